"""The transaction coordinator's runtime in process (a real Broker, its real __transaction_state
log, a recording marker writer): each transition is durable before it counts, markers are
written for every partition and retried, a restart finds each state where it was (a prepared
transaction is completed, an ongoing one past its timeout aborted with the epoch bumped), the
periodic timeout check aborts, and producer ids are never handed out twice across restarts."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kcoord.broker.app import Broker
from kcoord.broker.config import Config
from kcoord.broker.data.topic_names import TRANSACTION_STATE_TOPIC
from kcoord.broker.txn.producer_ids import ProducerIdBlocks
from kcoord.broker.txn.runtime import TxnRuntime
from kcoord.coordinator.transactions.coordinator import Transition
from kcoord.coordinator.transactions.model import TxnState
from kcoord.protocol.errors import ErrorCode as E
from kcoord.storage.file_engine import FileEngine

TP = ("t", 0)
OFFSETS = ("__consumer_offsets", 3)


class Markers:
    """A marker writer that records its calls; ``fail`` partitions fail that many times."""

    def __init__(self, fail: dict[tuple[str, int], int] | None = None, block: bool = False) -> None:
        self.calls: list[tuple[int, int, bool, list[tuple[str, int]]]] = []
        self.fail = dict(fail or {})
        self.block = block

    async def __call__(
        self, pid: int, epoch: int, commit: bool, coordinator_epoch: int,
        partitions: Sequence[tuple[str, int]],
    ) -> dict[tuple[str, int], int]:
        self.calls.append((pid, epoch, commit, list(partitions)))
        if self.block:
            await asyncio.Event().wait()
        out = {}
        for tp in partitions:
            if self.fail.get(tp, 0) > 0:
                self.fail[tp] -= 1
                out[tp] = E.not_leader_or_follower
            else:
                out[tp] = 0
        return out


def _config(data_dir: Path, **settings: object) -> Config:
    overrides = [f"{k}={v}" for k, v in {"transaction.state.log.num.partitions": 3, **settings}.items()]
    return Config.load(port=0, data_dir=data_dir, environ={}, overrides=overrides)


async def _broker(data_dir: Path, markers: Markers, **settings: object) -> Broker:
    b = Broker(_config(data_dir, **settings))
    b.transactions.write_markers = markers
    await b.start()
    await _until(lambda: b.transactions.loaded)
    # A fresh node makes __transaction_state at its first use, in a worker thread
    # (COORDINATOR_NOT_AVAILABLE meanwhile, which a client retries): these tests start after it.
    assert await b.transactions.state_topic.wait()
    return b


async def _until(cond: object, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


async def _step(rt: TxnRuntime, answer: int | Transition) -> Transition:
    assert isinstance(answer, Transition), E(answer).name
    assert await rt.write(answer) == 0
    return answer


async def _ongoing(rt: TxnRuntime, txn: str = "tx", timeout_ms: int = 60_000) -> tuple[int, int]:
    c = rt.coordinator
    tr = await _step(rt, c.init_producer_id(txn, timeout_ms, None, rt.clock()))
    assert tr.after is not None
    pid, epoch = tr.after.producer_id, tr.after.producer_epoch
    await _step(rt, c.add_partitions(txn, pid, epoch, [TP, OFFSETS], rt.clock()))
    return pid, epoch


def _state(rt: TxnRuntime, txn: str = "tx") -> TxnState | None:
    m = rt.coordinator.get(txn)
    return None if m is None else m.state


async def test_commit_writes_markers_for_every_partition_then_completes(tmp_path: Path) -> None:
    markers = Markers(fail={TP: 2})  # retried until written
    b = await _broker(tmp_path / "data", markers)
    rt = b.transactions
    try:
        pid, epoch = await _ongoing(rt)
        plog = b.topics.get(TRANSACTION_STATE_TOPIC).partitions[rt.partition_of("tx")]  # type: ignore[union-attr]
        assert plog.flushed_offset == 2  # InitProducerId and AddPartitions, durable
        await _step(rt, rt.coordinator.end_txn("tx", pid, epoch, True, rt.clock()))
        await _until(lambda: _state(rt) == TxnState.COMPLETE_COMMIT)
        assert markers.calls[0] == (pid, epoch, True, sorted([TP, OFFSETS]))
        assert [c[3] for c in markers.calls[1:]] == [[TP], [TP]]
        assert plog.flushed_offset == 4
    finally:
        await b.stop()


async def test_restart_completes_a_prepared_transaction(tmp_path: Path) -> None:
    blocked = Markers(block=True)
    b = await _broker(tmp_path / "data", blocked)
    rt = b.transactions
    pid, epoch = await _ongoing(rt)
    await _step(rt, rt.coordinator.end_txn("tx", pid, epoch, False, rt.clock()))
    await _until(lambda: len(blocked.calls) == 1)
    await b.stop()  # the broker goes before the markers are written

    markers = Markers()
    b = await _broker(tmp_path / "data", markers)
    rt = b.transactions
    try:
        await _until(lambda: _state(rt) == TxnState.COMPLETE_ABORT)
        assert markers.calls == [(pid, epoch, False, sorted([TP, OFFSETS]))]
    finally:
        await b.stop()


async def test_restart_aborts_an_ongoing_transaction_past_its_timeout(tmp_path: Path) -> None:
    b = await _broker(tmp_path / "data", Markers())
    rt = b.transactions
    pid, epoch = await _ongoing(rt, "late", timeout_ms=200)
    await _ongoing(rt, "young", timeout_ms=60_000)
    await b.stop()
    await asyncio.sleep(0.3)

    markers = Markers()
    b = await _broker(tmp_path / "data", markers)
    rt = b.transactions
    try:
        await _until(lambda: _state(rt, "late") == TxnState.COMPLETE_ABORT)
        assert markers.calls == [(pid, epoch + 1, False, sorted([TP, OFFSETS]))]
        assert _state(rt, "young") == TxnState.ONGOING
        assert rt.coordinator.end_txn("late", pid, epoch, True, rt.clock()) == E.producer_fenced
    finally:
        await b.stop()


async def test_restart_keeps_empty_ongoing_and_completed_ids(tmp_path: Path) -> None:
    b = await _broker(tmp_path / "data", Markers())
    rt = b.transactions
    await _step(rt, rt.coordinator.init_producer_id("empty", 1000, None, rt.clock()))
    await _ongoing(rt, "ongoing")
    pid, epoch = await _ongoing(rt, "done")
    await _step(rt, rt.coordinator.end_txn("done", pid, epoch, True, rt.clock()))
    await _until(lambda: _state(rt, "done") == TxnState.COMPLETE_COMMIT)
    before = dict(rt.coordinator.txns)
    await b.stop()
    b = await _broker(tmp_path / "data", Markers())
    try:
        after = b.transactions.coordinator.txns
        assert {t: (m.state, m.producer_id, m.producer_epoch, m.partitions) for t, m in after.items()} == {
            t: (m.state, m.producer_id, m.producer_epoch, m.partitions) for t, m in before.items()
        }
    finally:
        await b.stop()


async def test_periodic_check_aborts_timed_out_transactions(tmp_path: Path) -> None:
    markers = Markers()
    b = await _broker(
        tmp_path / "data", markers,
        **{"transaction.abort.timed.out.transaction.cleanup.interval.ms": 50},
    )
    rt = b.transactions
    try:
        pid, epoch = await _ongoing(rt, timeout_ms=100)
        await _until(lambda: _state(rt) == TxnState.COMPLETE_ABORT)
        assert markers.calls == [(pid, epoch + 1, False, sorted([TP, OFFSETS]))]
        assert rt.coordinator.get("tx").producer_epoch == epoch + 1  # type: ignore[union-attr]
    finally:
        await b.stop()


async def test_expired_ids_are_removed_durably(tmp_path: Path) -> None:
    settings = {
        "transactional.id.expiration.ms": 100,
        "transaction.remove.expired.transaction.cleanup.interval.ms": 50,
    }
    b = await _broker(tmp_path / "data", Markers(), **settings)
    rt = b.transactions
    await _step(rt, rt.coordinator.init_producer_id("idle", 1000, None, rt.clock()))
    await _until(lambda: rt.coordinator.get("idle") is None)
    await b.stop()
    b = await _broker(tmp_path / "data", Markers())
    try:
        assert b.transactions.coordinator.get("idle") is None
    finally:
        await b.stop()


def test_producer_ids_are_never_reused_across_restarts(tmp_path: Path) -> None:
    blocks = ProducerIdBlocks(FileEngine(tmp_path), block_size=10)
    assert [blocks.allocate() for _ in range(3)] == [0, 1, 2]
    again = ProducerIdBlocks(FileEngine(tmp_path), block_size=10)
    assert again.allocate() == 10  # the rest of the first block is skipped
    assert [again.allocate() for _ in range(10)][-1] == 20
    assert (tmp_path / "producer-ids").read_text() == "next.block.start=30\n"


def test_two_nodes_never_take_the_same_producer_id_block(tmp_path: Path) -> None:
    """Both started on one document (as two nodes of a cluster): each block starts where the
    document says the last one, whoever took it, ended."""
    engine = FileEngine(tmp_path)
    one, two = ProducerIdBlocks(engine, block_size=10), ProducerIdBlocks(engine, block_size=10)
    given = [one.allocate(), two.allocate()] + [b.allocate() for _ in range(12) for b in (one, two)]
    assert len(set(given)) == len(given) and given[:2] == [0, 10]


def test_the_next_producer_id_block_is_taken_ahead_in_a_thread(tmp_path: Path) -> None:
    engine = FileEngine(tmp_path)
    blocks = ProducerIdBlocks(engine, block_size=100)
    taken_by: list[str] = []
    update = engine.update_document

    def recording(name: str, change: Any) -> None:
        taken_by.append(threading.current_thread().name)
        update(name, change)

    engine.update_document = recording  # type: ignore[method-assign]
    assert [blocks.allocate() for _ in range(90)] == list(range(90))
    deadline = time.monotonic() + 10  # nine tenths given out: the next block is on its way
    while (tmp_path / "producer-ids").read_text() != "next.block.start=200\n":
        assert time.monotonic() < deadline, "the next block was not taken ahead"
        time.sleep(0.01)
    assert [blocks.allocate() for _ in range(20)] == list(range(90, 110))
    assert taken_by == ["MainThread", "kcoord-producer-ids"]


async def test_compaction_keeps_the_newest_state_of_every_id(tmp_path: Path) -> None:
    settings = {"transaction.state.log.num.partitions": 1,
                "transaction.state.log.segment.bytes": 1024, "log.cleaner.enable": "false"}
    b = await _broker(tmp_path / "data", Markers(), **settings)
    rt = b.transactions
    for round_ in range(15):
        for txn in ("a", "b", "c"):
            pid, epoch = await _ongoing(rt, txn)
            await _step(rt, rt.coordinator.end_txn(txn, pid, epoch, round_ % 2 == 0, rt.clock()))
            await _until(lambda t=txn: _state(rt, t) in (TxnState.COMPLETE_COMMIT,  # type: ignore[misc]
                                                         TxnState.COMPLETE_ABORT))
    await _step(rt, rt.coordinator.expired(rt.clock() + 10**12)[0])  # one tombstone too
    before = dict(rt.coordinator.txns)
    plog = b.topics.get(TRANSACTION_STATE_TOPIC).partitions[0]  # type: ignore[union-attr]
    size = plog.size_bytes
    await rt.compact(force=True)
    assert plog.size_bytes < size / 4
    await b.stop()
    b = await _broker(tmp_path / "data", Markers(), **settings)
    try:
        # (the last epoch is not in a version 0 record, as in Kafka)
        assert {t: m.but(last_producer_epoch=-1) for t, m in b.transactions.coordinator.txns.items()} == {
            t: m.but(last_producer_epoch=-1) for t, m in before.items()
        }
    finally:
        await b.stop()


async def test_concurrent_end_txn_and_a_failed_write(tmp_path: Path) -> None:
    b = await _broker(tmp_path / "data", Markers(block=True))
    rt = b.transactions
    try:
        pid, epoch = await _ongoing(rt)
        plog = b.topics.get(TRANSACTION_STATE_TOPIC).partitions[rt.partition_of("tx")]  # type: ignore[union-attr]
        end = rt.coordinator.end_txn("tx", pid, epoch, True, rt.clock())
        assert isinstance(end, Transition)
        written = rt.write(end)
        assert plog.log_end_offset == 3  # appended at once, durable later
        # A second EndTxn arriving before the first is durable (same tick).
        assert rt.coordinator.end_txn("tx", pid, epoch, True, rt.clock()) == E.concurrent_transactions
        assert await written == 0
        assert _state(rt) == TxnState.PREPARE_COMMIT

        # A write that fails changes nothing and answers NOT_COORDINATOR.
        other = rt.coordinator.init_producer_id("other", 1000, None, rt.clock())
        assert isinstance(other, Transition)
        target = b.topics.get(TRANSACTION_STATE_TOPIC).partitions[rt.partition_of("other")]  # type: ignore[union-attr]

        def broken(_: bytes) -> tuple[int, int]:
            raise OSError(28, "No space left on device")

        target.append = broken  # type: ignore[method-assign]
        assert await rt.write(other) == E.not_coordinator
        assert rt.coordinator.get("other") is None and "other" not in rt.coordinator.pending
    finally:
        await b.stop()


async def test_the_marker_writer_appends_control_batches(tmp_path: Path) -> None:
    from kcoord.broker.txn.markers import MarkerWriter
    from kcoord.protocol.batch import HEADER_SIZE, parse_header
    from kcoord.protocol.control import decode_marker, is_marker_batch
    from kcoord.protocol.key_values import decode_key_values

    b = await _broker(tmp_path / "data", Markers())
    offsets_calls: list[tuple[int, int, int, bool, int]] = []

    async def offsets_marker(p: int, pid: int, epoch: int, commit: bool, ce: int) -> int:
        offsets_calls.append((p, pid, epoch, commit, ce))
        return 0

    try:
        b.topics.create("t", 1)
        writer = MarkerWriter(b.topics, b.flusher, offsets_marker)
        got = await writer.write_markers(7, 3, True, 0, [TP, OFFSETS, ("gone", 0)])
        assert got == {TP: 0, OFFSETS: 0, ("gone", 0): E.unknown_topic_or_partition}
        assert offsets_calls == [(3, 7, 3, True, 0)]
        plog = b.topics.get("t").partitions[0]  # type: ignore[union-attr]
        assert plog.flushed_offset == 1
        data = plog.read(0, 1 << 20)
        h = parse_header(data)
        assert is_marker_batch(h) and (h.producer_id, h.producer_epoch) == (7, 3)
        [(key, value)] = decode_key_values(h, data[HEADER_SIZE : h.size])
        marker = decode_marker(key, value)
        assert marker is not None and marker.commit and marker.coordinator_epoch == 0
    finally:
        await b.stop()


async def test_a_partition_whose_compaction_fails_does_not_stop_the_others(tmp_path: Path) -> None:
    settings = {"transaction.state.log.num.partitions": 2,
                "transaction.state.log.segment.bytes": 1024, "log.cleaner.enable": "false"}
    b = await _broker(tmp_path / "data", Markers(), **settings)
    try:
        rt = b.transactions
        ids = {rt.partition_of(t): t for t in ("a", "b", "c", "d", "e", "f")}
        assert set(ids) == {0, 1}
        for _ in range(12):
            for txn in ids.values():
                pid, epoch = await _ongoing(rt, txn)
                await _step(rt, rt.coordinator.end_txn(txn, pid, epoch, True, rt.clock()))
                await _until(lambda t=txn: _state(rt, t) == TxnState.COMPLETE_COMMIT)  # type: ignore[misc]
        first, second = b.topics.get(TRANSACTION_STATE_TOPIC).partitions  # type: ignore[union-attr]

        def unreadable(**_: object) -> None:
            raise OSError("the disk went away")

        first.prepare_compaction = unreadable  # type: ignore[method-assign]
        size = second.size_bytes
        await rt.compact(force=True)
        assert second.size_bytes < size
    finally:
        await b.stop()
