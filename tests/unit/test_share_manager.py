"""The broker's share partition manager (broker/share/partitions.py) over real partition logs,
with a fake clock and the in-memory share-state persister: where a new share partition starts
(``share.auto.offset.reset``), read_committed skipping an aborted transaction and the markers,
acknowledgements answered only once persisted (and undone when the write is refused), lock
expiry by the loop timer, a member leaving, the log start moving, a topic deleted."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

from kcoord.broker.config import Config
from kcoord.broker.share.partitions import SharePartitionManager
from kcoord.protocol.control import encode_marker
from kcoord.protocol.errors import ErrorCode
from kcoord.protocol.record_encoding import build_batch
from kcoord.share.model import AckType, RecordState, SharePartitionKey
from kcoord.share.partition import Acknowledgement
from kcoord.storage.log import PartitionLog

from .share_memory_persister import MemoryPersister

T0 = 1_700_000_000_000
TID = uuid.UUID(int=7)
KEY = SharePartitionKey("g", TID, 0)


class Topics:
    """What the manager asks of the topic registry."""

    def __init__(self) -> None:
        self.version = 0
        self.by_id: dict[uuid.UUID, object] = {TID: object()}


class Clock:
    def __init__(self) -> None:
        self.now = T0 + 1_000_000

    def __call__(self) -> int:
        return self.now


def make(
    tmp_path: Path, overrides: Mapping[str, str] | None = None, clock: Clock | None = None
) -> tuple[SharePartitionManager, PartitionLog, MemoryPersister, Topics]:
    config = Config.load(
        environ={},
        overrides=[
            "group.share.min.record.lock.duration.ms=1000",
            "group.share.record.lock.duration.ms=1000",
            "group.share.delivery.count.limit=3",
        ],
    )
    plog = PartitionLog.open(tmp_path / "t-0", segment_bytes=1 << 20, fsync=False)
    persister = MemoryPersister()
    topics = Topics()
    manager = SharePartitionManager(
        config, cast(Any, topics), persister, lambda group: dict(overrides or {}),
        clock=clock or Clock(),
    )
    return manager, plog, persister, topics


def append(plog: PartitionLog, n: int, ts: int = T0, **options: object) -> int:
    first, _ = plog.append(build_batch([(b"k", b"v", (), ts)] * n, **options))
    plog.flush()
    return first


def marker(plog: PartitionLog, pid: int, commit: bool) -> None:
    plog.append(encode_marker(pid, 0, commit, 0, T0))
    plog.flush()


def offsets_of(got: Any) -> list[int]:
    return [o for r in got.ranges for o in range(r.first_offset, r.last_offset + 1)]


def test_a_new_share_partition_starts_at_latest_by_default(tmp_path: Path) -> None:
    async def run() -> None:
        manager, plog, persister, _ = make(tmp_path)
        append(plog, 3)
        got = await manager.acquire(KEY, "t", plog, "m", 100, 1 << 20)
        assert got.ranges == []
        assert persister.states[KEY].start_offset == 3
        append(plog, 2)
        got = await manager.acquire(KEY, "t", plog, "m", 100, 1 << 20)
        assert offsets_of(got) == [3, 4]
        assert got.records  # the batch holding them

    asyncio.run(run())


def test_earliest_and_by_duration_starts(tmp_path: Path) -> None:
    async def run() -> None:
        clock = Clock()
        manager, plog, persister, _ = make(tmp_path, {"share.auto.offset.reset": "earliest"}, clock)
        append(plog, 2, ts=clock.now - 7_200_000)  # 0-1, two hours ago
        append(plog, 2, ts=clock.now - 60_000)  # 2-3, a minute ago
        got = await manager.acquire(KEY, "t", plog, "m", 100, 1 << 20)
        assert offsets_of(got) == [0, 1, 2, 3]
        other = SharePartitionKey("h", TID, 0)
        manager.overrides = lambda group: {"share.auto.offset.reset": "by_duration:PT1H"}
        got = await manager.acquire(other, "t", plog, "m", 100, 1 << 20)
        assert offsets_of(got) == [2, 3]
        assert persister.states[other].start_offset == 2

    asyncio.run(run())




def test_read_committed_skips_an_aborted_transaction_and_the_markers(tmp_path: Path) -> None:
    async def run() -> None:
        manager, plog, _, _ = make(tmp_path, {"share.isolation.level": "read_committed",
                                              "share.auto.offset.reset": "earliest"})
        append(plog, 2, producer_id=5, producer_epoch=0, base_sequence=0, is_transactional=True)
        marker(plog, 5, commit=False)  # 0-1 aborted, marker 2
        append(plog, 1)  # 3
        append(plog, 2, producer_id=6, producer_epoch=0, base_sequence=0, is_transactional=True)
        # 4-5 open: the last stable offset stops the read before them
        got = await manager.acquire(KEY, "t", plog, "m", 100, 1 << 20)
        assert offsets_of(got) == [3]
        marker(plog, 6, commit=True)  # 6
        got = await manager.acquire(KEY, "t", plog, "m", 100, 1 << 20)
        assert offsets_of(got) == [4, 5]
        sp = manager.loaded(KEY)
        assert sp is not None and sp.archived_count() >= 3  # 0, 1 and the abort marker

    asyncio.run(run())


def test_read_uncommitted_delivers_the_aborted_records(tmp_path: Path) -> None:
    async def run() -> None:
        manager, plog, _, _ = make(tmp_path, {"share.auto.offset.reset": "earliest"})
        append(plog, 2, producer_id=5, producer_epoch=0, base_sequence=0, is_transactional=True)
        marker(plog, 5, commit=False)
        got = await manager.acquire(KEY, "t", plog, "m", 100, 1 << 20)
        assert offsets_of(got) == [0, 1]

    asyncio.run(run())


def test_acknowledgements_are_persisted_before_the_answer_and_undone_when_refused(
    tmp_path: Path,
) -> None:
    async def run() -> None:
        manager, plog, persister, _ = make(tmp_path, {"share.auto.offset.reset": "earliest"})
        append(plog, 4)
        await manager.acquire(KEY, "t", plog, "m", 100, 1 << 20)
        accept = [Acknowledgement(0, 1, (AckType.ACCEPT,))]
        assert await manager.acknowledge(KEY, "m", accept) == 0
        assert persister.states[KEY].start_offset == 2
        persister.fail_with = ErrorCode.fenced_state_epoch
        later = [Acknowledgement(2, 3, (AckType.ACCEPT,))]
        assert await manager.acknowledge(KEY, "m", later) == ErrorCode.fenced_state_epoch
        persister.fail_with = None
        # The share partition left memory (as Kafka drops a fenced one): acknowledgements find
        # none until it is loaded again, from what was durable: 2-3 available.
        assert manager.loaded(KEY) is None
        assert await manager.acknowledge(KEY, "m", later) == ErrorCode.unknown_topic_or_partition
        got = await manager.acquire(KEY, "t", plog, "other", 100, 1 << 20)
        assert [(r.first_offset, r.last_offset, r.delivery_count) for r in got.ranges] == [(2, 3, 1)]

    asyncio.run(run())


def test_unknown_share_partition_acknowledgement(tmp_path: Path) -> None:
    async def run() -> None:
        manager, _, _, _ = make(tmp_path)
        acks = [Acknowledgement(0, 0, (AckType.ACCEPT,))]
        assert await manager.acknowledge(KEY, "m", acks) == ErrorCode.unknown_topic_or_partition

    asyncio.run(run())


def test_locks_expire_on_the_loop_timer_and_wake_long_polls(tmp_path: Path) -> None:
    async def run() -> None:
        clock = Clock()
        manager, plog, persister, _ = make(tmp_path, {"share.auto.offset.reset": "earliest"}, clock)
        append(plog, 2)
        await manager.acquire(KEY, "t", plog, "m", 100, 1 << 20)
        woken = manager.available()
        clock.now += 1000  # the timer fires a second from now by the loop's clock
        await asyncio.wait_for(woken, 5)
        got = await manager.acquire(KEY, "t", plog, "other", 100, 1 << 20)
        assert [(r.first_offset, r.last_offset, r.delivery_count) for r in got.ranges] == [(0, 1, 2)]
        assert persister.writes >= 1
        await manager.stop()

    asyncio.run(run())


def test_a_member_leaving_releases_its_records(tmp_path: Path) -> None:
    async def run() -> None:
        manager, plog, _, _ = make(tmp_path, {"share.auto.offset.reset": "earliest"})
        append(plog, 3)
        await manager.acquire(KEY, "t", plog, "gone", 100, 1 << 20)
        manager.sessions.for_fetch("g", "gone", 0, [], [], False, "conn")
        woken = manager.available()
        manager.member_left("g", "gone")
        await asyncio.wait_for(woken, 5)
        assert manager.sessions.get("g", "gone") is None
        got = await manager.acquire(KEY, "t", plog, "next", 100, 1 << 20)
        assert offsets_of(got) == [0, 1, 2]
        await manager.stop()

    asyncio.run(run())


def test_the_log_start_moving_forgets_the_records_below_it(tmp_path: Path) -> None:
    async def run() -> None:
        manager, plog, persister, _ = make(tmp_path, {"share.auto.offset.reset": "earliest"})
        append(plog, 2)
        append(plog, 2)
        await manager.acquire(KEY, "t", plog, "m", 1, 1 << 20)  # 0-1
        assert plog.advance_log_start(3)
        got = await manager.acquire(KEY, "t", plog, "m", 100, 1 << 20)
        assert offsets_of(got) == [3]
        sp = manager.loaded(KEY)
        assert sp is not None and sp.start_offset == 3
        assert persister.states[KEY].start_offset == 3

    asyncio.run(run())


def test_a_deleted_topic_drops_its_share_partitions_and_state(tmp_path: Path) -> None:
    async def run() -> None:
        manager, plog, persister, topics = make(tmp_path, {"share.auto.offset.reset": "earliest"})
        manager.start()
        append(plog, 1)
        await manager.acquire(KEY, "t", plog, "m", 100, 1 << 20)
        manager.sessions.for_fetch("g", "m", 0, [(TID, 0)], [], False, "conn")
        topics.by_id.clear()
        topics.version += 1
        manager.forget_deleted_topics()
        assert manager.loaded(KEY) is None
        session = manager.sessions.get("g", "m")
        assert session is not None and not session.partitions
        for _ in range(5):  # the state's deletion runs in the background
            await asyncio.sleep(0)
        assert KEY not in persister.states
        await manager.stop()

    asyncio.run(run())


def test_persisted_state_after_a_release(tmp_path: Path) -> None:
    async def run() -> None:
        manager, plog, persister, _ = make(tmp_path, {"share.auto.offset.reset": "earliest"})
        append(plog, 2)
        await manager.acquire(KEY, "t", plog, "m", 100, 1 << 20)
        release = [Acknowledgement(0, 1, (AckType.RELEASE,))]
        assert await manager.acknowledge(KEY, "m", release) == 0
        batches = persister.states[KEY].batches
        assert [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in batches] == [
            (0, 1, RecordState.AVAILABLE, 1)
        ]

    asyncio.run(run())
