"""Kafka 4.3's epoch rules around delayed target assignments, driven through GroupShard with a
fake clock; each test names the Kafka issue:

- KAFKA-20268: a consumer group starts at epoch 1 with an empty target at epoch 1, so its
  first computed target is epoch 2 and a member joining while that target is not there yet
  (its computation offloaded) reconciles to epoch 1 with no partitions;
- KAFKA-20442: the fencing or leaving that empties a group also writes the target epoch (6),
  caught up with the group epoch;
- KAFKA-20272: a classic member of a consumer group is told to rejoin only when a target newer
  than its epoch is there, not when the group epoch alone moved on (batching)."""

from __future__ import annotations

from kcoord.coordinator.config import GroupConfig
from kcoord.coordinator.consumer.batching import OFFLOAD_MIN_SIZE
from kcoord.coordinator.consumer.records import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupMetadataKey,
    ConsumerGroupTargetAssignmentMetadataKey,
    decode_consumer_value,
)
from kcoord.coordinator.consumer.topics import StaticTopics
from kcoord.coordinator.schemas import decode_key
from kcoord.coordinator.shard import GroupShard
from tests.unit.test_group_harness import Harness
from tests.unit.test_group_migration import consumer_hb, subscription_v1

from .test_assignment_batching import land
from .test_consumer_group import SESSION, Group, _state, partitions
from .test_consumer_group import E as Err

T0 = 50_000


def epochs_written(g: Group) -> list[tuple[int, int]]:
    """(record kind, epoch) of the last operation's records 3, 6 and 8, in write order."""
    out = []
    for key, value in g.last_records:
        k = decode_key(key)
        if value is None:
            continue
        if isinstance(k, ConsumerGroupMetadataKey):
            out.append((3, decode_consumer_value(k, value).epoch))
        elif isinstance(k, ConsumerGroupTargetAssignmentMetadataKey):
            out.append((6, decode_consumer_value(k, value).assignment_epoch))
        elif isinstance(k, ConsumerGroupCurrentMemberAssignmentKey):
            out.append((8, decode_consumer_value(k, value).member_epoch))
    return out


def replayed_equals_live(g: Group) -> bool:
    fresh = GroupShard(0, g.config, topics=g.topics)
    for key, value in g.log:
        fresh.replay(key, value, g.now)
    fresh.finish_loading(g.now)
    return _state(fresh) == _state(g.shard)


# ---- KAFKA-20268 ------------------------------------------------------------------------------


def test_kafka_20268_a_new_group_is_at_epoch_1_and_its_first_target_is_epoch_2() -> None:
    g = Group()
    r = g.hb("a", 0)
    assert (r.error, r.member_epoch, partitions(r)) == (Err.none, 2, set(range(6)))
    # Nothing is written for epoch 1 itself: the join's records start at epoch 2.
    assert epochs_written(g) == [(3, 2), (6, 2), (8, 2)]
    assert replayed_equals_live(g)


def test_kafka_20268_a_member_joining_while_the_first_target_is_out_reconciles_to_epoch_1() -> None:
    g = Group({"t": OFFLOAD_MIN_SIZE}, consumer_assignment_interval_ms=0)
    g.now = T0
    r = g.hb("a", 0)
    assert (r.error, r.member_epoch, partitions(r)) == (Err.none, 1, set())
    assert epochs_written(g) == [(3, 2), (8, 1)]  # no target yet: its run is out
    group = g.group()
    assert (group.group_epoch, group.assignment_epoch, group.assigning_epoch) == (2, 1, 2)
    assert replayed_equals_live(g)  # a group loaded without a record 6 is at target epoch 1
    assert land(g) == 1
    r = g.hb("a", 1, topic_partitions=())
    assert (r.member_epoch, len(partitions(r))) == (2, OFFLOAD_MIN_SIZE)


# ---- KAFKA-20442 ------------------------------------------------------------------------------


def test_kafka_20442_the_last_member_leaving_catches_the_target_epoch_up() -> None:
    g = Group()
    g.hb("a", 0)
    g.hb("b", 0)
    g.hb("b", -1)  # a member remains: the target catches up by computation, not here
    assert epochs_written(g) == [(3, 4)]
    g.hb("a", -1)
    assert g.kinds() == [(8, True), (7, True), (5, True), (3, False), (6, False)]
    assert epochs_written(g) == [(3, 5), (6, 5)]
    group = g.group()
    assert (group.state, group.group_epoch, group.assignment_epoch) == ("Empty", 5, 5)
    assert replayed_equals_live(g)


def test_kafka_20442_the_last_member_fenced_by_its_session_catches_the_target_epoch_up() -> None:
    g = Group()
    g.hb("a", 0)
    g.advance(SESSION + 1)
    group = g.group()
    assert not group.members and (group.group_epoch, group.assignment_epoch) == (3, 3)
    assert (6, False) in g.kinds()
    assert replayed_equals_live(g)


# ---- KAFKA-20272 ------------------------------------------------------------------------------


def test_kafka_20272_a_classic_member_rejoins_only_for_a_newer_target() -> None:
    h = Harness(GroupConfig(consumer_assignment_interval_ms=1000), topics=StaticTopics({"t": 4}))
    h.now = T0
    assert consumer_hb(h, "a", 0).member_epoch == 2  # a new group's first target: at once
    # A classic member joins within the interval: epoch 3, the target stays at epoch 2.
    j = h.join_response(h.join(protocols=(("range", subscription_v1("t")),)))
    assert j.error == Err.none and j.generation_id == 2
    group = h.shard.consumer_group("g")
    assert group is not None and (group.group_epoch, group.assignment_epoch) == (3, 2)
    # No newer target: it syncs and heartbeats without being sent back to rejoin.
    s = h.sync_response(h.sync(j.member_id, 2, protocol_type="consumer", protocol_name="range"))
    assert s.error == Err.none
    assert h.heartbeat(j.member_id, 2) == Err.none
    h.tick(1000)  # the interval is over: the timer computes the target of epoch 3
    assert group.assignment_epoch == 3
    assert h.heartbeat(j.member_id, 2) == Err.rebalance_in_progress
