"""The configuration object: layering, types and errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from kcoord.broker.config import Config, ConfigError


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


# --- allowed values, suggestions, the environment, `kcoord config` -------------------------------


@pytest.mark.parametrize(
    "override, needles",
    [
        (["num.partitions=many"], ["'num.partitions'", "allowed values: an integer >= 1"]),
        (["num.partitions=0"], ["'num.partitions'", "minimum 1", "an integer >= 1"]),
        (["log.cleaner.enable=yes"], ["'log.cleaner.enable'", "allowed values: true or false"]),
        (["group.max.sise=3"], ["'group.max.sise'", "did you mean 'group.max.size'", "Known settings:"]),
        (["advertised.listeners=nonsense"], ["'advertised.listeners'", "host:port"]),
        (["sasl.enabled.mechanisms=PLAIN,GSSAPI"], ["'sasl.enabled.mechanisms'", "OAUTHBEARER"]),
    ],
)
def test_bad_settings_name_the_allowed_values(override: list[str], needles: list[str]) -> None:
    with pytest.raises(ConfigError) as info:
        Config.load(environ={}, overrides=override)
    for needle in needles:
        assert needle in str(info.value)


def test_bad_value_from_the_environment_names_the_variable() -> None:
    with pytest.raises(ConfigError, match="group.min.session.timeout.ms.*an integer"):
        Config.load(environ={"KCOORD_GROUP_MIN_SESSION_TIMEOUT_MS": "soon"})


def test_unknown_setting_in_a_file_is_refused(tmp_path: Path) -> None:
    f = tmp_path / "k.toml"
    f.write_text("[group]\nmax.sizes = 3\n")
    with pytest.raises(ConfigError, match=r"unknown setting 'group.max.sizes' \(from file"):
        Config.load(config_file=f, environ={})


def test_unknown_kcoord_environment_variables_are_warned_about_not_fatal() -> None:
    cfg = Config.load(environ={"KCOORD_GROUP_MAX_SIZ": "3", "KCOORD_NUM_PARTITIONS": "2"})
    assert cfg["num.partitions"] == 2
    assert len(cfg.warnings) == 1 and "KCOORD_GROUP_MAX_SIZ" in cfg.warnings[0]


# Settings whose arbitrary sample value above is not valid on its own.
VALID_SAMPLES = {
    "advertised.listeners": "h:1",
    "compression.type": "zstd",
    "log.cleaner.min.cleanable.ratio": "0.5",
    "log.message.timestamp.type": "LogAppendTime",
    "group.consumer.assignors": "range",
    "group.consumer.migration.policy": "upgrade",
    "group.consumer.heartbeat.interval.ms": "6000",
    "group.consumer.max.heartbeat.interval.ms": "20000",
    "group.consumer.session.timeout.ms": "50000",
    "group.consumer.max.session.timeout.ms": "70000",
    "group.share.heartbeat.interval.ms": "6000",
    "group.share.max.heartbeat.interval.ms": "20000",
    "group.share.session.timeout.ms": "50000",
    "group.share.max.session.timeout.ms": "70000",
    "group.share.record.lock.duration.ms": "20000",
    "group.share.min.record.lock.duration.ms": "1000",
    "group.share.max.record.lock.duration.ms": "50000",
    "group.share.max.size": "7",
    "group.share.delivery.count.limit": "7",
    "log.cleanup.policy": "compact,delete",
    "storage.url": "postgresql://kcoord@db.example:5432/kcoord",
    "sasl.enabled.mechanisms": "SCRAM-SHA-512,OAUTHBEARER",
}


def test_every_setting_has_an_environment_name_that_round_trips() -> None:
    from kcoord.broker.config import SETTINGS

    for name, setting in SETTINGS.items():
        env = "KCOORD_" + name.upper().replace(".", "_")
        raw = "true" if setting.type is bool else "x" if setting.type is str else str(
            max(7, setting.minimum or 0)
        )
        raw = VALID_SAMPLES.get(name, raw)
        cfg = Config.load(environ={env: raw})
        assert cfg.source(name) == f"env {env}"


def test_a_list_setting_accepts_only_its_choices() -> None:
    assert Config.load(overrides=["log.cleanup.policy=compact,delete"])["log.cleanup.policy"] == (
        "compact,delete"
    )
    with pytest.raises(ConfigError, match="a comma-separated list of compact, delete"):
        Config.load(overrides=["log.cleanup.policy=forever"])


def test_a_setting_with_a_maximum_refuses_more() -> None:
    assert Config.load(overrides=["compression.lz4.level=17"])["compression.lz4.level"] == 17
    with pytest.raises(ConfigError, match=r"18 is above the maximum 17; allowed values: an integer >= 1 and <= 17"):
        Config.load(overrides=["compression.lz4.level=18"])
    assert Config.load(overrides=["log.cleaner.min.cleanable.ratio=0.25"])["log.cleaner.min.cleanable.ratio"] == 0.25
    with pytest.raises(ConfigError, match="above the maximum 1"):
        Config.load(overrides=["log.cleaner.min.cleanable.ratio=1.5"])


def test_a_one_of_setting_accepts_exactly_one_choice() -> None:
    assert Config.load(overrides=["compression.type= gzip"])["compression.type"] == "gzip"
    for raw in ("gzip,lz4", "brotli", ""):
        with pytest.raises(ConfigError, match="one of uncompressed, zstd, lz4, snappy, gzip, producer"):
            Config.load(overrides=[f"compression.type={raw}"])


def test_describe_lists_value_source_and_allowed_values() -> None:
    cfg = Config.load(environ={"KCOORD_NUM_PARTITIONS": "3"}, overrides=["group.max.size=4"])
    rows = {r["name"]: r for r in cfg.describe()}
    assert rows["num.partitions"]["value"] == 3
    assert rows["num.partitions"]["source"] == "env KCOORD_NUM_PARTITIONS"
    assert rows["group.max.size"]["source"] == "--set"
    assert rows["node.id"]["source"] == "default" and rows["node.id"]["allowed"] == "an integer >= 0"
    assert set(rows) == {r[0] for r in cfg.items()}


def test_kcoord_config_prints_effective_values_and_sources(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from kcoord.cli import main

    f = tmp_path / "k.toml"
    f.write_text("num.partitions = 6\n")
    monkeypatch.setenv("KCOORD_GROUP_MAX_SIZE", "11")
    assert main(["config", "--config", str(f), "--set", "log.cleaner.enable=false"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["NAME", "VALUE", "SOURCE"]
    table = {line.split()[0]: line.split(None, 2)[1:] for line in lines[1:]}
    assert table["num.partitions"] == ["6", f"file {f}"]
    assert table["group.max.size"] == ["11", "env KCOORD_GROUP_MAX_SIZE"]
    assert table["log.cleaner.enable"] == ["false", "--set"]
    assert table["node.id"] == ["0", "default"]

    assert main(["config", "--json"]) == 0
    import json

    rows = json.loads(capsys.readouterr().out)
    assert {r["name"]: r["value"] for r in rows}["group.max.size"] == 11


@pytest.mark.parametrize("command", ["serve", "config"])
def test_bad_configuration_stops_start_up_with_a_message(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from kcoord.cli import main

    args = [command, "--set", "group.initial.rebalance.delay.ms=-5"]
    if command == "serve":
        args += ["--data-dir", str(tmp_path / "d"), "--port", "0"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "group.initial.rebalance.delay.ms" in err and "an integer >= 0" in err
    assert not (tmp_path / "d").exists()  # refused before touching anything


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("group.consumer.heartbeat.interval.ms", "100"),
        ("group.consumer.session.timeout.ms", "100000"),
        ("group.consumer.assignors", "uniform,sticky"),
        ("group.consumer.assignors", ""),
        ("group.consumer.migration.policy", "sideways"),
    ],
)
def test_consumer_group_settings_are_checked_at_start_up(setting: str, value: str) -> None:
    with pytest.raises(ConfigError, match=setting.replace(".", r"\.")):
        Config.load(overrides=[f"{setting}={value}"])


def test_consumer_group_bounds_can_be_lowered_for_development() -> None:
    cfg = Config.load(
        overrides=[
            "group.consumer.min.heartbeat.interval.ms=100",
            "group.consumer.heartbeat.interval.ms=500",
            "group.consumer.min.session.timeout.ms=1000",
            "group.consumer.session.timeout.ms=6000",
            "group.consumer.assignors=range,uniform",
        ]
    )
    assert cfg["group.consumer.heartbeat.interval.ms"] == 500
    assert cfg.consumer_assignors == ("range", "uniform")


def test_secrets_are_sensitive_and_never_described() -> None:
    from kcoord.broker.config import SETTINGS, is_secret_name

    assert SETTINGS["ssl.key.password"].sensitive
    assert not SETTINGS["ssl.keystore.location"].sensitive
    assert not SETTINGS["num.partitions"].sensitive
    for name in (
        "ssl.keystore.password",
        "ssl.truststore.password",
        "sasl.jaas.config",
        "listener.name.sasl_ssl.plain.sasl.jaas.config",
        "sasl.oauthbearer.client.credentials.client.secret",
        "password.encoder.secret",
        "ssl.keystore.key",
        "listener.name.ssl.ssl.keystore.key",
        "ssl.truststore.certificates",
    ):
        assert is_secret_name(name), name
    for name in ("ssl.keystore.location", "ssl.keystore.type", "sasl.enabled.mechanisms"):
        assert not is_secret_name(name), name
    # every setting whose name mentions a password or a secret is hidden
    for name, setting in SETTINGS.items():
        if "password" in name or "secret" in name:
            assert setting.sensitive, name
    cfg = Config.load(overrides=["ssl.key.password=hunter2"])
    assert cfg["ssl.key.password"] == "hunter2"  # the broker itself still reads it
    rows = {r["name"]: r for r in cfg.describe()}
    assert rows["ssl.key.password"]["value"] is None and rows["ssl.key.password"]["sensitive"]
    assert "hunter2" not in repr(cfg.describe())


def test_storage_url_chooses_the_engine_and_is_never_shown() -> None:
    assert Config.load(environ={}).storage_url is None
    assert Config.load(environ={"KCOORD_STORAGE_URL": "file:"}).storage_url is None
    url = "postgresql://kcoord:hunter2@db.example:5432/kcoord"
    cfg = Config.load(environ={"KCOORD_STORAGE_URL": url})
    assert cfg.storage_url == url
    assert [row["value"] for row in cfg.describe() if row["name"] == "storage.url"] == [None]
    with pytest.raises(ConfigError, match="storage.url"):
        Config.load(overrides=["storage.url=mysql://db/kcoord"])


def test_kcoord_config_into_a_pipe_closed_early_ends_quietly() -> None:
    """``kcoord config | head``: the reader goes away before the table is written."""
    import subprocess
    import sys

    proc = subprocess.Popen(
        [sys.executable, "-m", "kcoord", "config"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # before the interpreter has even imported kcoord
    err = proc.stderr.read().decode()
    assert proc.wait(60) == 1
    assert "Traceback" not in err and "BrokenPipe" not in err, err


def test_the_dev_preset_is_a_layer_over_the_defaults_under_everything_given(
    tmp_path: Path,
) -> None:
    from kcoord.broker.config.presets import DEV_PRESET

    cfg = Config.load(dev=True, environ={})
    for name, value in DEV_PRESET.items():
        assert (cfg[name], cfg.source(name)) == (value, "--dev"), name
    assert cfg["group.initial.rebalance.delay.ms"] == 0 and cfg["num.partitions"] == 3
    assert cfg["group.consumer.heartbeat.interval.ms"] == 500
    assert cfg["group.consumer.session.timeout.ms"] == 6000
    # A file, the environment and --set each override it.
    toml = tmp_path / "k.toml"
    toml.write_text('"num.partitions" = 5\n')
    cfg = Config.load(
        dev=True,
        config_file=toml,
        environ={"KCOORD_GROUP_MIN_SESSION_TIMEOUT_MS": "2000"},
        overrides=["group.initial.rebalance.delay.ms=100"],
    )
    assert (cfg["num.partitions"], cfg.source("num.partitions")) == (5, f"file {toml}")
    assert cfg["group.min.session.timeout.ms"] == 2000
    assert (cfg["group.initial.rebalance.delay.ms"], cfg.source("group.initial.rebalance.delay.ms")) == (
        100,
        "--set",
    )
    assert Config.load(environ={})["group.initial.rebalance.delay.ms"] == 3000  # not without it


def test_kcoord_config_dev_shows_the_preset_as_the_source(
    capsys: pytest.CaptureFixture[str],
) -> None:
    import json

    from kcoord.cli import main

    assert main(["config", "--dev", "--json", "--set", "num.partitions=2"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert (rows["group.consumer.heartbeat.interval.ms"]["value"], rows["group.consumer.heartbeat.interval.ms"]["source"]) == (500, "--dev")
    assert (rows["num.partitions"]["value"], rows["num.partitions"]["source"]) == (2, "--set")
