"""Static membership (BEHAVIOR.md L3-L7; ten behaviour 9's static half)."""

from __future__ import annotations

from kcoord.coordinator.classic.group import GroupState
from kcoord.coordinator.messages import JoinGroupRequest, JoinGroupResponse, JoinMember
from kcoord.coordinator.schemas import GroupMetadataValue
from tests.unit.test_group_harness import E, Harness

S = GroupState


def test_L3_stable_replacement_without_rebalance() -> None:
    h = Harness()
    a, b = h.stable_group(2, instances=["ia", "ib"], session=30_000)
    assert (a, b) == ("ia-1", "ib-2")
    n = len(h.records)
    j = h.join(instance="ia", session=30_000)  # the leader's instance restarts
    r = h.join_response(j)
    g = h.group()
    assert g.state is S.STABLE and g.generation == 1
    # new id; leadership moved to it; the response names the OLD leader id
    assert r == JoinGroupResponse(
        E.none, 1, "consumer", "range", leader=a, member_id="ia-3", members=()
    )
    assert g.leader_id == "ia-3" and g.static_members == {"ia": "ia-3", "ib": b}
    assert list(g.members) == [b, "ia-3"]
    # the group record is written with the new id and the kept assignment
    assert len(h.records) == n + 1
    rec = h.group_records()[-1]
    assert isinstance(rec, GroupMetadataValue)
    assert rec.leader == "ia-3"
    assert [(m.member_id, m.group_instance_id, m.assignment) for m in rec.members] == [
        (b, "ib", f"assign-{b}".encode()),
        ("ia-3", "ia", f"assign-{a}".encode()),
    ]
    # the old id is fenced; the new one works and gets the stored assignment
    assert h.heartbeat(a, 1, instance="ia") == E.fenced_instance_id
    assert h.heartbeat("ia-3", 1, instance="ia") == E.none
    assert h.sync_response(h.sync("ia-3", 1, instance="ia")).assignment == f"assign-{a}".encode()


def test_L3_skip_assignment_variant_for_join_v9() -> None:
    h = Harness()
    a, b = h.stable_group(2, instances=["ia", "ib"])
    r = h.join_response(h.join(instance="ia", skip_assignment=True))
    assert r.leader == r.member_id == "ia-3" and r.skip_assignment
    assert r.members == (JoinMember(b, "ib", b"sub"), JoinMember("ia-3", "ia", b"sub"))
    rf = h.join_response(h.join(instance="ib", skip_assignment=True))
    assert rf.leader == "ia-3" and not rf.skip_assignment and rf.members == ()


def test_L3_old_ids_parked_requests_get_fenced_in_preparing() -> None:
    h = Harness()
    a, b = h.stable_group(2, instances=["ia", "ib"])
    jold = h.join(b, instance="ib", protocols=[("range", b"v2")])
    assert h.group().state is S.PREPARING_REBALANCE
    jnew = h.join(instance="ib")
    ro = h.join_response(jold)
    assert (ro.error, ro.member_id) == (E.fenced_instance_id, b)
    assert not h.answered(jnew)  # L3: in Preparing the new id is parked
    ja = h.join(a, instance="ia")
    rn, ra = h.join_response(jnew), h.join_response(ja)
    assert rn.generation_id == ra.generation_id == 2 and rn.member_id == "ib-3"
    assert [m.member_id for m in ra.members] == [a, "ib-3"]


def test_L3_completing_replacement_rebalances_and_fences_parked_sync() -> None:
    h = Harness()
    ja = h.join(instance="ia", client_id="x")
    jb = h.join(instance="ib", client_id="y")
    h.run_until(lambda: h.answered(ja))
    b = h.join_response(jb).member_id
    sb = h.sync(b, 1, instance="ib")
    jnew = h.join(instance="ib")
    assert h.sync_response(sb).error == E.fenced_instance_id
    assert h.group().state is S.PREPARING_REBALANCE and not h.answered(jnew)


def test_L3_protocol_change_in_stable_rebalances() -> None:
    h = Harness()
    a, b = h.stable_group(2, instances=["ia", "ib"], protocols=[("range", b""), ("rr", b"")])
    # ib comes back supporting only rr: selected protocol would change -> rebalance
    j = h.join(instance="ib", protocols=[("rr", b"")])
    assert h.group().state is S.PREPARING_REBALANCE and not h.answered(j)


def test_L3_write_failure_reverts_the_replacement() -> None:
    h = Harness()
    a, b = h.stable_group(2, instances=["ia", "ib"], session=30_000)
    req = JoinGroupRequest(
        "g", "", "ib", 45_000, 30_000, "consumer", (("range", b"sub"),), "c", "/h", False
    )
    out = h.shard.join_group("jx", req, h.now)
    assert out.records and out.reply_for("jx") is not None
    h.absorb(h.shard.append_failed(out, E.not_enough_replicas, h.now))
    r = h.join_response("jx")
    assert (r.error, r.member_id, r.leader, r.generation_id) == (
        E.coordinator_not_available,
        "",
        a,
        1,
    )
    g = h.group()
    assert (
        g.static_members == {"ia": a, "ib": b}
        and g.has(b)
        and g.get(b).session_timeout_ms == 30_000
    )
    assert h.heartbeat(b, 1, instance="ib") == E.none


def test_L4_static_member_with_require_known_is_added() -> None:
    h = Harness()
    j = h.join(instance="i", require_known=True)
    assert not h.answered(j) and not h.group().pending_members


def test_L5_static_group_follower_rejoin_does_not_rebalance() -> None:
    h = Harness()
    a, b = h.stable_group(2, instances=["ia", "ib"])
    r = h.join_response(h.join(b, instance="ib"))
    assert r.error == E.none and h.group().state is S.STABLE
    h.join(a, instance="ia")  # leader rejoin does
    assert h.group().state is S.PREPARING_REBALANCE


def test_L6_ten_9_static_members_not_removed_at_join_completion_only_by_session_expiry() -> None:
    h = Harness()
    a, b = h.stable_group(2, instances=["ia", "ib"], session=60_000, rebalance=10_000)
    ja = h.join(a, instance="ia", session=60_000, rebalance=10_000)
    h.tick(10_000)
    r = h.join_response(ja)
    assert r.generation_id == 2 and h.group().has(b)
    assert [m.member_id for m in r.members] == [a, b]
    h.sync(a, 2, [(a, b"A"), (b, b"B")], instance="ia")
    # b never heartbeats: its session timer (re-armed at completion) removes it
    h.tick(60_000 - 1)
    assert h.group().has(b)
    h.tick(1)
    assert not h.group().has(b) and h.group().static_members.get("ib") is None


def test_L7_fenced_and_unknown_instance() -> None:
    h = Harness()
    (a,) = h.stable_group(1, instances=["ia"])
    assert h.join_response(h.join("someone", instance="ia")).error == E.fenced_instance_id
    assert h.join_response(h.join(a, instance="other")).error == E.unknown_member_id
    assert h.sync_response(h.sync("someone", 1, instance="ia")).error == E.fenced_instance_id


# ---- a replaced static member still expires (issue 19) -------------------------------------
#
# L3 moves a static member to a new id. Its session timer was queued under the old id, so each
# path that renames a member must queue a fresh timer under the new one: otherwise the member,
# once it stops heartbeating, is never removed and its partitions are never reassigned.


def _live_while(h: Harness, ms: int, alive: dict[str, tuple[str, int]], step: int = 1_000) -> None:
    """Advance ``ms`` in steps, heartbeating the members of ``alive`` (member id -> (instance,
    generation)) before each step; a heartbeat telling of a rebalance is fine."""
    left = ms
    while left > 0:
        for member_id, (instance, generation) in alive.items():
            assert h.heartbeat(member_id, generation, instance=instance) in (
                E.none,
                E.rebalance_in_progress,
            )
        h.tick(min(step, left))
        left -= step


def test_L3_replaced_member_in_stable_expires_after_its_session_timeout() -> None:
    h = Harness()
    a, b = h.stable_group(2, instances=["ia", "ib"], session=10_000)
    r = h.join_response(h.join(instance="ib", session=10_000))  # ib restarts: no rebalance
    assert r.error == E.none and h.group().state is S.STABLE
    new_b = r.member_id
    # the new ib dies without leaving (static members send no LeaveGroup); ia lives on
    _live_while(h, 9_000, {a: ("ia", 1)})
    assert h.group().has(new_b) and h.group().state is S.STABLE
    _live_while(h, 2_000, {a: ("ia", 1)})
    g = h.group()
    assert not g.has(new_b) and g.static_members == {"ia": a}
    assert g.state is S.PREPARING_REBALANCE  # ia gets ib's partitions at the next generation


def test_L3_replaced_member_in_stable_expires_after_a_later_generation() -> None:
    h = Harness()
    a, b = h.stable_group(2, instances=["ia", "ib"], session=10_000, rebalance=5_000)
    new_b = h.join_response(h.join(instance="ib", session=10_000, rebalance=5_000)).member_id
    # a rebalance after the replacement: the session timer is re-armed at its completion
    ja = h.join(a, instance="ia", session=10_000, rebalance=5_000)
    jb = h.join(new_b, instance="ib", session=10_000, rebalance=5_000)
    ra, rb = h.join_response(ja), h.join_response(jb)
    assert ra.generation_id == rb.generation_id == 2
    h.sync(a, 2, [(a, b"A"), (new_b, b"B")], instance="ia")
    h.sync(new_b, 2, instance="ib")
    assert h.group().state is S.STABLE
    _live_while(h, 11_000, {a: ("ia", 2)})
    assert not h.group().has(new_b) and h.group().state is S.PREPARING_REBALANCE


def test_L3_replaced_member_with_a_protocol_change_expires() -> None:
    h = Harness()
    protos = [("range", b""), ("rr", b"")]
    a, b = h.stable_group(2, instances=["ia", "ib"], protocols=protos, session=10_000, rebalance=5_000)
    # ib comes back supporting only rr: replaced, and the group rebalances
    jb = h.join(instance="ib", protocols=[("rr", b"")], session=10_000, rebalance=5_000)
    assert h.group().state is S.PREPARING_REBALANCE
    ja = h.join(a, instance="ia", protocols=protos, session=10_000, rebalance=5_000)
    ra, rb = h.join_response(ja), h.join_response(jb)
    assert ra.generation_id == rb.generation_id == 2 and ra.protocol_name == "rr"
    new_b = rb.member_id
    h.sync(a, 2, [(a, b"A"), (new_b, b"B")], instance="ia")
    h.sync(new_b, 2, instance="ib")
    assert h.group().state is S.STABLE
    _live_while(h, 11_000, {a: ("ia", 2)})
    assert not h.group().has(new_b) and h.group().state is S.PREPARING_REBALANCE


def test_L3_replaced_member_in_preparing_rebalance_expires() -> None:
    h = Harness()
    a, b = h.stable_group(2, instances=["ia", "ib"], session=10_000, rebalance=5_000)
    ja = h.join(a, instance="ia", session=10_000, rebalance=5_000)  # the leader rejoins
    assert h.group().state is S.PREPARING_REBALANCE
    jb = h.join(instance="ib", session=10_000, rebalance=5_000)  # ib restarts meanwhile
    ra, rb = h.join_response(ja), h.join_response(jb)
    assert ra.generation_id == rb.generation_id == 2
    new_b = rb.member_id
    h.sync(a, 2, [(a, b"A"), (new_b, b"B")], instance="ia")
    h.sync(new_b, 2, instance="ib")
    assert h.group().state is S.STABLE
    _live_while(h, 11_000, {a: ("ia", 2)})
    assert not h.group().has(new_b) and h.group().state is S.PREPARING_REBALANCE


def test_L3_replaced_member_in_completing_rebalance_expires() -> None:
    h = Harness()
    ja = h.join(instance="ia", session=10_000, rebalance=5_000)
    jb = h.join(instance="ib", session=10_000, rebalance=5_000)
    h.run_until(lambda: h.answered(ja))
    a = h.join_response(ja).member_id
    assert h.join_response(jb).error == E.none
    assert h.group().state is S.COMPLETING_REBALANCE
    jnew = h.join(instance="ib", session=10_000, rebalance=5_000)  # ib restarts: start over
    assert h.group().state is S.PREPARING_REBALANCE
    ja2 = h.join(a, instance="ia", session=10_000, rebalance=5_000)
    ra, rb = h.join_response(ja2), h.join_response(jnew)
    assert ra.generation_id == rb.generation_id == 2 and ra.leader == a
    new_b = rb.member_id
    h.sync(a, 2, [(a, b"A"), (new_b, b"B")], instance="ia")
    h.sync(new_b, 2, instance="ib")
    assert h.group().state is S.STABLE
    _live_while(h, 11_000, {a: ("ia", 2)})
    assert not h.group().has(new_b) and h.group().state is S.PREPARING_REBALANCE


def test_L3_member_restored_after_a_failed_replacement_still_expires() -> None:
    h = Harness()
    a, b = h.stable_group(2, instances=["ia", "ib"], session=10_000)
    req = JoinGroupRequest(
        "g", "", "ib", 45_000, 10_000, "consumer", (("range", b"sub"),), "c", "/h", False
    )
    out = h.shard.join_group("jx", req, h.now)
    h.absorb(h.shard.append_failed(out, E.not_enough_replicas, h.now))
    assert h.group().static_members == {"ia": a, "ib": b}
    # the restored b never heartbeats again
    _live_while(h, 11_000, {a: ("ia", 1)})
    assert not h.group().has(b) and h.group().state is S.PREPARING_REBALANCE
