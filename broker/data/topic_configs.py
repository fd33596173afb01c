"""Topic configs: each topic's overrides, kept in the storage engine's document
``topic-configs.json``, and what a topic's settings are once the broker's settings (or Kafka's
defaults) fill in what it does not override. The configs themselves -- every name Kafka
accepts, with its type, checks, default and broker setting -- are in ``topic_config_defs``;
docs/storage.md says which kcoord honours.

Overrides are set at CreateTopics and changed by IncrementalAlterConfigs/AlterConfigs
(``broker/admin_api/configs.py``); ``broker/data/retention.py`` applies the retention ones, the
Produce path (``broker/data/api.py``, ``protocol/append_rules.py``) max.message.bytes,
compression and timestamps. Internal topics carry the
overrides Kafka gives them at creation (``__consumer_offsets``: ``cleanup.policy=compact`` and
``segment.bytes`` from ``offsets.topic.segment.bytes``), which may be overridden in turn.

The document maps topic ids (not names: a topic deleted and created again under its name starts
afresh) to ``{"name": ..., "configs": {...}}``; it is replaced atomically. Every change is made
on the document as stored (:meth:`TopicConfigs.alter`: one topic's overrides as a function of
what is stored for it), so two nodes of a cluster changing it at once both keep their changes
(``Documents.update_document``); the store then holds the document it wrote. A deleted topic's
entry is removed with it; the entry of a topic whose creation failed stays in the document
(harmless: ids are never reused).
"""

from __future__ import annotations

import json
import logging
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kcoord.protocol.append_rules import CODEC_IDS, AppendRules
from kcoord.storage.engine import Documents
from kcoord.storage.files import describe_error

from .topic_config_defs import (
    DEFS,
    ConfigProblem,
    TopicConfigDef,
    check_overrides,
    text_of,
)

__all__ = [
    "CONFIGS_FILE",
    "DEFS",
    "SOURCE_DEFAULT",
    "SOURCE_STATIC_BROKER",
    "SOURCE_TOPIC",
    "ConfigProblem",
    "ConfigValue",
    "TopicConfigs",
    "TopicSettings",
    "builtin_defaults",
    "check_overrides",
]

log = logging.getLogger("kcoord.topics")

CONFIGS_FILE = "topic-configs.json"

# DescribeConfigs' config sources (Kafka's DescribeConfigsResponse.ConfigSource).
SOURCE_TOPIC = 1
SOURCE_STATIC_BROKER = 4
SOURCE_DEFAULT = 5


@dataclass(frozen=True, slots=True)
class TopicSettings:
    """A topic's effective settings."""

    cleanup_policy: frozenset[str]
    retention_ms: int
    retention_bytes: int
    segment_ms: int
    segment_bytes: int
    delete_retention_ms: int
    max_message_bytes: int
    min_insync_replicas: int
    compression_type: str
    """``producer`` or the codec batches are stored with (``uncompressed``, ``gzip``, ...)."""
    compression_level: int | None
    """The level of that codec (None: the codec's default)."""
    log_append_time: bool
    timestamp_before_max_ms: int
    timestamp_after_max_ms: int
    rules: AppendRules
    """What the Produce path applies to the topic's batches (from the configs above)."""

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy


@dataclass(frozen=True, slots=True)
class ConfigValue:
    """One config as DescribeConfigs reports it: its value, where it came from, and (v1+) the
    values under it (synonyms: the topic's own, the broker's, the default)."""

    name: str
    value: str
    source: int
    type: int
    doc: str
    synonyms: tuple[tuple[str, str, int], ...]


def builtin_defaults(setting: str) -> tuple[Any, bool]:
    """A broker setting's built-in default (a TopicConfigs without a broker Config)."""
    from ..config import SETTINGS  # the table only: no cycle at import time

    return SETTINGS[setting].default, True


class TopicConfigs:
    """The topics' overrides and the broker's defaults for them (module docstring)."""

    def __init__(
        self,
        documents: Documents,
        broker: Callable[[str], tuple[Any, bool]],
        *,
        internal: Mapping[str, Mapping[str, str]] | None = None,
    ) -> None:
        """``broker(setting)`` gives a broker setting's value and whether it is its default;
        ``internal`` the overrides internal topics are created with, by topic name."""
        self._documents = documents
        self._broker = broker
        self._internal = {k: dict(v) for k, v in (internal or {}).items()}
        self._entries: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._updating = threading.Lock()
        self._settings: dict[tuple[uuid.UUID, str], TopicSettings] = {}
        """settings() by topic (every Produce asks): dropped whenever anything changes."""

    def read(self) -> None:
        """Read the document (start-up); one that cannot be read leaves every topic on the
        broker's defaults, and says so."""
        try:
            self.stored_elsewhere(self._documents.read_document(CONFIGS_FILE))
        except OSError as e:
            log.error("%s could not be read (%s): topics use the broker's defaults",
                      CONFIGS_FILE, describe_error(e))

    def stored_elsewhere(self, raw: bytes | None) -> None:
        """The overrides become those of a stored document (start-up; another node changed it,
        in cluster mode; this node, after a change); one that cannot be parsed changes nothing,
        and says so."""
        if raw is None:
            return
        try:
            entries = _parse(raw)
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            log.error("%s could not be read (%s): the topics' overrides stay as they were",
                      CONFIGS_FILE, e)
            return
        with self._lock:
            self._entries = entries
            self._settings = {}

    def set_internal(self, name: str, overrides: Mapping[str, str]) -> None:
        """The overrides internal topic ``name`` is created with (by its owner, before use)."""
        self._internal[name] = dict(overrides)
        self._settings = {}

    def prune(self, live: Iterable[uuid.UUID], keep_names: Iterable[str] = ()) -> None:
        """Forget (in memory only: another node may be creating a topic the document already
        names) the entries of topics that do not exist (a creation that failed, a deletion the
        document did not record); entries named in ``keep_names`` (internal topics, opened
        later) stay."""
        keep = {str(t) for t in live}
        names = set(keep_names)
        self._entries = {
            k: v for k, v in self._entries.items() if k in keep or v["name"] in names
        }
        self._settings = {}

    def overrides(self, topic_id: uuid.UUID, name: str) -> dict[str, str]:
        """The topic's own settings: those it was created with or given since (an internal
        topic's creation overrides under them)."""
        out = dict(self._internal.get(name, {}))
        entry = self._entries.get(str(topic_id))
        if entry is not None:
            out.update(entry["configs"])
        return out

    def settings(self, topic_id: uuid.UUID, name: str) -> TopicSettings:
        """The topic's effective settings (remembered until a change)."""
        found = self._settings.get((topic_id, name))
        if found is None:
            found = self._settings[(topic_id, name)] = self._compute(topic_id, name)
        return found

    def changed(self) -> None:
        """Forget the remembered settings (on the event loop, after a :meth:`set` in a worker
        thread: a settings() racing with it may have remembered the old ones)."""
        self._settings = {}

    def _default(self, d: TopicConfigDef) -> tuple[str, int]:
        """The value a topic without an override has, and its source."""
        if d.broker_setting is None:
            return d.default, SOURCE_DEFAULT
        value, is_default = self._broker(d.broker_setting)
        return text_of(value), SOURCE_DEFAULT if is_default else SOURCE_STATIC_BROKER

    def _compute(self, topic_id: uuid.UUID, name: str) -> TopicSettings:
        own = self.overrides(topic_id, name)
        values = {n: own[n] if n in own else self._default(d)[0] for n, d in DEFS.items()}
        codec = values["compression.type"]
        raw_level = values.get(f"compression.{codec}.level")
        level = (
            None if raw_level is None or (codec == "gzip" and raw_level == "-1") else int(raw_level)
        )
        policy = frozenset(p for p in values["cleanup.policy"].split(",") if p)
        log_append_time = values["message.timestamp.type"] == "LogAppendTime"
        before = int(values["message.timestamp.before.max.ms"])
        after = int(values["message.timestamp.after.max.ms"])
        rules = AppendRules(
            keys_required="compact" in policy,
            log_append_time=log_append_time,
            before_max_ms=before,
            after_max_ms=after,
            codec=CODEC_IDS.get(codec),
            level=level,
            max_bytes=int(values["max.message.bytes"]),
        )
        return TopicSettings(
            cleanup_policy=policy,
            retention_ms=int(values["retention.ms"]),
            retention_bytes=int(values["retention.bytes"]),
            segment_ms=int(values["segment.ms"]),
            segment_bytes=int(values["segment.bytes"]),
            delete_retention_ms=int(values["delete.retention.ms"]),
            max_message_bytes=int(values["max.message.bytes"]),
            min_insync_replicas=int(values["min.insync.replicas"]),
            compression_type=codec,
            compression_level=level,
            log_append_time=log_append_time,
            timestamp_before_max_ms=before,
            timestamp_after_max_ms=after,
            rules=rules,
        )

    def describe(
        self, topic_id: uuid.UUID, name: str, own: Mapping[str, str] | None = None
    ) -> list[ConfigValue]:
        """Every topic config with its value and source, in name order (DescribeConfigs);
        ``own``: the overrides of a topic not stored yet (CreateTopics)."""
        own = self.overrides(topic_id, name) if own is None else own
        out = []
        for n, d in sorted(DEFS.items()):
            default, default_source = self._default(d)
            synonyms = [(d.broker_setting or n, default, default_source)]
            if n in own:
                synonyms.insert(0, (n, own[n], SOURCE_TOPIC))
            value, source = synonyms[0][1], synonyms[0][2]
            out.append(ConfigValue(n, value, source, d.type, d.doc, tuple(synonyms)))
        return out

    def set(self, topic_id: uuid.UUID, name: str, configs: Mapping[str, str]) -> None:
        """Make ``configs`` the topic's overrides, durably (blocking; any thread). OSError if
        the document could not be written (nothing changed then)."""
        self.alter(topic_id, name, lambda _: dict(configs))

    def alter(
        self,
        topic_id: uuid.UUID,
        name: str,
        change: Callable[[dict[str, str]], dict[str, str]],
    ) -> dict[str, str]:
        """Change the topic's overrides durably (blocking; any thread): ``change`` maps them as
        stored now (with an internal topic's creation overrides under them) to the new ones;
        it may be called more than once, and what it raises is raised here with nothing
        changed. The new overrides; OSError if the document could not be written (nothing
        changed then)."""
        key = str(topic_id)
        wanted: dict[str, str] = {}

        def update(raw: bytes | None) -> bytes | None:
            nonlocal wanted
            entries = self._stored_entries(raw)
            current = dict(self._internal.get(name, {}))
            if key in entries:
                current.update(entries[key]["configs"])
            wanted = change(current)
            if key in entries and wanted == current:
                return None
            entries[key] = {"name": name, "configs": dict(wanted)}
            return _encode(entries)

        with self._updating:  # this node's changes one at a time: it holds the last one's result
            self.stored_elsewhere(self._documents.update_document(CONFIGS_FILE, update))
        return wanted

    def forget(self, topic_id: uuid.UUID) -> None:
        """A deleted topic's overrides (blocking; failures only logged: a new topic never has
        the old id)."""
        key = str(topic_id)

        def update(raw: bytes | None) -> bytes | None:
            entries = self._stored_entries(raw)
            return _encode({k: v for k, v in entries.items() if k != key}) if key in entries else None

        with self._updating:
            try:
                self.stored_elsewhere(self._documents.update_document(CONFIGS_FILE, update))
            except OSError as e:
                log.warning("writing %s failed: %s", CONFIGS_FILE, describe_error(e))
            with self._lock:
                self._entries = {k: v for k, v in self._entries.items() if k != key}
                self._settings = {}

    def _stored_entries(self, raw: bytes | None) -> dict[str, dict[str, Any]]:
        """The entries of the stored document, to change; if it cannot be parsed, those this
        node holds (the change then replaces what could not be read)."""
        try:
            return _parse(raw) if raw is not None else {}
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            log.error("%s could not be read (%s): it is replaced", CONFIGS_FILE, e)
            return dict(self._entries)


def _parse(raw: bytes) -> dict[str, dict[str, Any]]:
    """The entries of a stored document (ValueError, KeyError, TypeError or AttributeError if it
    is not one)."""
    data = json.loads(raw.decode("utf-8"))
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    entries = {}
    for topic_id, entry in data.items():
        uuid.UUID(topic_id)
        configs = check_overrides(entry["configs"].items())
        entries[topic_id] = {"name": str(entry["name"]), "configs": configs}
    return entries


def _encode(entries: Mapping[str, Mapping[str, Any]]) -> bytes:
    return json.dumps(entries, indent=1, sort_keys=True).encode("utf-8")
