"""The consumer-group state behind ``/metrics``, read from the shards without holding the loop.

A scrape first takes a :class:`GroupsSnapshot` (:func:`read_groups`): the shards are read in
slices of about ``offload.SLICE`` groups and offsets, with a pause for the event loop after
each, so that a broker holding hundreds of thousands of groups keeps serving its clients while
it is scraped. The registry then renders the snapshot, which nothing changes any more.

The response stays bounded: per-group series (kafka_exporter's ``kafka_consumergroup_*``) are
rendered for at most ``metrics.max.groups`` groups, those with the most lag (summed over their
partitions), ties going to the smaller group id. Every other group is summed into series
labelled ``consumergroup="__other__"``: members, and current offset and lag per topic partition
and per topic. Like kafka_exporter, which reports the topics it finds in the cluster, only
partitions of existing topics get offset and lag series: lag needs the partition's end offset,
and offsets left behind by deleted topics (or committed for topics that never existed) would
otherwise grow the response without bound.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kcoord.coordinator.classic.group import ClassicGroup, GroupState
from kcoord.coordinator.consumer.group import ASSIGNING, EMPTY, RECONCILING, STABLE, ConsumerGroup

from ..net.offload import SLICE, gc_paused, pause

if TYPE_CHECKING:
    from ..data.topics import TopicStore
    from ..groups.runtime import GroupRuntime

CONSUMER_GROUP_STATES = (EMPTY, ASSIGNING, RECONCILING, STABLE)

OTHER = "__other__"
"""The consumergroup label of the sums over the groups without series of their own."""

PartitionSeries = tuple[str, int, int, int]
"""(topic, partition, current offset, lag)."""


@dataclass(slots=True)
class GroupSeries:
    """One group's series (or the sums of :data:`OTHER`)."""

    group_id: str
    members: int
    lag: int
    partitions: list[PartitionSeries]

    def ranks_below(self, other: GroupSeries) -> bool:
        """Whether ``other`` has a better claim to series of its own: more lag, or as much
        and a smaller group id."""
        if self.lag != other.lag:
            return self.lag < other.lag
        return self.group_id > other.group_id

    # heapq orders by "<": the group with the weakest claim sits at the top of the heap.
    def __lt__(self, other: GroupSeries) -> bool:
        return self.ranks_below(other)


@dataclass(slots=True)
class _OtherSums:
    groups: int = 0
    members: int = 0
    by_partition: dict[tuple[str, int], list[int]] = field(default_factory=dict)

    def add(self, group: GroupSeries) -> None:
        self.groups += 1
        self.members += group.members
        for topic, partition, offset, lag in group.partitions:
            sums = self.by_partition.get((topic, partition))
            if sums is None:
                self.by_partition[(topic, partition)] = [offset, lag]
            else:
                sums[0] += offset
                sums[1] += lag

    def series(self) -> GroupSeries:
        parts = [(t, p, s[0], s[1]) for (t, p), s in sorted(self.by_partition.items())]
        return GroupSeries(OTHER, self.members, sum(p[3] for p in parts), parts)


@dataclass(slots=True)
class GroupsSnapshot:
    """What the coordinator's metrics show, as read for one scrape."""

    states: dict[GroupState, int]
    consumer_states: dict[str, int]
    """KIP-848 consumer groups by state."""
    offsets: int
    """Committed offsets held (every group's, existing topics or not)."""
    committed: int
    loaded: int
    partitions: int
    groups: list[GroupSeries]
    """The groups with series of their own, by group id."""
    other: GroupSeries | None
    """The sums over every other group; None when there is none."""


async def read_groups(runtime: GroupRuntime, topics: TopicStore, max_groups: int) -> GroupsSnapshot:
    """Read every shard's groups and committed offsets, pausing after every SLICE of them."""
    with gc_paused():  # every group is read: see broker/net/offload.py
        return await _read_groups(runtime, topics, max_groups)


async def _read_groups(runtime: GroupRuntime, topics: TopicStore, max_groups: int) -> GroupsSnapshot:
    states = dict.fromkeys(GroupState, 0)
    consumer_states = dict.fromkeys(CONSUMER_GROUP_STATES, 0)
    offsets = committed = loaded = 0
    kept: list[GroupSeries] = []  # a heap: the weakest claim first
    other = _OtherSums()
    work = 0
    for sr in runtime.shards:
        shard = sr.shard
        loaded += sr.loaded
        committed += shard.offsets_committed
        groups: list[ClassicGroup | ConsumerGroup] = [*shard.groups(), *shard.consumer_groups()]
        for group in groups:  # a list taken now: safe across pauses
            gid = group.group_id
            if isinstance(group, ConsumerGroup):
                consumer_states[group.state] = consumer_states.get(group.state, 0) + 1
            else:
                states[group.state] += 1
            held = shard.committed_offsets(gid)
            offsets += len(held)
            parts: list[PartitionSeries] = []
            lag = 0
            for (topic, partition), value in held.items():
                plog = topics.partition(topic, partition)
                if plog is None or value.offset < 0:
                    continue
                # records below the log start (DeleteRecords, retention) are no lag
                behind = plog.flushed_offset - max(value.offset, plog.log_start_offset)
                parts.append((topic, partition, value.offset, behind))
                lag += behind
            series = GroupSeries(gid, len(group.members), lag, parts)
            if len(kept) < max_groups:
                heapq.heappush(kept, series)
            elif kept and kept[0].ranks_below(series):
                other.add(heapq.heapreplace(kept, series))
            else:
                other.add(series)
            work += 1 + len(held)
            if work >= SLICE:
                work = 0
                await pause()
    for series in kept:
        series.partitions.sort()
    return GroupsSnapshot(
        states=states,
        consumer_states=consumer_states,
        offsets=offsets,
        committed=committed,
        loaded=loaded,
        partitions=len(runtime.shards),
        groups=sorted(kept, key=lambda g: g.group_id),
        other=other.series() if other.groups else None,
    )
