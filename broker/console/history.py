"""Each group's recent lag, for the sparklines of the console: kept in memory, bounded.

A sample (wall-clock ms, total lag in messages) is taken whenever a group's lag is computed for
the console (its row in ``/api/groups``, its page), at most one per :data:`MIN_INTERVAL_MS`,
and the last :data:`SAMPLES` of each group are kept, for at most :data:`MAX_GROUPS` groups (past
that, the group not sampled for the longest is forgotten). Nothing is written anywhere: a
restart starts afresh.
"""

from __future__ import annotations

from collections import OrderedDict, deque

SAMPLES = 60
MAX_GROUPS = 2000
MIN_INTERVAL_MS = 1000


class LagHistory:
    def __init__(self, samples: int = SAMPLES, max_groups: int = MAX_GROUPS) -> None:
        self.samples = samples
        self.max_groups = max_groups
        self._groups: OrderedDict[str, deque[tuple[int, int]]] = OrderedDict()

    def sample(self, group_id: str, now_ms: int, lag: int) -> None:
        kept = self._groups.get(group_id)
        if kept is None:
            if len(self._groups) >= self.max_groups:
                self._groups.popitem(last=False)
            kept = self._groups[group_id] = deque(maxlen=self.samples)
        elif kept and now_ms - kept[-1][0] < MIN_INTERVAL_MS:
            return
        kept.append((now_ms, lag))
        self._groups.move_to_end(group_id)

    def of(self, group_id: str) -> list[list[int]]:
        """The group's samples, oldest first, as [ms, lag] pairs."""
        return [list(s) for s in self._groups.get(group_id, ())]

    def forget(self, group_id: str) -> None:
        self._groups.pop(group_id, None)
