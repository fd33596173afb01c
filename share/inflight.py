"""The in-flight records of a share partition, kept as runs.

A :class:`RunList` covers the offsets from the share-partition start offset (``start``) up to the
end offset (``end``, exclusive) with contiguous, sorted runs: offsets in one run share a state, a
delivery count and, while ACQUIRED, the member holding them and the lock deadline. A run is split
only where an operation names part of it, and neighbours that end up alike are joined again, so a
few thousand in-flight records of a healthy partition are a handful of runs and an operation costs
the runs it touches. The list also keeps the number of records in each state. The share rules
themselves live in :mod:`kcoord.share.partition`; this module only keeps the runs in order.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterator
from dataclasses import dataclass

from kcoord.share.model import RecordState

DONE = frozenset({RecordState.ACKNOWLEDGED, RecordState.ARCHIVED})
"""The states a record never leaves while in flight."""


@dataclass(frozen=True, slots=True)
class InFlightRun:
    """A read-only view of one run (for describe, the console and tests)."""

    first_offset: int
    last_offset: int
    state: RecordState
    delivery_count: int
    member_id: str | None = None
    lock_deadline_ms: int | None = None


class Run:
    """One run of in-flight offsets ``first .. last`` with one state (mutable, owned by a
    :class:`RunList`)."""

    __slots__ = ("first", "last", "state", "count", "member", "deadline")

    def __init__(
        self,
        first: int,
        last: int,
        state: RecordState,
        count: int,
        member: str | None = None,
        deadline: int | None = None,
    ) -> None:
        self.first = first
        self.last = last
        self.state = state
        self.count = count
        self.member = member
        self.deadline = deadline

    @property
    def size(self) -> int:
        return self.last - self.first + 1

    def alike(self, other: Run) -> bool:
        """Whether the two runs could be one."""
        return (
            self.state == other.state
            and self.count == other.count
            and self.member == other.member
            and self.deadline == other.deadline
        )

    def view(self) -> InFlightRun:
        return InFlightRun(
            self.first, self.last, self.state, self.count, self.member, self.deadline
        )


def _first(run: Run) -> int:
    return run.first


class RunList:
    """Contiguous runs from ``start`` to ``end`` (module docstring)."""

    def __init__(self, start: int, runs: list[Run]) -> None:
        """``runs`` must be sorted and contiguous from ``start``."""
        self.start = start
        self.end = runs[-1].last + 1 if runs else start
        self.runs: list[Run] = []
        self.counts = {state: 0 for state in RecordState}
        for run in runs:
            self.append(run)

    def __len__(self) -> int:
        return len(self.runs)

    def index_of(self, offset: int) -> int:
        """The index of the run holding ``offset`` (``start <= offset < end``)."""
        return bisect_right(self.runs, offset, key=_first) - 1

    def split_at(self, offset: int) -> int:
        """Make a run begin at ``offset`` (``start <= offset <= end``); its index (``len`` for
        ``end``)."""
        if offset >= self.end:
            return len(self.runs)
        i = self.index_of(offset)
        run = self.runs[i]
        if run.first == offset:
            return i
        tail = Run(offset, run.last, run.state, run.count, run.member, run.deadline)
        run.last = offset - 1
        self.runs.insert(i + 1, tail)
        return i + 1

    def carve(self, first: int, last: int) -> tuple[int, int]:
        """Split so that ``runs[i:j]`` cover exactly ``first .. last`` (within start .. end)."""
        i = self.split_at(first)
        j = self.split_at(last + 1)
        return i, j

    def overlapping(self, first: int, last: int) -> Iterator[Run]:
        """The runs holding any of ``first .. last`` (clipped to the in-flight offsets), without
        splitting."""
        first = max(first, self.start)
        if first > last or first >= self.end:
            return
        for i in range(self.index_of(first), len(self.runs)):
            run = self.runs[i]
            if run.first > last:
                return
            yield run

    def change(
        self,
        run: Run,
        state: RecordState,
        count: int,
        member: str | None = None,
        deadline: int | None = None,
    ) -> None:
        """Give ``run`` a new state, keeping the per-state figures right."""
        self.counts[run.state] -= run.size
        self.counts[state] += run.size
        run.state, run.count, run.member, run.deadline = state, count, member, deadline

    def append(self, run: Run) -> None:
        """Add ``run`` at ``end`` (it must begin there), joined to the last run if alike."""
        self.counts[run.state] += run.size
        self.end = run.last + 1
        if self.runs and self.runs[-1].alike(run):
            self.runs[-1].last = run.last
        else:
            self.runs.append(run)

    def join(self, i: int, j: int) -> None:
        """Join alike neighbours among ``runs[i-1 .. j]``."""
        lo = max(i - 1, 0)
        hi = min(j, len(self.runs) - 1)
        k = hi
        while k > lo:
            left, right = self.runs[k - 1], self.runs[k]
            if left.alike(right):
                left.last = right.last
                del self.runs[k]
            k -= 1

    def drop_before(self, offset: int) -> int:
        """Forget every offset below ``offset`` (> start); how many of them were not done."""
        undone = 0
        cut = self.split_at(min(offset, self.end))
        for run in self.runs[:cut]:
            self.counts[run.state] -= run.size
            if run.state not in DONE:
                undone += run.size
        del self.runs[:cut]
        self.start = offset
        self.end = max(self.end, offset)
        return undone

    def drop_leading_done(self) -> bool:
        """Move ``start`` past the leading done runs; whether it moved."""
        k = 0
        while k < len(self.runs) and self.runs[k].state in DONE:
            self.counts[self.runs[k].state] -= self.runs[k].size
            k += 1
        if not k:
            return False
        self.start = self.runs[k - 1].last + 1
        del self.runs[:k]
        return True

    def first_available(self) -> int | None:
        """The first AVAILABLE offset, None if there is none."""
        if not self.counts[RecordState.AVAILABLE]:
            return None
        for run in self.runs:
            if run.state == RecordState.AVAILABLE:
                return run.first
        return None  # pragma: no cover - the figure says there is one
