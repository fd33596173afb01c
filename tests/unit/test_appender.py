"""broker.data.appender: batches checked in worker threads are appended in arrival order per
partition; a later small batch never overtakes an earlier big one; refusals and other partitions
do not wait."""

from __future__ import annotations

import asyncio
import random
import threading
from typing import Any

import pytest

import kcoord.broker.data.appender as appender_mod
from kcoord.broker.data.appender import Appender, Outcome
from kcoord.protocol.compression import Compression
from kcoord.protocol.errors import ErrorCode
from kcoord.protocol.record_encoding import build_batch, encode_batch
from kcoord.protocol.records import Record
from kcoord.protocol.validate import check_batch

T0 = 1_700_000_000_000


class FakeLog:
    """Stands in for a partition log: the appender only uses it as a key (and its name in logs)."""

    def __init__(self, name: str) -> None:
        self.name = name


def _batch(tag: int, compressed: bool) -> tuple[Any, bytes]:
    records = build_batch(
        [(b"k", b"%d" % tag, (), T0)], compression=Compression.LZ4 if compressed else Compression.NONE
    )
    return check_batch(records, 9), records


class Recorder:
    def __init__(self) -> None:
        self.appended: list[tuple[str, bytes]] = []

    def __call__(self, plog: Any, where: tuple[str, int], header: Any, records: bytes) -> Outcome:
        self.appended.append((where[0], records))
        return Outcome(ErrorCode.none, len(self.appended) - 1, must_sync=True)


@pytest.fixture
def gate(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """Compressed batches' checks wait for this event (in their worker thread)."""
    event = threading.Event()
    real = appender_mod._check

    def held(header: Any, records: bytes, limit: int, keyed: bool) -> Any:
        if header.compression:
            assert event.wait(10)
        return real(header, records, limit, keyed)

    monkeypatch.setattr(appender_mod, "_check", held)
    return event


async def test_a_small_batch_waits_behind_a_big_one(gate: threading.Event) -> None:
    rec = Recorder()
    appender = Appender(rec, limit=1 << 20)
    a, b = FakeLog("a-0"), FakeLog("b-0")
    try:
        big = _batch(1, compressed=True)
        small1, small2 = _batch(2, compressed=False), _batch(3, compressed=False)
        first = appender.submit(a, ("a", 0), *big)  # type: ignore[arg-type]
        second = appender.submit(a, ("a", 0), *small1)  # type: ignore[arg-type]
        third = appender.submit(a, ("a", 0), *small2)  # type: ignore[arg-type]
        assert all(isinstance(f, asyncio.Future) for f in (first, second, third))
        # A refused batch appends nothing: answered at once, even behind the queue.
        bad = encode_batch(
            [Record(0, 0, b"k", b"v"), Record(0, 0, b"k", b"v")],
            base_timestamp=T0,
            last_offset_delta=1,
        )
        refusal = appender.submit(a, ("a", 0), check_batch(bad, 9), bad)  # type: ignore[arg-type]
        assert isinstance(refusal, Outcome) and refusal.error_code == ErrorCode.invalid_record
        # Another partition is not held up.
        other = appender.submit(b, ("b", 0), *_batch(4, compressed=False))  # type: ignore[arg-type]
        assert isinstance(other, Outcome) and other.error_code == ErrorCode.none
        await asyncio.sleep(0.05)  # give the (held) worker a chance to misbehave
        assert rec.appended == [("b", _batch(4, compressed=False)[1])]
        assert appender.pending(a) == 3  # type: ignore[arg-type]
        gate.set()
        outcomes = await asyncio.gather(first, second, third)  # type: ignore[arg-type]
        assert [o.base_offset for o in outcomes] == [1, 2, 3]
        assert [r for t, r in rec.appended if t == "a"] == [big[1], small1[1], small2[1]]
        assert appender.pending(a) == 0  # type: ignore[arg-type]
    finally:
        gate.set()
        appender.close()


async def test_arrival_order_is_kept_for_any_mix() -> None:
    rec = Recorder()
    appender = Appender(rec, limit=1 << 20, inline_bytes=200)
    rng = random.Random(7)
    logs = [FakeLog(f"t-{i}") for i in range(3)]
    try:
        expected: dict[int, list[bytes]] = {i: [] for i in range(3)}
        futures = []
        for tag in range(300):
            i = rng.randrange(3)
            header, records = _batch(tag, compressed=rng.random() < 0.4)
            expected[i].append(records)
            futures.append(appender.submit(logs[i], (f"t{i}", 0), header, records))  # type: ignore[arg-type]
            if rng.random() < 0.1:
                await asyncio.sleep(0)
        await asyncio.gather(*(f for f in futures if isinstance(f, asyncio.Future)))
        for i in range(3):
            assert [r for t, r in rec.appended if t == f"t{i}"] == expected[i]
    finally:
        appender.close()


async def test_a_refused_big_batch_does_not_block_the_ones_after_it() -> None:
    rec = Recorder()
    appender = Appender(rec, limit=100)  # lz4 records over 100 bytes: MESSAGE_TOO_LARGE
    plog = FakeLog("t-0")
    try:
        records = build_batch([(None, bytes(5000), (), T0)], compression=Compression.LZ4)
        big = appender.submit(plog, ("t", 0), check_batch(records, 9), records)  # type: ignore[arg-type]
        small = appender.submit(plog, ("t", 0), *_batch(1, compressed=False))  # type: ignore[arg-type]
        assert isinstance(big, asyncio.Future) and isinstance(small, asyncio.Future)
        assert (await big).error_code == ErrorCode.message_too_large
        assert (await small).error_code == ErrorCode.none
        assert len(rec.appended) == 1
    finally:
        appender.close()


async def test_a_failing_check_fails_its_batch_only(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(header: Any, records: bytes, limit: int, keyed: bool) -> Any:
        raise RuntimeError("bug")

    rec = Recorder()
    appender = Appender(rec, limit=1 << 20)
    plog = FakeLog("t-0")
    try:
        big = appender.submit(plog, ("t", 0), *_batch(1, compressed=True))  # type: ignore[arg-type]
        monkeypatch.setattr(appender_mod, "_check", broken)  # the worker calls it later
        small = appender.submit(plog, ("t", 0), *_batch(2, compressed=True))  # type: ignore[arg-type]
        assert isinstance(big, asyncio.Future) and isinstance(small, asyncio.Future)
        results = await asyncio.gather(big, small)  # the function is taken at submission
        assert [r.error_code for r in results] == [ErrorCode.none, ErrorCode.unknown_server_error]
        assert appender.pending(plog) == 0  # type: ignore[arg-type]
    finally:
        appender.close()


async def test_a_gated_batch_keeps_its_place_and_its_gate_decides() -> None:
    """A batch waiting for its gate (another node's verification) holds back the later batches
    of its partition, not other partitions; a non-zero gate refuses it, 0 appends it."""
    rec = Recorder()
    appender = Appender(rec, limit=1 << 20)
    a, b = FakeLog("a-0"), FakeLog("b-0")
    loop = asyncio.get_running_loop()
    try:
        open_gate: asyncio.Future[int] = loop.create_future()
        closed_gate: asyncio.Future[int] = loop.create_future()
        b1, b2, b3, b4 = (_batch(i, compressed=i == 3) for i in (1, 2, 3, 4))
        first = appender.submit(a, ("a", 0), *b1, gate=open_gate)  # type: ignore[arg-type]
        second = appender.submit(a, ("a", 0), *b2)  # type: ignore[arg-type]
        third = appender.submit(a, ("a", 0), *b3, gate=closed_gate)  # type: ignore[arg-type]
        other = appender.submit(b, ("b", 0), *b4)  # type: ignore[arg-type]
        assert isinstance(other, Outcome) and other.error_code == 0  # not held back
        assert isinstance(first, asyncio.Future) and isinstance(second, asyncio.Future)
        await asyncio.sleep(0.01)
        assert not first.done() and not second.done() and appender.pending(a) == 3  # type: ignore[arg-type]
        closed_gate.set_result(ErrorCode.invalid_txn_state)  # decided first, answered in order
        await asyncio.sleep(0.01)
        assert not second.done()
        open_gate.set_result(0)
        one, two, three = await asyncio.gather(first, second, third)  # type: ignore[arg-type]
        assert (one.error_code, two.error_code) == (0, 0)
        assert three.error_code == ErrorCode.invalid_txn_state and "INVALID_TXN_STATE" in three.message
        assert rec.appended == [("b", b4[1]), ("a", b1[1]), ("a", b2[1])]
    finally:
        appender.close()
