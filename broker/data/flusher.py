"""Group commit: many writers, one fsync.

A request that appended to one or more logs awaits ``Flusher.sync(logs)``; every log dirtied
while an fsync round is running is flushed together in the next round, in a worker thread so
the event loop keeps serving. Throughput then grows with concurrency instead of paying one fsync
per request.

A log whose flush fails (an I/O error, a log closed under it) fails only the waiters that asked
for that log, with its exception; the others in the same round complete normally.

Logs that name a ``shared_flush`` (an engine's: PostgreSQL writes many partitions in one
transaction) are handed to it together, one call per round and engine; the others flush one
each, in parallel.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from typing import Protocol

from kcoord.storage.engine import SharedFlush

log = logging.getLogger("kcoord.flusher")


class Flushable(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def shared_flush(self) -> SharedFlush | None: ...

    def flush(self) -> None: ...


class Flusher:
    def __init__(
        self,
        enabled: bool = True,
        on_flushed: Callable[[], None] | None = None,
        observe: Callable[[float], None] | None = None,
    ) -> None:
        self.enabled = enabled
        self._dirty: set[Flushable] = set()
        self._waiters: list[tuple[asyncio.Future[None], tuple[Flushable, ...]]] = []
        self._running = False
        self._on_flushed = on_flushed
        self._observe = observe
        self.rounds = 0

    async def sync(self, logs: Iterable[Flushable]) -> None:
        """Return once everything appended to ``logs`` before this call is on disk."""
        fut = self.synced(logs)
        if fut is not None:
            await fut

    def synced(self, logs: Iterable[Flushable]) -> asyncio.Future[None] | None:
        """A future done once everything appended to ``logs`` before this call is on disk;
        None if that is already so (fsync disabled, the logs flushed at once, which makes their
        records readable). For callers chaining callbacks rather than awaiting."""
        if not self.enabled:
            # No fsync: a flush only makes what was appended readable (no I/O), at once.
            error: BaseException | None = None
            for item in logs:
                try:
                    item.flush()
                except Exception as e:  # an offline log: its waiters learn it as with fsync
                    error = error or e
            if self._on_flushed is not None:
                self._on_flushed()
            if error is None:
                return None
            failed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            failed.set_exception(error)
            return failed
        wanted = tuple(logs)
        self._dirty.update(wanted)
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((fut, wanted))
        if not self._running:
            self._running = True
            asyncio.ensure_future(self._run())
        return fut

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while self._waiters:
                dirty, waiters = list(self._dirty), self._waiters
                self._dirty, self._waiters = set(), []
                started = time.perf_counter()
                alone: list[Flushable] = []
                together: dict[SharedFlush, list[Flushable]] = {}
                for item in dirty:
                    shared = item.shared_flush
                    if shared is None:
                        alone.append(item)
                    else:
                        together.setdefault(shared, []).append(item)
                # One worker per log (fsyncs of different files proceed in parallel) or per
                # engine that flushes its logs together.
                results = await asyncio.gather(
                    *(loop.run_in_executor(None, item.flush) for item in alone),
                    *(loop.run_in_executor(None, s.flush_all, items) for s, items in together.items()),
                    return_exceptions=True,
                )
                failed: dict[Flushable, BaseException] = {}
                for item, result in zip(alone, results, strict=False):
                    if isinstance(result, BaseException):
                        failed[item] = result
                for items, outcome in zip(together.values(), results[len(alone) :], strict=True):
                    if isinstance(outcome, BaseException):
                        failed.update(dict.fromkeys(items, outcome))
                    elif outcome is not None:
                        failed.update(outcome)
                for item, cause in failed.items():
                    log.error("fsync of %s failed: %r", item.name, cause)
                if len(failed) < len(dirty):
                    self.rounds += 1
                    if self._observe is not None:
                        self._observe(time.perf_counter() - started)
                    if self._on_flushed is not None:
                        self._on_flushed()
                for fut, wanted in waiters:
                    if fut.done():
                        continue
                    error = next((failed[w] for w in wanted if w in failed), None)
                    if error is None:
                        fut.set_result(None)
                    else:
                        fut.set_exception(error)
        finally:
            self._running = False
