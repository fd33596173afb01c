"""``kcoord serve --metrics-port``: metric values after a known sequence, /healthz, /readyz, and
the start-up load progress.

The sequence: K standalone offset commits (one partition each) into an Empty group, N members
joining at once (one initial delayed rebalance), then lag L from known produced and committed
offsets, then more records.

On one broker shared by the module (:func:`shared`): kafka_exporter's topic series after known
produces and a DeleteRecords, lag in seconds, OffsetDelete counted, and every metric the Grafana
dashboard (deploy/grafana/) queries found in a real scrape.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient
from kafka import TopicPartition as KafkaTopicPartition
from kafka.admin import KafkaAdminClient
from prometheus_client.parser import text_string_to_metric_families

from tests.unit.test_dashboard import dashboard_metric_names

from .clients import create_topic, produce_confluent
from .groups import ConfluentMember, settle, wait_balanced
from .harness import BrokerProcess, free_port, wait_for
from .test_admin_cli import commit

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def scrape(broker: BrokerProcess) -> Samples:
    assert broker.metrics_port is not None
    status, text = get(broker.metrics_port, "/metrics")
    assert status == 200
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def total(samples: Samples, name: str, **labels: str) -> float:
    """The sum of ``name``'s samples whose labels include ``labels``."""
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= ls)


def test_metric_values_after_a_known_sequence(tmp_path: Path) -> None:
    # A 2 s initial delay gathers the N members into one rebalance (E3).
    settings = {"group.initial.rebalance.delay.ms": 2000, "group.min.session.timeout.ms": 1000}
    broker = BrokerProcess(tmp_path / "data", settings, metrics_port=free_port()).start()
    members: list[ConfluentMember] = []
    try:
        assert broker.metrics_port is not None
        assert get(broker.metrics_port, "/healthz") == (200, "ok\n")
        wait_for(lambda: get(broker.metrics_port, "/readyz")[0] == 200, 30, what="/readyz")  # type: ignore[arg-type]
        assert get(broker.metrics_port, "/nope")[0] == 404

        create_topic(broker.bootstrap, "m", 3)
        produce_confluent(broker.bootstrap, "m", [(p, b"k", b"v") for p in range(3) for _ in range(10)], "none")

        # K = 5 commits, one partition each; final offsets 3, 4, 6 -> lag 7 + 6 + 4 = 17.
        commits = [(0, 1), (0, 2), (1, 4), (2, 6), (0, 3)]
        for partition, offset in commits:
            commit(broker.bootstrap, "mg", {("m", partition): offset})
        s = scrape(broker)
        assert value(s, "kcoord_offset_commits_total") == len(commits)
        assert value(s, "kcoord_requests_total", api="OffsetCommit") == len(commits)
        assert value(s, "kcoord_request_latency_seconds_count", api="OffsetCommit") == len(commits)
        assert value(s, "kcoord_offsets") == 3
        assert value(s, "kcoord_groups", state="Empty") == 1
        assert total(s, "kcoord_group_rebalances_total") == 0
        assert value(s, "kcoord_log_append_seconds_count") >= len(commits)  # type: ignore[operator]
        assert value(s, "kcoord_log_flush_seconds_count") >= 1  # type: ignore[operator]

        # N = 3 members, one rebalance.
        members = [ConfluentMember(broker.bootstrap, "mg", "m", f"m{i}") for i in range(3)]
        wait_balanced(members, 3)
        settle(members)
        wait_for(
            lambda: value(scrape(broker), "kcoord_groups", state="Stable") == 1, 30, what="Stable"
        )
        s = scrape(broker)
        assert value(s, "kafka_consumergroup_members", consumergroup="mg") == 3
        assert total(s, "kcoord_group_rebalances_total") == 1
        assert value(
            s, "kcoord_group_rebalances_total", group="mg", type="classic", trigger="member_joined"
        ) == 1
        assert value(s, "kcoord_group_rebalance_duration_seconds_count") == 1
        assert value(s, "kcoord_groups", state="PreparingRebalance") == 0
        assert value(s, "kcoord_requests_total", api="JoinGroup") >= 3  # type: ignore[operator]
        assert value(s, "kcoord_requests_total", api="SyncGroup") >= 3  # type: ignore[operator]
        line = next(x for x in broker.log().splitlines() if "kcoord.rebalance rebalance group=mg " in x)
        assert " type=classic " in line and " generation=1 " in line and " members_after=3 " in line

        # Lag L = 17, per partition as kafka_exporter reports it.
        lags = {p: value(s, "kafka_consumergroup_lag", consumergroup="mg", topic="m", partition=str(p)) for p in range(3)}
        assert lags == {0: 7, 1: 6, 2: 4}
        current = {
            p: value(s, "kafka_consumergroup_current_offset", consumergroup="mg", topic="m", partition=str(p))
            for p in range(3)
        }
        assert current == {0: 3, 1: 4, 2: 6}
        assert value(s, "kafka_consumergroup_lag_sum", consumergroup="mg", topic="m") == 17
        assert value(s, "kafka_consumergroup_current_offset_sum", consumergroup="mg", topic="m") == 13

        # More records: more lag.
        produce_confluent(broker.bootstrap, "m", [(2, b"k", b"v")] * 2, "none")
        s = scrape(broker)
        assert value(s, "kafka_consumergroup_lag", consumergroup="mg", topic="m", partition="2") == 6
        assert value(s, "kafka_consumergroup_lag_sum", consumergroup="mg", topic="m") == 19

        for m in members:
            m.stop()
        members = []
        wait_for(
            lambda: value(scrape(broker), "kafka_consumergroup_members", consumergroup="mg") == 0,
            30,
            what="members gone",
        )
        s = scrape(broker)
        assert value(s, "kcoord_groups", state="Empty") == 1
        assert total(s, "kcoord_group_rebalances_total", group="mg") >= 2
        assert total(s, "kcoord_group_rebalances_total", group="mg", trigger="member_left") >= 1
    finally:
        for m in members:
            m.stop()
        broker.stop()


def test_restart_reports_load_progress_time_and_readiness(tmp_path: Path) -> None:
    settings = {"group.initial.rebalance.delay.ms": 0, "offsets.topic.num.partitions": 4}
    broker = BrokerProcess(tmp_path / "data", settings, metrics_port=free_port()).start()
    try:
        create_topic(broker.bootstrap, "t", 2)
        commit(broker.bootstrap, "g1", {("t", 0): 5, ("t", 1): 6})
        commit(broker.bootstrap, "g2", {("t", 0): 1})
        broker.stop()
        broker.restart()
        assert broker.metrics_port is not None
        wait_for(lambda: get(broker.metrics_port, "/readyz")[0] == 200, 30, what="/readyz")  # type: ignore[arg-type]
        assert get(broker.metrics_port, "/readyz") == (200, "ready\n")
        s = scrape(broker)
        assert value(s, "kcoord_offsets_partitions_loaded") == 4
        assert value(s, "kcoord_offsets_partitions") == 4
        assert value(s, "kcoord_offsets_partition_load_seconds_count") == 4
        assert value(s, "kcoord_offsets_load_seconds") is not None
        assert value(s, "kafka_consumergroup_current_offset", consumergroup="g1", topic="t", partition="1") == 6
        log = broker.log()
        for n in range(1, 5):
            assert f"loaded ({n}/4)" in log
        assert "loaded __consumer_offsets: 4 partitions, 2 groups, 3 offsets, 3 records in" in log
    finally:
        broker.stop()


def test_healthz_and_readyz_follow_serving_and_loading() -> None:
    from kcoord.broker.metrics.prometheus import MetricsServer

    shards = [SimpleNamespace(loaded=True), SimpleNamespace(loaded=False)]
    fake = SimpleNamespace(serving=False, groups=SimpleNamespace(shards=shards))
    server = MetricsServer(
        SimpleNamespace(),  # type: ignore[arg-type]
        "127.0.0.1",
        0,
        serving=lambda: fake.serving,
        runtime=fake.groups,  # type: ignore[arg-type]
    )
    assert server.answer("GET", "/healthz")[0] == 503
    fake.serving = True
    assert server.answer("GET", "/healthz")[0] == 200
    status, _, body = server.answer("GET", "/readyz")
    assert (status, body) == (503, b"loading 1/2 offsets partitions\n")
    shards[1].loaded = True
    assert server.answer("GET", "/readyz?verbose") == (200, "text/plain; charset=utf-8", b"ready\n")
    assert server.answer("POST", "/metrics")[0] == 405


# One broker for the tests below ---------------------------------------------------------------
@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    data = tmp_path_factory.mktemp("metrics") / "data"
    broker = BrokerProcess(data, {"group.initial.rebalance.delay.ms": 0}, metrics_port=free_port())
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


def test_topic_series_as_kafka_exporter_shows_them(shared: BrokerProcess) -> None:
    create_topic(shared.bootstrap, "ts", 3)
    produce_confluent(shared.bootstrap, "ts", [(p, b"k", b"v") for p in range(3) for _ in range(p + 4)], "none")
    s = scrape(shared)
    assert value(s, "kafka_brokers") == 1
    assert value(s, "kafka_broker_info", id="0", address=shared.bootstrap) == 1
    assert value(s, "kafka_topic_partitions", topic="ts") == 3
    for p in range(3):
        part = {"topic": "ts", "partition": str(p)}
        assert value(s, "kafka_topic_partition_current_offset", **part) == p + 4
        assert value(s, "kafka_topic_partition_oldest_offset", **part) == 0
        assert value(s, "kafka_topic_partition_leader", **part) == 0  # node.id
        assert value(s, "kafka_topic_partition_replicas", **part) == 1
        assert value(s, "kafka_topic_partition_in_sync_replica", **part) == 1
        assert value(s, "kafka_topic_partition_leader_is_preferred", **part) == 1
        assert value(s, "kafka_topic_partition_under_replicated_partition", **part) == 0

    admin = AdminClient({"bootstrap.servers": shared.bootstrap})
    futures = admin.delete_records([TopicPartition("ts", 1, 3)], request_timeout=10)
    next(iter(futures.values())).result(timeout=30)
    s = scrape(shared)
    assert value(s, "kafka_topic_partition_oldest_offset", topic="ts", partition="1") == 3
    assert value(s, "kafka_topic_partition_current_offset", topic="ts", partition="1") == 5


def test_lag_in_seconds_and_offset_deletions(shared: BrokerProcess) -> None:
    create_topic(shared.bootstrap, "ls", 2)
    produced = time.time()
    produce_confluent(shared.bootstrap, "ls", [(0, b"k", b"v")] * 5, "none")
    commit(shared.bootstrap, "lagging", {("ls", 0): 2, ("ls", 1): 0})
    part = {"consumergroup": "lagging", "topic": "ls"}

    def seconds() -> float | None:
        return value(scrape(shared), "kafka_consumergroup_lag_seconds", **part, partition="0")

    # the record at offset 2 was appended at `produced` or a few ms later
    wait_for(lambda: (seconds() or 0) > 0, 10, what="lag in seconds > 0")
    s = scrape(shared)
    lag_seconds = value(s, "kafka_consumergroup_lag_seconds", **part, partition="0")
    assert lag_seconds is not None and 0 < lag_seconds <= time.time() - produced + 1
    assert value(s, "kafka_consumergroup_lag", **part, partition="0") == 3
    assert value(s, "kafka_consumergroup_lag_seconds", **part, partition="1") == 0  # nothing behind

    assert value(s, "kcoord_offset_deletions_total") == 0
    assert value(s, "kcoord_offset_expirations_total") == 0
    # OffsetDelete (confluent-kafka's AdminClient has none; kafka-python's has)
    admin = KafkaAdminClient(bootstrap_servers=shared.bootstrap)
    try:
        admin.delete_group_offsets("lagging", [KafkaTopicPartition("ls", 1)])
    finally:
        admin.close()
    s = scrape(shared)
    assert value(s, "kcoord_offset_deletions_total") == 1
    assert value(s, "kafka_consumergroup_lag", **part, partition="1") is None


def test_every_metric_the_dashboard_queries_is_exported(shared: BrokerProcess) -> None:
    """Names from the code itself: the families of a real scrape (those without samples yet
    included), with the sample names Prometheus stores for each type."""
    assert shared.metrics_port is not None
    status, text = get(shared.metrics_port, "/metrics")
    assert status == 200
    exported: set[str] = set()
    for family in text_string_to_metric_families(text):
        exported.add(family.name)
        suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_count", "_sum"]}
        exported.update(family.name + x for x in suffixes.get(family.type, []))
    missing = dashboard_metric_names() - exported
    assert not missing, f"the dashboard queries metrics kcoord does not export: {sorted(missing)}"
