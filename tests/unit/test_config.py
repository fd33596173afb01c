"""The configuration object: layering, types and errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.config import Config, ConfigError


def test_defaults_are_kafkas() -> None:
    cfg = Config.load(environ={})
    assert cfg["group.initial.rebalance.delay.ms"] == 3000
    assert cfg["group.min.session.timeout.ms"] == 6000
    assert cfg["offsets.topic.num.partitions"] == 50
    assert cfg["auto.create.topics.enable"] is True
    assert cfg.source("num.partitions") == "default"
    assert cfg.advertised == ("127.0.0.1", 9092)


def test_layers_file_then_env_then_set(tmp_path: Path) -> None:
    f = tmp_path / "k.toml"
    f.write_text('num.partitions = 4\n"log.segment.bytes" = 2048\n[group]\nmax.size = 7\n')
    cfg = Config.load(
        config_file=f,
        environ={"KCOORD_NUM_PARTITIONS": "5", "KCOORD_GROUP_MAX_SIZE": "8", "OTHER": "x"},
        overrides=["group.max.size=9", "auto.create.topics.enable=false"],
    )
    assert cfg["log.segment.bytes"] == 2048 and cfg.source("log.segment.bytes").startswith("file")
    assert cfg["num.partitions"] == 5 and cfg.source("num.partitions") == "env KCOORD_NUM_PARTITIONS"
    assert cfg["group.max.size"] == 9 and cfg.source("group.max.size") == "--set"
    assert cfg["auto.create.topics.enable"] is False


def test_advertised_listeners() -> None:
    cfg = Config.load(environ={"KCOORD_ADVERTISED_LISTENERS": "PLAINTEXT://kafka.example:19092"})
    assert cfg.advertised == ("kafka.example", 19092)


@pytest.mark.parametrize(
    "override, needle",
    [
        (["no.such.setting=1"], "no.such.setting"),
        (["num.partitions=many"], "num.partitions"),
        (["num.partitions=0"], "minimum"),
        (["auto.create.topics.enable=yes"], "true or false"),
        (["num.partitions"], "NAME=VALUE"),
        (["advertised.listeners=nonsense"], "advertised.listeners"),
    ],
)
def test_bad_settings_name_the_setting(override: list[str], needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        Config.load(environ={}, overrides=override)
