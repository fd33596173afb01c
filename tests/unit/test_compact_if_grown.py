"""broker/data/retention.py compact_if_grown: when a cleaner pass compacts a log again."""

from __future__ import annotations

import asyncio
from typing import Any

from kcoord.broker.data.retention import compact_if_grown
from kcoord.storage.compaction_rules import CompactionStats


class FakeLog:
    """What compact_if_grown reads of a log: its size, its segments, the two phases."""

    name = "t-0"
    offline = None
    compactable = True
    compaction_commits_anywhere = False

    def __init__(self) -> None:
        self.size_bytes = 1000
        self.segment_base_offsets = [0, 10]
        self.compactions = 0

    def prepare_compaction(self, *, now_ms: int, delete_retention_ms: int) -> Any:
        return object()

    def commit_compaction(self, plan: Any) -> CompactionStats:
        self.compactions += 1
        self.size_bytes = 400
        return CompactionStats()

    def abort_compaction(self, plan: Any) -> None:
        raise AssertionError("not aborted here")


def test_a_roll_that_seals_a_segment_is_compacted_even_without_growth() -> None:
    """The log's records may all have come before the first compaction, some in the segment
    then active: once a roll seals it, there is more to clean though the size did not grow
    (a pass that waited for growth left them forever)."""
    log = FakeLog()
    cleaned: dict[Any, tuple[int, int]] = {}

    def once() -> None:
        asyncio.run(compact_if_grown(log, cleaned, "k", delete_retention_ms=0,  # type: ignore[arg-type]
                                     current=lambda: True))

    once()
    assert log.compactions == 1
    once()
    assert log.compactions == 1  # nothing new: no growth, no new sealed segment
    log.segment_base_offsets = [0, 10, 30]  # rolled by time
    once()
    assert log.compactions == 2
    log.size_bytes = 900  # grew
    once()
    assert log.compactions == 3
