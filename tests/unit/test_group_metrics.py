"""The snapshot behind /metrics' consumer-group series (broker/metrics/group_state.py): which groups
get series of their own (the most lag, ties to the smaller id), what __other__ sums, and that
reading pauses for the event loop."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from kcoord.broker.metrics import group_state as group_metrics
from kcoord.broker.metrics.group_state import OTHER, GroupSeries, read_groups
from kcoord.broker.metrics.lag import RecordTimes
from kcoord.coordinator.classic.group import GroupState
from kcoord.coordinator.config import GroupConfig
from tests.unit.test_group_harness import Harness

END = 10  # every existing partition's log end offset


class Topics:
    """A TopicStore with topics ``t`` and ``u`` of 4 partitions, each ending at END (and
    starting at ``start``)."""

    def __init__(self, start: int = 0) -> None:
        self.start = start

    def partition(self, topic: str, index: int) -> Any:
        if topic in ("t", "u") and 0 <= index < 4:
            return SimpleNamespace(flushed_offset=END, log_start_offset=self.start)
        return None


def runtime(h: Harness) -> Any:
    return SimpleNamespace(shards=[SimpleNamespace(shard=h.shard, loaded=True)])


async def snapshot(h: Harness, max_groups: int) -> Any:
    return await read_groups(runtime(h), Topics(), max_groups)  # type: ignore[arg-type]


async def test_groups_with_the_most_lag_get_series_the_others_are_summed() -> None:
    h = Harness()
    h.commit({("t", 0): 5}, group="a")  # lag 5
    h.commit({("t", 0): 0, ("t", 1): 10}, group="b")  # lag 10
    h.commit({("t", 2): 0}, group="c")  # lag 10
    h.commit({("t", 3): 10, ("u", 0): 10}, group="d")  # lag 0
    snap = await snapshot(h, 2)
    assert [g.group_id for g in snap.groups] == ["b", "c"]
    assert snap.groups[0] == GroupSeries("b", 0, 10, [("t", 0, 0, 10), ("t", 1, 10, 0)])
    assert snap.other == GroupSeries(
        OTHER, 0, 5, [("t", 0, 5, 5), ("t", 3, 10, 0), ("u", 0, 10, 0)]
    )
    assert snap.states[GroupState.EMPTY] == 4 and snap.offsets == 6


async def test_lag_counts_from_the_log_start_when_the_commit_is_below_it() -> None:
    """Issue 19: records deleted by DeleteRecords or retention are not lag."""
    h = Harness()
    h.commit({("t", 0): 2, ("t", 1): 8}, group="a")
    snap = await read_groups(runtime(h), Topics(start=6), 10)  # type: ignore[arg-type]
    assert snap.groups == [GroupSeries("a", 0, 4 + 2, [("t", 0, 2, 4), ("t", 1, 8, 2)])]


async def test_ties_go_to_the_smaller_group_id_whatever_the_order_seen() -> None:
    h = Harness()
    for name in ["z", "x", "y", "w", "v"]:
        h.commit({("t", 0): END}, group=name)  # lag 0 each
    snap = await snapshot(h, 2)
    assert [g.group_id for g in snap.groups] == ["v", "w"]
    assert snap.other is not None and snap.other.partitions == [("t", 0, 3 * END, 0)]


async def test_members_are_summed_too_and_no_other_when_every_group_fits() -> None:
    h = Harness()
    h.stable_group(3, group="busy")
    h.commit({("t", 0): 1}, group="s")
    snap = await snapshot(h, 1)
    assert [(g.group_id, g.members) for g in snap.groups] == [("s", 0)]  # lag 9 beats 0
    assert snap.other is not None and snap.other.members == 3
    snap = await snapshot(h, 2)
    assert [g.group_id for g in snap.groups] == ["busy", "s"] and snap.other is None
    snap = await snapshot(h, 0)  # metrics.max.groups 0: everything in __other__
    assert snap.groups == [] and snap.other is not None and snap.other.members == 3


async def test_only_partitions_of_existing_topics_get_series_but_all_offsets_count() -> None:
    h = Harness()
    h.commit({("gone", 0): 3, ("t", 9): 3, ("t", 1): 4}, group="s")
    snap = await snapshot(h, 10)
    (g,) = snap.groups
    assert g.partitions == [("t", 1, 4, END - 4)]
    assert snap.offsets == 3


async def test_reading_pauses_for_the_loop_every_slice(monkeypatch: pytest.MonkeyPatch) -> None:
    h = Harness()
    for i in range(7):
        h.commit({("t", 0): 1}, group=f"g{i}")
    pauses = []

    async def pause() -> None:
        pauses.append(1)

    monkeypatch.setattr(group_metrics, "SLICE", 4)  # a group and its offset: 2 units each
    monkeypatch.setattr(group_metrics, "pause", pause)
    snap = await snapshot(h, 100)
    assert len(snap.groups) == 7 and len(pauses) == 3


class _Times(RecordTimes):
    """Every record's timestamp is its offset in seconds."""

    def timestamp(self, topic: str, partition: int, plog: Any, offset: int, budget: list[int]) -> int:
        return offset * 1000


async def test_lag_seconds_of_own_groups_and_of_other_at_its_smallest_offset() -> None:
    h = Harness()
    h.commit({("t", 0): 0}, group="b")  # lag 10: series of its own
    h.commit({("t", 0): 5}, group="a")
    h.commit({("t", 0): 2, ("t", 1): END}, group="c")
    snap = await read_groups(runtime(h), Topics(), 1, _Times(), 100_000)  # type: ignore[arg-type]
    assert [g.group_id for g in snap.groups] == ["b"]
    assert snap.groups[0].seconds == {("t", 0): 100.0}
    # __other__: the furthest behind of a and c (offset 2); nothing behind on t-1
    assert snap.other is not None and snap.other.seconds == {("t", 0): 98.0, ("t", 1): 0.0}
    assert (await snapshot(h, 1)).groups[0].seconds == {}  # no times: no lag in seconds


async def test_offsets_expired_and_deleted_are_counted_as_kafka_counts_them() -> None:
    h = Harness(GroupConfig(offsets_retention_ms=100_000, offsets_retention_check_interval_ms=10_000))
    h.commit({("t", 0): 1, ("t", 1): 1}, group="old")
    h.commit({("t", 0): 1, ("t", 1): 1, ("u", 0): 1}, group="d")
    h.offset_delete({"t": [0, 1, 2]}, group="d")  # t-2 has no offset: not counted
    assert (h.shard.offsets_expired, h.shard.offsets_deleted) == (0, 2)
    h.tick(50_000)
    h.commit({("u", 0): 2}, group="d")
    h.tick(55_000)  # "old"'s offsets are past retention, d's u-0 (renewed) is not
    assert (h.shard.offsets_expired, h.shard.offsets_deleted) == (2, 2)
    snap = await snapshot(h, 10)
    assert (snap.expired, snap.deleted) == (2, 2)
