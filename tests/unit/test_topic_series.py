"""kafka_exporter's topic series (broker/metrics/topic_series.py): which node reports which
partition in a cluster (each partition once over the nodes), what a partition without a usable
leader shows, the metrics.max.partitions bound with whole topics and __other__; and the bound
on kcoord_group_rebalances_total's group label (broker/metrics/prometheus.py)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from kcoord.broker.cluster.view import ClusterView, NodeInfo
from kcoord.broker.metrics.group_state import OTHER
from kcoord.broker.metrics.prometheus import BrokerMetrics
from kcoord.broker.metrics.topic_series import read_topics, topic_metrics
from kcoord.coordinator.output import RebalanceCompleted
from kcoord.storage.engine import LeaderFence


def _log(end: int, start: int = 0, offline: object = None) -> Any:
    return SimpleNamespace(flushed_offset=end, log_start_offset=start, offline=offline)


def _topics(**partitions: list[Any]) -> Any:
    """A TopicStore: each keyword a topic (``__x`` ones internal) with these logs."""
    return SimpleNamespace(
        topics={
            name: SimpleNamespace(internal=name.startswith("__"), partitions=logs)
            for name, logs in partitions.items()
        }
    )


def _node(n: int) -> NodeInfo:
    return NodeInfo(n, (("PLAINTEXT", f"h{n}", 9092),), None)


def _samples(snap: Any) -> dict[tuple[str, tuple[str, ...]], float]:
    out = {}
    for family in topic_metrics(snap):
        for s in family.samples:
            out[(s.name, tuple(s.labels.values()))] = s.value
    return out


async def test_a_single_broker_reports_every_partition_as_kafka_exporter_would() -> None:
    view = ClusterView(7, (("PLAINTEXT", "localhost", 9092),), None, clustered=False)
    topics = _topics(t=[_log(10, 2), _log(5, 0, offline=OSError("disk"))])
    s = _samples(await read_topics(topics, view, 100))
    assert s[("kafka_brokers", ())] == 1
    assert s[("kafka_broker_info", ("7", "localhost:9092"))] == 1
    assert s[("kafka_topic_partitions", ("t",))] == 2
    assert s[("kafka_topic_partition_current_offset", ("t", "0"))] == 10
    assert s[("kafka_topic_partition_oldest_offset", ("t", "0"))] == 2
    assert s[("kafka_topic_partition_leader", ("t", "0"))] == 7
    assert s[("kafka_topic_partition_leader_is_preferred", ("t", "0"))] == 1
    # offline: no leader and no offsets, as kafka_exporter shows a partition Metadata gives
    # without a leader; still one replica, in sync, not under-replicated
    assert ("kafka_topic_partition_leader", ("t", "1")) not in s
    assert ("kafka_topic_partition_current_offset", ("t", "1")) not in s
    assert s[("kafka_topic_partition_leader_is_preferred", ("t", "1"))] == 0
    assert s[("kafka_topic_partition_replicas", ("t", "1"))] == 1
    assert s[("kafka_topic_partition_in_sync_replica", ("t", "1"))] == 1
    assert s[("kafka_topic_partition_under_replicated_partition", ("t", "1"))] == 0


async def test_in_a_cluster_each_partition_is_reported_once_over_the_nodes() -> None:
    topics = _topics(t=[_log(10), _log(20), _log(30)])
    leaders = [(("t", 0), LeaderFence(1, 3)), (("t", 1), LeaderFence(2, 1))]  # t-2: no leader
    seen: dict[tuple[str, str], list[int]] = {}
    for me in (1, 2, 3):
        view = ClusterView(me, _node(me).endpoints, None, clustered=True)
        view.update([_node(1), _node(2), _node(3)], leaders)
        s = _samples(await read_topics(topics, view, 100))
        assert s[("kafka_brokers", ())] == 3  # cluster-wide facts: the same on every node
        assert s[("kafka_topic_partitions", ("t",))] == 3
        assert {k[1] for k in s if k[0] == "kafka_broker_info"} == {
            ("1", "h1:9092"), ("2", "h2:9092"), ("3", "h3:9092")
        }
        for (name, labels), _ in s.items():
            if name == "kafka_topic_partition_replicas":
                seen.setdefault(labels, []).append(me)
        if me == 2:
            assert s[("kafka_topic_partition_leader", ("t", "1"))] == 2
            assert s[("kafka_topic_partition_current_offset", ("t", "1"))] == 20
    # led partitions by their leader, the leaderless one by the controller (lowest live id)
    assert seen == {("t", "0"): [1], ("t", "1"): [2], ("t", "2"): [1]}


async def test_whole_topics_up_to_the_bound_then_other() -> None:
    topics = _topics(
        b=[_log(1), _log(2)], a=[_log(10, 4)], c=[_log(100, 50)], __offsets=[_log(7)] * 3
    )
    view = ClusterView(0, (), None, clustered=False)
    snap = await read_topics(topics, view, 4)
    # clients' topics by name first, internal ones last; c (1 more) fits, __offsets (3) not
    assert snap.topics == [("a", 1), ("b", 2), ("c", 1)]
    s = _samples(snap)
    assert s[("kafka_topic_partitions", (OTHER,))] == 3
    assert s[("kafka_topic_partition_current_offset", (OTHER, OTHER))] == 21
    assert s[("kafka_topic_partition_oldest_offset", (OTHER, OTHER))] == 0
    assert sum(1 for k in s if k[0] == "kafka_topic_partition_leader") == 4
    snap = await read_topics(topics, view, 2)  # b (2) does not fit after a: b, c, __offsets
    assert snap.topics == [("a", 1)]
    assert _samples(snap)[("kafka_topic_partition_current_offset", (OTHER, OTHER))] == 124
    assert _samples(await read_topics(topics, view, 100)).get(
        ("kafka_topic_partitions", (OTHER,))
    ) is None


def test_rebalances_count_by_group_for_the_first_max_groups_groups() -> None:
    metrics = BrokerMetrics()
    metrics.observe(SimpleNamespace(config={"metrics.max.groups": 2}))  # type: ignore[arg-type]

    def done(group: str, trigger: str = "member_joined") -> RebalanceCompleted:
        return RebalanceCompleted(group, 1, 1, "", 10, trigger=trigger)

    for group in ("g1", "g2", "g3", "g1", "g4"):
        metrics.rebalance(done(group))
    metrics.rebalance(done("g2", "member_left"))
    (family,) = metrics.rebalances.collect()
    counts = {(s.labels["group"], s.labels["trigger"]): s.value for s in family.samples}
    assert counts == {
        ("g1", "member_joined"): 2,
        ("g2", "member_joined"): 1,
        ("g2", "member_left"): 1,
        (OTHER, "member_joined"): 2,
    }
