"""Replaying a __consumer_offsets partition into a shard: the newest record per key wins.

The partition is a compacted log, and a shard's persisted state depends only on the newest
record of every key (group metadata or committed offset). So loading first reduces the log to
those records, in order of their last occurrence, and replays only them; a key whose newest
record is a tombstone needs no replay at all. The property test in
tests/unit/test_log_state_property.py checks this against a full replay, with compaction and
restarts in between.
"""

from __future__ import annotations

from collections.abc import Iterable

from .shard import GroupShard


class LatestRecords:
    """Collects (key, value) pairs of a partition in log order, keeping the newest per key."""

    __slots__ = ("_latest", "records")

    def __init__(self) -> None:
        self._latest: dict[bytes, bytes | None] = {}
        self.records = 0  # records seen, keyless ones included

    def add(self, pairs: Iterable[tuple[bytes | None, bytes | None]]) -> None:
        latest = self._latest
        pop = latest.pop
        n = 0
        for key, value in pairs:
            n += 1
            if key is not None:
                pop(key, None)  # re-inserting moves the key to its last occurrence
                latest[key] = value
        self.records += n

    def __len__(self) -> int:
        return len(self._latest)

    def replay_into(self, shard: GroupShard, now_ms: int) -> int:
        """Replay the surviving records; returns how many were replayed."""
        replay = shard.replay
        n = 0
        for key, value in self._latest.items():
            if value is not None:
                replay(key, value, now_ms)
                n += 1
        return n
