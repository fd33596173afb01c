"""broker.data.flusher: one fsync round for many waiters; a log whose flush fails fails only the
waiters that asked for it."""

from __future__ import annotations

import asyncio
import errno

import pytest

from kcoord.broker.data.flusher import Flusher


class FakeLog:
    name = "fake-0"

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
