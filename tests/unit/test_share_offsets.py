"""The group coordinator's part of the share offsets admin APIs (coordinator/share/offsets.py)
driven through GroupShard: which group may have its offsets altered or deleted (Kafka 4.2's
checks and error codes), record 15 after each, a group created by an alter, a failed write
undone, the records replayed into a fresh shard; KIP-1226's lag (broker/share/admin_api.py);
and the broker's share partitions forgetting what an admin changed."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

from kcoord.broker.share.admin_api import share_lag
from kcoord.coordinator.config import GroupConfig
from kcoord.coordinator.consumer.messages import ConsumerGroupHeartbeatRequest
from kcoord.coordinator.consumer.topics import StaticTopics
from kcoord.coordinator.shard import GroupShard
from kcoord.coordinator.share.messages import (
    AlterPlan,
    DeletePlan,
    Initialized,
    InitializedRead,
    OffsetsAlter,
    OffsetsDeleteCheck,
    OffsetsDeleted,
    OffsetsDeletedResponse,
    ShareGroupHeartbeatRequest,
)
from kcoord.protocol.errors import ErrorCode
from kcoord.share.model import PersistedState, RecordState, SharePartitionKey, StateBatch
from kcoord.share.state_shard import summary_of

from .test_share_manager import append, make

E = ErrorCode


class Shard:
    """A loaded shard with topics "t" (4 partitions) and "u" (1), and the records it wrote."""

    def __init__(self) -> None:
        self.topics = StaticTopics({"t": 4, "u": 1})
        self.config = GroupConfig(share_session_timeout_ms=6000, share_heartbeat_interval_ms=500)
        self.shard = GroupShard(0, self.config, topics=self.topics)
        self.shard.finish_loading(0)
        self.log: list[tuple[bytes, bytes | None]] = []
        self.last: list[tuple[bytes, bytes | None]] = []

    def tid(self, name: str) -> uuid.UUID:
        info = self.topics.topic(name)
        assert info is not None
        return info.topic_id

    def call(self, req: Any, now: int = 5) -> Any:
        out = self.shard.share_offsets("h", req, now)
        self.last = out.records
        self.log += out.records
        self.out = out
        return out.reply_for("h")

    def alter(self, group: str, *topics: tuple[str, tuple[tuple[int, int], ...]]) -> AlterPlan:
        plan = self.call(OffsetsAlter(group, topics))
        assert isinstance(plan, AlterPlan)
        return plan

    def join(self, group: str, member: str) -> None:
        req = ShareGroupHeartbeatRequest(group, member, 0, subscribed_topic_names=("t",))
        out = self.shard.share_group_heartbeat("j", req, 0)
        self.log += out.records
        assert out.reply_for("j").error == E.none  # type: ignore[union-attr]

    def record_types(self) -> list[int]:
        return [int.from_bytes(key[:2], "big") for key, _ in self.last]


def test_alter_creates_a_missing_share_group_with_records_11_and_15() -> None:
    s = Shard()
    plan = s.alter("g", ("t", ((0, 7), (2, 9))))
    assert (plan.error, plan.initialize) == (E.none, ((s.tid("t"), 0, 7), (s.tid("t"), 2, 9)))
    assert [(r.partition, r.error) for r in plan.topics[0].partitions] == [(0, 0), (2, 0)]
    assert s.record_types() == [11, 15]
    group = s.shard.share_group("g")
    assert group is not None and (group.state, group.group_epoch) == ("Empty", 0)
    assert group.initialized[s.tid("t")][:2] == ("t", frozenset({0, 2}))


def test_alter_adds_to_the_initialized_partitions_of_an_existing_group() -> None:
    s = Shard()
    s.join("g", "m")
    s.shard.share_group_heartbeat("l", ShareGroupHeartbeatRequest("g", "m", -1), 0)
    plan = s.alter("g", ("u", ((0, 3),)))
    assert plan.error == E.none and s.record_types() == [15]
    group = s.shard.share_group("g")
    assert group is not None
    assert {t: v[1] for t, v in group.initialized.items()} == {
        s.tid("t"): frozenset(range(4)),
        s.tid("u"): frozenset({0}),
    }


def test_alter_is_refused_while_the_group_has_members() -> None:
    s = Shard()
    s.join("g", "m")
    plan = s.alter("g", ("t", ((0, 0),)))
    assert plan.error == E.non_empty_group and plan.topics == () and s.last == []


def test_alter_of_another_types_group_or_the_empty_id_is_refused() -> None:
    s = Shard()
    req = ConsumerGroupHeartbeatRequest(
        group_id="cg",
        member_id="c",
        member_epoch=0,
        rebalance_timeout_ms=5000,
        subscribed_topic_names=("t",),
        topic_partitions=(),
    )
    s.shard.consumer_group_heartbeat("c", req, 0)
    plan = s.alter("cg", ("t", ((0, 0),)))
    assert (plan.error, plan.message) == (E.group_id_not_found, "Group cg is not a share group.")
    assert s.alter("", ("t", ((0, 0),))).error == E.invalid_group_id
    assert s.last == [] and s.shard.share_group("") is None


def test_alter_answers_unknown_topics_partitions_and_negative_offsets_per_partition() -> None:
    s = Shard()
    plan = s.alter("g", ("nope", ((0, 1),)), ("t", ((4, 1), (-1, 1), (1, -5), (3, 2))))
    nope, t = plan.topics
    assert nope.topic_id is None and [(r.partition, r.error) for r in nope.partitions] == [
        (0, E.unknown_topic_or_partition)
    ]
    assert [(r.partition, r.error) for r in t.partitions] == [
        (4, E.unknown_topic_or_partition),
        (-1, E.unknown_topic_or_partition),
        (1, E.invalid_request),
        (3, E.none),
    ]
    assert plan.initialize == ((s.tid("t"), 3, 2),)


def test_an_alter_with_nothing_to_set_writes_nothing_and_creates_no_group() -> None:
    s = Shard()
    plan = s.alter("g", ("nope", ((0, 1),)))
    assert plan.error == E.none and plan.initialize == () and s.last == []
    assert s.shard.share_group("g") is None


def test_a_failed_alter_write_is_answered_with_the_error_and_undone() -> None:
    s = Shard()
    s.alter("g", ("t", ((0, 1),)))
    out = s.shard.append_failed(s.out, E.not_leader_or_follower, 0)
    assert out.reply_for("h") == AlterPlan(E.not_coordinator)
    assert s.shard.share_group("g") is None


def test_describe_reads_record_15_and_answers_any_id() -> None:
    s = Shard()
    assert s.call(InitializedRead("nobody")) == Initialized(0, {})
    assert s.call(InitializedRead("")) == Initialized(0, {})
    s.join("g", "m")
    read = s.call(InitializedRead("g"))
    assert read == Initialized(0, {s.tid("t"): ("t", frozenset(range(4)))})


def test_delete_check_refusals_follow_kafka() -> None:
    s = Shard()
    assert s.call(OffsetsDeleteCheck("", ("t",))).error == E.invalid_group_id
    assert s.call(OffsetsDeleteCheck("g", ("t",))).error == E.group_id_not_found
    s.join("g", "m")
    assert s.call(OffsetsDeleteCheck("g", ("t",))).error == E.non_empty_group


def test_delete_check_then_deleted_takes_the_topics_out_of_record_15() -> None:
    s = Shard()
    s.alter("g", ("t", ((0, 1), (1, 1))))
    plan = s.call(OffsetsDeleteCheck("g", ("t", "u", "nope")))
    assert isinstance(plan, DeletePlan) and plan.error == E.none and s.last == []
    assert plan.delete == ((s.tid("t"), "t", (0, 1)),)
    assert [(r.name, r.error) for r in plan.refused] == [
        ("u", E.unknown_topic_or_partition),
        ("nope", E.unknown_topic_or_partition),
    ]
    assert s.call(OffsetsDeleted("g", (s.tid("t"),))) == OffsetsDeletedResponse(0)
    assert s.record_types() == [15]
    group = s.shard.share_group("g")
    assert group is not None and group.initialized == {}
    assert s.call(OffsetsDeleted("g", (s.tid("t"),))) == OffsetsDeletedResponse(0)
    assert s.last == []  # nothing left to take out


def test_the_records_replay_into_the_same_group() -> None:
    s = Shard()
    s.alter("g", ("t", ((0, 1), (3, 1))), ("u", ((0, 4),)))
    s.call(OffsetsDeleted("g", (s.tid("u"),)))
    fresh = GroupShard(0, s.config, topics=s.topics)
    for key, value in s.log:
        fresh.replay(key, value, 0)
    fresh.finish_loading(0)
    a, b = s.shard.share_group("g"), fresh.share_group("g")
    assert a is not None and b is not None
    assert (b.group_epoch, b.initialized) == (a.group_epoch, a.initialized)
    assert set(b.initialized) == {s.tid("t")}


def test_lag_is_the_records_past_the_start_offset_not_yet_delivered_for_good() -> None:
    assert share_lag(summary_of(PersistedState(1, -1)), 100) == -1
    assert share_lag(summary_of(PersistedState(1, 40)), 100) == 60
    batches = (
        StateBatch(38, 41, RecordState.ACKNOWLEDGED, 1),  # 40 and 41 count: at or past the start
        StateBatch(42, 43, RecordState.AVAILABLE, 1),
        StateBatch(44, 44, RecordState.ARCHIVED, 5),
    )
    assert share_lag(summary_of(PersistedState(1, 40, batches)), 100) == 57


def test_forget_drops_a_loaded_share_partition_and_the_next_use_reads_the_new_state(
    tmp_path: Path,
) -> None:
    async def run() -> None:
        manager, plog, persister, _ = make(tmp_path, {"share.auto.offset.reset": "earliest"})
        key = SharePartitionKey("g", uuid.UUID(int=7), 0)
        append(plog, 5)
        got = await manager.acquire(key, "t", plog, "m", 100, 1 << 20)
        assert got.count == 5
        await persister.initialize(key, persister.states[key].state_epoch + 1, 2)
        await manager.forget([key])
        assert manager.loaded(key) is None
        got = await manager.acquire(key, "t", plog, "m2", 100, 1 << 20)
        assert [(r.first_offset, r.last_offset) for r in got.ranges] == [(2, 4)]
        await manager.forget([SharePartitionKey("g", uuid.UUID(int=8), 0)])  # never loaded: nothing
        await manager.stop()

    asyncio.run(run())
