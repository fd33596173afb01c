"""broker/data/topic_configs.py: topic configs' checks, defaults and sources, and their file."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from kcoord.broker.data.topic_configs import (
    CONFIGS_FILE,
    DEFS,
    SOURCE_DEFAULT,
    SOURCE_STATIC_BROKER,
    SOURCE_TOPIC,
    ConfigProblem,
    TopicConfigs,
    builtin_defaults,
    check_overrides,
)
from kcoord.protocol.append_rules import AppendRules
from kcoord.protocol.compression import Compression
from kcoord.storage.file_engine import FileEngine


def test_checks_follow_kafkas_types_and_ranges() -> None:
    assert check_overrides([("cleanup.policy", " compact , delete")]) == {
        "cleanup.policy": "compact,delete"
    }
    assert check_overrides([("cleanup.policy", "")]) == {"cleanup.policy": ""}  # Kafka 4: kept forever
    assert check_overrides([("retention.ms", "-1"), ("segment.bytes", "1024")]) == {
        "retention.ms": "-1",
        "segment.bytes": "1024",
    }
    assert check_overrides(
        [
            ("retention.bytes", "-5"),  # no range in Kafka: any negative means no limit
            ("preallocate", " TRUE"),
            ("min.cleanable.dirty.ratio", "0.25"),
            ("compression.type", "zstd"),
            ("compression.gzip.level", "-1"),
            ("message.timestamp.type", "LogAppendTime"),
            ("leader.replication.throttled.replicas", "0:1, 1:2"),
            ("follower.replication.throttled.replicas", "*"),
            ("remote.storage.enable", "false"),
        ]
    ) == {
        "retention.bytes": "-5",
        "preallocate": "true",
        "min.cleanable.dirty.ratio": "0.25",
        "compression.type": "zstd",
        "compression.gzip.level": "-1",
        "message.timestamp.type": "LogAppendTime",
        "leader.replication.throttled.replicas": "0:1,1:2",
        "follower.replication.throttled.replicas": "*",
        "remote.storage.enable": "false",
    }
    for name, value, message in [
        ("retention.ms", "-2", "Invalid value -2 for configuration retention.ms: Value must be at least -1"),
        ("segment.ms", "0", "Invalid value 0 for configuration segment.ms: Value must be at least 1"),
        ("segment.bytes", str(2**31), f"Invalid value {2**31} for configuration segment.bytes: Not a number of type INT"),
        ("delete.retention.ms", "x", "Invalid value x for configuration delete.retention.ms: Not a number of type LONG"),
        ("delete.retention.ms", "1_000", "Not a number of type LONG"),
        ("cleanup.policy", "Compact", "Invalid value Compact for configuration cleanup.policy: String must be one of: compact, delete"),
        ("cleanup.policy", "delete,forever", "String must be one of: compact, delete"),
        ("cleanup.policy", "delete,delete", "Configuration 'cleanup.policy' values must not be duplicated."),
        ("retention.ms", None, "Null value not supported for topic configs: retention.ms"),
        ("max.message.bytes", "-1", "Value must be at least 0"),
        ("min.insync.replicas", "0", "Invalid value 0 for configuration min.insync.replicas: Value must be at least 1"),
        ("compression.type", "brotli", "String must be one of: uncompressed, zstd, lz4, snappy, gzip, producer"),
        ("compression.type", "GZIP", "String must be one of"),
        ("compression.gzip.level", "0", "Value must be between 1 and 9 or equal to -1"),
        ("compression.lz4.level", "18", "Value must be no more than 17"),
        ("compression.zstd.level", "-131073", "Value must be at least -131072"),
        ("message.timestamp.type", "createtime", "String must be one of: CreateTime, LogAppendTime"),
        ("message.timestamp.after.max.ms", "-1", "Value must be at least 0"),
        ("unclean.leader.election.enable", "yes", "Expected value to be either true or false"),
        ("min.cleanable.dirty.ratio", "1.5", "Value must be no more than 1"),
        ("min.cleanable.dirty.ratio", "half", "Not a number of type DOUBLE"),
        ("leader.replication.throttled.replicas", "0:1,x", "must be the literal '*' or a list of replicas"),
        ("remote.storage.enable", "true", "Tiered Storage functionality is disabled in the broker"),
        ("message.format.version", "3.0", "Unknown topic config name: message.format.version"),
    ]:
        with pytest.raises(ConfigProblem) as e:
            check_overrides([(name, value)])
        assert message in str(e.value), (name, value, str(e.value))
    with pytest.raises(ConfigProblem, match=r"min.compaction.lag.ms \(10\) > max.compaction.lag.ms \(5\)"):
        check_overrides([("min.compaction.lag.ms", "10"), ("max.compaction.lag.ms", "5")])


def test_every_kafka_topic_config_is_known_with_its_default() -> None:
    """The names Kafka 4.x's LogConfig defines (internal ones aside), and some defaults."""
    assert set(DEFS) == {
        "cleanup.policy", "compression.gzip.level", "compression.lz4.level", "compression.type",
        "compression.zstd.level", "delete.retention.ms", "file.delete.delay.ms",
        "flush.messages", "flush.ms", "follower.replication.throttled.replicas",
        "index.interval.bytes", "leader.replication.throttled.replicas",
        "local.retention.bytes", "local.retention.ms", "max.compaction.lag.ms",
        "max.message.bytes", "message.timestamp.after.max.ms",
        "message.timestamp.before.max.ms", "message.timestamp.type",
        "min.cleanable.dirty.ratio", "min.compaction.lag.ms", "min.insync.replicas",
        "preallocate", "remote.log.copy.disable", "remote.log.delete.on.disable",
        "remote.storage.enable", "retention.bytes", "retention.ms", "segment.bytes",
        "segment.index.bytes", "segment.jitter.ms", "segment.ms",
        "unclean.leader.election.enable",
    }
    defaults = {n: d.default for n, d in DEFS.items()}
    assert defaults["message.timestamp.after.max.ms"] == "3600000"
    assert defaults["message.timestamp.before.max.ms"] == str(2**63 - 1)
    assert defaults["min.cleanable.dirty.ratio"] == "0.5"
    assert defaults["unclean.leader.election.enable"] == "false"
    assert defaults["local.retention.ms"] == "-2"
    # every default passes its own check
    for d in DEFS.values():
        if d.name != "cleanup.policy" or d.default:
            assert d.check(d.default) == d.default, d.name


def test_settings_and_sources_layer_topic_over_broker_over_default(tmp_path: Path) -> None:
    broker: dict[str, tuple[Any, bool]] = {"log.retention.ms": (1000, False)}

    def lookup(name: str) -> tuple[Any, bool]:
        return broker.get(name) or builtin_defaults(name)

    configs = TopicConfigs(FileEngine(tmp_path, fsync=False), lookup)
    tid = uuid.uuid4()
    configs.set(tid, "t", {"segment.ms": "60000"})
    s = configs.settings(tid, "t")
    assert (s.retention_ms, s.segment_ms, s.retention_bytes) == (1000, 60000, -1)
    assert s.delete and not s.compact
    described = {v.name: v for v in configs.describe(tid, "t")}
    assert (described["segment.ms"].value, described["segment.ms"].source) == ("60000", SOURCE_TOPIC)
    assert [x[2] for x in described["segment.ms"].synonyms] == [SOURCE_TOPIC, SOURCE_DEFAULT]
    assert described["retention.ms"].source == SOURCE_STATIC_BROKER
    assert described["cleanup.policy"].source == SOURCE_DEFAULT

    # the file is read back; entries of topics gone are pruned, internal topics' kept
    configs.set(uuid.uuid4(), "__consumer_offsets", {"segment.ms": "5"})
    again = TopicConfigs(FileEngine(tmp_path, fsync=False), lookup)
    again.read()
    assert again.overrides(tid, "t") == {"segment.ms": "60000"}
    again.prune([], keep_names=["__consumer_offsets"])
    assert again.overrides(tid, "t") == {}
    again.set_internal("__consumer_offsets", {"cleanup.policy": "compact"})
    [(internal_id, _)] = [
        (k, v) for k, v in again._entries.items() if v["name"] == "__consumer_offsets"
    ]
    assert again.settings(uuid.UUID(internal_id), "__consumer_offsets").compact


def test_an_unreadable_file_leaves_the_defaults(tmp_path: Path, caplog: Any) -> None:
    (tmp_path / CONFIGS_FILE).write_text("{not json")
    configs = TopicConfigs(FileEngine(tmp_path), builtin_defaults)
    configs.read()
    assert configs.overrides(uuid.uuid4(), "t") == {}
    assert "could not be read" in caplog.text


def test_the_produce_rules_follow_the_topics_configs(tmp_path: Path) -> None:
    broker: dict[str, tuple[Any, bool]] = {"compression.zstd.level": (7, False)}

    def lookup(name: str) -> tuple[Any, bool]:
        return broker.get(name) or builtin_defaults(name)

    configs = TopicConfigs(FileEngine(tmp_path, fsync=False), lookup)
    tid = uuid.uuid4()
    assert configs.settings(tid, "t").rules == AppendRules(after_max_ms=3_600_000, max_bytes=1048588)
    configs.set(tid, "t", check_overrides([
        ("compression.type", "zstd"), ("message.timestamp.type", "LogAppendTime"),
        ("cleanup.policy", "compact"), ("max.message.bytes", "5000"),
    ]))  # fmt: skip
    assert configs.settings(tid, "t").rules == AppendRules(
        keys_required=True, log_append_time=True, after_max_ms=3_600_000,
        codec=Compression.ZSTD, level=7, max_bytes=5000,
    )  # fmt: skip
    configs.set(tid, "t", {"compression.type": "gzip", "cleanup.policy": ""})
    s = configs.settings(tid, "t")
    assert (s.rules.codec, s.rules.level, s.delete, s.compact) == (Compression.GZIP, None, False, False)


def test_a_change_is_made_on_the_stored_overrides(tmp_path: Path) -> None:
    """Two stores over one document (as two nodes): each one's change of a key of one topic is
    made on what the other stored, so both keys stay; a deletion removes only its topic."""
    engine = FileEngine(tmp_path, fsync=False)
    mine, theirs = TopicConfigs(engine, builtin_defaults), TopicConfigs(engine, builtin_defaults)
    tid, other = uuid.uuid4(), uuid.uuid4()
    mine.set(tid, "t", {"retention.ms": "1000"})
    theirs.set(other, "u", {"segment.ms": "5000"})  # theirs never read mine's change

    def add(key: str, value: str) -> Any:
        return lambda current: {**current, key: value}

    assert theirs.alter(tid, "t", add("segment.ms", "60000")) == {
        "retention.ms": "1000", "segment.ms": "60000"}
    assert mine.alter(tid, "t", add("max.message.bytes", "2048")) == {
        "retention.ms": "1000", "segment.ms": "60000", "max.message.bytes": "2048"}
    assert mine.overrides(other, "u") == {"segment.ms": "5000"}  # holds what it wrote
    with pytest.raises(ValueError):  # what a change raises: nothing written
        mine.alter(tid, "t", lambda current: int("x"))  # type: ignore[arg-type,return-value]
    theirs.forget(other)
    again = TopicConfigs(engine, builtin_defaults)
    again.read()
    assert again.overrides(tid, "t") == mine.overrides(tid, "t")
    assert again.overrides(other, "u") == {}
