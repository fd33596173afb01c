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

Lag in records and in seconds is computed by broker/metrics/lag.py (as the web console shows
it). Lag in seconds reads one record's timestamp per lagging partition, so it is read only for
the groups that keep series of their own, after the ranking, and for ``__other__`` at the
smallest committed offset among the summed groups on each partition (the furthest behind of
them, whose lag in seconds is the largest); at most :data:`TIMESTAMP_READS` log reads per scrape
(what was read is kept for the next: :class:`~broker.metrics.lag.RecordTimes`), a partition
whose record was not read has no lag-seconds series in that scrape.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from kcoord.coordinator.classic.group import ClassicGroup, GroupState
from kcoord.coordinator.consumer.group import ASSIGNING, EMPTY, RECONCILING, STABLE, ConsumerGroup

from ..net.offload import SLICE, gc_paused, pause
from .lag import RecordTimes, records_behind, seconds_behind

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

    from ..data.topics import TopicStore
    from ..groups.runtime import GroupRuntime

CONSUMER_GROUP_STATES = (EMPTY, ASSIGNING, RECONCILING, STABLE)

OTHER = "__other__"
"""The consumergroup label of the sums over the groups without series of their own."""

PartitionSeries = tuple[str, int, int, int]
"""(topic, partition, current offset, lag)."""
TIMESTAMP_READS = 1000
"""Records read from the logs per scrape for lag in seconds (the others are known from before
or left out)."""


@dataclass(slots=True)
class GroupSeries:
    """One group's series (or the sums of :data:`OTHER`)."""

    group_id: str
    members: int
    lag: int
    partitions: list[PartitionSeries]
    seconds: dict[tuple[str, int], float] = field(default_factory=dict)
    """Lag in seconds per (topic, partition), where known (:func:`read_groups` with ``times``)."""

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
    """(topic, partition) -> [offsets summed, lags summed, smallest offset]."""

    def add(self, group: GroupSeries) -> None:
        self.groups += 1
        self.members += group.members
        for topic, partition, offset, lag in group.partitions:
            sums = self.by_partition.get((topic, partition))
            if sums is None:
                self.by_partition[(topic, partition)] = [offset, lag, offset]
            else:
                sums[0] += offset
                sums[1] += lag
                sums[2] = min(sums[2], offset)

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
    expired: int
    """Offsets expired by retention since start (every shard's)."""
    deleted: int
    """Offsets deleted by OffsetDelete since start."""
    groups: list[GroupSeries]
    """The groups with series of their own, by group id."""
    other: GroupSeries | None
    """The sums over every other group; None when there is none."""


async def read_groups(
    runtime: GroupRuntime,
    topics: TopicStore,
    max_groups: int,
    times: RecordTimes | None = None,
    now_ms: int = 0,
) -> GroupsSnapshot:
    """Read every shard's groups and committed offsets, pausing after every SLICE of them;
    with ``times``, the lag in seconds at ``now_ms`` too."""
    with gc_paused():  # every group is read: see broker/net/offload.py
        snap, other = await _read_groups(runtime, topics, max_groups)
        if times is not None:
            await _read_seconds(snap, other, topics, times, now_ms)
        return snap


async def _read_seconds(
    snap: GroupsSnapshot, other: _OtherSums, topics: TopicStore, times: RecordTimes, now_ms: int
) -> None:
    """Lag in seconds of the groups with series of their own, and of __other__ (at the
    smallest offset summed on each partition)."""
    budget = [TIMESTAMP_READS]
    work = 0
    wanted: list[tuple[GroupSeries, list[tuple[str, int, int]]]] = [
        (g, [(t, p, offset) for t, p, offset, _ in g.partitions]) for g in snap.groups
    ]
    if snap.other is not None:
        least = [(t, p, sums[2]) for (t, p), sums in sorted(other.by_partition.items())]
        wanted.append((snap.other, least))
    for series, parts in wanted:
        for topic, partition, offset in parts:
            plog = topics.partition(topic, partition)
            if plog is None:
                continue
            seconds = seconds_behind(times, topic, partition, plog, offset, now_ms, budget)
            if seconds is not None:
                series.seconds[(topic, partition)] = seconds
            work += 1
            if work >= SLICE:
                work = 0
                await pause()


async def _read_groups(
    runtime: GroupRuntime, topics: TopicStore, max_groups: int
) -> tuple[GroupsSnapshot, _OtherSums]:
    states = dict.fromkeys(GroupState, 0)
    consumer_states = dict.fromkeys(CONSUMER_GROUP_STATES, 0)
    offsets = committed = loaded = expired = deleted = 0
    kept: list[GroupSeries] = []  # a heap: the weakest claim first
    other = _OtherSums()
    work = 0
    for sr in runtime.shards:
        shard = sr.shard
        loaded += sr.loaded
        committed += shard.offsets_committed
        expired += shard.offsets_expired
        deleted += shard.offsets_deleted
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
                behind = records_behind(plog, value.offset)
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
    snap = GroupsSnapshot(
        states=states,
        consumer_states=consumer_states,
        offsets=offsets,
        committed=committed,
        loaded=loaded,
        partitions=len(runtime.shards),
        expired=expired,
        deleted=deleted,
        groups=sorted(kept, key=lambda g: g.group_id),
        other=other.series() if other.groups else None,
    )
    return snap, other


def group_metrics(snap: GroupsSnapshot) -> Iterator[Metric]:
    """The families of the consumer groups' state: groups by state, offsets, and
    kafka_exporter's per-group series (partitions in topic, partition order)."""
    by_state = GaugeMetricFamily("kcoord_groups", "Classic groups by state.", labels=["state"])
    for state, n in snap.states.items():
        by_state.add_metric([state.value], n)
    consumer_by_state = GaugeMetricFamily(
        "kcoord_consumer_groups", "KIP-848 consumer groups by state.", labels=["state"]
    )
    for name, n in snap.consumer_states.items():
        consumer_by_state.add_metric([name], n)
    yield by_state
    yield consumer_by_state
    yield CounterMetricFamily(
        "kcoord_offset_commits",
        "Partition offsets committed (OffsetCommit) since start.",
        value=snap.committed,
    )
    yield CounterMetricFamily(
        "kcoord_offset_expirations",
        "Committed offsets expired by the retention check since start (Kafka:"
        " offset-expiration-count).",
        value=snap.expired,
    )
    yield CounterMetricFamily(
        "kcoord_offset_deletions",
        "Committed offsets deleted by OffsetDelete since start (Kafka: offset-deletion-count).",
        value=snap.deleted,
    )
    yield GaugeMetricFamily("kcoord_offsets", "Committed offsets held, all groups.", value=snap.offsets)
    yield GaugeMetricFamily(
        "kcoord_offsets_partitions_loaded",
        "__consumer_offsets partitions loaded and serving.",
        value=snap.loaded,
    )
    yield GaugeMetricFamily(
        "kcoord_offsets_partitions",
        "Partitions of __consumer_offsets (coordinator shards).",
        value=snap.partitions,
    )
    yield from _group_series(snap)


def _group_series(snap: GroupsSnapshot) -> Iterator[Metric]:
    per_partition = ["consumergroup", "topic", "partition"]
    members = GaugeMetricFamily(
        "kafka_consumergroup_members", "Amount of members in a consumer group", labels=["consumergroup"]
    )
    current = GaugeMetricFamily(
        "kafka_consumergroup_current_offset",
        "Current Offset of a ConsumerGroup at Topic/Partition",
        labels=per_partition,
    )
    current_sum = GaugeMetricFamily(
        "kafka_consumergroup_current_offset_sum",
        "Current Offset of a ConsumerGroup at Topic for all partitions",
        labels=["consumergroup", "topic"],
    )
    lag = GaugeMetricFamily(
        "kafka_consumergroup_lag",
        "Current Approximate Lag of a ConsumerGroup at Topic/Partition",
        labels=per_partition,
    )
    lag_sum = GaugeMetricFamily(
        "kafka_consumergroup_lag_sum",
        "Current Approximate Lag of a ConsumerGroup at Topic for all partitions",
        labels=["consumergroup", "topic"],
    )
    lag_seconds = GaugeMetricFamily(
        "kafka_consumergroup_lag_seconds",
        "Age in seconds of the oldest record a ConsumerGroup has still to consume at"
        " Topic/Partition (0: none)",
        labels=per_partition,
    )
    groups = snap.groups if snap.other is None else [*snap.groups, snap.other]
    for g in groups:
        gid = g.group_id
        members.add_metric([gid], g.members)
        sums: dict[str, list[int]] = {}
        for topic, partition, offset, behind in g.partitions:
            labels = [gid, topic, str(partition)]
            current.add_metric(labels, offset)
            lag.add_metric(labels, behind)
            seconds = g.seconds.get((topic, partition))
            if seconds is not None:
                lag_seconds.add_metric(labels, seconds)
            topic_sums = sums.setdefault(topic, [0, 0])
            topic_sums[0] += offset
            topic_sums[1] += behind
        for topic, (c_sum, l_sum) in sums.items():
            current_sum.add_metric([gid, topic], c_sum)
            lag_sum.add_metric([gid, topic], l_sum)
    yield from (members, current, current_sum, lag, lag_sum, lag_seconds)
