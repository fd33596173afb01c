"""Topic configs as Kafka has them (issue 31), with real clients against one broker: topics
created with Kafka's configs by confluent-kafka's and kafka-python's admin clients and described
with their sources; refusals in Kafka's words; and the configs kcoord honours on the Produce
path: LogAppendTime stamping, the CreateTime window, compression.type re-encoding stored
batches, min.insync.replicas with one replica (as Kafka, capped at the replicas); and kcat
(Debian's, installed by the test where missing) producing to and reading such a topic."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import (
    TIMESTAMP_LOG_APPEND_TIME,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
    ResourceType,
)

from kcoord.broker.data.topic_config_defs import DEFS
from kcoord.protocol.apis import ApiKey
from kcoord.protocol.batch import iter_headers
from kcoord.protocol.compression import Compression
from tests.debian import program

from .harness import BrokerProcess, stored_batches
from .rawclient import RawClient

HOUR = 3_600_000


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    data: Path = tmp_path_factory.mktemp("topic-configs") / "data"
    b = BrokerProcess(data, {"compression.zstd.level": 5})
    b.start()
    yield b
    b.stop()


def _admin(broker: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def _create(broker: BrokerProcess, topic: str, config: dict[str, str]) -> None:
    admin = _admin(broker)  # kept while its future is waited on
    admin.create_topics([NewTopic(topic, 1, 1, config=config)])[topic].result(timeout=30)


def _configs(broker: BrokerProcess, topic: str) -> dict[str, tuple[str, str]]:
    resource = ConfigResource(ResourceType.TOPIC, topic)
    admin = _admin(broker)
    entries = admin.describe_configs([resource])[resource].result(timeout=30)
    return {e.name: (e.value, ConfigSource(e.source).name) for e in entries.values()}


def _produce(
    broker: BrokerProcess, topic: str, timestamps: list[int], **conf: Any
) -> list[Any]:
    """One record per timestamp (0: the producer's clock), in one batch; the delivery reports."""
    reports: list[Any] = []
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 50, **conf})
    for i, ts in enumerate(timestamps):
        p.produce(topic, key=b"k%d" % i, value=b"value %d " % i * 20, partition=0,
                  timestamp=ts, on_delivery=lambda err, msg: reports.append((err, msg)))
    assert p.flush(30) == 0
    return reports


def _consume(broker: BrokerProcess, topic: str, count: int) -> list[Any]:
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused",
                  "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        got: list[Any] = []
        deadline = time.monotonic() + 20
        while len(got) < count and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m)
        assert len(got) == count, f"{len(got)} of {count} records read from {topic}"
        return got
    finally:
        c.close()


def test_confluent_admin_creates_and_alters_topics_with_kafkas_configs(broker: BrokerProcess) -> None:
    given = {
        "compression.type": "gzip",
        "min.insync.replicas": "2",
        "message.timestamp.type": "LogAppendTime",
        "max.message.bytes": "200000",
        "retention.ms": "3600000",
        "cleanup.policy": "compact,delete",
        "unclean.leader.election.enable": "true",  # accepted and stored, as Kafka does
    }
    _create(broker, "configured", given)
    configs = _configs(broker, "configured")
    assert set(configs) == set(DEFS)
    for name, value in given.items():
        assert configs[name] == (value, "DYNAMIC_TOPIC_CONFIG"), name
    assert configs["compression.zstd.level"] == ("5", "STATIC_BROKER_CONFIG")  # the broker's
    assert configs["message.timestamp.after.max.ms"] == ("3600000", "DEFAULT_CONFIG")
    assert configs["min.cleanable.dirty.ratio"] == ("0.5", "DEFAULT_CONFIG")

    # refusals in Kafka's words (INVALID_CONFIG)
    for config, words in [
        ({"compression.type": "brotli"}, "Invalid value brotli for configuration compression.type"),
        ({"min.insync.replicas": "0"}, "Value must be at least 1"),
        ({"message.format.version": "3.0"}, "Unknown topic config name: message.format.version"),
    ]:
        with pytest.raises(KafkaException) as e:
            _create(broker, "refused", config)
        err = e.value.args[0]
        assert err.code() == KafkaError.INVALID_CONFIG and words in err.str(), err.str()

    # IncrementalAlterConfigs: set, delete back to the default; append only to lists
    resource = ConfigResource(ResourceType.TOPIC, "configured", incremental_configs=[
        ConfigEntry("compression.type", "producer", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("min.insync.replicas", None, incremental_operation=AlterConfigOpType.DELETE),
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SUBTRACT),
    ])  # fmt: skip
    admin = _admin(broker)
    admin.incremental_alter_configs([resource])[resource].result(timeout=30)
    configs = _configs(broker, "configured")
    assert configs["compression.type"] == ("producer", "DYNAMIC_TOPIC_CONFIG")
    assert configs["min.insync.replicas"] == ("1", "DEFAULT_CONFIG")
    assert configs["cleanup.policy"] == ("delete", "DYNAMIC_TOPIC_CONFIG")
    bad = ConfigResource(ResourceType.TOPIC, "configured", incremental_configs=[
        ConfigEntry("compression.type", "lz4", incremental_operation=AlterConfigOpType.APPEND)])
    with pytest.raises(KafkaException, match="append is not allowed for config key: compression.type"):
        admin.incremental_alter_configs([bad])[bad].result(timeout=30)


def test_kafka_python_admin_creates_a_topic_with_configs(broker: BrokerProcess) -> None:
    from kafka.admin import ConfigResource as KpResource
    from kafka.admin import ConfigResourceType, KafkaAdminClient
    from kafka.admin import NewTopic as KpTopic

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10000)
    try:
        configs = {"compression.type": "lz4", "message.timestamp.type": "LogAppendTime",
                   "retention.bytes": "1000000"}
        created = admin.create_topics([KpTopic("from-kafka-python", 1, 1, topic_configs=configs)])
        described = admin.describe_configs(  # only the configs not at their defaults
            [KpResource(ConfigResourceType.TOPIC, "from-kafka-python")]
        )
    finally:
        admin.close()
    [topic] = created["topics"]
    assert topic["error_code"] == 0 and topic["configs"]["compression.type"]["value"] == "lz4"
    modified = described["topic"]["from-kafka-python"]
    assert {n: (e["value"], e["config_source"]) for n, e in modified.items()} == {
        n: (v, "DYNAMIC_TOPIC_CONFIG") for n, v in configs.items()
    }
    assert modified["retention.bytes"]["config_type"] == "LONG"
    assert _configs(broker, "from-kafka-python")["compression.type"] == ("lz4", "DYNAMIC_TOPIC_CONFIG")


def test_log_append_time_topics_carry_the_brokers_timestamp(broker: BrokerProcess) -> None:
    _create(broker, "stamped", {"message.timestamp.type": "LogAppendTime"})
    before = int(time.time() * 1000)
    reports = _produce(broker, "stamped", [1_600_000_000_000, 1_600_000_000_001])
    after = int(time.time() * 1000)
    assert [err for err, _ in reports] == [None, None]
    kind, stamp = reports[0][1].timestamp()  # the Produce answer's log_append_time
    assert kind == TIMESTAMP_LOG_APPEND_TIME and before <= stamp <= after
    for m in _consume(broker, "stamped", 2):
        assert m.timestamp() == (TIMESTAMP_LOG_APPEND_TIME, stamp)


def test_create_time_records_outside_the_window_are_refused(broker: BrokerProcess) -> None:
    _create(broker, "windowed", {"message.timestamp.before.max.ms": str(HOUR)})
    now = int(time.time() * 1000)
    [(err, _)] = _produce(broker, "windowed", [now - 2 * HOUR])
    assert err is not None and err.code() == KafkaError.INVALID_TIMESTAMP
    [(err, _)] = _produce(broker, "windowed", [now + 2 * HOUR])  # Kafka 4's default: 1 hour
    assert err is not None and err.code() == KafkaError.INVALID_TIMESTAMP
    [(err, msg)] = _produce(broker, "windowed", [now - HOUR // 2])
    assert err is None and msg.offset() == 0


def test_compression_type_recompresses_stored_batches(broker: BrokerProcess) -> None:
    _create(broker, "gzipped", {"compression.type": "gzip"})
    _create(broker, "plain", {"compression.type": "uncompressed"})
    assert all(e is None for e, _ in _produce(broker, "gzipped", [0] * 5, **{"compression.type": "none"}))
    assert all(e is None for e, _ in _produce(broker, "plain", [0] * 5, **{"compression.type": "lz4"}))
    for topic, codec in (("gzipped", Compression.GZIP), ("plain", Compression.NONE)):
        headers = [h for _, h in iter_headers(stored_batches(broker.data_dir, topic, 0))]
        assert headers and {h.compression for h in headers} == {codec}, topic
        assert sum(h.records_count for h in headers) == 5
        got = _consume(broker, topic, 5)
        assert [m.value() for m in got] == [b"value %d " % i * 20 for i in range(5)]


def test_min_insync_replicas_above_the_replicas_does_not_refuse_acks_all(broker: BrokerProcess) -> None:
    """Kafka (3.7+, KAFKA-15583) caps min.insync.replicas at the partition's replicas: with
    replication factor 1, min.insync.replicas=2 still lets acks=all writes through."""
    _create(broker, "isr", {"min.insync.replicas": "2"})
    for acks in ("all", "1"):
        [(err, msg)] = _produce(broker, "isr", [0], acks=acks)
        assert err is None, (acks, err)
    assert msg.offset() == 1


def test_broker_describes_the_topic_defaults_under_kafkas_names(broker: BrokerProcess) -> None:
    resource = ConfigResource(ResourceType.BROKER, "0")
    admin = _admin(broker)
    entries = admin.describe_configs([resource])[resource].result(timeout=30)
    got = {n: (e.value, ConfigSource(e.source).name) for n, e in entries.items()}
    assert got["compression.type"] == ("producer", "DEFAULT_CONFIG")
    assert got["compression.zstd.level"] == ("5", "STATIC_BROKER_CONFIG")
    assert got["min.insync.replicas"] == ("1", "DEFAULT_CONFIG")
    assert got["log.message.timestamp.type"] == ("CreateTime", "DEFAULT_CONFIG")
    assert got["log.message.timestamp.after.max.ms"] == ("3600000", "DEFAULT_CONFIG")
    assert got["log.message.timestamp.before.max.ms"] == (str(2**63 - 1), "DEFAULT_CONFIG")
    assert got["message.max.bytes"] == ("1048588", "DEFAULT_CONFIG")
    assert got["unclean.leader.election.enable"] == ("false", "DEFAULT_CONFIG")  # accepted only
    assert got["log.cleaner.min.cleanable.ratio"] == ("0.5", "DEFAULT_CONFIG")
    with RawClient(broker.port) as c:
        r = c.request(ApiKey.DESCRIBE_CONFIGS, 4, resources=[dict(
            resource_type=4, resource_name="0", configuration_keys=None)],
            include_synonyms=False, include_documentation=False)  # fmt: skip
    types = {x.name: x.config_type for x in r.results[0].configs}
    # Kafka's types: BOOLEAN 1, STRING 2, INT 3, LONG 5, DOUBLE 6, LIST 7
    assert types["message.max.bytes"] == 3 and types["log.segment.bytes"] == 3
    assert types["log.retention.bytes"] == 5 and types["log.cleanup.policy"] == 7
    assert types["compression.type"] == 2 and types["min.insync.replicas"] == 3
    assert types["log.cleaner.min.cleanable.ratio"] == 6  # DOUBLE
    assert types["unclean.leader.election.enable"] == 1  # BOOLEAN


# kcat (librdkafka's command-line client, Debian's kcat) --------------------------------------------
@pytest.fixture(scope="module")
def kcat() -> str:
    return program("kcat", "kcat")


def test_kcat_produces_to_and_consumes_from_a_topic_with_configs(
    broker: BrokerProcess, kcat: str
) -> None:
    topic = "kcat-appended"
    _create(broker, topic, {"message.timestamp.type": "LogAppendTime", "compression.type": "gzip"})
    listed = json.loads(_kcat(kcat, broker, "-L", "-J", "-t", topic))
    assert [(t["topic"], len(t["partitions"])) for t in listed["topics"]] == [(topic, 1)]
    assert [b["id"] for b in listed["brokers"]] == [0]

    before_ms = int(time.time() * 1000)
    _kcat(kcat, broker, "-P", "-t", topic, "-K", ":", "-H", "origin=kcat", "-z", "lz4",
          stdin="k1:v1\nk2:v2\n")  # fmt: skip
    lines = _kcat(kcat, broker, "-C", "-t", topic, "-o", "beginning", "-e", "-J").splitlines()
    records = [json.loads(line) for line in lines]
    assert [(r["offset"], r["key"], r["payload"]) for r in records] == [(0, "k1", "v1"), (1, "k2", "v2")]
    assert all(r["headers"] == ["origin", "kcat"] for r in records)
    # Stamped by the broker on append (LogAppendTime), whatever time kcat's producer gave.
    assert all(r["tstype"] == "logappend" and r["ts"] >= before_ms for r in records)
    # Stored as the topic's codec, not the producer's lz4.
    headers = [h for _, h in iter_headers(stored_batches(broker.data_dir, topic, 0))]
    assert headers and {h.compression for h in headers} == {Compression.GZIP}


def _kcat(kcat: str, broker: BrokerProcess, *args: str, stdin: str | None = None) -> str:
    done = subprocess.run(
        [kcat, "-b", broker.bootstrap, "-m", "30", *args],
        input=stdin, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout
