"""kafka_exporter's broker and topic series of ``/metrics``, under its names, labels and
meanings, so that dashboards made for kafka_exporter find their data:

- ``kafka_brokers``: the live nodes of the cluster (1 for a single broker), and
  ``kafka_broker_info{id,address}`` (1 per live node, at its first advertised listener);
- ``kafka_topic_partitions{topic}``: the topic's partition count;
- per ``{topic,partition}``: ``kafka_topic_partition_current_offset`` (the high watermark, what
  Fetch and ListOffsets LATEST report), ``kafka_topic_partition_oldest_offset`` (the log start
  offset, which DeleteRecords and retention move), ``kafka_topic_partition_leader`` (the leader's
  node id), ``kafka_topic_partition_replicas`` and ``kafka_topic_partition_in_sync_replica``
  (1: kcoord keeps one copy of a partition, as its Metadata says),
  ``kafka_topic_partition_leader_is_preferred`` (1 when the partition has a leader; the only
  replica is the preferred one) and ``kafka_topic_partition_under_replicated_partition`` (0).
  A partition without a usable leader (its log offline, or in a cluster no live node leading
  it) has no leader, current or oldest offset series, and leader_is_preferred 0, as
  kafka_exporter shows a partition whose Metadata gives no leader.

Which node reports what, in a cluster (every node is scraped): a partition's series come from
the node that leads it, and a partition no live node leads from the controller (the lowest live
node id), so that summing a partition series over the nodes counts each partition once. The
cluster-wide facts, ``kafka_brokers``, ``kafka_broker_info`` and ``kafka_topic_partitions``,
are reported by every node alike, as every kafka_exporter pointed at the cluster would: take
their ``max``, not their sum, across nodes.

The response stays bounded: per-partition series go to at most ``metrics.max.partitions``
partitions, whole topics taken in order (the clients' topics by name, then the internal ones)
until the next one would pass the bound. That topic and every later one are summed into
``topic="__other__"``: ``kafka_topic_partitions`` (their partition count) and the current and
oldest offsets (``partition="__other__"``, summed over the partitions reported here), enough
for ``rate()`` to show their throughput.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from prometheus_client.core import GaugeMetricFamily

from ..net.offload import SLICE, pause
from .group_state import OTHER

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

    from ..cluster.view import ClusterView
    from ..data.topics import TopicStore

PartitionRow = tuple[str, int, int | None, int, int]
"""(topic, partition, leader node id or None if it has no usable leader, current offset,
oldest offset); the offsets mean nothing without a leader."""


@dataclass(slots=True)
class TopicsSnapshot:
    """What the topic series show, as read for one scrape."""

    brokers: list[tuple[int, str]]
    """(node id, ``host:port``) of each live node."""
    topics: list[tuple[str, int]]
    """(topic, partition count) of the topics with series of their own."""
    partitions: list[PartitionRow] = field(default_factory=list)
    """The partitions of those topics that this node reports."""
    other_partitions: int = 0
    """Partitions of the topics summed into ``__other__`` (0: none is)."""
    other_current: int = 0
    other_oldest: int = 0


async def read_topics(topics: TopicStore, view: ClusterView, max_partitions: int) -> TopicsSnapshot:
    """Read the topics and the partitions this node reports, pausing every SLICE partitions."""
    me = view.node_id
    brokers = []
    for node in view.live_nodes():
        host, port = (node.endpoints[0][1], node.endpoints[0][2]) if node.endpoints else ("", 0)
        brokers.append((node.node_id, f"{host}:{port}"))
    snap = TopicsSnapshot(brokers, [])
    controller = view.controller_id == me
    room = max_partitions
    work = 0
    names = sorted(topics.topics, key=lambda n: (topics.topics[n].internal, n))
    for name in names:
        topic = topics.topics.get(name)
        if topic is None:  # deleted during a pause
            continue
        logs = list(topic.partitions)
        kept = snap.other_partitions == 0 and len(logs) <= room
        if kept:
            room -= len(logs)
            snap.topics.append((name, len(logs)))
        else:
            snap.other_partitions += len(logs)
        for index, plog in enumerate(logs):
            leader = view.leader(name, index)
            if leader is None:
                if controller and kept:
                    snap.partitions.append((name, index, None, 0, 0))
                continue
            if leader.node_id != me:
                continue  # its leader reports it
            online = plog.offline is None
            if kept:
                row = (name, index, me, plog.flushed_offset, plog.log_start_offset)
                snap.partitions.append(row if online else (name, index, None, 0, 0))
            elif online:
                snap.other_current += plog.flushed_offset
                snap.other_oldest += plog.log_start_offset
        work += 1 + len(logs)
        if work >= SLICE:
            work = 0
            await pause()
    return snap


def topic_metrics(snap: TopicsSnapshot) -> Iterator[Metric]:
    """The families of :class:`TopicsSnapshot` (kafka_exporter's help texts)."""
    yield GaugeMetricFamily(
        "kafka_brokers", "Number of Brokers in the Kafka Cluster.", value=len(snap.brokers)
    )
    info = GaugeMetricFamily(
        "kafka_broker_info", "Information about the Kafka Broker.", labels=["id", "address"]
    )
    for node_id, address in snap.brokers:
        info.add_metric([str(node_id), address], 1)
    yield info
    count = GaugeMetricFamily(
        "kafka_topic_partitions", "Number of partitions for this Topic", labels=["topic"]
    )
    for name, n in snap.topics:
        count.add_metric([name], n)
    if snap.other_partitions:
        count.add_metric([OTHER], snap.other_partitions)
    yield count
    labels = ["topic", "partition"]
    current = GaugeMetricFamily(
        "kafka_topic_partition_current_offset", "Current Offset of a Broker at Topic/Partition", labels=labels
    )
    oldest = GaugeMetricFamily(
        "kafka_topic_partition_oldest_offset", "Oldest Offset of a Broker at Topic/Partition", labels=labels
    )
    leader = GaugeMetricFamily(
        "kafka_topic_partition_leader", "Leader Broker ID of this Topic/Partition", labels=labels
    )
    replicas = GaugeMetricFamily(
        "kafka_topic_partition_replicas", "Number of Replicas for this Topic/Partition", labels=labels
    )
    in_sync = GaugeMetricFamily(
        "kafka_topic_partition_in_sync_replica",
        "Number of In-Sync Replicas for this Topic/Partition",
        labels=labels,
    )
    preferred = GaugeMetricFamily(
        "kafka_topic_partition_leader_is_preferred",
        "1 if Topic/Partition is using the Preferred Broker",
        labels=labels,
    )
    under = GaugeMetricFamily(
        "kafka_topic_partition_under_replicated_partition",
        "1 if Topic/Partition is under Replicated",
        labels=labels,
    )
    for topic, partition, node, current_offset, oldest_offset in snap.partitions:
        values = [topic, str(partition)]
        if node is not None:
            leader.add_metric(values, node)
            current.add_metric(values, current_offset)
            oldest.add_metric(values, oldest_offset)
        replicas.add_metric(values, 1)
        in_sync.add_metric(values, 1)
        preferred.add_metric(values, 0 if node is None else 1)
        under.add_metric(values, 0)
    if snap.other_partitions:
        current.add_metric([OTHER, OTHER], snap.other_current)
        oldest.add_metric([OTHER, OTHER], snap.other_oldest)
    yield from (current, oldest, leader, replicas, in_sync, preferred, under)
