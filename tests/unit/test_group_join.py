"""JoinGroup and join completion (BEHAVIOR.md C2, C5, D1-D13, E1-E9; ten behaviours 1-3, 7-9)."""

from __future__ import annotations

from kcoord.coordinator.classic.group import GroupState
from kcoord.coordinator.config import GroupConfig
from kcoord.coordinator.messages import JoinGroupResponse, JoinMember, LeaveMember
from tests.unit.test_group_harness import E, Harness

S = GroupState


def assert_join_error(resp: JoinGroupResponse, error: int, member_id: str) -> None:
    """D13: error responses carry member id and error; generation -1; nothing else."""
    assert resp == JoinGroupResponse(
        error=error,
        generation_id=-1,
        protocol_type=None,
        protocol_name=None,
        leader="",
        member_id=member_id,
        members=(),
        skip_assignment=False,
    )


# ---- D1 check order --------------------------------------------------------------------------


def test_D1_check_order_invalid_id_not_coordinator_loading() -> None:
    h = Harness(load=False, partition_for=lambda g: 0 if g == "mine" else 7)
    j = h.join(group="", session=1)
    assert_join_error(h.join_response(j), E.invalid_group_id, "")
    j = h.join(group="other", session=1)
    assert_join_error(h.join_response(j), E.not_coordinator, "")
    j = h.join("m-1", group="mine", session=1)
    assert_join_error(h.join_response(j), E.coordinator_load_in_progress, "m-1")


def test_D1_session_timeout_bounds() -> None:
    h = Harness()
    for bad in (5999, 1_800_001):
        j = h.join(session=bad)
        assert_join_error(h.join_response(j), E.invalid_session_timeout, "")
    for good in (6000, 1_800_000):
        j = h.join(session=good, group=f"g{good}")
        assert not h.answered(j)  # parked in a new group
    assert h.group("g") is None


def test_D1_C2_unknown_group_with_member_id_is_unknown_member_and_creates_nothing() -> None:
    h = Harness()
    j = h.join("ghost")
    assert_join_error(h.join_response(j), E.unknown_member_id, "ghost")
    assert h.group() is None
    assert h.heartbeat("ghost", 0) == E.unknown_member_id
    assert h.group() is None
    j = h.join("")
    assert h.group().state is S.PREPARING_REBALANCE


def test_D1_group_full_is_group_max_size_reached() -> None:
    h = Harness(GroupConfig(max_size=2))
    h.stable_group(2)
    j = h.join()
    assert_join_error(h.join_response(j), E.group_max_size_reached, "")
    assert h.group().state is S.STABLE and len(h.group().members) == 2


def test_D2_preparing_accepts_awaiting_members_and_counts_awaiting() -> None:
    h = Harness(GroupConfig(max_size=2))
    a, b = h.stable_group(2)
    # b rejoins with new metadata: Preparing, one member awaiting
    jb = h.join(b, protocols=[("range", b"changed")])
    assert h.group().state is S.PREPARING_REBALANCE
    # awaiting (1) < max size (2): a new member is accepted although the group has 2 members
    jc = h.join(client_id="new")
    assert not h.answered(jc)
    assert len(h.group().members) == 3 and h.group().num_awaiting_join == 2
    # a (not awaiting) now finds awaiting == max size: rejected and removed
    ja = h.join(a)
    assert_join_error(h.join_response(ja), E.group_max_size_reached, "")
    assert not h.group().has(a)
    # the removal let the join complete: b and the new member form generation 2
    rb, rc = h.join_response(jb), h.join_response(jc)
    assert rb.error == rc.error == E.none
    assert rb.generation_id == 2 and rb.leader == b
    # b (awaiting) is accepted again even though the group is full
    assert h.group().state is S.COMPLETING_REBALANCE


def test_D2_existing_member_accepted_in_stable_when_full() -> None:
    h = Harness(GroupConfig(max_size=1))
    (a,) = h.stable_group(1)
    j = h.join(a)  # leader rejoin: rebalance completes at once (single member)
    r = h.join_response(j)
    assert r.error == E.none and r.generation_id == 2


# ---- D3/D4 new members --------------------------------------------------------------------------


def test_D3_dead_group_is_coordinator_not_available() -> None:
    h = Harness()
    h.stable_group(1)
    h.group().state = S.DEAD
    j = h.join()
    assert_join_error(h.join_response(j), E.coordinator_not_available, "")


def test_D3_D5_unsupported_protocols_are_inconsistent_with_empty_member_id() -> None:
    h = Harness()
    h.stable_group(1)
    j = h.join(protocols=[("roundrobin", b"")])
    assert_join_error(h.join_response(j), E.inconsistent_group_protocol, "")
    j = h.join(protocol_type="connect")
    assert_join_error(h.join_response(j), E.inconsistent_group_protocol, "")


def test_D5_empty_group_needs_type_and_protocols() -> None:
    h = Harness()
    j = h.join(protocol_type="")
    assert_join_error(h.join_response(j), E.inconsistent_group_protocol, "")
    j = h.join(protocols=[])
    assert_join_error(h.join_response(j), E.inconsistent_group_protocol, "")
    # Kafka leaves the freshly created group Empty
    assert h.group().state is S.EMPTY and h.group().generation == 0


def test_D3_D4_member_id_required_then_join_with_it() -> None:
    h = Harness()
    j = h.join(require_known=True, client_id="cli", session=7000)
    assert_join_error(h.join_response(j), E.member_id_required, "cli-1")
    g = h.group()
    assert g.state is S.EMPTY and "cli-1" in g.pending_members and not g.members
    j2 = h.join("cli-1", require_known=True)
    assert not h.answered(j2)
    assert g.has("cli-1") and not g.pending_members
    assert g.state is S.PREPARING_REBALANCE
    h.tick(3000)
    r = h.join_response(j2)
    assert (r.error, r.member_id, r.leader, r.generation_id) == (E.none, "cli-1", "cli-1", 1)


def test_D4_L4_static_members_never_get_member_id_required() -> None:
    h = Harness()
    j = h.join(require_known=True, instance="inst")
    assert not h.answered(j)
    g = h.group()
    assert not g.pending_members and g.static_members == {"inst": "inst-1"}
    h.tick(3000)
    assert h.join_response(j).member_id == "inst-1"


def test_D4_without_require_known_member_is_added_at_once() -> None:
    h = Harness()
    j = h.join(require_known=False)
    assert not h.answered(j) and h.group().has("c-1")


# ---- D6/D7 known members ---------------------------------------------------------------------------


def test_D6_pending_member_with_unsupported_protocol() -> None:
    h = Harness()
    h.stable_group(1)
    j = h.join(require_known=True)
    pending = h.join_response(j).member_id
    j = h.join(pending, protocols=[("other", b"")])
    assert_join_error(h.join_response(j), E.inconsistent_group_protocol, pending)
    assert h.group().is_pending(pending)


def test_D6_known_member_dead_group() -> None:
    h = Harness()
    (a,) = h.stable_group(1)
    h.group().state = S.DEAD
    assert_join_error(h.join_response(h.join(a)), E.coordinator_not_available, a)


def test_D6_pending_member_joins_and_rebalances() -> None:
    h = Harness()
    (a,) = h.stable_group(1)
    j = h.join(require_known=True)
    pending = h.join_response(j).member_id
    assert h.group().state is S.STABLE  # a pending id alone does not rebalance
    jp = h.join(pending, require_known=True)
    assert h.group().state is S.PREPARING_REBALANCE
    ja = h.join(a)
    # both joined and nothing pending: completes at once
    assert h.join_response(jp).generation_id == h.join_response(ja).generation_id == 2


def test_D7_unknown_member_and_unregistered_instance() -> None:
    h = Harness()
    h.stable_group(1)
    assert_join_error(h.join_response(h.join("nobody")), E.unknown_member_id, "nobody")
    (a,) = list(h.group().members)
    assert_join_error(h.join_response(h.join(a, instance="unregistered")), E.unknown_member_id, a)


def test_D7_L7_fenced_static_member() -> None:
    h = Harness()
    (s,) = h.stable_group(1, instances=["i1"])
    assert_join_error(
        h.join_response(h.join("stale-id", instance="i1")), E.fenced_instance_id, "stale-id"
    )
    assert h.group().static_members == {"i1": s}


# ---- D8 existing member by state ------------------------------------------------------------------


def test_D8_preparing_rejoin_updates_and_parks() -> None:
    h = Harness()
    a, b = h.stable_group(2)
    ja = h.join(a)  # leader: rebalance
    assert h.group().state is S.PREPARING_REBALANCE and not h.answered(ja)
    jb = h.join(b, protocols=[("range", b"v2")])
    assert h.group().get(b).protocols == (("range", b"v2"),)
    # all rejoined: completes
    ra, rb = h.join_response(ja), h.join_response(jb)
    assert ra.generation_id == rb.generation_id == 2
    assert ra.members == (JoinMember(a, None, b"sub"), JoinMember(b, None, b"v2"))


def test_D8_completing_matching_rejoin_answered_at_once() -> None:
    h = Harness()
    ja, jb = h.join(client_id="a"), h.join(client_id="b")
    h.run_until(lambda: h.answered(ja))
    ra = h.join_response(ja)
    a, b = ra.member_id, h.join_response(jb).member_id
    assert h.group().state is S.COMPLETING_REBALANCE
    # follower lost its response: same generation, no members
    rb2 = h.join_response(h.join(b))
    assert (rb2.error, rb2.generation_id, rb2.leader, rb2.members) == (E.none, 1, a, ())
    # leader: same generation with the member list
    ra2 = h.join_response(h.join(a))
    assert ra2.generation_id == 1 and ra2.members == ra.members
    assert h.group().state is S.COMPLETING_REBALANCE


def test_D8_completing_changed_metadata_rebalances() -> None:
    h = Harness()
    ja, jb = h.join(client_id="a"), h.join(client_id="b")
    h.run_until(lambda: h.answered(ja))
    a, b = h.join_response(ja).member_id, h.join_response(jb).member_id
    sa = h.sync(a, 1, [(a, b"x")])  # parked? no: leader completes the sync
    assert h.sync_response(sa).error == E.none
    # fresh rebalance into Completing with b parked in sync
    ja = h.join(a)
    jb = h.join(b)
    assert h.join_response(jb).generation_id == 2
    sb = h.sync(b, 2)
    assert not h.answered(sb)
    jb2 = h.join(b, protocols=[("range", b"new")])
    assert h.group().state is S.PREPARING_REBALANCE
    # D11: the parked sync is told to rejoin
    assert h.sync_response(sb).error == E.rebalance_in_progress
    assert not h.answered(jb2)


def test_D8_ten_3_stable_leader_rejoin_always_rebalances() -> None:
    h = Harness()
    a, b = h.stable_group(2)
    ja = h.join(a)  # same metadata
    assert h.group().state is S.PREPARING_REBALANCE and not h.answered(ja)


def test_D8_ten_3_stable_follower_same_metadata_answered_at_once() -> None:
    h = Harness()
    a, b = h.stable_group(2)
    r = h.join_response(h.join(b))
    assert (r.error, r.generation_id, r.leader, r.member_id, r.members) == (E.none, 1, a, b, ())
    assert r.protocol_type == "consumer" and r.protocol_name == "range"
    assert h.group().state is S.STABLE


def test_D8_M2_stable_follower_changed_metadata_rebalances() -> None:
    h = Harness()
    a, b = h.stable_group(2)
    jb = h.join(b, protocols=[("range", b"owned-partitions-revoked")])
    assert h.group().state is S.PREPARING_REBALANCE and not h.answered(jb)
    ja = h.join(a)
    assert h.join_response(ja).generation_id == 2
    assert h.join_response(ja).members[1] == JoinMember(b, None, b"owned-partitions-revoked")


def test_D8_empty_group_known_member_is_unknown() -> None:
    h = Harness()
    (a,) = h.stable_group(1)
    h.leave(a)
    assert h.group().state is S.EMPTY
    assert_join_error(h.join_response(h.join(a)), E.unknown_member_id, a)


# ---- D10-D13 --------------------------------------------------------------------------------------


def test_D10_new_member_expires_after_five_minutes_while_awaiting_join() -> None:
    h = Harness()
    (a,) = h.stable_group(1, rebalance=600_000)
    t0 = h.now
    jb = h.join(client_id="newbie", rebalance=600_000)
    assert h.group().state is S.PREPARING_REBALANCE
    b = "newbie-2"
    assert h.group().get(b).is_new
    # a keeps heartbeating (REBALANCE_IN_PROGRESS) but never rejoins
    for _ in range(59):
        h.tick(5000)
        assert h.heartbeat(a, 1) == E.rebalance_in_progress
    assert h.now == t0 + 295_000 and not h.answered(jb)
    h.tick(5000)  # 300 s after b joined
    assert_join_error(h.join_response(jb), E.unknown_member_id, "")
    assert not h.group().has(b) and h.group().state is S.PREPARING_REBALANCE


def test_D10_existing_members_are_not_new_after_completion() -> None:
    h = Harness()
    (a,) = h.stable_group(1)
    assert not h.group().get(a).is_new


def test_D11_rebalance_from_completing_fails_parked_syncs_and_clears_assignments() -> None:
    h = Harness()
    a, b, c = h.stable_group(3)
    h.join(a)
    h.join(b)
    h.join(c)  # completes generation 2
    sb, sc = h.sync(b, 2), h.sync(c, 2)
    assert not h.answered(sb) and not h.answered(sc)
    h.group().get(b).assignment = b"stale"
    h.leave(a)  # C5: LeaveGroup in Completing
    assert h.sync_response(sb).error == E.rebalance_in_progress
    assert h.sync_response(sc) == h.sync_response(sb)
    assert h.sync_response(sb).assignment == b"" and h.sync_response(sb).protocol_name is None
    assert all(m.assignment == b"" for m in h.group().members.values())
    # the delayed join is bounded by the group's rebalance timeout
    assert h.group().join_timer.initial is False
    assert h.group().join_timer.deadline_ms == h.now + 30_000


def test_D11_empty_group_uses_initial_delayed_join() -> None:
    h = Harness()
    h.join(rebalance=10_000)
    t = h.group().join_timer
    assert (t.initial, t.deadline_ms, t.delay_ms, t.remaining_ms) == (True, 3000, 3000, 7000)


def test_D12_ten_1_join_is_a_long_poll_that_blocks_nothing_else() -> None:
    h = Harness()
    (x,) = h.stable_group(1, group="other")
    j1 = h.join(group="slow")
    assert not h.answered(j1)
    # other groups and other requests are served meanwhile
    assert h.join_response(h.join(x, group="other")).generation_id == 2
    assert h.heartbeat(x, 2, group="other") == E.none
    assert h.describe("slow")[0].state == "PreparingRebalance"
    assert not h.answered(j1)
    h.run_until(lambda: h.answered(j1))
    assert h.join_response(j1).error == E.none


# ---- E join completion --------------------------------------------------------------------------------


def test_E1_completes_early_when_all_rejoined() -> None:
    h = Harness()
    a, b = h.stable_group(2)
    t0 = h.now
    ja = h.join(a)
    assert not h.answered(ja)
    jb = h.join(b)
    assert h.now == t0
    assert h.join_response(ja).generation_id == h.join_response(jb).generation_id == 2


def test_E1_rechecked_after_removal() -> None:
    h = Harness()
    a, b = h.stable_group(2)
    ja = h.join(a)
    resp = h.leave(b)
    assert resp.members[0].error == E.none
    r = h.join_response(ja)
    assert (r.generation_id, r.leader, [m.member_id for m in r.members]) == (2, a, [a])


def test_E2_rebalance_timeout_completes_and_drops_non_rejoined() -> None:
    h = Harness()
    a, b, c = h.stable_group(3, rebalance=20_000, session=60_000)
    t0 = h.now
    jb = h.join(
        b, rebalance=25_000, protocols=[("range", b"v2")]
    )  # B8: group rebalance timeout becomes max = 25 s
    jc = h.join(c)
    assert h.group().join_timer.deadline_ms == t0 + 25_000
    h.tick(24_999)
    assert not h.answered(jb)
    h.tick(1)
    rb, rc = h.join_response(jb), h.join_response(jc)
    assert rb.generation_id == rc.generation_id == 2
    assert not h.group().has(a)
    # E6: a (old leader) did not rejoin; b is first remaining in insertion order and rejoined
    assert rb.leader == b and [m.member_id for m in rb.members] == [b, c]


def test_E3_initial_delay_never_completes_early_and_extends_for_new_members() -> None:
    h = Harness()
    ja = h.join(rebalance=10_000)
    # a alone has joined: all members joined, yet the initial delay is not cut short
    h.tick(1000)
    jb = h.join(rebalance=10_000)
    h.tick(1999)
    assert not h.answered(ja)
    h.tick(1)  # t=3000: b arrived during the delay: wait min(3000, 7000) more
    assert not h.answered(ja)
    assert h.shard.next_deadline() == 6000
    h.tick(2999)
    assert not h.answered(ja)
    h.tick(1)  # t=6000: nobody new: complete
    assert h.join_response(ja).generation_id == h.join_response(jb).generation_id == 1


def test_E3_initial_delay_capped_by_rebalance_timeout() -> None:
    h = Harness()
    handles = [h.join(rebalance=10_000)]
    deadlines = [h.group().join_timer.deadline_ms]
    for t in (1000, 5000, 8000, 9500):  # a new member in every window
        h.tick(t - h.now)
        handles.append(h.join(rebalance=10_000))
        deadlines.append(h.group().join_timer.deadline_ms)
    # windows: 3000, +3000, +3000, +1000 -> complete at 10000 (= rebalance timeout)
    assert deadlines == [3000, 3000, 6000, 9000, 10_000]
    h.tick(499)
    assert not h.answered(handles[0])
    h.tick(1)
    assert h.now == 10_000
    assert all(h.join_response(x).generation_id == 1 for x in handles)


def test_E3_first_window_is_the_full_delay_even_with_short_rebalance_timeout() -> None:
    h = Harness()
    ja = h.join(rebalance=1000)
    h.tick(100)
    h.join(rebalance=1000)
    h.tick(2899)
    assert not h.answered(ja)
    h.tick(1)  # remaining = max(1000 - 3000, 0) = 0: no re-arm
    assert h.join_response(ja).error == E.none


def test_E4_leader_gets_members_followers_empty_and_heartbeats_rescheduled() -> None:
    h = Harness()
    ja = h.join(client_id="a", protocols=[("range", b"A")])
    jb = h.join(client_id="b", protocols=[("range", b"B")], session=20_000)
    h.run_until(lambda: h.answered(ja))
    ra, rb = h.join_response(ja), h.join_response(jb)
    assert ra.leader == rb.leader == "a-1"
    assert ra.members == (JoinMember("a-1", None, b"A"), JoinMember("b-2", None, b"B"))
    assert rb.members == ()
    assert (ra.protocol_type, ra.protocol_name) == ("consumer", "range")
    # members leave the new-member state and get session timers from the completion time
    g = h.group()
    assert not g.get("a-1").is_new and not g.get("b-2").is_new
    assert h.shard.next_deadline() == h.now + 10_000


def test_E4_ten_7_rearm_when_no_member_rejoined_then_static_stays() -> None:
    h = Harness()
    a, b = h.stable_group(2, instances=["ia", "ib"], session=100_000, rebalance=30_000)
    jc = h.join(client_id="dyn")
    c = h.join_response(jc).member_id if h.answered(jc) else "dyn-3"
    h.leave(c)
    assert_join_error(h.join_response(jc), E.unknown_member_id, "")
    t0 = h.now
    h.tick(30_000)  # timeout: nobody rejoined; static members stay; re-armed
    g = h.group()
    assert g.state is S.PREPARING_REBALANCE and g.generation == 1
    assert set(g.members) == {a, b}
    assert h.shard.next_deadline() == t0 + 60_000
    jb = h.join(b, instance="ib")
    h.tick(30_000)
    rb = h.join_response(jb)
    # E6: the leader (a) did not rejoin: b leads; a (static) stays without a response
    assert (rb.generation_id, rb.leader) == (2, b)
    assert [m.member_id for m in rb.members] == [a, b]
    assert set(g.members) == {a, b} and g.state is S.COMPLETING_REBALANCE


def test_E5_ten_9_generation_increments_when_group_becomes_empty() -> None:
    h = Harness()
    (a,) = h.stable_group(1)
    h.leave(a)
    g = h.group()
    assert (g.state, g.generation, g.protocol_name, g.protocol_type) == (
        S.EMPTY,
        2,
        None,
        "consumer",
    )
    rec = h.group_records()[-1]
    assert rec is not None
    assert (rec.generation, rec.protocol, rec.leader, rec.members) == (2, None, None, ())
    assert rec.protocol_type == "consumer"


def test_E5_empty_group_rejoin_uses_initial_delay_again_and_keeps_counting() -> None:
    h = Harness()
    (a,) = h.stable_group(1)
    h.leave(a)
    j = h.join()
    assert h.group().join_timer.initial
    h.tick(3000)
    assert h.join_response(j).generation_id == 3


def test_E6_leader_kept_when_it_rejoined() -> None:
    h = Harness()
    a, b, c = h.stable_group(3)
    ja = h.join(a)
    jc = h.join(c)
    h.tick(30_000)
    assert h.join_response(ja).leader == a and h.join_response(jc).leader == a
    assert not h.group().has(b)


def test_E6_any_rejoined_member_when_leader_and_successor_did_not() -> None:
    h = Harness()
    a, b, c = h.stable_group(3)
    jc = h.join(c, protocols=[("range", b"c2")])
    h.tick(30_000)
    r = h.join_response(jc)
    assert (r.leader, [m.member_id for m in r.members]) == (c, [c])


def test_E7_protocol_vote_vector_through_the_shard() -> None:
    h = Harness()
    handles = [
        h.join(protocols=[("B", b"1b"), ("A", b"1a")]),
        h.join(protocols=[("A", b"2a"), ("B", b"2b"), ("C", b"2c")]),
        h.join(protocols=[("D", b"3d"), ("B", b"3b"), ("A", b"3a")]),
    ]
    h.run_until(lambda: h.answered(handles[0]))
    r = h.join_response(handles[0])
    assert r.protocol_name == "B"
    assert [m.metadata for m in r.members] == [b"1b", b"2b", b"3b"]


def test_E9_ten_2_pending_member_blocks_early_completion_until_it_joins() -> None:
    h = Harness()
    (a,) = h.stable_group(1)
    pending = h.join_response(h.join(require_known=True, session=60_000)).member_id
    ja = h.join(a)
    assert not h.answered(ja)  # a is the only member and rejoined, but an id is pending
    jp = h.join(pending, require_known=True)
    assert h.join_response(ja).generation_id == h.join_response(jp).generation_id == 2


def test_E9_ten_2_pending_member_blocks_until_it_expires() -> None:
    h = Harness()
    (a,) = h.stable_group(1)
    h.join(require_known=True, session=7000)
    ja = h.join(a)
    h.tick(6999)
    assert not h.answered(ja)
    h.tick(1)  # G6: pending id expires, join completes
    assert h.join_response(ja).generation_id == 2
    assert not h.group().pending_members


def test_E9_pending_member_does_not_block_the_timeout() -> None:
    h = Harness()
    (a,) = h.stable_group(1, rebalance=20_000)
    h.join(require_known=True, session=60_000)
    ja = h.join(a, rebalance=20_000)
    h.tick(20_000)
    r = h.join_response(ja)
    assert r.generation_id == 2 and [m.member_id for m in r.members] == [a]
    assert h.group().pending_members  # still pending until its own timer


def test_C5_triggers_new_member_and_existing_member_join() -> None:
    h = Harness()
    a, b = h.stable_group(2)
    h.join()
    assert h.group().state is S.PREPARING_REBALANCE


def test_leave_member_by_instance_in_batch_completes_join() -> None:
    h = Harness()
    a, b = h.stable_group(2, instances=["ia", "ib"])
    ja = h.join(a, instance="ia")
    resp = h.leave(LeaveMember("", "ib"))
    assert resp.members[0].error == E.none
    assert h.join_response(ja).generation_id == 2
