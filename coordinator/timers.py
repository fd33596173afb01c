"""The timers of one shard: a lazy deadline heap shared by its managers.

Managers register the kinds of timer they own (:meth:`Timers.register`): how to tell whether an
entry is still the live timer of its key, where a live timer has moved to, and what to do when
it fires. An entry is ``(deadline_ms, token, kind, key, subkey)``; arming hands out a token that
the owner keeps on its object (a group's join timer, a member's session timer), and an entry is
live only while the owner still holds its token, so cancelling or re-arming is just forgetting
or replacing the token: the stale entry is skipped when it comes up, and dropped by compaction.

A timer may also *move* later without a new entry (a member's heartbeat only pushes its session
deadline): when its queued entry comes up early, it is queued again at the moved deadline, under
the same token. :meth:`Timers.next_deadline` is exact; :meth:`Timers.next_wakeup` (the heap's
first entry, live or not) is the cheap bound the runtime arms its wake-up on.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass

TimerEntry = tuple[int, int, int, str, str]
"""(deadline_ms, token, kind, key, subkey): key and subkey name what the timer is for."""

COMPACT_MIN = 64
"""Below this many entries the heap is never compacted."""


@dataclass(frozen=True, slots=True)
class TimerKind:
    """How the shard handles the entries of one kind of timer."""

    live: Callable[[TimerEntry], bool]
    """Whether the entry is still its key's armed timer."""
    fire: Callable[[TimerEntry, int], None]
    """What happens when a live entry comes due (with the time now)."""
    moved: Callable[[TimerEntry], int | None] | None = None
    """The later deadline a live timer was moved to since it was queued, None if none."""


class Timers:
    def __init__(self) -> None:
        self.entries: list[TimerEntry] = []
        self._kinds: dict[int, TimerKind] = {}
        self._next_token = 1
        self._compact_at = COMPACT_MIN
        self.compactions = 0  # how often stale entries were swept out

    def register(self, kind: int, handling: TimerKind) -> None:
        if kind in self._kinds:
            raise ValueError(f"timer kind {kind} is registered already")
        self._kinds[kind] = handling

    def __len__(self) -> int:
        """Entries queued, stale ones included (for metrics and tests)."""
        return len(self.entries)

    def push(
        self,
        deadline_ms: int,
        kind: int,
        key: str,
        subkey: str = "",
        token: int | None = None,
    ) -> int:
        """Queue an entry under a new token (returned), or under ``token`` (an entry queued
        again)."""
        # Compact BEFORE pushing: the caller registers the new token only after this returns,
        # so a compaction that saw the new entry would discard it as stale.
        if len(self.entries) >= self._compact_at:
            self._compact()
        if token is None:
            token = self._next_token
            self._next_token += 1
        heapq.heappush(self.entries, (deadline_ms, token, kind, key, subkey))
        return token

    def _compact(self) -> None:
        self.compactions += 1
        kinds = self._kinds
        self.entries = [e for e in self.entries if kinds[e[2]].live(e)]
        heapq.heapify(self.entries)
        # Stale entries (timers re-armed earlier or cancelled) stay at most a quarter of the
        # heap: with many idle groups the heap is a good part of their memory.
        self._compact_at = len(self.entries) + max(COMPACT_MIN, len(self.entries) // 4)

    def _moved(self, entry: TimerEntry) -> int | None:
        moved = self._kinds[entry[2]].moved
        return moved(entry) if moved is not None else None

    def next_deadline(self) -> int | None:
        """The earliest live deadline, None if there is none (exact: stale entries are
        dropped, moved timers queued again at their new deadline)."""
        entries = self.entries
        kinds = self._kinds
        while entries:
            top = entries[0]
            if not kinds[top[2]].live(top):
                heapq.heappop(entries)
                continue
            moved = self._moved(top)
            if moved is None:
                return top[0]
            heapq.heappop(entries)
            self.push(moved, top[2], top[3], top[4], top[1])
        return None

    def next_wakeup(self) -> int | None:
        """A cheap lower bound of :meth:`next_deadline`: the heap's first entry, live or not.
        Heartbeats leave it unchanged."""
        return self.entries[0][0] if self.entries else None

    def fire_due(self, now_ms: int, limit: int | None = None) -> None:
        """Fire every live timer due at or before ``now_ms``, in deadline order; at most
        ``limit`` of them when given (the rest stay queued, due, for the next call: firing them
        a turn later is what a busier machine would have done)."""
        entries = self.entries
        kinds = self._kinds
        left = -1 if limit is None else limit
        while left and entries and entries[0][0] <= now_ms:
            entry = heapq.heappop(entries)
            kind = kinds[entry[2]]
            if not kind.live(entry):
                continue
            moved = self._moved(entry)
            if moved is not None:
                self.push(moved, entry[2], entry[3], entry[4], entry[1])
            else:
                kind.fire(entry, now_ms)
                left -= 1

    def clear(self) -> None:
        self.entries.clear()
