"""SyncGroup, Heartbeat, LeaveGroup, liveness and cooperative rebalancing
(BEHAVIOR.md C5, F2-F6, G2-G7, H3, M1-M3; ten behaviours 4-6)."""

from __future__ import annotations

from kcoord.coordinator.classic.group import GroupState
from kcoord.coordinator.messages import (
    LeaveGroupRequest,
    LeaveMember,
    LeaveMemberResult,
    SyncGroupRequest,
    SyncGroupResponse,
)
from kcoord.coordinator.schemas import GroupMetadataValue, MemberMetadata
from tests.unit.test_group_harness import E, Harness

S = GroupState


def completing(h: Harness, n: int = 2, **kw: object) -> list[str]:
    """A new group in CompletingRebalance at generation 1; returns member ids (leader first)."""
    handles = [h.join(client_id=f"m{i}", **kw) for i in range(n)]  # type: ignore[arg-type]
    h.run_until(lambda: all(h.answered(x) for x in handles))
    assert h.group().state is S.COMPLETING_REBALANCE
    return [h.join_response(x).member_id for x in handles]


# ---- F2 check order -------------------------------------------------------------------------


def test_F2_sync_check_order() -> None:
    h = Harness(load=False)
    assert h.sync_response(h.sync("m", 1)).error == E.rebalance_in_progress  # K3
    h.absorb(h.shard.finish_loading(h.now))
    assert h.sync_response(h.sync("m", 1, group="")).error == E.invalid_group_id
    assert h.sync_response(h.sync("m", 1)).error == E.unknown_member_id  # unknown group
    a, b = completing(h, 2, instance=None)
    h.group().static_members = {"inst": a}  # as if "inst" were registered to a
    assert h.sync_response(h.sync(b, 1, instance="inst")).error == E.fenced_instance_id
    assert h.sync_response(h.sync(a, 1, instance="other")).error == E.unknown_member_id
    h.group().static_members = {}
    assert h.sync_response(h.sync("nobody", 1)).error == E.unknown_member_id
    assert h.sync_response(h.sync(b, 7)).error == E.illegal_generation
    r = h.sync_response(h.sync(b, 1, protocol_type="connect"))
    assert r.error == E.inconsistent_group_protocol
    r = h.sync_response(h.sync(b, 1, protocol_name="roundrobin"))
    assert r.error == E.inconsistent_group_protocol
    h.group().state = S.DEAD
    assert h.sync_response(h.sync(b, 1)).error == E.coordinator_not_available


def test_F2_sync_error_response_fields() -> None:
    h = Harness()
    assert h.sync_response(h.sync("x", 1)) == SyncGroupResponse(
        E.unknown_member_id, None, None, b""
    )


# ---- F3/F4 by state -------------------------------------------------------------------------


def test_F3_ten_4_leader_parked_too_left_out_members_get_empty_assignment() -> None:
    h = Harness()
    a, b, c = completing(h, 3)
    sb = h.sync(b, 1, protocol_type="consumer", protocol_name="range")
    assert not h.answered(sb)
    n_records = len(h.records)
    sa = h.sync(a, 1, [(a, b"A"), (b, b"B"), ("stranger", b"?")])
    out = h.last
    # the leader's sync writes the group record and answers in the same Output
    assert len(h.records) == n_records + 1 and len(out.records) == 1
    assert {hd for hd, _ in out.replies} == {sa, sb}
    assert h.sync_response(sa) == SyncGroupResponse(E.none, "consumer", "range", b"A")
    assert h.sync_response(sb) == SyncGroupResponse(E.none, "consumer", "range", b"B")
    assert h.group().state is S.STABLE
    assert h.group().get(c).assignment == b""
    # ten 4: late followers get the stored assignment
    assert h.sync_response(h.sync(c, 1)) == SyncGroupResponse(E.none, "consumer", "range", b"")
    rec = h.group_records()[-1]
    assert isinstance(rec, GroupMetadataValue)
    assert [(m.member_id, m.assignment) for m in rec.members] == [(a, b"A"), (b, b"B"), (c, b"")]


def test_F4_leader_first_then_followers() -> None:
    h = Harness()
    a, b = completing(h, 2)
    sa = h.sync(a, 1, [(a, b"x"), (b, b"y")])
    assert h.sync_response(sa).assignment == b"x"
    assert h.sync_response(h.sync(b, 1)).assignment == b"y"


def test_F3_preparing_is_rebalance_in_progress_and_empty_is_unknown() -> None:
    h = Harness()
    a, b = h.stable_group(2)
    h.join(a)
    assert h.sync_response(h.sync(b, 1)).error == E.rebalance_in_progress
    h2 = Harness()
    (x,) = h2.stable_group(1)
    h2.leave(x)
    # gen 2, Empty: validate_current_member fails first (x is gone) -> UNKNOWN_MEMBER_ID
    assert h2.sync_response(h2.sync(x, 2)).error == E.unknown_member_id


def test_F3_duplicate_follower_sync_answers_the_older_one() -> None:
    h = Harness()
    a, b = completing(h, 2)
    s1 = h.sync(b, 1)
    s2 = h.sync(b, 1)
    assert h.sync_response(s1).error == E.rebalance_in_progress
    h.sync(a, 1, [(b, b"B")])
    assert h.sync_response(s2).assignment == b"B"


def test_F6_assignments_are_opaque_bytes() -> None:
    h = Harness()
    (a,) = completing(h, 1)
    blob = bytes(range(256)) * 4
    assert h.sync_response(h.sync(a, 1, [(a, blob)])).assignment == blob


def test_F3_C5_failed_group_write_answers_error_and_rebalances() -> None:
    h = Harness()
    a, b = completing(h, 2)
    sb = h.sync(b, 1)
    sa = h.handle("sync")
    # the runtime fails to append the leader's sync Output: it calls append_failed instead
    failed = h.shard.sync_group(
        sa, SyncGroupRequest("g", 1, a, None, None, None, ((b, b"B"),)), h.now
    )
    assert len(failed.records) == 1 and {x for x, _ in failed.replies} == {sa, sb}
    retry = h.absorb(h.shard.append_failed(failed, E.not_leader_or_follower, h.now))
    assert h.sync_response(sa) == SyncGroupResponse(E.not_coordinator, None, None, b"")
    assert h.sync_response(sb) == SyncGroupResponse(E.not_coordinator, None, None, b"")
    assert not retry.records
    g = h.group()
    assert g.state is S.PREPARING_REBALANCE and g.generation == 1
    assert all(m.assignment == b"" for m in g.members.values())
    # the members rejoin and the group recovers at the next generation
    ja, jb = h.join(a), h.join(b)
    assert h.join_response(ja).generation_id == h.join_response(jb).generation_id == 2


def test_ten_4_stale_write_failure_after_rebalance_is_ignored() -> None:
    h = Harness()
    a, b = completing(h, 2)
    sa = h.handle("sync")
    sync_out = h.shard.sync_group(sa, SyncGroupRequest("g", 1, a, None, None, None, ()), h.now)
    # the group moves on before the write outcome arrives
    ja = h.join(a)
    jb = h.join(b)
    assert h.join_response(jb).generation_id == 2
    state_before = (h.group().state, h.group().generation)
    h.absorb(h.shard.append_failed(sync_out, E.request_timed_out, h.now))
    assert h.sync_response(sa).error == E.coordinator_not_available
    assert (h.group().state, h.group().generation) == state_before
    assert h.join_response(ja).error == E.none


def test_append_failed_passes_unrelated_replies_through() -> None:
    h = Harness()
    (a,) = h.stable_group(1)
    hl = h.handle("leave")
    out = h.shard.leave_group(hl, LeaveGroupRequest("g", (LeaveMember(a),)), h.now)
    assert out.records  # the Empty group record
    again = h.shard.append_failed(out, E.kafka_storage_error, h.now)
    assert again.replies == out.replies and not again.records


# ---- G heartbeats and liveness ----------------------------------------------------------------


def test_G2_heartbeat_check_order() -> None:
    h = Harness(load=False)
    assert h.heartbeat("m", 1) == E.none  # K3: blindly NONE while loading
    h.absorb(h.shard.finish_loading(h.now))
    assert h.heartbeat("m", 1, group="") == E.invalid_group_id
    assert h.heartbeat("m", 1) == E.unknown_member_id  # unknown group
    (a,) = h.stable_group(1, instances=["i"])
    assert h.heartbeat("other", 1, instance="i") == E.fenced_instance_id
    assert h.heartbeat(a, 1, instance="nope") == E.unknown_member_id
    assert h.heartbeat("nobody", 1) == E.unknown_member_id
    assert h.heartbeat(a, 0) == E.illegal_generation
    assert h.heartbeat(a, 1, instance="i") == E.none
    h.group().state = S.DEAD
    assert h.heartbeat(a, 1) == E.coordinator_not_available


def test_G2_ten_5_heartbeat_in_completing_is_none() -> None:
    h = Harness()
    a, b = completing(h, 2)
    assert h.heartbeat(b, 1) == E.none


def test_G2_ten_5_heartbeat_in_preparing_rebalance_in_progress() -> None:
    h = Harness()
    a, b = h.stable_group(2)
    h.join(a)
    assert h.heartbeat(b, 1) == E.rebalance_in_progress
    assert h.heartbeat(b, 0) == E.illegal_generation


def test_G2_heartbeat_in_empty_is_unknown_member() -> None:
    h = Harness()
    (a,) = h.stable_group(1)
    # An Empty group has no members, so validation normally answers first; force the state
    # to reach G2's last branch (a defensive check in Kafka too).
    h.group().state = S.EMPTY
    assert h.heartbeat(a, 1) == E.unknown_member_id


def test_G3_heartbeats_rearm_the_session_timer() -> None:
    h = Harness()
    a, b = h.stable_group(2, session=10_000)
    for _ in range(5):
        h.tick(9_000)
        assert h.heartbeat(a, 1) == E.none
        assert h.heartbeat(b, 1) == E.none
    assert h.group().state is S.STABLE and len(h.group().members) == 2


def test_G4_C5_session_expiry_in_stable_removes_and_rebalances() -> None:
    h = Harness()
    a, b = h.stable_group(2, session=10_000)
    h.tick(9_000)
    h.heartbeat(a, 1)
    h.tick(1_000)  # b expires
    g = h.group()
    assert not g.has(b) and g.state is S.PREPARING_REBALANCE
    ja = h.join(a)
    r = h.join_response(ja)
    assert r.generation_id == 2 and [m.member_id for m in r.members] == [a]


def test_G4_G7_session_expiry_in_completing_rebalances() -> None:
    h = Harness()
    a, b = completing(h, 2, session=10_000)
    sa = h.sync(b, 1)  # b awaits sync; a (leader) never syncs and never heartbeats
    h.tick(10_000)
    assert not h.group().has(a)
    assert h.sync_response(sa).error == E.rebalance_in_progress
    assert h.group().state is S.PREPARING_REBALANCE
    # G7 in Preparing: removal re-checks completion; b must rejoin
    jb = h.join(b)
    assert h.join_response(jb).leader == b


def test_G4_ten_6_members_awaiting_join_or_sync_never_expire() -> None:
    h = Harness()
    a, b = completing(h, 2, session=10_000, rebalance=100_000)
    sb = h.sync(b, 1)
    h.tick(10_000)  # both session timers fire: a (not awaiting) expires, b (parked) does not
    g = h.group()
    assert g.has(b) and not g.has(a)
    # a's removal rebalanced: b's parked sync is answered and b's timer re-armed from now
    assert h.sync_response(sb).error == E.rebalance_in_progress
    h.tick(10_000)
    assert not g.has(b) and g.state is S.EMPTY
    h2 = Harness()
    x, y = h2.stable_group(2, session=10_000, rebalance=100_000)
    jy = h2.join(y, protocols=[("range", b"new")], session=10_000, rebalance=100_000)
    h2.tick(9_999)
    assert h2.group().get(y).awaiting_join and not h2.answered(jy)
    h2.tick(1)  # both timers due: x expires; y, awaiting join, does not
    assert h2.group().has(y) and not h2.group().has(x)
    # x's removal completed the join (y was the only member left)
    assert h2.join_response(jy).generation_id == 2


def test_G4_awaiting_member_gets_a_session_timer_after_completion() -> None:
    h = Harness()
    a, b = h.stable_group(2, session=10_000)
    h.join(a)
    jb = h.join(b)
    assert h.join_response(jb).generation_id == 2  # completion re-arms both timers
    h.tick(5_000)
    assert h.heartbeat(a, 2) == E.none
    h.tick(5_000)
    g = h.group()
    assert not g.has(b) and g.has(a)  # b never heartbeated after its join response


def test_G6_pending_member_expires_after_request_session_timeout() -> None:
    h = Harness()
    r = h.join_response(h.join(require_known=True, session=8_000))
    pending = r.member_id
    h.tick(7_999)
    assert h.group().is_pending(pending)
    h.tick(1)
    assert not h.group().is_pending(pending)
    # the expired id is now unknown (group is Empty)
    jr = h.join_response(h.join(pending))
    assert jr.error == E.unknown_member_id


# ---- H3 LeaveGroup -----------------------------------------------------------------------------


def test_H3_leave_group_errors_and_batch() -> None:
    h = Harness()
    r = h.leave("x", LeaveMember("", "i"))
    assert r.error == E.none
    assert r.members == (
        LeaveMemberResult("x", None, E.unknown_member_id),
        LeaveMemberResult("", "i", E.unknown_member_id),
    )
    assert h.leave("x", group="").error == E.invalid_group_id
    a, b, c = h.stable_group(3, instances=["ia", None, None])
    pending = h.join_response(h.join(require_known=True)).member_id
    r = h.leave(
        LeaveMember(a, "wrong"),  # unregistered instance
        LeaveMember("other", "ia"),  # fenced
        LeaveMember(pending),
        LeaveMember("ghost"),
        LeaveMember(c),
        LeaveMember("", "nope"),
    )
    assert [m.error for m in r.members] == [
        E.unknown_member_id,
        E.fenced_instance_id,
        E.none,
        E.unknown_member_id,
        E.none,
        E.unknown_member_id,
    ]
    g = h.group()
    assert not g.pending_members and not g.has(c) and g.state is S.PREPARING_REBALANCE


def test_H3_dead_group_leave() -> None:
    h = Harness()
    (a,) = h.stable_group(1)
    h.group().state = S.DEAD
    r = h.leave(a)
    assert (r.error, r.members) == (E.coordinator_not_available, ())


def test_H3_L5_static_member_leave_rebalances() -> None:
    h = Harness()
    a, b = h.stable_group(2, instances=["ia", "ib"])
    r = h.leave(LeaveMember(b, "ib"))
    assert r.members[0].error == E.none
    assert h.group().state is S.PREPARING_REBALANCE and h.group().static_members == {"ia": a}


def test_H3_leaving_member_with_parked_join_and_sync_is_answered() -> None:
    h = Harness()
    a, b = h.stable_group(2)
    ja = h.join(a)
    h.leave(a)
    r = h.join_response(ja)
    assert (r.error, r.member_id) == (E.unknown_member_id, "")
    h2 = Harness()
    x, y = completing(h2, 2)
    sy = h2.sync(y, 1)
    h2.leave(y)
    assert h2.sync_response(sy).error == E.unknown_member_id


def test_H3_leader_leaves_B5_next_member_leads() -> None:
    h = Harness()
    a, b, c = h.stable_group(3)
    h.leave(a)
    assert h.group().leader_id == b


# ---- M cooperative -------------------------------------------------------------------------------


def test_M1_M2_cooperative_two_rounds() -> None:
    h = Harness()
    a, b = h.stable_group(2, protocols=[("cooperative-sticky", b"owned:P1-P3")])
    # c joins: round 1
    jc = h.join(client_id="c", protocols=[("cooperative-sticky", b"owned:")])
    assert h.heartbeat(a, 1) == E.rebalance_in_progress  # M3
    ja = h.join(a, protocols=[("cooperative-sticky", b"owned:P1-P3")])
    h.join(b, protocols=[("cooperative-sticky", b"owned:P4-P6")])
    ra = h.join_response(ja)
    c = h.join_response(jc).member_id
    assert ra.generation_id == 2 and ra.protocol_name == "cooperative-sticky"
    assert [m.metadata for m in ra.members] == [b"owned:P1-P3", b"owned:P4-P6", b"owned:"]
    h.sync(a, 2, [(a, b"P1,P2"), (b, b"P4,P5"), (c, b"")])
    h.sync(b, 2)
    h.sync(c, 2)
    assert h.group().state is S.STABLE
    # M2: a revoked P3, rejoins at once with changed metadata: follow-up rebalance
    ja2 = h.join(a, protocols=[("cooperative-sticky", b"owned:P1,P2")])
    assert h.group().state is S.PREPARING_REBALANCE
    jb2 = h.join(b, protocols=[("cooperative-sticky", b"owned:P4,P5")])
    jc2 = h.join(c, protocols=[("cooperative-sticky", b"owned:")])
    assert h.join_response(ja2).generation_id == h.join_response(jc2).generation_id == 3
    assert h.join_response(jb2).error == E.none


def test_M3_heartbeats_during_preparing_keep_members_alive() -> None:
    h = Harness()
    a, b = h.stable_group(2, session=10_000, rebalance=60_000)
    h.join(b, protocols=[("range", b"new")], rebalance=60_000)
    for _ in range(6):
        h.tick(8_000)
        assert h.heartbeat(a, 1) == E.rebalance_in_progress
    assert h.group().has(a)


def test_member_metadata_record_shape() -> None:
    h = Harness()
    a, b = h.stable_group(2, instances=["ia", None], session=12_000, rebalance=34_000)
    rec = h.group_records()[-1]
    assert isinstance(rec, GroupMetadataValue)
    assert rec.members[0] == MemberMetadata(
        a, "ia", "c0", "/127.0.0.1", 34_000, 12_000, b"sub", f"assign-{a}".encode()
    )
    assert (rec.protocol_type, rec.generation, rec.protocol, rec.leader) == (
        "consumer",
        1,
        "range",
        a,
    )
    # the CompletingRebalance transition time (the second joiner re-armed the initial delay)
    assert rec.current_state_timestamp == 6000
