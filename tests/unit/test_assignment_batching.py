"""KIP-1263 (Kafka 4.3), batched and offloaded target assignment, driven through GroupShard
with a fake clock: the target is computed at most once per ``consumer.assignment.interval.ms``
after the last computation finished (heartbeats meanwhile get the last target at its epoch); an
offloaded computation runs on a snapshot, one at a time per group, and lands as an operation of
its own, applied at the epoch it was computed for unless the group it was computed for is gone;
record 6 carries the computation's timestamp (tagged field 0). Each test names the rule."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from kcoord.coordinator.consumer.batching import OFFLOAD_MIN_SIZE
from kcoord.coordinator.consumer.records import (
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    decode_consumer_value,
    encode_consumer_key,
    encode_consumer_value,
)
from kcoord.coordinator.consumer.target import run_job
from kcoord.coordinator.shard import GroupShard
from kcoord.protocol.errors import ErrorCode

from .test_consumer_group import Group, _owned, _random_activity, _state, partitions

E = ErrorCode
T0 = 50_000  # the fake clock's start: a timestamp of 0 means "never computed"
BIG = OFFLOAD_MIN_SIZE  # partitions enough for a run to be offloaded


def batched(interval: int = 1000, **kw: Any) -> Group:
    g = Group(consumer_assignment_interval_ms=interval, consumer_assignor_offload=False, **kw)
    g.now = T0
    return g


def offloaded(interval: int = 0) -> Group:
    g = Group({"t": BIG}, consumer_assignment_interval_ms=interval)
    g.now = T0
    return g


def target_epochs(g: Group) -> list[ConsumerGroupTargetAssignmentMetadataValue]:
    """The record-6 values of the last operation, decoded."""
    key = encode_consumer_key(ConsumerGroupTargetAssignmentMetadataKey("g"))
    out = []
    for k, v in g.last_records:
        if k == key and v is not None:
            value = decode_consumer_value(ConsumerGroupTargetAssignmentMetadataKey("g"), v)
            assert isinstance(value, ConsumerGroupTargetAssignmentMetadataValue)
            out.append(value)
    return out


def land(g: Group, fail: bool = False) -> int:
    """Run every offloaded computation the shard asked for (as the runtime's worker thread
    does) and hand each back as its own operation; how many there were."""
    requests = g.shard.take_assignment_requests()
    g.last_records = []
    for request in requests:
        result = run_job(request.job)
        if fail:
            result = dataclasses.replace(result, target=None)
        out = g.shard.assignment_computed(result, g.now)
        g.last_records += out.records
        g.log += out.records
    return len(requests)


# ---- batching ---------------------------------------------------------------------------------


def test_kip_1263_a_new_groups_first_target_is_computed_at_once() -> None:
    g = batched()
    r = g.hb("a", 0)  # the group starts at epoch 1 (KAFKA-20268): its first target is epoch 2
    assert r.member_epoch == 2 and partitions(r) == set(range(6))
    assert [(v.assignment_epoch, v.assignment_timestamp) for v in target_epochs(g)] == [(2, T0)]


def test_kip_1263_joins_within_the_interval_give_one_computation() -> None:
    g = batched()
    g.hb("a", 0)
    for i, m in enumerate(("b", "c")):
        g.now += 100
        r = g.hb(m, 0)
        # The last target stands: the new member is at its epoch, with nothing yet.
        assert (r.error, r.member_epoch, partitions(r)) == (E.none, 2, set())
        assert target_epochs(g) == []
        group = g.group()
        assert (group.group_epoch, group.assignment_epoch, group.state) == (3 + i, 2, "Assigning")
    g.advance(799)  # T0 + 999: not yet
    assert target_epochs(g) == [] and g.group().assignment_epoch == 2
    g.advance(1)  # the interval has passed since the first computation: one for both joins
    assert [(v.assignment_epoch, v.assignment_timestamp) for v in target_epochs(g)] == [(4, T0 + 1000)]
    target = g.group().target
    assert sorted(len(p) for a in target.values() for p in a.values()) == [2, 2, 2]
    # a revokes what it gives up; then b and c get theirs at the new epoch.
    g.hb("a", 2, topic_partitions=_owned(g, "a"))
    g.hb("a", 2, topic_partitions=())
    assert g.hb("b", 2, topic_partitions=()).member_epoch == 4
    assert len(partitions(g.hb("c", 2, topic_partitions=()))) == 2


def test_kip_1263_a_heartbeat_after_the_interval_computes_without_waiting_for_the_timer() -> None:
    g = batched()
    g.hb("a", 0)
    g.now += 100
    g.hb("b", 0)
    g.now += 2000  # past the interval, before the shard's timer ran
    r = g.hb("b", 2, topic_partitions=())
    assert [v.assignment_epoch for v in target_epochs(g)] == [3]
    assert r.member_epoch in (2, 3)  # reconciling towards epoch 3 (a still holds its share)


def test_kip_1263_an_interval_of_zero_computes_at_every_epoch() -> None:
    g = batched(interval=0)
    g.hb("a", 0)
    g.now += 1
    g.hb("b", 0)
    assert [v.assignment_epoch for v in target_epochs(g)] == [3]


def test_kip_1263_the_groups_own_interval_overrides_the_brokers() -> None:
    g = batched(interval=1000, overrides=lambda gid: {"consumer.assignment.interval.ms": "0"})
    g.hb("a", 0)
    g.now += 1
    g.hb("b", 0)
    assert [v.assignment_epoch for v in target_epochs(g)] == [3]


# ---- offload ----------------------------------------------------------------------------------


def test_kip_1263_a_large_groups_target_is_computed_off_the_coordinator() -> None:
    g = offloaded()
    r = g.hb("a", 0)  # a new group's first target goes out too: a waits at epoch 1 (KAFKA-20268)
    assert (r.member_epoch, partitions(r)) == (1, set())
    assert (g.group().assignment_epoch, g.group().assigning_epoch) == (1, 2)
    assert land(g) == 1 and g.group().assignment_epoch == 2
    g.now += 10
    r = g.hb("b", 0)
    assert (r.member_epoch, partitions(r)) == (2, set())  # from the last target
    assert target_epochs(g) == [] and g.group().assigning_epoch == 3
    g.now += 10
    g.hb("c", 0)  # a run is out: no second one
    assert g.group().group_epoch == 4
    g.now += 10
    assert land(g) == 1
    # The run of epoch 3 becomes the target at epoch 3 (c, who joined since, gets nothing),
    # and the next one, for epoch 4, starts at once (interval 0).
    assert [(v.assignment_epoch, v.assignment_timestamp) for v in target_epochs(g)] == [(3, T0 + 30)]
    group = g.group()
    assert group.assignment_epoch == 3 and group.target["c"] == {}
    assert sum(len(p) for p in group.target["b"].values()) == BIG // 2
    assert group.assigning_epoch == 4
    assert land(g) == 1 and g.group().assignment_epoch == 4
    assert sorted(sum(len(p) for p in a.values()) for a in g.group().target.values()) == [333, 333, 334]


def test_kip_1263_a_landed_target_skips_members_that_left_meanwhile() -> None:
    g = offloaded(interval=1000)
    g.hb("a", 0)
    assert land(g) == 1  # the first target, at epoch 2
    g.now += 10
    g.hb("b", 0)
    g.now += 10
    g.hb("c", 0)  # batched: waits for the interval
    g.now += 1000
    g.hb("c", 2, topic_partitions=())  # the interval passed: a run of epoch 4 goes out
    assert g.group().assigning_epoch == 4
    g.hb("b", -1)  # b leaves: epoch 5
    assert land(g) == 1
    group = g.group()
    assert group.assignment_epoch == 4 and set(group.target) == {"a", "c"}
    # Epoch 5 waits for the interval after this computation.
    assert group.group_epoch == 5 and group.assigning_epoch == 0 and group.assignment_timer


def test_kip_1263_a_result_for_an_undone_operation_is_dropped() -> None:
    g = offloaded()
    g.hb("a", 0)
    assert land(g) == 1  # the first target, at epoch 2
    from kcoord.coordinator.consumer.messages import ConsumerGroupHeartbeatRequest

    req = ConsumerGroupHeartbeatRequest("g", "b", 0, rebalance_timeout_ms=5000,
                                        subscribed_topic_names=("t",), topic_partitions=())
    out = g.shard.consumer_group_heartbeat("h", req, g.now)
    assert g.group().assigning_epoch == 3
    g.shard.append_failed(out, E.not_leader_or_follower, g.now)  # the join is undone
    assert set(g.group().members) == {"a"} and g.group().assigning_epoch == 0
    assert land(g) == 1 and g.last_records == []
    assert g.group().assignment_epoch == 2


def test_kip_1263_a_result_for_a_group_deleted_and_created_again_is_dropped() -> None:
    from kcoord.coordinator.messages import DeleteGroupsRequest

    g = offloaded()
    g.hb("a", 0)
    g.hb("b", 0)
    [old] = g.shard.take_assignment_requests()
    g.hb("a", -1)
    g.hb("b", -1)
    g.shard.delete_groups("d", DeleteGroupsRequest(("g",)), g.now)
    g.hb("a", 0)
    g.hb("b", 0)  # the new group's run, at the same epoch 2
    assert g.group().assigning_epoch == old.job.epoch == 2
    out = g.shard.assignment_computed(run_job(old.job), g.now)
    assert out.records == [] and g.group().assignment_epoch == 1
    assert land(g) == 1 and g.group().assignment_epoch == 2


def test_kip_1263_a_result_for_a_replaced_shard_changes_nothing_there() -> None:
    g = offloaded()
    g.hb("a", 0)
    g.hb("b", 0)
    [request] = g.shard.take_assignment_requests()
    fresh = GroupShard(0, g.config, topics=g.topics)
    for key, value in g.log:
        fresh.replay(key, value, g.now)
    fresh.finish_loading(g.now)
    out = fresh.assignment_computed(run_job(request.job), g.now)
    assert out.records == [] and fresh.consumer_group("g").assignment_epoch == 1  # type: ignore[union-attr]


def test_kip_1263_a_failed_run_leaves_the_last_target_and_the_next_heartbeat_asks_again() -> None:
    g = offloaded()
    g.hb("a", 0)
    g.hb("b", 0)
    assert land(g, fail=True) == 1 and g.last_records == []
    assert g.group().assignment_epoch == 1 and g.group().assigning_epoch == 0
    g.hb("b", 1, topic_partitions=())  # b waits at epoch 1, the group is at 3
    assert land(g) == 1 and g.group().assignment_epoch == 3


def test_kip_1263_offload_off_computes_inline_even_for_a_large_group() -> None:
    g = Group({"t": BIG}, consumer_assignor_offload=False)
    g.now = T0
    g.hb("a", 0)
    g.hb("b", 0)
    assert g.shard.take_assignment_requests() == [] and g.group().assignment_epoch == 3


# ---- record 6's timestamp ---------------------------------------------------------------------


def test_kip_1263_the_assignment_timestamp_is_tagged_field_0_written_only_when_set() -> None:
    with_ts = encode_consumer_value(ConsumerGroupTargetAssignmentMetadataValue(7, 1_700_000_000_123))
    without = encode_consumer_value(ConsumerGroupTargetAssignmentMetadataValue(7))
    key = ConsumerGroupTargetAssignmentMetadataKey("g")
    # version 0, epoch 7, then the tagged fields: none, or tag 0 of 8 bytes.
    assert without == b"\x00\x00\x00\x00\x00\x07\x00"
    assert with_ts == b"\x00\x00\x00\x00\x00\x07\x01\x00\x08" + (1_700_000_000_123).to_bytes(8, "big")
    assert decode_consumer_value(key, with_ts) == ConsumerGroupTargetAssignmentMetadataValue(7, 1_700_000_000_123)
    assert decode_consumer_value(key, without) == ConsumerGroupTargetAssignmentMetadataValue(7, 0)


def test_kip_1263_a_reloaded_group_keeps_its_timestamp_and_batches_from_it() -> None:
    g = batched()
    g.hb("a", 0)
    fresh = GroupShard(0, g.config, topics=g.topics)
    for key, value in g.log:
        fresh.replay(key, value, g.now)
    fresh.finish_loading(g.now)
    assert fresh.consumer_group("g").assignment_timestamp == T0  # type: ignore[union-attr]
    g.shard = fresh
    g.now += 100
    g.hb("b", 0)
    assert target_epochs(g) == []  # still within the interval of the stored computation


@pytest.mark.parametrize("seed", range(6))
def test_kip_1263_live_equals_replayed_with_batching(seed: int) -> None:
    """The replay property of test_consumer_group (its state includes the timestamp) with
    targets batched over an interval, the timer computing some of them."""
    g = _random_activity(seed, consumer_assignment_interval_ms=700)
    assert any(t for t in (grp.assignment_timestamp for grp in g.shard.consumer_groups()))
    fresh = GroupShard(0, g.config, topics=g.topics)
    for key, value in g.log:
        fresh.replay(key, value, g.now)
    fresh.finish_loading(g.now)
    assert _state(fresh) == _state(g.shard)


def held(reply: Any) -> int:
    """How many partitions, of all topics, the reply assigns."""
    return sum(len(ps) for _, ps in reply.assignment)


def test_an_unsubscribed_topics_partitions_are_revoked_before_the_batched_target() -> None:
    """Kafka 4.2's CurrentAssignmentBuilder: a member that drops a topic from its subscription
    is asked at once to revoke that topic's partitions, at its epoch, even while KIP-1263 keeps
    the last target (which still gives it those partitions) until the interval has passed."""
    g = batched(topics={"t": 4, "u": 4})
    r = g.hb("a", 0, subscribed_topic_names=("t", "u"))
    assert (r.member_epoch, held(r)) == (2, 8)
    g.now += 100
    r = g.hb("a", 2, subscribed_topic_names=("t",), topic_partitions=_owned(g, "a"))
    member = g.group().members["a"]
    assert g.group().assignment_epoch == 2  # the target is not recomputed yet
    assert (r.member_epoch, member.state.name) == (2, "UNREVOKED_PARTITIONS")
    assert {g.topics.topic_by_id(t).name for t in member.pending_revocation} == {"u"}  # type: ignore[union-attr]
    assert r.assignment is not None and {t for t, _ in r.assignment} == {g.id_of("t")}
    # Once revoked, the member stays at epoch 2 (the target's) with t's partitions only.
    r = g.hb("a", 2, topic_partitions=_owned(g, "a"))
    member = g.group().members["a"]
    assert (r.member_epoch, member.state.name, len(member.assigned[g.id_of("t")])) == (2, "STABLE", 4)
    assert not member.pending_revocation and g.id_of("u") not in member.assigned
    g.advance(900)  # the batched target at epoch 3 (the subscription change) changes nothing more
    r = g.hb("a", 2, topic_partitions=_owned(g, "a"))
    assert (r.member_epoch, r.assignment) == (3, None)  # None: the assignment did not change
    assert list(g.group().members["a"].assigned) == [g.id_of("t")]
    fresh = GroupShard(0, g.config, topics=g.topics)
    for key, value in g.log:
        fresh.replay(key, value, g.now)
    fresh.finish_loading(g.now)
    assert _state(fresh) == _state(g.shard)
