"""The layers of the configuration (module docstring of ``kcoord.broker.config``): defaults,
TOML file, environment and flags, merged into the one :class:`Config`."""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kcoord.compiled import PURE_ENV

from .presets import DEV_PRESET
from .settings import SETTINGS, ConfigError, parse_value, unknown_setting


class Config:
    """Effective configuration; ``config["group.max.size"]`` reads a value."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 9092,
        data_dir: Path | str = "data",
        metrics_port: int | None = None,
    ):
        self.host = host
        self.port = port
        self.data_dir = Path(data_dir)
        self.metrics_port = metrics_port
        """Port of the /metrics, /healthz and /readyz HTTP server and the console (None: not
        served; 0: any free port)."""
        self.metrics_host = host
        """Address that server listens on (``kcoord serve``'s default console: 127.0.0.1)."""
        self.metrics_required = True
        """False: a metrics port that cannot be bound is logged and the broker serves Kafka
        without it (``kcoord serve``'s default console); True: start-up stops."""
        self.warnings: list[str] = []
        self._values: dict[str, Any] = {n: s.default for n, s in SETTINGS.items()}
        self._sources: dict[str, str] = {n: "default" for n in SETTINGS}

    def __getitem__(self, name: str) -> Any:
        return self._values[name]

    def source(self, name: str) -> str:
        return self._sources[name]

    def set(self, name: str, raw: Any, source: str) -> None:
        setting = SETTINGS.get(name)
        if setting is None:
            raise unknown_setting(name, source)
        self._values[name] = parse_value(setting, raw)
        self._sources[name] = source

    def items(self) -> list[tuple[str, Any, str]]:
        """(name, value, source) of every setting, secrets in clear: for the broker's own use,
        never for showing (that is :meth:`describe`)."""
        return [(n, self._values[n], self._sources[n]) for n in sorted(SETTINGS)]

    def describe(self) -> list[dict[str, Any]]:
        """Every setting with its effective value, where it came from, and what it accepts; the
        value (and default) of a sensitive one is None. Everything that shows settings to
        someone (DescribeConfigs, ``kcoord config``) reads them here, so none shows a secret."""
        rows = []
        for n in sorted(SETTINGS):
            hidden = SETTINGS[n].sensitive
            rows.append(
                {
                    "name": n,
                    "value": None if hidden else self._values[n],
                    "source": self._sources[n],
                    "default": None if hidden else SETTINGS[n].default,
                    "allowed": SETTINGS[n].allowed(),
                    "doc": SETTINGS[n].doc,
                    "sensitive": hidden,
                }
            )
        return rows

    @property
    def advertised(self) -> tuple[str, int]:
        """The host and port to put in Metadata and FindCoordinator answers."""
        raw = self._values["advertised.listeners"].strip()
        if not raw:
            return self.host, self.port
        first = raw.split(",")[0].strip()
        if "://" in first:
            first = first.split("://", 1)[1]
        host, _, port = first.rpartition(":")
        try:
            return host.strip("[]") or self.host, int(port)
        except ValueError:
            raise ConfigError(
                f"setting 'advertised.listeners': {raw!r} is not valid; allowed values:"
                " host:port or PLAINTEXT://host:port (the first of a comma-separated list is used)"
            ) from None

    @classmethod
    def load(
        cls,
        *,
        host: str = "127.0.0.1",
        port: int = 9092,
        data_dir: Path | str = "data",
        config_file: Path | str | None = None,
        environ: Mapping[str, str] | None = None,
        overrides: list[str] | None = None,
        metrics_port: int | None = None,
        dev: bool = False,
    ) -> Config:
        cfg = cls(host, port, data_dir, metrics_port)
        if dev:  # the development preset: above the defaults, below everything given
            for name, raw in DEV_PRESET.items():
                cfg.set(name, raw, "--dev")
        if config_file is not None:
            try:
                with open(config_file, "rb") as f:
                    table = tomllib.load(f)
            except (OSError, tomllib.TOMLDecodeError) as e:
                raise ConfigError(f"cannot read config file {config_file}: {e}") from None
            for name, raw in _flatten(table).items():
                cfg.set(name, raw, f"file {config_file}")
        env = os.environ if environ is None else environ
        by_env = {"KCOORD_" + n.upper().replace(".", "_"): n for n in SETTINGS}
        for key, raw in env.items():
            if key in by_env:
                cfg.set(by_env[key], raw, f"env {key}")
            elif key.startswith("KCOORD_") and key != PURE_ENV:
                cfg.warnings.append(
                    f"environment variable {key} names no setting, ignored (a setting's variable"
                    " is KCOORD_ + its name upper-cased with dots as underscores)"
                )
        for item in overrides or []:
            name, sep, raw = item.partition("=")
            if not sep:
                raise ConfigError(f"--set expects NAME=VALUE, got {item!r}")
            cfg.set(name.strip(), raw, "--set")
        cfg.advertised  # noqa: B018 - validates advertised.listeners early
        cfg._check_consumer_group_settings()
        cfg._check_share_group_settings()
        cfg.storage_url  # noqa: B018 - validates storage.url early
        return cfg

    @property
    def storage_url(self) -> str | None:
        """The PostgreSQL URL of ``storage.url``, or None for the files engine."""
        url = str(self._values["storage.url"]).strip()
        if url in ("", "file:") or url.startswith("file:"):
            return None
        if url.startswith(("postgresql://", "postgres://")):
            return url
        raise ConfigError(
            "setting 'storage.url': allowed values: empty or file: (the data directory),"
            " or postgresql://USER[:PASSWORD]@HOST[:PORT]/DB"
        )

    @property
    def consumer_assignors(self) -> tuple[str, ...]:
        raw = self._values["group.consumer.assignors"]
        return tuple(a.strip() for a in raw.split(",") if a.strip())

    def _check_consumer_group_settings(self) -> None:
        """Kafka's start-up checks of the KIP-848 settings."""
        v = self._values
        for what in ("heartbeat.interval", "session.timeout"):
            value = v[f"group.consumer.{what}.ms"]
            low, high = v[f"group.consumer.min.{what}.ms"], v[f"group.consumer.max.{what}.ms"]
            if not low <= value <= high:
                raise ConfigError(
                    f"setting 'group.consumer.{what}.ms': {value} is outside"
                    f" group.consumer.min.{what}.ms ({low}) .. group.consumer.max.{what}.ms ({high})"
                )
        if v["group.consumer.heartbeat.interval.ms"] >= v["group.consumer.session.timeout.ms"]:
            raise ConfigError(
                "setting 'group.consumer.heartbeat.interval.ms' must be smaller than"
                " group.consumer.session.timeout.ms"
            )
        known = ("uniform", "range")
        names = self.consumer_assignors
        if not names or any(n not in known for n in names) or len(set(names)) != len(names):
            raise ConfigError(
                f"setting 'group.consumer.assignors': {v['group.consumer.assignors']!r} is not"
                " valid; allowed values: a comma-separated list of uniform and range"
            )
        policies = ("bidirectional", "upgrade", "downgrade", "disabled")
        if v["group.consumer.migration.policy"].lower() not in policies:
            raise ConfigError(
                "setting 'group.consumer.migration.policy': allowed values: " + ", ".join(policies)
            )

    def _check_share_group_settings(self) -> None:
        """Kafka's start-up checks of the share-group (KIP-932) settings: each value within its
        bounds, the heartbeat interval below the session timeout, at most 10 deliveries."""
        v = self._values
        for what in ("heartbeat.interval", "session.timeout", "record.lock.duration"):
            value = v[f"group.share.{what}.ms"]
            low, high = v[f"group.share.min.{what}.ms"], v[f"group.share.max.{what}.ms"]
            if not low <= value <= high:
                raise ConfigError(
                    f"setting 'group.share.{what}.ms': {value} is outside"
                    f" group.share.min.{what}.ms ({low}) .. group.share.max.{what}.ms ({high})"
                )
        if v["group.share.heartbeat.interval.ms"] >= v["group.share.session.timeout.ms"]:
            raise ConfigError(
                "setting 'group.share.heartbeat.interval.ms' must be smaller than"
                " group.share.session.timeout.ms"
            )
        if not 2 <= v["group.share.delivery.count.limit"] <= 10:
            raise ConfigError("setting 'group.share.delivery.count.limit': allowed values: 2 .. 10")
        if v["group.share.max.size"] > 1000:
            raise ConfigError("setting 'group.share.max.size': allowed values: 1 .. 1000")


def _flatten(table: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """TOML allows ``group.max.size = 5`` (nested tables) or ``"group.max.size" = 5``: accept both."""
    out: dict[str, Any] = {}
    for key, value in table.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flatten(value, name + "."))
        else:
            out[name] = value
    return out
