"""broker/data/topic_configs.py: topic configs' checks, defaults and sources, and their file."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from kcoord.broker.data.topic_configs import (
    CONFIGS_FILE,
    SOURCE_DEFAULT,
    SOURCE_STATIC_BROKER,
    SOURCE_TOPIC,
    ConfigProblem,
    TopicConfigs,
    builtin_defaults,
    check_overrides,
)
from kcoord.storage.file_engine import FileEngine


def test_checks_follow_kafkas_types_and_ranges() -> None:
    assert check_overrides([("cleanup.policy", " Compact, delete,compact")]) == {
        "cleanup.policy": "compact,delete"
    }
    assert check_overrides([("retention.ms", "-1"), ("segment.bytes", "1024")]) == {
        "retention.ms": "-1",
        "segment.bytes": "1024",
    }
    for name, value in [
        ("retention.ms", "-2"),
        ("segment.ms", "0"),
        ("segment.bytes", str(2**31)),
        ("delete.retention.ms", "x"),
        ("cleanup.policy", ""),
        ("cleanup.policy", "delete,forever"),
        ("retention.ms", None),
        ("max.message.bytes", "-1"),
        ("max.message.bytes", str(2**31)),
    ]:
        with pytest.raises(ConfigProblem):
            check_overrides([(name, value)])


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
