"""The share coordinator's runtime in process over real storage (a FileEngine on a temporary
directory, the topic registry, the flusher with fsync): every state call is durable when it
returns, a restart replays ``__share_group_state`` to the same state, the log holds a snapshot
after every 500 updates of a share partition, a deleted share partition stays deleted, fencing
and loading answer Kafka's errors, pruning keeps what is needed, and the broker wires it in."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from types import TracebackType

import pytest

from kcoord.broker.app import Broker
from kcoord.broker.config import Config
from kcoord.broker.data.flusher import Flusher
from kcoord.broker.data.topic_configs import TopicConfigs
from kcoord.broker.data.topic_names import INTERNAL_TOPICS, SHARE_GROUP_STATE_TOPIC
from kcoord.broker.data.topics import PartitionLimits, TopicStore
from kcoord.broker.share.persister import SharePersister, ShareStateError
from kcoord.broker.share.state_runtime import ShareStateRuntime
from kcoord.protocol.batch import HEADER_SIZE
from kcoord.protocol.errors import ErrorCode as E
from kcoord.protocol.key_values import decode_key_values
from kcoord.share.model import UNINITIALIZED, SharePartitionKey, StateBatch, StateWrite
from kcoord.share.state_records import ShareSnapshotKey, decode_key
from kcoord.storage.file_engine import FileEngine

AVAILABLE, ACKED, ARCHIVED = 0, 2, 4
TOPIC = uuid.UUID(int=0xABCDEF)


def _config(data_dir: Path, **settings: object) -> Config:
    overrides = [
        f"{k}={v}"
        for k, v in {"share.coordinator.state.topic.num.partitions": 3, **settings}.items()
    ]
    return Config.load(port=0, data_dir=data_dir, environ={}, overrides=overrides)


class Node:
    """The runtime over a FileEngine in ``data_dir``, as broker/app.py builds it."""

    def __init__(self, data_dir: Path, **settings: object) -> None:
        self.config = config = _config(data_dir, **settings)
        data_dir.mkdir(parents=True, exist_ok=True)
        self.engine = FileEngine(data_dir, fsync=True)
        self.engine.start()
        self.topics = TopicStore(
            self.engine,
            config["log.segment.bytes"],
            PartitionLimits(config["max.broker.partitions"], config["max.partitions.per.request"]),
            configs=TopicConfigs(
                self.engine, lambda name: (config[name], config.source(name) == "default")
            ),
        )
        self.topics.load(skip=INTERNAL_TOPICS)
        self.flusher = Flusher(enabled=True, on_flushed=self.topics.notify_appended)
        self.runtime = ShareStateRuntime(config, self.topics, self.flusher)

    async def __aenter__(self) -> ShareStateRuntime:
        rt = self.runtime
        await rt.start()
        await _until(lambda: rt.loaded)
        if rt.logs is None:
            # A fresh node makes __share_group_state at its first use, in a worker thread, and
            # answers COORDINATOR_NOT_AVAILABLE meanwhile (a caller retries): wait for it here.
            with pytest.raises(ShareStateError) as creating:
                await rt.read(_key(0))
            assert creating.value.code == E.coordinator_not_available
            assert await rt.state_topic.wait()
        return rt

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.runtime.stop()
        self.topics.close()
        self.topics.write_checkpoints(self.topics.checkpoint_snapshot())
        self.engine.close()


async def _until(cond: object, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


def _key(partition: int, group: str = "g") -> SharePartitionKey:
    return SharePartitionKey(group, TOPIC, partition)


def _kinds(rt: ShareStateRuntime, key: SharePartitionKey) -> list[str]:
    """The kind of every record of ``key``'s partition of the log, in order."""
    assert rt.logs is not None
    plog = rt.logs[rt.partition_of(key)]
    kinds = []
    for _, header, data in plog.iter_batches():
        for k, v in decode_key_values(header, data[HEADER_SIZE:]):
            assert k is not None
            if decode_key(k).share_key == key:
                is_snapshot = isinstance(decode_key(k), ShareSnapshotKey)
                kinds.append("tombstone" if v is None else "snapshot" if is_snapshot else "update")
    return kinds


async def test_state_written_is_read_back_after_a_restart(tmp_path: Path) -> None:
    keys = [_key(p, group) for group in ("a", "b", "c") for p in range(3)]
    async with Node(tmp_path / "data") as rt:
        persister: SharePersister = rt
        for i, key in enumerate(keys):
            await persister.initialize(key, 1, 10 * i)
            await persister.write(key, 1, 3, StateWrite(10 * i, (StateBatch(10 * i, 10 * i + 4, ACKED, 1),)))
            await persister.write(key, 1, 3, StateWrite(-1, (StateBatch(10 * i + 5, 10 * i + 6, ARCHIVED, 5),)))
        written = {key: await rt.read(key) for key in keys}
        plog = rt.logs[rt.partition_of(keys[0])]  # type: ignore[index]
        assert plog.flushed_offset == plog.log_end_offset  # durable on return
    assert {len(s.batches) for s in written.values()} == {2}
    async with Node(tmp_path / "data") as rt:
        assert {key: await rt.read(key) for key in keys} == written
        assert await rt.read(_key(0, "unknown")) == UNINITIALIZED


async def test_a_snapshot_after_500_updates(tmp_path: Path) -> None:
    key = _key(1)
    async with Node(tmp_path / "data", **{"share.coordinator.state.topic.num.partitions": 1}) as rt:
        await rt.initialize(key, 0, 0)
        for i in range(501):
            await rt.write(key, 0, 0, StateWrite(-1, (StateBatch(i, i, ACKED, 1),)))
        assert _kinds(rt, key) == ["snapshot"] + ["update"] * 500 + ["snapshot"]
        before = await rt.read(key)
    assert before.batches == (StateBatch(0, 500, ACKED, 1),)
    async with Node(tmp_path / "data", **{"share.coordinator.state.topic.num.partitions": 1}) as rt:
        assert await rt.read(key) == before
        await rt.write(key, 0, 0, StateWrite(-1, (StateBatch(501, 501, ACKED, 1),)))
        assert _kinds(rt, key)[-1] == "update"  # the cadence goes on from the replayed count


async def test_a_deleted_share_partition_reads_uninitialized_after_a_restart(tmp_path: Path) -> None:
    gone, kept = _key(0, "gone"), _key(0, "kept")
    async with Node(tmp_path / "data") as rt:
        for key in (gone, kept):
            await rt.write(key, 1, 0, StateWrite(0, (StateBatch(0, 0, ACKED, 1),)))
        await rt.delete([gone, _key(2, "never-written")])
        assert await rt.read(gone) == UNINITIALIZED
        assert _kinds(rt, gone) == ["snapshot", "tombstone", "tombstone"]
    async with Node(tmp_path / "data") as rt:
        assert await rt.read(gone) == UNINITIALIZED
        assert (await rt.read(kept)).batches == (StateBatch(0, 0, ACKED, 1),)


async def test_fencing_and_bad_input_answer_kafkas_errors(tmp_path: Path) -> None:
    key = _key(0)
    async with Node(tmp_path / "data") as rt:
        await rt.initialize(key, 2, 0)
        await rt.write(key, 2, 5, StateWrite(0, ()))
        cases = [
            (rt.write(key, 1, 5, StateWrite(-1, ())), E.fenced_state_epoch),
            (rt.write(key, 2, 4, StateWrite(-1, ())), E.fenced_leader_epoch),
            (rt.initialize(key, 1, 0), E.fenced_state_epoch),
            (rt.write(key, 2, 5, StateWrite(0, (StateBatch(3, 2, ACKED, 1),))), E.invalid_request),
        ]
        for call, code in cases:
            with pytest.raises(ShareStateError) as refused:
                await call
            assert refused.value.code == code
        assert (await rt.read(key)).state_epoch == 2
        plog = rt.logs[rt.partition_of(key)]  # type: ignore[index]
        assert plog.log_end_offset == 2  # refusals wrote nothing


async def test_a_partition_answers_load_in_progress_until_replayed(tmp_path: Path) -> None:
    key = _key(0)
    async with Node(tmp_path / "data") as rt:
        await rt.write(key, 1, 0, StateWrite(0, ()))
    node = Node(tmp_path / "data")
    rt = node.runtime
    await rt.start()  # the replay runs in a task that has not had a turn yet
    with pytest.raises(ShareStateError) as loading:
        await rt.read(key)
    assert loading.value.code == E.coordinator_load_in_progress
    try:
        await _until(lambda: rt.loaded)
        assert (await rt.read(key)).start_offset == 0
    finally:
        await node.__aexit__(None, None, None)


async def test_pruning_keeps_what_the_state_needs(tmp_path: Path) -> None:
    settings = {
        "share.coordinator.state.topic.num.partitions": 1,
        "share.coordinator.snapshot.update.records.per.snapshot": 5,
        "share.coordinator.state.topic.segment.bytes": 1024,
    }
    quiet, busy, gone = _key(0, "quiet"), _key(0, "busy"), _key(0, "gone")
    async with Node(tmp_path / "data", **settings) as rt:
        await rt.write(gone, 1, 0, StateWrite(0, ()))
        await rt.write(quiet, 1, 0, StateWrite(0, (StateBatch(0, 3, ACKED, 2),)))
        await rt.delete([gone])
        for i in range(60):
            await rt.write(busy, 1, 0, StateWrite(-1, (StateBatch(i, i, ACKED, 1),)))
        assert await rt.prune() == 1
        plog = rt.logs[0]  # type: ignore[index]
        assert plog.log_start_offset == 1  # quiet's snapshot, at offset 1, is still needed
        for _ in range(6):  # five updates of quiet, then its next snapshot
            await rt.write(quiet, 1, 0, StateWrite(-1, (StateBatch(4, 4, ARCHIVED, 5),)))
        for i in range(60, 66):
            await rt.write(busy, 1, 0, StateWrite(-1, (StateBatch(i, i, ACKED, 1),)))
        assert await rt.prune() == 1
        start = plog.log_start_offset
        assert start == 69  # quiet's second snapshot (busy's newest is at 70)
        first_segment = plog.segment_base_offsets[0]
        assert 0 < first_segment <= start  # the segments wholly below the start are deleted
        expected = {key: await rt.read(key) for key in (quiet, busy, gone)}
    async with Node(tmp_path / "data", **settings) as rt:
        assert rt.logs[0].log_start_offset == start  # type: ignore[index]
        assert {key: await rt.read(key) for key in (quiet, busy, gone)} == expected
    assert expected[busy].batches == (StateBatch(0, 65, ACKED, 1),)
    assert expected[gone] == UNINITIALIZED


async def test_the_broker_serves_share_state_across_a_restart(tmp_path: Path) -> None:
    key = _key(0)
    config = _config(tmp_path / "data")
    b = Broker(config)
    await b.start()
    try:
        await _until(lambda: b.share_state.loaded)
        assert await b.share_state.state_topic.wait()  # made on first use (Node.__aenter__)
        await b.share_state.write(key, 1, 0, StateWrite(7, (StateBatch(7, 9, ACKED, 1),)))
        topic = b.topics.get(SHARE_GROUP_STATE_TOPIC)
        assert topic is not None and topic.internal
        assert len(topic.partitions) == 3
        settings = b.topics.settings_of(topic)
        assert settings.delete and not settings.compact
    finally:
        await b.stop()
    b = Broker(_config(tmp_path / "data"))
    await b.start()
    try:
        await _until(lambda: b.share_state.loaded)
        assert (await b.share_state.read(key)).batches == (StateBatch(7, 9, ACKED, 1),)
    finally:
        await b.stop()
