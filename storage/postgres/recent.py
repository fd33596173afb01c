"""The newest flushed batches of an engine's PostgreSQL logs, kept in memory within one byte
budget, so that consumers at the end of a log are served without a query (the tail of a log is
what is read most).

:class:`RecentBatches` is one first-in first-out order over all the logs of an engine: a flush
adds its batches at the back; when the total passes the budget the oldest go from the front,
whichever log they belong to. Each log's :class:`LogTail` holds its own part in offset order,
contiguous up to the log's flushed offset, so the front of the shared order is always the front
of some tail, unless that tail dropped it already (a compaction rewrote it, the log closed):
then it only leaves the budget. One lock guards both (flushes run in worker threads, reads on
the event loop).
"""

from __future__ import annotations

import threading
from collections import deque

from kcoord.protocol.batch import BatchHeader

Batch = tuple[BatchHeader, bytes]

DEFAULT_BUDGET_BYTES = 64 << 20


class LogTail:
    """One log's newest flushed batches (see the module docstring)."""

    __slots__ = ("_batches", "_shared")

    def __init__(self, shared: RecentBatches) -> None:
        self._shared = shared
        self._batches: deque[Batch] = deque()

    def add(self, batches: list[Batch]) -> None:
        """Batches just flushed, following those already held."""
        self._shared.add(self, batches)

    def since(self, start: int, end: int) -> tuple[int, list[Batch]]:
        """``(first, batches)``: the offset from which the tail holds the log up to ``end`` (the
        flushed offset; ``end`` itself when it holds nothing), and its batches that hold
        offsets from ``start`` on, in order."""
        with self._shared.lock:
            batches = self._batches
            if not batches:
                return end, []
            first = batches[0][0].base_offset
            if start <= first:
                return first, list(batches)
            # Readers are mostly near the end: look from the back.
            i = len(batches) - 1
            while i > 0 and batches[i][0].base_offset > start:
                i -= 1
            return first, [batches[j] for j in range(i, len(batches))]

    def first_offset(self, end: int) -> int:
        """The offset from which the tail holds the log up to ``end`` (``end`` when empty)."""
        with self._shared.lock:
            return self._batches[0][0].base_offset if self._batches else end

    def drop_below(self, offset: int) -> None:
        """Forget the batches wholly below ``offset`` (rewritten by a compaction); the budget
        counts them until their turn in the shared order."""
        with self._shared.lock:
            batches = self._batches
            while batches and batches[0][0].last_offset < offset:
                batches.popleft()

    def clear(self) -> None:
        """Forget every batch (the log is closed), as :meth:`drop_below`."""
        with self._shared.lock:
            self._batches.clear()


class RecentBatches:
    def __init__(self, budget_bytes: int = DEFAULT_BUDGET_BYTES) -> None:
        self.budget_bytes = budget_bytes
        self.lock = threading.Lock()
        self._order: deque[tuple[LogTail, Batch]] = deque()
        self._bytes = 0

    @property
    def held_bytes(self) -> int:
        return self._bytes

    def tail(self) -> LogTail:
        return LogTail(self)

    def add(self, tail: LogTail, batches: list[Batch]) -> None:
        with self.lock:
            for batch in batches:
                tail._batches.append(batch)
                self._order.append((tail, batch))
                self._bytes += len(batch[1])
            while self._bytes > self.budget_bytes:
                owner, oldest = self._order.popleft()
                front = owner._batches
                if front and front[0] is oldest:  # (not when it was dropped already)
                    front.popleft()
                self._bytes -= len(oldest[1])
