"""The topics a consumer group's coordinator sees, sans-IO.

The broker owns the topics; the coordinator only needs, for the topics a group subscribes to,
their ids and partition counts (the target assignment is computed over them, and a change of
either bumps the group epoch), and, for regular-expression subscriptions, every topic name.
:class:`TopicsView` is that narrow read-only view; ``version`` changes whenever any topic is
created, deleted or gains partitions, so a group re-reads its subscribed topics only then.
:class:`StaticTopics` is a plain in-memory view for tests and for a broker without topics.
"""

from __future__ import annotations

import hashlib
import struct
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Protocol

TopicId = uuid.UUID


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """One topic as a consumer group uses it."""

    topic_id: TopicId
    name: str
    partitions: int


class TopicsView(Protocol):
    """What the coordinator may read about topics (implemented by the broker)."""

    @property
    def version(self) -> int:
        """Changes whenever a topic is created, deleted or gains partitions."""
        ...

    def topic(self, name: str) -> TopicInfo | None: ...

    def topic_by_id(self, topic_id: TopicId) -> TopicInfo | None: ...

    def names(self) -> Iterable[str]:
        """Every topic name (internal topics included; callers filter)."""
        ...


class StaticTopics:
    """An in-memory :class:`TopicsView`: tests create and delete topics on it."""

    def __init__(self, topics: Mapping[str, int] | None = None) -> None:
        self._by_name: dict[str, TopicInfo] = {}
        self._by_id: dict[TopicId, TopicInfo] = {}
        self.version = 0
        for name, partitions in (topics or {}).items():
            self.create(name, partitions)

    def create(self, name: str, partitions: int, topic_id: TopicId | None = None) -> TopicInfo:
        old = self._by_name.get(name)
        info = TopicInfo(
            topic_id or (old.topic_id if old else uuid.uuid5(uuid.NAMESPACE_OID, name)),
            name,
            partitions,
        )
        self._by_name[name] = info
        self._by_id[info.topic_id] = info
        self.version += 1
        return info

    def delete(self, name: str) -> None:
        info = self._by_name.pop(name)
        del self._by_id[info.topic_id]
        self.version += 1

    def topic(self, name: str) -> TopicInfo | None:
        return self._by_name.get(name)

    def topic_by_id(self, topic_id: TopicId) -> TopicInfo | None:
        return self._by_id.get(topic_id)

    def names(self) -> Iterator[str]:
        return iter(list(self._by_name))


NO_TOPICS = StaticTopics()
"""A view with no topics at all (a shard built without a broker)."""


def subscribed_topics(topics: TopicsView, names: Iterable[str]) -> dict[str, TopicInfo]:
    """The existing topics among ``names``, by name."""
    found = {}
    for name in names:
        info = topics.topic(name)
        if info is not None and info.partitions > 0:
            found[name] = info
    return found


def by_name(assignment: Mapping[TopicId, Iterable[int]], topics: TopicsView) -> dict[str, Iterable[int]]:
    """Partitions by topic id -> by topic name (the embedded consumer protocol's form); topics
    no longer known are left out."""
    out: dict[str, Iterable[int]] = {}
    for topic_id, partitions in assignment.items():
        info = topics.topic_by_id(topic_id)
        if info is not None:
            out[info.name] = partitions
    return out


def by_id(named: Iterable[tuple[str, Iterable[int]]], topics: TopicsView) -> dict[TopicId, frozenset[int]]:
    """``(topic name, partitions)`` pairs -> partitions by topic id, a topic named twice merged;
    unknown topics and empty partition lists are left out."""
    out: dict[TopicId, frozenset[int]] = {}
    for name, partitions in named:
        info = topics.topic(name)
        if info is not None and partitions:
            out[info.topic_id] = out.get(info.topic_id, frozenset()) | frozenset(partitions)
    return out


_HASH_ITEM = struct.Struct(">16si")


def metadata_hash(subscribed: Mapping[str, TopicInfo]) -> int:
    """A signed 64-bit digest of the subscribed topics (name, id, partition count), stored in
    the group's epoch record as Kafka 4.1+ stores its own topic hash. Ours is SHA-256 based:
    it only has to change when the topics do (a different hash after a restart bumps the
    group epoch once, which is harmless)."""
    if not subscribed:
        return 0
    h = hashlib.sha256()
    for name in sorted(subscribed):
        info = subscribed[name]
        h.update(name.encode("utf-8") + b"\0")
        h.update(_HASH_ITEM.pack(info.topic_id.bytes, info.partitions))
    return int.from_bytes(h.digest()[:8], "big", signed=True)
