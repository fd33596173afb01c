"""The share groups' series of ``/metrics`` (KIP-932), under Kafka's share metric names made
Prometheus names (the table in docs/operating.md gives Kafka's name of each):

- from the coordinator's shards: share groups by state (Kafka's ``share-group-count``), share
  group rebalances (``share-group-rebalance-count``: group epoch bumps), members per group;
- from the share partitions held here (broker/share/partitions.py), per group, topic and
  partition: records in flight (``InFlightMessageCount``), in-flight batches
  (``InFlightBatchCount``: runs of one state from the start offset to the end offset), records
  acquired, records archived since loaded;
- from the share layer's counters (broker/share/counters.py): records acknowledged by type
  (``RecordAcknowledgementsPerSec``), acquisition locks timed out
  (``AcquisitionLockTimeoutPerSec``), ShareFetch and ShareAcknowledge requests and failures
  (``BrokerTopicMetrics``' share rates);
- from the share coordinator: the offset each ``__share_group_state`` partition was pruned to
  (``last-pruned-offset``).

The load time of share partitions and the share-state write latency are histograms fed by the
broker's hooks (broker/metrics/prometheus.py).

Per-group series are bounded as the consumer groups' are (broker/metrics/group_state.py): only
``metrics.max.groups`` share groups get series of their own, those with the most records in
flight (ties to the smaller group id); every other one is summed into ``group="__other__"``
(members, and per topic partition its figures).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from kcoord.coordinator.share.group import DEAD, EMPTY, STABLE

from ..net.offload import SLICE, pause
from ..share.counters import ACK_TYPE_NAMES
from .group_state import OTHER

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

    from ..groups.runtime import GroupRuntime
    from ..share.partitions import SharePartitionManager
    from ..share.state_runtime import ShareStateRuntime

SHARE_GROUP_STATES = (EMPTY, STABLE, DEAD)

SharePartitionFigures = tuple[str, int, int, int, int, int]
"""(topic, partition, in flight, in-flight batches, acquired, archived)."""


@dataclass(slots=True)
class ShareGroupSeries:
    """One share group's series (or the sums of :data:`OTHER`)."""

    group_id: str
    members: int = 0
    in_flight: int = 0
    partitions: list[SharePartitionFigures] = field(default_factory=list)


@dataclass(slots=True)
class SharesSnapshot:
    """What the share metrics show, as read for one scrape."""

    states: dict[str, int]
    rebalances: int
    loaded: int
    """Share partitions held here."""
    groups: list[ShareGroupSeries]
    """The groups with series of their own, by group id."""
    other: ShareGroupSeries | None


async def read_shares(
    runtime: GroupRuntime, manager: SharePartitionManager | None, max_groups: int
) -> SharesSnapshot:
    """Read the share groups of every shard and the share partitions held here, pausing for
    the loop every SLICE groups or partitions."""
    states = dict.fromkeys(SHARE_GROUP_STATES, 0)
    rebalances = 0
    series: dict[str, ShareGroupSeries] = {}
    work = 0
    for sr in runtime.shards:
        shard = sr.shard
        rebalances += shard.share_rebalances
        for group in list(shard.share_groups()):
            states[group.state] = states.get(group.state, 0) + 1
            series[group.group_id] = ShareGroupSeries(group.group_id, len(group.members))
            work += 1
            if work >= SLICE:
                work = 0
                await pause()
    loaded = manager.loaded_partitions() if manager is not None else []
    for held in loaded:
        sp = held.partition
        gid = held.key.group_id
        g = series.get(gid)
        if g is None:  # the group is gone, its share partitions not yet
            g = series[gid] = ShareGroupSeries(gid)
        in_flight = sp.in_flight()
        runs = sp.in_flight_runs()
        g.in_flight += in_flight
        g.partitions.append(
            (held.topic, held.key.partition, in_flight, len(runs), sp.acquired(), sp.archived_count())
        )
        work += 1 + len(runs)
        if work >= SLICE:
            work = 0
            await pause()
    ranked = sorted(series.values(), key=lambda g: (-g.in_flight, g.group_id))
    kept = sorted(ranked[:max_groups], key=lambda g: g.group_id)
    for g in kept:
        g.partitions.sort()
    rest = ranked[max_groups:]
    return SharesSnapshot(
        states=states,
        rebalances=rebalances,
        loaded=len(loaded),
        groups=kept,
        other=_summed(rest) if rest else None,
    )


def _summed(groups: list[ShareGroupSeries]) -> ShareGroupSeries:
    sums: dict[tuple[str, int], list[int]] = {}
    other = ShareGroupSeries(OTHER)
    for g in groups:
        other.members += g.members
        other.in_flight += g.in_flight
        for topic, partition, *figures in g.partitions:
            known = sums.setdefault((topic, partition), [0, 0, 0, 0])
            for i, v in enumerate(figures):
                known[i] += v
    other.partitions = [(t, p, *f) for (t, p), f in sorted(sums.items())]  # type: ignore[misc]
    return other


def share_metrics(
    snap: SharesSnapshot,
    manager: SharePartitionManager | None,
    state: ShareStateRuntime | None,
) -> Iterator[Metric]:
    """Every share family of one scrape."""
    by_state = GaugeMetricFamily(
        "kcoord_share_groups", "Share groups by state (Kafka: share-group-count).", labels=["state"]
    )
    for name, n in snap.states.items():
        by_state.add_metric([name], n)
    yield by_state
    yield CounterMetricFamily(
        "kcoord_share_group_rebalances",
        "Share group epoch bumps (Kafka: share-group-rebalance-count).",
        value=snap.rebalances,
    )
    yield GaugeMetricFamily(
        "kcoord_share_partitions", "Share partitions (group, topic partition) held here.",
        value=snap.loaded,
    )
    yield from _per_group(snap)
    if manager is not None:
        yield from _counted(manager)
    if state is not None and state.logs is not None:
        pruned = GaugeMetricFamily(
            "kcoord_share_coordinator_last_pruned_offset",
            "The log start offset of a __share_group_state partition, once pruning moved it"
            " (Kafka: last-pruned-offset).",
            labels=["partition"],
        )
        for p, plog in enumerate(state.logs):
            if plog.offline is None and plog.log_start_offset > 0:
                pruned.add_metric([str(p)], plog.log_start_offset)
        yield pruned


def _per_group(snap: SharesSnapshot) -> Iterator[Metric]:
    labels = ["group", "topic", "partition"]
    members = GaugeMetricFamily(
        "kcoord_share_group_members", "Members of a share group.", labels=["group"]
    )
    in_flight = GaugeMetricFamily(
        "kcoord_share_partition_in_flight_messages",
        "Records in flight, available or acquired, in a share partition (Kafka:"
        " InFlightMessageCount).",
        labels=labels,
    )
    batches = GaugeMetricFamily(
        "kcoord_share_partition_in_flight_batches",
        "Runs of in-flight records of one state in a share partition (Kafka: InFlightBatchCount).",
        labels=labels,
    )
    acquired = GaugeMetricFamily(
        "kcoord_share_partition_acquired_messages",
        "Records acquired by a consumer, under their lock, in a share partition.",
        labels=labels,
    )
    archived = CounterMetricFamily(
        "kcoord_share_partition_archived_messages",
        "Records archived (rejected, past the delivery limit, not deliverable) in a share"
        " partition since it was loaded here.",
        labels=labels,
    )
    groups = snap.groups if snap.other is None else [*snap.groups, snap.other]
    for g in groups:
        members.add_metric([g.group_id], g.members)
        for topic, partition, n, runs, taken, gone in g.partitions:
            key = [g.group_id, topic, str(partition)]
            in_flight.add_metric(key, n)
            batches.add_metric(key, runs)
            acquired.add_metric(key, taken)
            archived.add_metric(key, gone)
    yield from (members, in_flight, batches, acquired, archived)


def _counted(manager: SharePartitionManager) -> Iterator[Metric]:
    c = manager.counters
    acks = CounterMetricFamily(
        "kcoord_share_record_acknowledgements",
        "Records acknowledged by share consumers, by type (Kafka: RecordAcknowledgementsPerSec).",
        labels=["ack_type"],
    )
    for kind, name in ACK_TYPE_NAMES.items():
        acks.add_metric([name], c.acknowledged[kind])
    yield acks
    yield CounterMetricFamily(
        "kcoord_share_acquisition_lock_timeouts",
        "Acquired records whose acquisition lock ran out (Kafka: AcquisitionLockTimeoutPerSec).",
        value=c.lock_timeouts,
    )
    for name, total, failed, what, kafka in (
        ("fetch", c.fetch_requests, c.fetch_failed, "ShareFetch requests", "ShareFetch"),
        (
            "acknowledgement", c.acknowledge_requests, c.acknowledge_failed,
            "ShareFetch and ShareAcknowledge requests carrying acknowledgements",
            "ShareAcknowledgement",
        ),
    ):
        yield CounterMetricFamily(
            f"kcoord_share_{name}_requests",
            f"{what}, once per topic (Kafka: Total{kafka}RequestsPerSec).",
            value=total,
        )
        yield CounterMetricFamily(
            f"kcoord_share_{name}_requests_failed",
            f"{what}, once per topic with a partition answered an error (Kafka:"
            f" Failed{kafka}RequestsPerSec).",
            value=failed,
        )
