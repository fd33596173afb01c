"""Group configs (Kafka's GROUP config resource, type 32): the dynamic settings an admin sets on
one group with IncrementalAlterConfigs, their checks, and the store that keeps them.

| group config | type | broker default (setting) | bounds (settings) |
|---|---|---|---|
| ``consumer.session.timeout.ms`` | int | ``group.consumer.session.timeout.ms`` | ``group.consumer.min/max.session.timeout.ms`` |
| ``consumer.heartbeat.interval.ms`` | int | ``group.consumer.heartbeat.interval.ms`` | ``group.consumer.min/max.heartbeat.interval.ms`` |
| ``consumer.assignment.interval.ms`` | int >= 0 | ``group.consumer.assignment.interval.ms`` | ``group.consumer.min/max.assignment.interval.ms`` |
| ``consumer.assignor.offload.enable`` | true, false | ``group.consumer.assignor.offload.enable`` | |
| ``share.session.timeout.ms`` | int | ``group.share.session.timeout.ms`` | ``group.share.min/max.session.timeout.ms`` |
| ``share.heartbeat.interval.ms`` | int | ``group.share.heartbeat.interval.ms`` | ``group.share.min/max.heartbeat.interval.ms`` |
| ``share.record.lock.duration.ms`` | int >= 1000 | ``group.share.record.lock.duration.ms`` | ``group.share.min/max.record.lock.duration.ms`` |
| ``share.auto.offset.reset`` | latest, earliest, by_duration:ISO-8601 | latest | |
| ``share.isolation.level`` | read_uncommitted, read_committed | read_uncommitted | |

These are Kafka 4.2's group configs and Kafka 4.3's two of KIP-1263 (batched and offloaded
assignment), but for the ``streams.*`` ones: kcoord has no streams groups,
so they are refused like a name Kafka does not know. A change is checked as Kafka's controller
checks it: the group's configs as they would be after the change, over the broker's values for
those it does not set, each value parsed and within its floor, each one the group sets within the
broker's bounds, and the session timeout above the heartbeat interval (consumer and share alike).
Any group id but the empty one may have configs, whether or not the group exists (as in Kafka).

The store keeps every group's configs in the storage engine's document ``group-configs.json``
(``{group id: {name: value}}``), replaced whole, as topic configs are kept: a change is made on
the document as stored (:meth:`GroupConfigs.alter`, ``Documents.update_document``), so two
nodes of a cluster changing it at once both keep theirs; in cluster mode every node reads it
again when another node changed it (``stored_elsewhere``, broker/app.py).
:meth:`GroupConfigs.of` is the reader the coordinator and the share partitions call
(``coordinator.config.GroupOverrides``): the group's values by name, a value outside the broker's
current bounds (the settings changed since it was set) brought within them, as Kafka does.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kcoord.storage.engine import Documents
from kcoord.storage.files import describe_error

log = logging.getLogger("kcoord.coordinator")

CONFIGS_FILE = "group-configs.json"

# DescribeConfigs' config sources and types (Kafka's DescribeConfigsResponse).
SOURCE_DEFAULT = 5
SOURCE_GROUP = 8
TYPE_BOOLEAN = 1
TYPE_STRING = 2
TYPE_INT = 3

_INT_MAX = 2**31 - 1
_EMPTY: Mapping[str, str] = {}


class GroupConfigProblem(ValueError):
    """A group config name kcoord does not know, or a value it does not accept (INVALID_CONFIG)."""


# share.auto.offset.reset -----------------------------------------------------------------------

_DURATION = re.compile(
    r"([-+]?)P(?:([-+]?\d+)D)?"
    r"(T(?:([-+]?\d+)H)?(?:([-+]?\d+)M)?(?:([-+]?\d+)(?:[.,](\d{0,9}))?S)?)?",
    re.IGNORECASE,
)


def iso_duration_ms(text: str) -> int:
    """The milliseconds of an ISO-8601 duration as Java's ``Duration.parse`` reads it
    (``PnDTnHnMn.nS``: days, hours, minutes, seconds with a fraction, each signed, the whole
    signed too); ValueError if it is not one."""
    m = _DURATION.fullmatch(text)
    if m is None or m.group(3) == "T" or not any(m.group(i) for i in (2, 4, 5, 6)):
        raise ValueError(f"{text!r} is not an ISO-8601 duration (PnDTnHnMn.nS)")
    days, hours, minutes, seconds = (int(m.group(i) or 0) for i in (2, 4, 5, 6))
    fraction = m.group(7) or ""
    nanos = int(fraction.ljust(9, "0")) if fraction else 0
    if m.group(6) and m.group(6).startswith("-"):
        nanos = -nanos
    total_ns = (((days * 24 + hours) * 60 + minutes) * 60 + seconds) * 10**9 + nanos
    if m.group(1) == "-":
        total_ns = -total_ns
    return total_ns // 10**6


def auto_offset_reset(value: str) -> tuple[str, int | None]:
    """``share.auto.offset.reset`` read: ("latest", None), ("earliest", None) or
    ("by_duration", milliseconds back from now); ValueError if the value is none of them.
    Lower case only, as Kafka reads it."""
    if value in ("latest", "earliest"):
        return value, None
    if value.startswith("by_duration:"):
        ms = iso_duration_ms(value[len("by_duration:"):])
        if ms < 0:
            raise ValueError("a negative duration")
        return "by_duration", ms
    raise ValueError(f"{value!r} is not a strategy")


# the definitions --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GroupConfigDef:
    name: str
    type: int  # TYPE_*
    default: str | None
    """The built-in default of a config no broker setting backs (the string ones)."""
    broker_setting: str | None
    """The broker setting a group without its own value falls back to (the int ones)."""
    floor: int
    bounds: tuple[str, str] | None
    """The broker settings of its lowest and highest allowed values."""
    doc: str

    def parse(self, value: str | None) -> str:
        """The value as stored, or GroupConfigProblem (the checks that need no broker)."""
        if value is None:
            raise GroupConfigProblem(f"{self.name}: a value is required (null given)")
        if self.type == TYPE_INT:
            text = value.strip()
            if not re.fullmatch(r"[-+]?\d{1,19}", text) or not -(2**31) <= int(text) <= _INT_MAX:
                raise GroupConfigProblem(
                    f"invalid value {value[:40]!r} for group config {self.name}: not a 32-bit integer"
                )
            if int(text) < self.floor:
                raise GroupConfigProblem(
                    f"invalid value {int(text)} for group config {self.name}: the least allowed"
                    f" is {self.floor}"
                )
            return str(int(text))
        if self.type == TYPE_BOOLEAN:
            text = value.strip().lower()  # as Kafka's ConfigDef reads a boolean
            if text not in ("true", "false"):
                raise GroupConfigProblem(
                    f"invalid value {value[:40]!r} for group config {self.name}: true or false"
                )
            return text
        if self.name == "share.auto.offset.reset":
            try:
                auto_offset_reset(value)
            except ValueError:
                raise GroupConfigProblem(
                    f"invalid value {value[:60]!r} for group config {self.name}: allowed are"
                    " latest, earliest and by_duration:<ISO-8601 duration, e.g. PT1H>, not negative"
                ) from None
            return value
        allowed = ("read_committed", "read_uncommitted")
        if value not in allowed:
            raise GroupConfigProblem(
                f"invalid value {value[:40]!r} for group config {self.name}: allowed are"
                f" {', '.join(allowed)}"
            )
        return value


def _int_def(name: str, setting: str, floor: int, doc: str) -> GroupConfigDef:
    head, _, what = setting.partition(".")  # "group", "consumer.session.timeout.ms"
    kind, _, rest = what.partition(".")
    bounds = (f"{head}.{kind}.min.{rest}", f"{head}.{kind}.max.{rest}")
    return GroupConfigDef(name, TYPE_INT, None, setting, floor, bounds, doc)


DEFS: dict[str, GroupConfigDef] = {
    d.name: d
    for d in (
        _int_def(
            "consumer.session.timeout.ms",
            "group.consumer.session.timeout.ms",
            1,
            "A member of this consumer group (KIP-848 protocol) without a heartbeat for this long"
            " is fenced. Falls back to group.consumer.session.timeout.ms.",
        ),
        _int_def(
            "consumer.heartbeat.interval.ms",
            "group.consumer.heartbeat.interval.ms",
            1,
            "The heartbeat interval told to the members of this consumer group. Falls back to"
            " group.consumer.heartbeat.interval.ms.",
        ),
        _int_def(
            "consumer.assignment.interval.ms",
            "group.consumer.assignment.interval.ms",
            0,
            "This consumer group's target assignment is computed at most once per interval (0:"
            " at once). Falls back to group.consumer.assignment.interval.ms.",
        ),
        GroupConfigDef(
            "consumer.assignor.offload.enable",
            TYPE_BOOLEAN,
            None,
            "group.consumer.assignor.offload.enable",
            0,
            None,
            "Whether this consumer group's target assignment, when large, is computed off the"
            " event loop. Falls back to group.consumer.assignor.offload.enable.",
        ),
        _int_def(
            "share.session.timeout.ms",
            "group.share.session.timeout.ms",
            1,
            "A member of this share group without a heartbeat for this long is fenced. Falls"
            " back to group.share.session.timeout.ms.",
        ),
        _int_def(
            "share.heartbeat.interval.ms",
            "group.share.heartbeat.interval.ms",
            1,
            "The heartbeat interval told to the members of this share group. Falls back to"
            " group.share.heartbeat.interval.ms.",
        ),
        _int_def(
            "share.record.lock.duration.ms",
            "group.share.record.lock.duration.ms",
            1000,
            "How long a member of this share group holds a record it acquired before the record"
            " is released. Falls back to group.share.record.lock.duration.ms.",
        ),
        GroupConfigDef(
            "share.auto.offset.reset",
            TYPE_STRING,
            "latest",
            None,
            0,
            None,
            "Where a share partition of this group starts when the group first reads it:"
            " earliest, latest, or by_duration:<ISO-8601 duration> (the first record at most"
            " that long ago).",
        ),
        GroupConfigDef(
            "share.isolation.level",
            TYPE_STRING,
            "read_uncommitted",
            None,
            0,
            None,
            "read_committed: this share group is given only committed transactional records;"
            " read_uncommitted: every record, aborted ones too.",
        ),
    )
}

_PAIRS = (
    ("consumer.session.timeout.ms", "consumer.heartbeat.interval.ms"),
    ("share.session.timeout.ms", "share.heartbeat.interval.ms"),
)
"""(session timeout, heartbeat interval): the first must stay above the second."""

NOT_SUPPORTED = frozenset(
    {
        "streams.session.timeout.ms",
        "streams.heartbeat.interval.ms",
        "streams.num.standby.replicas",
        "streams.initial.rebalance.delay.ms",
    }
)
"""Kafka 4.2's group configs of streams groups, which kcoord does not have."""

BrokerSetting = Callable[[str], Any]
"""A broker setting's value by name (``Config.__getitem__``)."""


def check_group_configs(configs: Iterable[tuple[str, str | None]], broker: BrokerSetting) -> dict[str, str]:
    """A group's whole set of configs, as it would be after a change, checked (module docstring);
    the values as stored, or GroupConfigProblem."""
    out: dict[str, str] = {}
    for name, value in configs:
        d = DEFS.get(name)
        if d is None:
            if name in NOT_SUPPORTED:
                raise GroupConfigProblem(
                    f"group config {name} is not supported: kcoord has no streams groups"
                )
            raise GroupConfigProblem(
                f"unknown group config name: {name[:80]!r} (known: {', '.join(sorted(DEFS))})"
            )
        out[name] = d.parse(value)
    for name, value in out.items():
        d = DEFS[name]
        if d.bounds is None:
            continue
        low_setting, high_setting = d.bounds
        low, high = int(broker(low_setting)), int(broker(high_setting))
        if int(value) < low:
            raise GroupConfigProblem(
                f"{name} must be at least {low_setting} ({low}); {value} given"
            )
        if int(value) > high:
            raise GroupConfigProblem(
                f"{name} must be at most {high_setting} ({high}); {value} given"
            )
    for session, heartbeat in _PAIRS:
        if session not in out and heartbeat not in out:
            continue
        s, h = (int(out[n]) if n in out else int(broker(_setting(n))) for n in (session, heartbeat))
        if s <= h:
            raise GroupConfigProblem(
                f"{session} ({s}) must be greater than {heartbeat} ({h})"
            )
    return out


def _setting(name: str) -> str:
    setting = DEFS[name].broker_setting
    assert setting is not None
    return setting


def _within_bounds(group_id: str, configs: dict[str, str], broker: BrokerSetting) -> dict[str, str]:
    """The configs a group's members get: a value outside the broker's current bounds (set under
    other settings) brought to the nearest bound, with a warning."""
    out = dict(configs)
    for name, value in configs.items():
        bounds = DEFS[name].bounds
        if bounds is None:
            continue
        low, high = int(broker(bounds[0])), int(broker(bounds[1]))
        bounded = min(max(int(value), low), high)
        if bounded != int(value):
            log.warning(
                "group %r: config %s=%s is outside %s..%s (the broker's bounds): %d applies",
                group_id, name, value, low, high, bounded,
            )
            out[name] = str(bounded)
    return out


@dataclass(frozen=True, slots=True)
class GroupConfigValue:
    """One group config as DescribeConfigs reports it."""

    name: str
    value: str
    source: int  # SOURCE_GROUP or SOURCE_DEFAULT
    type: int
    doc: str
    synonyms: tuple[tuple[str, str, int], ...]


# the store --------------------------------------------------------------------------------------


class GroupConfigs:
    """Every group's configs, kept in ``group-configs.json`` (module docstring)."""

    def __init__(self, documents: Documents, broker: BrokerSetting) -> None:
        self._documents = documents
        self._broker = broker
        self._lock = threading.Lock()
        self._updating = threading.Lock()
        self._stored: dict[str, dict[str, str]] = {}
        """Each group's configs as set (DescribeConfigs shows them)."""
        self._applied: dict[str, Mapping[str, str]] = {}
        """The same within the broker's bounds (what :meth:`of` answers)."""

    def read(self) -> None:
        """Read the document (start-up); one that cannot be read leaves every group on the
        broker's settings, and says so."""
        try:
            self.stored_elsewhere(self._documents.read_document(CONFIGS_FILE))
        except OSError as e:
            log.error("%s could not be read (%s): groups use the broker's settings",
                      CONFIGS_FILE, describe_error(e))

    def stored_elsewhere(self, raw: bytes | None) -> None:
        """The configs become those of a stored document (start-up; another node changed it, in
        cluster mode). A group whose entry does not parse keeps the broker's settings; the
        others are read."""
        if raw is None:
            return
        try:
            stored = _parse(raw)
        except ValueError as e:
            log.error("%s could not be read (%s): the groups' configs stay as they were",
                      CONFIGS_FILE, e)
            return
        with self._lock:
            self._install(stored)

    def _install(self, stored: dict[str, dict[str, str]]) -> None:
        self._stored = stored
        self._applied = {g: _within_bounds(g, c, self._broker) for g, c in stored.items() if c}

    def of(self, group_id: str) -> Mapping[str, str]:
        """The configs set on ``group_id`` by Kafka name, within the broker's bounds; a name not
        set is absent (``coordinator.config.GroupOverrides``). Read-only."""
        return self._applied.get(group_id, _EMPTY)

    def stored(self, group_id: str) -> dict[str, str]:
        """The configs set on ``group_id`` as they were set (a copy)."""
        return dict(self._stored.get(group_id, {}))

    def broker_value(self, name: str) -> str:
        """What config ``name`` is for a group that does not set it."""
        d = DEFS[name]
        if d.broker_setting is not None:
            value = self._broker(d.broker_setting)
            return str(value).lower() if isinstance(value, bool) else str(value)
        assert d.default is not None
        return d.default

    def describe(self, group_id: str) -> list[GroupConfigValue]:
        """Every group config with its value and source, in name order (DescribeConfigs): the
        group's own (GROUP_CONFIG, itself its one synonym, as Kafka answers) or the broker's
        (DEFAULT_CONFIG, no synonyms)."""
        own = self._stored.get(group_id, {})
        out = []
        for name, d in sorted(DEFS.items()):
            if name in own:
                value = own[name]
                out.append(GroupConfigValue(
                    name, value, SOURCE_GROUP, d.type, d.doc, ((name, value, SOURCE_GROUP),)
                ))
            else:
                out.append(GroupConfigValue(
                    name, self.broker_value(name), SOURCE_DEFAULT, d.type, d.doc, ()
                ))
        return out

    def check(self, configs: Mapping[str, str | None]) -> dict[str, str]:
        """``configs`` as a group's whole set, checked against this broker's settings; the
        values as stored, or GroupConfigProblem."""
        return check_group_configs(configs.items(), self._broker)

    def set(self, group_id: str, configs: Mapping[str, str]) -> None:
        """Make ``configs`` (checked) the group's whole set, durably (blocking; any thread); an
        empty set forgets the group. OSError if the document could not be written (nothing
        changed then)."""
        self.alter(group_id, lambda _: dict(configs))

    def alter(
        self, group_id: str, change: Callable[[dict[str, str]], dict[str, str]]
    ) -> dict[str, str]:
        """Change the group's configs durably (blocking; any thread): ``change`` maps its
        configs as stored now to its new whole set (checked; empty: none); it may be called more
        than once, and what it raises is raised here with nothing changed. The new set; OSError
        if the document could not be written (nothing changed then)."""
        wanted: dict[str, str] = {}

        def update(raw: bytes | None) -> bytes | None:
            nonlocal wanted
            try:
                stored = _parse(raw) if raw is not None else {}
            except ValueError as e:
                log.error("%s could not be read (%s): it is replaced", CONFIGS_FILE, e)
                stored = dict(self._stored)
            current = stored.get(group_id, {})
            wanted = change(dict(current))
            if wanted == current:
                return None
            if wanted:
                stored[group_id] = dict(wanted)
            else:
                stored.pop(group_id, None)
            return json.dumps(stored, indent=1, sort_keys=True).encode("utf-8")

        with self._updating:  # this node's changes one at a time: it holds the last one's result
            self.stored_elsewhere(self._documents.update_document(CONFIGS_FILE, update))
        return wanted


def _parse(raw: bytes) -> dict[str, dict[str, str]]:
    """The groups' configs of a stored document (ValueError if it is not a JSON object); a group
    whose entry does not parse is left out, and said so."""
    data = json.loads(raw.decode("utf-8"))
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    stored: dict[str, dict[str, str]] = {}
    for group_id, configs in data.items():
        try:
            stored[str(group_id)] = {
                name: DEFS[name].parse(value) for name, value in dict(configs).items()
            }
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            log.error("%s: the configs of group %r are not valid (%s): ignored",
                      CONFIGS_FILE, group_id, e)
    return stored
