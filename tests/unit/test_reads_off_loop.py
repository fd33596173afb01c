"""Fetch and ListOffsets leave the reads and lookups that would wait on a database to a worker
thread, and answer exactly as when everything is read on the event loop
(broker/data/fetch_reads.py, broker/data/list_offsets.py)."""

from __future__ import annotations

import asyncio
import struct
import threading
from types import SimpleNamespace
from typing import Any

from kcoord.broker.data.appender import Appender
from kcoord.broker.data.fetch_reads import FetchReads
from kcoord.broker.data.list_offsets import LATEST, MAX_TIMESTAMP, ListOffsetsApi
from kcoord.protocol.record_encoding import build_batch

BATCHES = [
    struct.pack(">q", i) + build_batch([(b"k", b"v%d" % i, [], 1000 * (i + 1))])[8:]
    for i in range(3)
]


class FakeLog:
    """Three one-record batches (offsets 0-2, timestamps 1000, 2000, 3000), from ``local_from``
    on held locally; the threads that read (``threads``) and that looked up timestamps."""

    def __init__(self, name: str, local_from: int, looks_up_locally: bool) -> None:
        self.name = name
        self.local_from = local_from
        self.looks_up_locally = looks_up_locally
        self.offline = None
        self.log_start_offset = 0
        self.flushed_offset = 3
        self.threads: set[int] = set()
        self.lookup_threads: set[int] = set()

    def reads_locally(self, offset: int) -> bool:
        return offset >= self.local_from

    def read(self, offset: int, max_bytes: int) -> bytes:
        self.threads.add(threading.get_ident())
        out = b""
        for data in BATCHES[offset:]:
            if out and len(out) + len(data) > max_bytes:
                break
            out += data
        return out

    def offset_for_timestamp(self, ts: int) -> tuple[int, int] | None:
        self.lookup_threads.add(threading.get_ident())
        return next(((i, 1000 * (i + 1)) for i in range(3) if 1000 * (i + 1) >= ts), None)

    def max_timestamp_batch(self) -> tuple[int, int] | None:
        self.lookup_threads.add(threading.get_ident())
        return 2, 3000

    def last_stable_offset(self, high_watermark: int) -> int:
        return high_watermark

    def aborted_transactions(self, start: int, upper: int) -> list[Any]:
        return []


def fetch_answers(logs: list[FakeLog], offsets: list[int], max_bytes: int) -> list[dict[str, Any]]:
    reads = FetchReads(max_bytes, committed=False)
    entries: list[dict[str, Any]] = []
    for plog, offset in zip(logs, offsets, strict=True):
        entries.append({"records": b"", "error_code": 0})
        reads.read(entries[-1], plog, offset, 1 << 20, 3)
    if reads.noted:
        worker = threading.Thread(target=reads.read_noted)
        worker.start()
        worker.join(10)
    return entries


def test_fetch_reads_after_the_first_remote_one_go_to_the_worker_in_order() -> None:
    local = [FakeLog(f"t-{i}", 0, True) for i in range(3)]
    remote = [FakeLog("t-0", 0, True), FakeLog("t-1", 2, False), FakeLog("t-2", 0, True)]
    for budget in (1 << 20, len(BATCHES[0]) * 2, 1):  # room for all; for two batches; for one
        want = fetch_answers(local, [0, 1, 0], budget)
        assert fetch_answers(remote, [0, 1, 0], budget) == want
    here = threading.get_ident()
    assert remote[0].threads == {here}  # before the first remote read: on the caller's thread
    assert here not in remote[1].threads | remote[2].threads
    assert remote[1].threads and remote[2].threads


def list_offsets(plog: FakeLog) -> list[dict[str, Any]]:
    topics = SimpleNamespace(partition=lambda name, index: plog)
    view = SimpleNamespace(epoch_error=lambda topic, partition, epoch: (0, 0))
    api = ListOffsetsApi(topics, view, Appender(lambda *a: None, limit=1 << 20), 1 << 20)  # type: ignore[arg-type]
    ctx = SimpleNamespace(connection=SimpleNamespace(authorizer=None), respond=lambda **kw: kw)
    asked = [1500, MAX_TIMESTAMP, LATEST, 9999]
    req = SimpleNamespace(
        isolation_level=0,
        topics=[SimpleNamespace(name="t", partitions=[
            SimpleNamespace(partition_index=0, timestamp=ts, current_leader_epoch=-1) for ts in asked
        ])],
    )

    async def answer() -> Any:
        out = api.list_offsets(ctx, req)  # type: ignore[arg-type]
        return await out if asyncio.iscoroutine(out) else out

    answered = asyncio.run(answer())
    return [
        {k: p[k] for k in ("offset", "timestamp", "error_code")}
        for p in answered["topics"][0]["partitions"]
    ]


def test_list_offsets_looks_up_and_reads_in_a_worker_where_the_log_would_query() -> None:
    on_loop = FakeLog("t-0", 0, looks_up_locally=True)
    want = list_offsets(on_loop)
    assert want == [
        {"offset": 1, "timestamp": 2000, "error_code": 0},
        {"offset": 2, "timestamp": 3000, "error_code": 0},
        {"offset": 3, "timestamp": -1, "error_code": 0},
        {"offset": -1, "timestamp": -1, "error_code": 0},
    ]
    here = threading.get_ident()
    assert on_loop.threads == on_loop.lookup_threads == {here}
    remote_lookups = FakeLog("t-0", 3, looks_up_locally=False)
    assert list_offsets(remote_lookups) == want
    assert remote_lookups.lookup_threads and here not in remote_lookups.lookup_threads
    assert remote_lookups.threads and here not in remote_lookups.threads
    remote_reads = FakeLog("t-0", 3, looks_up_locally=True)
    assert list_offsets(remote_reads) == want
    assert remote_reads.lookup_threads == {here}
    assert remote_reads.threads and here not in remote_reads.threads
