"""broker.data.flusher: one fsync round for many waiters; a log whose flush fails fails only the
waiters that asked for it."""

from __future__ import annotations

import asyncio
import errno
from collections.abc import Sequence

import pytest

from kcoord.broker.data.flusher import Flusher


class FakeLog:
    name = "fake-0"
    shared_flush = None

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.flushes = 0

    def flush(self) -> None:
        self.flushes += 1
        if self.fail:
            raise OSError(errno.EIO, "Input/output error")


async def test_a_failed_flush_fails_only_its_waiters() -> None:
    good, bad = FakeLog(), FakeLog(fail=True)
    flusher = Flusher()
    only_good = flusher.synced([good])
    only_bad = flusher.synced([bad])
    both = flusher.synced([good, bad])
    assert only_good is not None and only_bad is not None and both is not None
    results = await asyncio.gather(only_good, only_bad, both, return_exceptions=True)
    assert results[0] is None
    assert isinstance(results[1], OSError) and results[1].errno == errno.EIO
    assert isinstance(results[2], OSError)
    assert good.flushes == 1 and bad.flushes == 1  # one round for all three
    assert flusher.rounds == 1


async def test_later_rounds_work_after_a_failure() -> None:
    log = FakeLog(fail=True)
    flusher = Flusher()
    with pytest.raises(OSError):
        await flusher.sync([log])
    log.fail = False
    await flusher.sync([log])
    assert log.flushes == 2


async def test_disabled_flusher_does_not_wait_but_still_flushes() -> None:
    # log.flush.interval.messages > 1: no fsync, but a log's flush is what moves its high
    # watermark, so it is flushed at once (before, Fetch never saw any record).
    healthy, offline = FakeLog(), FakeLog(fail=True)
    flusher = Flusher(enabled=False)
    assert flusher.synced([healthy]) is None
    assert healthy.flushes == 1
    failed = flusher.synced([healthy, offline])
    assert failed is not None and failed.done()
    assert isinstance(failed.exception(), OSError)
    assert healthy.flushes == 2 and offline.flushes == 1


class TogetherLog(FakeLog):
    """A log of an engine that flushes its logs together (PostgreSQL: one transaction)."""

    def __init__(self, shared: Together, fail: bool = False) -> None:
        super().__init__(fail)
        self.shared_flush = shared  # type: ignore[assignment]


class Together:
    def __init__(self) -> None:
        self.calls: list[list[TogetherLog]] = []

    def flush_all(self, logs: Sequence[TogetherLog]) -> dict[TogetherLog, OSError]:
        self.calls.append(list(logs))
        return {plog: OSError(errno.ESTALE, "fenced") for plog in logs if plog.fail}


async def test_logs_of_an_engine_that_flushes_together_share_one_call_per_round() -> None:
    engine = Together()
    a, b, fenced, alone = TogetherLog(engine), TogetherLog(engine), TogetherLog(engine, True), FakeLog()
    flusher = Flusher()
    waits = [flusher.synced([a, b]), flusher.synced([fenced]), flusher.synced([alone, a])]
    results = await asyncio.gather(*(w for w in waits if w is not None), return_exceptions=True)
    assert results[0] is None and results[2] is None
    assert isinstance(results[1], OSError) and results[1].errno == errno.ESTALE
    assert len(engine.calls) == 1 and set(engine.calls[0]) == {a, b, fenced}
    assert alone.flushes == 1 and a.flushes == 0  # flush_all, not each log's flush
