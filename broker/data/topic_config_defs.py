"""The table of topic configs: every name Kafka 4.x accepts for a topic, with Kafka's type,
default, valid values and broker synonym, and how kcoord checks a value given for it.

Checks follow Kafka's ``ConfigDef``: the value is trimmed and parsed by type (an INT must be a
32-bit integer, a LONG a 64-bit one, a BOOLEAN ``true``/``false`` in any case, a LIST
comma-separated), then its validator runs (a range, one of a set of strings, a list of allowed
items without duplicates). A refusal reads as Kafka's: ``Invalid value X for configuration
Y: ...``. One deliberate difference: ``segment.bytes`` may be as small as 1024 bytes (Kafka
4 wants 1 MiB and keeps smaller segments to its internal ``internal.segment.bytes``), so that
small brokers and tests can roll segments quickly.

``honoured`` says whether kcoord acts on a topic's value (docs/storage.md lists them); the
others are accepted, stored and described exactly as Kafka does, and change nothing here:
kcoord has one replica per partition, no tiered storage and no throttled replication.
``broker_setting`` names kcoord's broker setting that gives the default, Kafka's synonym
(DescribeConfigs source STATIC_BROKER_CONFIG when it was set); configs Kafka has no broker
synonym for take Kafka's default.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

# DescribeConfigs' config types (Kafka's DescribeConfigsResponse.ConfigType).
TYPE_BOOLEAN = 1
TYPE_STRING = 2
TYPE_INT = 3
TYPE_LONG = 5
TYPE_DOUBLE = 6
TYPE_LIST = 7

_TYPE_NAMES = {TYPE_INT: "INT", TYPE_LONG: "LONG", TYPE_DOUBLE: "DOUBLE"}
INT_MAX = 2**31 - 1
LONG_MAX = 2**63 - 1
_BOUNDS = {TYPE_INT: (-(2**31), INT_MAX), TYPE_LONG: (-(2**63), LONG_MAX)}
_INTEGER = re.compile(r"[+-]?[0-9]+")
_REPLICA = re.compile(r"([0-9]+:[0-9]+)?")

CODECS = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
"""compression.type's values (Kafka's BrokerCompressionType), in Kafka's order."""
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")


class ConfigProblem(ValueError):
    """A config name kcoord does not know, or a value it does not accept (INVALID_CONFIG)."""


def invalid(name: str, value: object, reason: str) -> ConfigProblem:
    """Kafka's ConfigException wording."""
    return ConfigProblem(f"Invalid value {value} for configuration {name}: {reason}")


Validator = Callable[[str, object], None]


def at_least(low: int) -> Validator:
    return between(low, None)


def between(low: float | None, high: float | None) -> Validator:
    def check(name: str, value: object) -> None:
        assert isinstance(value, int | float)
        if low is not None and value < low:
            raise invalid(name, value, f"Value must be at least {low}")
        if high is not None and value > high:
            raise invalid(name, value, f"Value must be no more than {high}")

    return check


def one_of(*allowed: str) -> Validator:
    def check(name: str, value: object) -> None:
        if value not in allowed:
            raise invalid(name, value, f"String must be one of: {', '.join(allowed)}")

    return check


def list_of(*allowed: str) -> Validator:
    """Kafka's ValidList.in: empty allowed, no duplicates, each item one of ``allowed``."""

    def check(name: str, value: object) -> None:
        assert isinstance(value, list)
        if len(set(value)) != len(value):
            raise ConfigProblem(f"Configuration '{name}' values must not be duplicated.")
        for item in value:
            if item == "":
                raise ConfigProblem(f"Configuration '{name}' values must not be empty.")
            one_of(*allowed)(name, item)

    return check


def _gzip_level(name: str, value: object) -> None:
    assert isinstance(value, int)
    if value > 9 or (value < 1 and value != -1):
        raise invalid(name, value, "Value must be between 1 and 9 or equal to -1")


def _replicas(name: str, value: object) -> None:
    assert isinstance(value, list)
    if not (all(_REPLICA.fullmatch(s) for s in value) or "".join(value) == "*"):
        raise invalid(
            name,
            "[" + ", ".join(value) + "]",
            f"{name} must be the literal '*' or a list of replicas in the following format:"
            " [partitionId]:[brokerId],[partitionId]:[brokerId],...",
        )


def _no_remote(name: str, value: object) -> None:
    if value is True:  # as Kafka answers while tiered storage is off in the broker
        raise ConfigProblem(
            "Tiered Storage functionality is disabled in the broker. Topic cannot be configured"
            " with remote log storage."
        )


@dataclass(frozen=True, slots=True)
class TopicConfigDef:
    name: str
    type: int  # TYPE_*
    default: str
    """Kafka's default, as DescribeConfigs shows it."""
    validator: Validator | None
    honoured: bool
    doc: str
    broker_setting: str | None = None
    """kcoord's broker setting giving the default, under Kafka's name for it (else Kafka's
    default applies: the configs Kafka has no broker synonym for)."""

    def parse(self, value: str) -> object:
        """The value typed as Kafka parses it (after trimming); ConfigProblem."""
        text = value.strip()
        if self.type == TYPE_BOOLEAN:
            if text.lower() not in ("true", "false"):
                raise invalid(self.name, text, "Expected value to be either true or false")
            return text.lower() == "true"
        if self.type in _BOUNDS:
            low, high = _BOUNDS[self.type]
            if not _INTEGER.fullmatch(text) or not low <= int(text) <= high:
                raise invalid(self.name, text, f"Not a number of type {_TYPE_NAMES[self.type]}")
            return int(text)
        if self.type == TYPE_DOUBLE:
            try:
                if "_" in text:
                    raise ValueError(text)
                return float(text)
            except ValueError:
                raise invalid(self.name, text, "Not a number of type DOUBLE") from None
        if self.type == TYPE_LIST:
            return [] if text == "" else re.split(r"\s*,\s*", text)
        return text

    def check(self, value: str | None) -> str:
        """The value as stored (normalised: trimmed, typed, re-written), or ConfigProblem."""
        if value is None:
            raise ConfigProblem(f"Null value not supported for topic configs: {self.name}")
        parsed = self.parse(value)
        if self.validator is not None:
            self.validator(self.name, parsed)
        return text_of(parsed)


def text_of(value: object) -> str:
    """A typed value as DescribeConfigs shows it."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return str(value)


def _d(
    name: str,
    kind: int,
    default: object,
    validator: Validator | None,
    doc: str,
    *,
    honoured: bool = False,
    broker: str | None = None,
) -> TopicConfigDef:
    return TopicConfigDef(name, kind, text_of(default), validator, honoured, doc, broker)


_DAY = 86_400_000
_ACCEPTED = "Accepted and stored; kcoord does not act on it."

DEFS: dict[str, TopicConfigDef] = {
    d.name: d
    for d in (
        _d("cleanup.policy", TYPE_LIST, "delete", list_of("compact", "delete"),
           "delete: old segments are deleted (retention.ms, retention.bytes); compact: the"
           " newest record per key is kept; both: compacted, and old segments deleted too;"
           " empty: neither (kept forever).", honoured=True, broker="log.cleanup.policy"),
        _d("compression.gzip.level", TYPE_INT, -1, _gzip_level,
           "Level of the broker's gzip compression (compression.type=gzip).", honoured=True,
           broker="compression.gzip.level"),
        _d("compression.lz4.level", TYPE_INT, 9, between(1, 17),
           "Level of the broker's lz4 compression (compression.type=lz4).", honoured=True,
           broker="compression.lz4.level"),
        _d("compression.type", TYPE_STRING, "producer", one_of(*CODECS),
           "producer: batches are stored as the producer compressed them; a codec: each batch"
           " is stored compressed with it (uncompressed: not compressed).", honoured=True,
           broker="compression.type"),
        _d("compression.zstd.level", TYPE_INT, 3, between(-131072, 22),
           "Level of the broker's zstd compression (compression.type=zstd).", honoured=True,
           broker="compression.zstd.level"),
        _d("delete.retention.ms", TYPE_LONG, _DAY, at_least(0),
           "How long compaction keeps a tombstone (compact policy).", honoured=True,
           broker="log.cleaner.delete.retention.ms"),
        _d("file.delete.delay.ms", TYPE_LONG, 60000, at_least(0), _ACCEPTED,
           broker="log.segment.delete.delay.ms"),
        _d("flush.messages", TYPE_LONG, LONG_MAX, at_least(1),
           "Accepted and stored; the broker's log.flush.interval.messages applies.",
           broker="log.flush.interval.messages"),
        _d("flush.ms", TYPE_LONG, LONG_MAX, at_least(0), _ACCEPTED,
           broker="log.flush.interval.ms"),
        _d("follower.replication.throttled.replicas", TYPE_LIST, "", _replicas, _ACCEPTED),
        _d("index.interval.bytes", TYPE_INT, 4096, at_least(0),
           "Accepted and stored; the broker's log.index.interval.bytes applies.",
           broker="log.index.interval.bytes"),
        _d("leader.replication.throttled.replicas", TYPE_LIST, "", _replicas, _ACCEPTED),
        _d("local.retention.bytes", TYPE_LONG, -2, at_least(-2), _ACCEPTED,
           broker="log.local.retention.bytes"),
        _d("local.retention.ms", TYPE_LONG, -2, at_least(-2), _ACCEPTED,
           broker="log.local.retention.ms"),
        _d("max.compaction.lag.ms", TYPE_LONG, LONG_MAX, at_least(1), _ACCEPTED,
           broker="log.cleaner.max.compaction.lag.ms"),
        _d("max.message.bytes", TYPE_INT, 1048588, at_least(0),
           "The largest record batch a Produce may append to the topic (MESSAGE_TOO_LARGE).",
           honoured=True, broker="message.max.bytes"),
        _d("message.timestamp.after.max.ms", TYPE_LONG, 3_600_000, at_least(0),
           "CreateTime: a record timestamped more than this after the broker's clock is refused"
           " (INVALID_TIMESTAMP).", honoured=True,
           broker="log.message.timestamp.after.max.ms"),
        _d("message.timestamp.before.max.ms", TYPE_LONG, LONG_MAX, at_least(0),
           "CreateTime: a record timestamped more than this before the broker's clock is"
           " refused (INVALID_TIMESTAMP).", honoured=True,
           broker="log.message.timestamp.before.max.ms"),
        _d("message.timestamp.type", TYPE_STRING, "CreateTime", one_of(*TIMESTAMP_TYPES),
           "CreateTime: records keep the producer's timestamps; LogAppendTime: the broker"
           " stamps each batch with its clock when appending.", honoured=True,
           broker="log.message.timestamp.type"),
        _d("min.cleanable.dirty.ratio", TYPE_DOUBLE, 0.5, between(0, 1), _ACCEPTED,
           broker="log.cleaner.min.cleanable.ratio"),
        _d("min.compaction.lag.ms", TYPE_LONG, 0, at_least(0), _ACCEPTED,
           broker="log.cleaner.min.compaction.lag.ms"),
        _d("min.insync.replicas", TYPE_INT, 1, at_least(1),
           "With acks=all, the in-sync replicas a write needs, capped (as Kafka caps it) at the"
           " partition's replicas: kcoord has one, so writes always have enough.",
           honoured=True, broker="min.insync.replicas"),
        _d("preallocate", TYPE_BOOLEAN, False, None, _ACCEPTED, broker="log.preallocate"),
        _d("remote.log.copy.disable", TYPE_BOOLEAN, False, None, _ACCEPTED),
        _d("remote.log.delete.on.disable", TYPE_BOOLEAN, False, None, _ACCEPTED),
        _d("remote.storage.enable", TYPE_BOOLEAN, False, _no_remote,
           "Only false: kcoord has no tiered storage (true is refused, as by a Kafka broker"
           " without it)."),
        _d("retention.bytes", TYPE_LONG, -1, None,
           "Oldest segments are deleted while the partition stays at least this big (delete"
           " policy); negative: no size limit.", honoured=True, broker="log.retention.bytes"),
        _d("retention.ms", TYPE_LONG, 7 * _DAY, at_least(-1),
           "A segment whose newest record is older than this is deleted (delete policy);"
           " -1: no time limit.", honoured=True, broker="log.retention.ms"),
        _d("segment.bytes", TYPE_INT, 1 << 30, at_least(1024), "Roll a segment past this size.",
           honoured=True, broker="log.segment.bytes"),
        _d("segment.index.bytes", TYPE_INT, 10 << 20, at_least(4), _ACCEPTED,
           broker="log.index.size.max.bytes"),
        _d("segment.jitter.ms", TYPE_LONG, 0, at_least(0), _ACCEPTED,
           broker="log.roll.jitter.ms"),
        _d("segment.ms", TYPE_LONG, 7 * _DAY, at_least(1),
           "The active segment is rolled once its first record is this old.", honoured=True,
           broker="log.roll.ms"),
        _d("unclean.leader.election.enable", TYPE_BOOLEAN, False, None, _ACCEPTED,
           broker="unclean.leader.election.enable"),
    )
}

BROKER_TYPES = {d.broker_setting: d.type for d in DEFS.values() if d.broker_setting}
"""The Kafka type of each broker setting that backs a topic config (DescribeConfigs)."""


def check_overrides(configs: Iterable[tuple[str, str | None]]) -> dict[str, str]:
    """Topic config overrides as given (CreateTopics, AlterConfigs), checked one by one and
    together; ConfigProblem (INVALID_CONFIG) if a name is unknown or a value not accepted."""
    out: dict[str, str] = {}
    for name, value in configs:
        d = DEFS.get(name)
        if d is None:
            raise ConfigProblem(f"Unknown topic config name: {name[:200]}")
        out[name] = d.check(value)
    low = int(out.get("min.compaction.lag.ms", DEFS["min.compaction.lag.ms"].default))
    high = int(out.get("max.compaction.lag.ms", DEFS["max.compaction.lag.ms"].default))
    if low > high:
        raise ConfigProblem(
            f"conflict topic config setting min.compaction.lag.ms ({low}) >"
            f" max.compaction.lag.ms ({high})"
        )
    return out
