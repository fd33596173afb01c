"""Retention of topics with topic configs (issue 19), against a real broker: configs set at
CreateTopics and changed with IncrementalAlterConfigs (confluent-kafka's AdminClient and
``kcoord topics``), kept across restarts; ``retention.ms`` drops old segments; a compacted user
topic keeps the newest value per key across a kill -9; ``__consumer_offsets`` rolls by time so
that a small offsets log is compacted."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
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
from kcoord.protocol.batch import CorruptBatch, iter_headers
from kcoord.protocol.errors import ErrorCode
from kcoord.protocol.javahash import partition_for

from .harness import BrokerProcess, wait_for
from .rawclient import RawClient
from .test_admin_cli import commit, kcoord

FAST = {
    "group.initial.rebalance.delay.ms": 0,
    "log.retention.check.interval.ms": 100,
    "log.cleaner.backoff.ms": 100,
}


def _admin(b: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": b})


def _create(admin: AdminClient, topic: str, config: dict[str, str]) -> None:
    admin.create_topics([NewTopic(topic, 1, 1, config=config)])[topic].result(timeout=30)


def _configs(admin: AdminClient, topic: str) -> dict[str, tuple[str, str]]:
    resource = ConfigResource(ResourceType.TOPIC, topic)
    entries = admin.describe_configs([resource])[resource].result(timeout=30)
    return {e.name: (e.value, ConfigSource(e.source).name) for e in entries.values()}


def _produce_each(b: str, topic: str, items: list[tuple[bytes, bytes]]) -> None:
    """One batch per message (so small segments fill up), acks=all."""
    p = Producer({"bootstrap.servers": b, "acks": "all", "linger.ms": 0, "batch.num.messages": 1})
    for key, value in items:
        p.produce(topic, key=key, value=value, partition=0)
        assert p.flush(30) == 0


def _read_all(b: str, topic: str) -> list[tuple[int, bytes, bytes]]:
    c = Consumer({"bootstrap.servers": b, "group.id": "reader", "enable.auto.commit": False})
    try:
        low, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        c.assign([TopicPartition(topic, 0, low)])
        out: list[tuple[int, bytes, bytes]] = []

        def done() -> bool:
            for m in c.consume(num_messages=500, timeout=0.2):
                assert not m.error(), m.error()
                out.append((m.offset(), m.key(), m.value()))
            return high <= low or bool(out and out[-1][0] >= high - 1)

        wait_for(done, 30, interval=0, what=f"{topic} read to {high}")
        return out
    finally:
        c.close()


def _watermarks(b: str, topic: str) -> tuple[int, int]:
    c = Consumer({"bootstrap.servers": b, "group.id": "watermarks"})
    try:
        low, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        return int(low), int(high)
    finally:
        c.close()


def _segments(path: Path) -> list[Path]:
    return sorted(path.glob("*.log"))


def test_topic_configs_at_create_describe_alter_and_restart(broker_factory: Any) -> None:
    broker: BrokerProcess = broker_factory(FAST)
    b = broker.bootstrap
    admin = _admin(b)
    _create(admin, "r", {"retention.ms": "3600000", "segment.bytes": "2048"})
    configs = _configs(admin, "r")
    assert configs["retention.ms"] == ("3600000", "DYNAMIC_TOPIC_CONFIG")
    assert configs["segment.bytes"] == ("2048", "DYNAMIC_TOPIC_CONFIG")
    assert configs["cleanup.policy"] == ("delete", "DEFAULT_CONFIG")
    assert configs["segment.ms"] == ("604800000", "DEFAULT_CONFIG")
    assert set(configs) == set(DEFS)  # every topic config Kafka has

    # IncrementalAlterConfigs: set, delete (back to the default), append to a list
    resource = ConfigResource(
        ResourceType.TOPIC,
        "r",
        incremental_configs=[
            ConfigEntry("retention.bytes", "100000", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE),
            ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND),
        ],
    )
    admin.incremental_alter_configs([resource])[resource].result(timeout=30)
    configs = _configs(admin, "r")
    assert configs["retention.bytes"] == ("100000", "DYNAMIC_TOPIC_CONFIG")
    assert configs["retention.ms"] == ("604800000", "DEFAULT_CONFIG")
    assert configs["cleanup.policy"] == ("delete,compact", "DYNAMIC_TOPIC_CONFIG")

    # refusals: an unknown config, a bad value, at creation and when altering
    bad = ConfigResource(
        ResourceType.TOPIC,
        "r",
        incremental_configs=[
            ConfigEntry("retention.ms", "soon", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    with pytest.raises(KafkaException, match="INVALID_CONFIG|not a number"):
        admin.incremental_alter_configs([bad])[bad].result(timeout=30)
    with pytest.raises(KafkaException, match="INVALID_CONFIG|Unknown topic config"):
        _create(admin, "x", {"retention.hours": "1"})
    with pytest.raises(KafkaException, match="INVALID_CONFIG|allowed"):
        _create(admin, "y", {"cleanup.policy": "forever"})

    # kcoord topics alter-config / describe
    r = kcoord(broker, "topics", "alter-config", "r", "--set", "segment.ms=60000",
               "--subtract", "cleanup.policy=compact", "--delete", "retention.bytes")  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Completed updating config for topic r." in r.stdout
    r = kcoord(broker, "topics", "describe", "r", "--json")
    assert r.returncode == 0, r.stderr
    described = {c["name"]: (c["value"], c["source"]) for c in json.loads(r.stdout)["configs"]}
    assert described["segment.ms"] == ("60000", "topic")
    assert described["cleanup.policy"] == ("delete", "topic")
    assert described["retention.bytes"] == ("-1", "default")
    r = kcoord(broker, "topics", "alter-config", "r", "--set", "nonsense=1")
    assert r.returncode == 1 and "Unknown topic config name: nonsense" in r.stderr

    broker.kill()  # acknowledged config changes survive kill -9
    broker.restart()
    configs = _configs(_admin(b), "r")
    assert configs["segment.ms"] == ("60000", "DYNAMIC_TOPIC_CONFIG")
    assert configs["segment.bytes"] == ("2048", "DYNAMIC_TOPIC_CONFIG")
    assert configs["cleanup.policy"] == ("delete", "DYNAMIC_TOPIC_CONFIG")


def test_retention_ms_drops_old_segments(broker_factory: Any, tmp_path: Path) -> None:
    broker: BrokerProcess = broker_factory(FAST)
    b = broker.bootstrap
    admin = _admin(b)
    _create(admin, "old", {"retention.ms": "1000", "segment.bytes": "1024"})
    _create(admin, "kept", {"segment.bytes": "1024"})  # the default: 7 days
    items = [(f"k{i}".encode(), b"x" * 200) for i in range(20)]
    _produce_each(b, "old", items)
    _produce_each(b, "kept", items)
    old_dir = broker.data_dir / "old-0"
    # every segment is older than a second soon: all go, the log starts at its end
    wait_for(lambda: _watermarks(b, "old") == (20, 20), 30, what="old segments dropped")
    # (the log start moves first, the files go once the checkpoint holds it)
    wait_for(
        lambda: [p.name for p in _segments(old_dir)] == [f"{20:020d}.log"],
        30,
        what="old segment files deleted",
    )
    assert _watermarks(b, "kept") == (0, 20)
    assert len(_segments(broker.data_dir / "kept-0")) > 3
    # new records are kept until they are a second old too, and the start survives a restart
    _produce_each(b, "old", items[:2])
    broker.kill()
    broker.restart()
    assert _watermarks(b, "old")[1] == 22
    wait_for(lambda: _watermarks(b, "old") == (22, 22), 30, what="the new records dropped too")


def test_compacted_user_topic_keeps_the_newest_value_per_key_across_a_restart(
    broker_factory: Any,
) -> None:
    broker: BrokerProcess = broker_factory(FAST)
    b = broker.bootstrap
    _create(_admin(b), "c", {"cleanup.policy": "compact", "segment.bytes": "1024"})
    # Kafka refuses records without a key in a compacted topic (compaction could not keep them)
    p = Producer({"bootstrap.servers": b, "acks": "all"})
    errors: list[Any] = []
    p.produce("c", value=b"no key", partition=0, on_delivery=lambda err, _m: errors.append(err))
    assert p.flush(30) == 0
    assert errors and errors[0] is not None and "INVALID_RECORD" in errors[0].name()
    rounds, keys = 12, 4
    _produce_each(
        b, "c", [(f"k{k}".encode(), f"v{r}".encode()) for r in range(rounds) for k in range(keys)]
    )
    total = rounds * keys

    def compacted() -> list[tuple[int, bytes, bytes]] | None:
        records = _read_all(b, "c")
        return records if len(records) < total else None

    records = wait_for(compacted, 30, what="compaction of c")
    assert isinstance(records, list)

    def newest(rs: list[tuple[int, bytes, bytes]]) -> dict[bytes, bytes]:
        out: dict[bytes, bytes] = {}
        for _offset, key, value in rs:
            out[key] = value
        return out

    expected = {f"k{k}".encode(): f"v{rounds - 1}".encode() for k in range(keys)}
    assert newest(records) == expected
    offsets = [o for o, _, _ in records]
    assert offsets == sorted(offsets) and offsets[-1] == total - 1
    broker.kill()
    broker.restart()
    again = _read_all(b, "c")
    assert newest(again) == expected and len(again) <= len(records)
    assert _watermarks(b, "c")[1] == total


def _records_in(path: Path) -> int:
    total = 0
    for seg in _segments(path):
        with contextlib.suppress(CorruptBatch):  # a batch being written: count what is whole
            for _, h in iter_headers(seg.read_bytes()):
                total += h.records_count
    return total


def test_consumer_offsets_rolls_by_time_and_a_small_log_is_compacted(broker_factory: Any) -> None:
    broker: BrokerProcess = broker_factory({**FAST, "log.roll.ms": 300})
    b = broker.bootstrap
    _create(_admin(b), "t", {})
    for i in range(30):
        commit(b, "g", {("t", 0): i})
    part = broker.data_dir / f"__consumer_offsets-{partition_for('g', 50)}"
    # 30 records of one key, far from offsets.topic.segment.bytes: only rolls by time seal
    # segments, and only sealed segments are compacted (the newest record per key stays)
    wait_for(lambda: len(_segments(part)) >= 2, 30, what="__consumer_offsets rolled by time")
    wait_for(lambda: _records_in(part) < 10, 30, what="the rolled segments compacted")
    c = Consumer({"bootstrap.servers": b, "group.id": "g"})
    try:
        [tp] = c.committed([TopicPartition("t", 0)], timeout=10)
        assert tp.offset == 29
    finally:
        c.close()


def test_config_apis_on_the_wire(broker_factory: Any) -> None:
    """Every version of DescribeConfigs, IncrementalAlterConfigs and AlterConfigs: the
    broker's settings read-only, refusals per resource, AlterConfigs replacing overrides."""
    broker: BrokerProcess = broker_factory(FAST)
    _create(_admin(broker.bootstrap), "w", {"retention.ms": "5000"})
    commit(broker.bootstrap, "g", {("w", 0): 0})  # __consumer_offsets exists now
    for version in (1, 2, 3, 4):
        with RawClient(broker.port) as c:
            r = c.request(
                ApiKey.DESCRIBE_CONFIGS,
                version,
                resources=[
                    dict(resource_type=2, resource_name="w", configuration_keys=["retention.ms"]),
                    dict(resource_type=4, resource_name="0", configuration_keys=None),
                    dict(resource_type=2, resource_name="w", configuration_keys=None),
                    dict(resource_type=2, resource_name="nope", configuration_keys=None),
                    dict(resource_type=4, resource_name="7", configuration_keys=None),
                    dict(resource_type=8, resource_name="0", configuration_keys=None),
                ],
                include_synonyms=True,
                include_documentation=True,
            )
        codes = [x.error_code for x in r.results]
        assert codes == [
            ErrorCode.none,
            ErrorCode.none,
            ErrorCode.invalid_request,  # the same resource again
            ErrorCode.unknown_topic_or_partition,
            ErrorCode.invalid_request,  # not this node
            ErrorCode.invalid_request,  # a resource type kcoord has no configs for
        ], version
        [retention] = r.results[0].configs
        assert (retention.name, retention.value, retention.read_only) == ("retention.ms", "5000", False)
        assert [(s.name, s.source) for s in retention.synonyms] == [
            ("retention.ms", 1),
            ("log.retention.ms", 5),
        ]
        broker_configs = {x.name: x for x in r.results[1].configs}
        assert broker_configs["num.partitions"].value == "1" and broker_configs["num.partitions"].read_only
    with RawClient(broker.port) as c:
        for version in (0, 1):
            r = c.request(
                ApiKey.INCREMENTAL_ALTER_CONFIGS,
                version,
                resources=[
                    dict(resource_type=4, resource_name="0", configs=[
                        dict(name="num.partitions", config_operation=0, value="3")]),
                    dict(resource_type=2, resource_name="w", configs=[
                        dict(name="retention.ms", config_operation=2, value="1")]),
                    dict(resource_type=2, resource_name="__consumer_offsets", configs=[
                        dict(name="cleanup.policy", config_operation=0, value="delete")]),
                ],
                validate_only=False,
            )  # fmt: skip
            assert [x.error_code for x in r.responses] == [
                ErrorCode.invalid_request,  # the broker's settings are static
                ErrorCode.invalid_config,  # APPEND to a number
                ErrorCode.invalid_config,  # the coordinator needs it compacted
            ], version
        for version in (0, 1, 2):
            r = c.request(
                ApiKey.ALTER_CONFIGS,
                version,
                resources=[dict(resource_type=2, resource_name="w",
                                configs=[dict(name="segment.ms", value=str(1000 + version))])],
                validate_only=False,
            )  # fmt: skip
            assert [x.error_code for x in r.responses] == [ErrorCode.none]
    configs = _configs(_admin(broker.bootstrap), "w")
    # AlterConfigs replaces the overrides: retention.ms is back to its default
    assert configs["segment.ms"] == ("1002", "DYNAMIC_TOPIC_CONFIG")
    assert configs["retention.ms"] == ("604800000", "DEFAULT_CONFIG")


def test_added_partitions_take_the_topics_segment_bytes(broker_factory: Any) -> None:
    from confluent_kafka.admin import NewPartitions

    broker: BrokerProcess = broker_factory(FAST)
    b = broker.bootstrap
    admin = _admin(b)
    _create(admin, "s", {"segment.bytes": "1024"})
    admin.create_partitions([NewPartitions("s", 2)])["s"].result(timeout=30)
    p = Producer({"bootstrap.servers": b, "acks": "all", "linger.ms": 0})
    for i in range(20):
        p.produce("s", key=f"k{i}".encode(), value=b"x" * 200, partition=1)
        assert p.flush(30) == 0
    assert len(_segments(broker.data_dir / "s-1")) > 3


def test_max_message_bytes_bounds_a_topics_batches(broker_factory: Any) -> None:
    """A topic's ``max.message.bytes`` (issue 34, finding 16: refused as unknown before): a
    batch over it is MESSAGE_TOO_LARGE and nothing of it is appended, one within it is
    appended; DescribeConfigs shows it, and another topic keeps the broker's
    message.max.bytes."""
    b: BrokerProcess = broker_factory(FAST)
    admin = _admin(b.bootstrap)
    _create(admin, "small", {"max.message.bytes": "2000"})
    _create(admin, "big", {})
    assert _configs(admin, "small")["max.message.bytes"] == ("2000", "DYNAMIC_TOPIC_CONFIG")
    assert _configs(admin, "big")["max.message.bytes"] == ("1048588", "DEFAULT_CONFIG")
    failures: list[str] = []
    p = Producer({"bootstrap.servers": b.bootstrap, "acks": "all", "linger.ms": 0})

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            failures.append(err.name())

    for topic in ("small", "big"):
        for value in (b"x" * 5000, b"y" * 100):  # a batch each
            p.produce(topic, value=value, partition=0, on_delivery=on_delivery)
            assert p.flush(30) == 0
    assert failures == ["MSG_SIZE_TOO_LARGE"], failures
    assert [v for _, _, v in _read_all(b.bootstrap, "small")] == [b"y" * 100]
    assert [v for _, _, v in _read_all(b.bootstrap, "big")] == [b"x" * 5000, b"y" * 100]
