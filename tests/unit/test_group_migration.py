"""Online migration between classic and consumer groups (KIP-848): a consumer-protocol member
upgrades a classic group, classic members keep working inside the consumer group through
JoinGroup/SyncGroup/Heartbeat/LeaveGroup, and the group goes back to classic when its last
consumer-protocol member leaves. Driven through GroupShard with a fake clock."""

from __future__ import annotations

import struct
from typing import Any

from kcoord.coordinator.config import GroupConfig
from kcoord.coordinator.consumer.embedded import decode_assignment, encode_assignment
from kcoord.coordinator.consumer.messages import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)
from kcoord.coordinator.consumer.records import ConsumerRecordKey
from kcoord.coordinator.consumer.topics import StaticTopics
from kcoord.coordinator.schemas import GroupMetadataKey, decode_key
from tests.unit.test_group_harness import E, Harness

PARTITIONS = 4


def subscription_v1(*topics: str, owned: dict[str, list[int]] | None = None) -> bytes:
    """A ConsumerProtocol Subscription v1 (topics, no user data, owned partitions)."""
    out = struct.pack(">hi", 1, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    out += struct.pack(">i", -1)
    owned = owned or {}
    out += struct.pack(">i", len(owned))
    for t, ps in owned.items():
        out += struct.pack(">h", len(t)) + t.encode() + struct.pack(">i", len(ps))
        out += b"".join(struct.pack(">i", p) for p in ps)
    return out


def setup(policy: str = "bidirectional") -> tuple[Harness, list[str], int]:
    """A Stable classic cooperative group of two members owning t-0,1 and t-2,3."""
    h = Harness(
        GroupConfig(initial_rebalance_delay_ms=0, consumer_migration_policy=policy),
        topics=StaticTopics({"t": PARTITIONS}),
    )
    protos = (("cooperative-sticky", subscription_v1("t")),)
    handles = [h.join(protocols=protos, client_id=f"c{i}") for i in range(2)]
    h.run_until(lambda: all(h.answered(x) for x in handles))
    joined = [h.join_response(x) for x in handles]
    ids = [r.member_id for r in joined]
    gen = joined[0].generation_id
    plan = {ids[0]: encode_assignment({"t": [0, 1]}), ids[1]: encode_assignment({"t": [2, 3]})}
    h.sync(joined[0].leader, gen, list(plan.items()))
    for m in ids:
        if m != joined[0].leader:
            h.sync(m, gen)
    assert h.group().state.value == "Stable"
    return h, ids, gen


def consumer_hb(h: Harness, member: str, epoch: int, **kw: Any) -> ConsumerGroupHeartbeatResponse:
    if epoch == 0:
        kw.setdefault("rebalance_timeout_ms", 30_000)
        kw.setdefault("subscribed_topic_names", ("t",))
        kw.setdefault("topic_partitions", ())
    req = ConsumerGroupHeartbeatRequest("g", member, epoch, **kw)
    handle = h.handle("cgh")
    h.absorb(h.shard.consumer_group_heartbeat(handle, req, h.now))
    reply = h.last.reply_for(handle)
    assert isinstance(reply, ConsumerGroupHeartbeatResponse)
    return reply


def kinds(h: Harness) -> list[tuple[int, bool]]:
    out = []
    for key, value in h.last.records:
        decoded = decode_key(key)
        if isinstance(decoded, GroupMetadataKey):
            out.append((2, value is None))
        else:
            assert isinstance(decoded, ConsumerRecordKey)
            out.append((int.from_bytes(key[:2], "big"), value is None))
    return out


def test_a_consumer_protocol_member_upgrades_a_classic_group_keeping_the_assignments() -> None:
    h, ids, gen = setup()
    r = consumer_hb(h, "new", 0)
    assert r.error == E.none and r.member_epoch == gen + 1
    assert h.shard.group("g") is None
    group = h.shard.consumer_group("g")
    assert group is not None and set(group.members) == {*ids, "new"}
    for m, parts in zip(ids, ([0, 1], [2, 3]), strict=True):
        member = group.members[m]
        assert member.classic is not None and member.member_epoch == gen
        assert {p for ps in member.assigned.values() for p in ps} == set(parts)
    # The classic tombstone, the converted group (5 5 3 7 7 6 8 8), then the join.
    assert kinds(h)[:9] == [(2, True), (5, False), (5, False), (3, False), (7, False), (7, False),
                            (6, False), (8, False), (8, False)]
    assert r.assignment == ()  # everything is still held by the classic members
    # ConsumerGroupDescribe v1 (KIP-1099): each member's type, classic 0 and consumer 1.
    handle = h.handle("cgd")
    h.absorb(h.shard.consumer_group_describe(handle, ConsumerGroupDescribeRequest(("g",)), h.now))
    (described,) = h.last.reply_for(handle).groups  # type: ignore[union-attr]
    assert {m.member_id: m.member_type for m in described.members} == {ids[0]: 0, ids[1]: 0, "new": 1}


def test_classic_members_rejoin_revoke_and_the_newcomer_gets_released_partitions() -> None:
    h, ids, gen = setup()
    new = consumer_hb(h, "new", 0)
    epoch = new.member_epoch
    # The classic members are told to rejoin; they send what they own (cooperative).
    assert h.heartbeat(ids[0], gen) == E.rebalance_in_progress
    owned = {ids[0]: [0, 1], ids[1]: [2, 3]}
    generations = {}
    for m in ids:
        j = h.join(m, protocols=(("cooperative-sticky", subscription_v1("t", owned={"t": owned[m]})),))
        r = h.join_response(j)
        assert r.error == E.none and r.protocol_name == "cooperative-sticky" and r.leader == ""
        generations[m] = r.generation_id
        s = h.sync_response(h.sync(m, r.generation_id, protocol_type="consumer",
                                   protocol_name="cooperative-sticky"))
        assert s.error == E.none
        kept = {p for _, ps in decode_assignment(s.assignment) for p in ps}
        assert kept <= set(owned[m])
        owned[m] = sorted(kept)
    # They rejoin again once revoked, now reporting only what they kept.
    for m in ids:
        j = h.join(m, protocols=(("cooperative-sticky", subscription_v1("t", owned={"t": owned[m]})),))
        generations[m] = h.join_response(j).generation_id
        assert h.heartbeat(m, generations[m]) == E.none
    r = consumer_hb(h, "new", epoch, topic_partitions=())
    group = h.shard.consumer_group("g")
    assert group is not None
    held = [p for m in group.members.values() for ps in m.assigned.values() for p in ps]
    assert sorted(held) == list(range(PARTITIONS))  # each partition to exactly one member
    assert r.assignment is not None and len({p for _, ps in r.assignment for p in ps}) >= 1


def test_the_group_goes_back_to_classic_when_the_last_consumer_member_leaves() -> None:
    h, ids, gen = setup()
    new = consumer_hb(h, "new", 0)
    consumer_hb(h, "new", -1)
    assert new.error == E.none
    assert h.shard.consumer_group("g") is None
    classic = h.shard.group("g")
    assert classic is not None and classic.state.value == "PreparingRebalance"
    assert set(classic.members) == set(ids)
    assert (2, False) in kinds(h) and (3, True) in kinds(h)
    # The classic members rejoin a classic rebalance.
    assert h.heartbeat(ids[0], classic.generation) == E.rebalance_in_progress


def test_a_disabled_policy_refuses_the_upgrade() -> None:
    h, _ids, _gen = setup(policy="disabled")
    assert consumer_hb(h, "new", 0).error == E.group_id_not_found
    assert h.shard.group("g") is not None


def test_a_classic_member_with_a_stale_generation_or_unknown_id() -> None:
    h, ids, gen = setup()
    consumer_hb(h, "new", 0)
    assert h.heartbeat(ids[0], gen + 5) == E.illegal_generation
    assert h.heartbeat("nobody", gen) == E.unknown_member_id
    assert h.heartbeat("new", 1) == E.unknown_member_id  # a consumer-protocol member
    left = h.leave(ids[1])
    assert left.members[0].error == E.none
    group = h.shard.consumer_group("g")
    assert group is not None and ids[1] not in group.members


def test_replaying_the_records_of_an_upgrade_and_a_downgrade_rebuilds_the_groups() -> None:
    from kcoord.coordinator.shard import GroupShard
    from tests.unit.test_consumer_group import _state

    h, ids, gen = setup()
    new = consumer_hb(h, "new", 0)
    j = h.join(ids[0], protocols=(("cooperative-sticky", subscription_v1("t", owned={"t": [0, 1]})),))
    assert h.join_response(j).error == E.none
    consumer_hb(h, "new", new.member_epoch, topic_partitions=())

    def replayed() -> GroupShard:
        fresh = GroupShard(0, h.shard.config, topics=h.shard.consumer.topics)
        for key, value in h.records:
            fresh.replay(key, value, h.now)
        fresh.finish_loading(h.now)
        return fresh

    fresh = replayed()
    assert fresh.group("g") is None and _state(fresh) == _state(h.shard)
    member = fresh.consumer_group("g").members[ids[0]]  # type: ignore[union-attr]
    assert member.classic is not None and member.classic.supported_protocols[0].name == "cooperative-sticky"
    consumer_hb(h, "new", -1)  # back to classic
    fresh = replayed()
    assert fresh.consumer_group("g") is None
    classic = fresh.group("g")
    assert classic is not None and set(classic.members) == set(ids)


def test_a_classic_member_that_does_not_rejoin_within_its_rebalance_timeout_is_fenced() -> None:
    h, ids, gen = setup()
    consumer_hb(h, "new", 0)
    assert h.heartbeat(ids[0], gen) == E.rebalance_in_progress  # asked to rejoin; it never does
    for _ in range(4):
        h.tick(9_000)  # session 10 s: its heartbeats keep it alive, the rejoin never comes
        if ids[0] in h.shard.consumer_group("g").members:  # type: ignore[union-attr]
            h.heartbeat(ids[0], gen)
        h.heartbeat(ids[1], gen)
        consumer_hb(h, "new", h.shard.consumer_group("g").members["new"].member_epoch, topic_partitions=())  # type: ignore[union-attr]
    group = h.shard.consumer_group("g")
    assert group is not None and ids[0] not in group.members
