"""The topics a consumer group's coordinator sees, sans-IO.

The broker owns the topics; the coordinator only needs, for the topics a group subscribes to,
their ids, partition counts and the racks of each partition's replicas (the target assignment
is computed over them, and a change of any bumps the group epoch through the group's metadata
hash, :func:`metadata_hash`), and, for regular-expression subscriptions, every topic name.
:class:`TopicsView` is that narrow read-only view; ``version`` changes whenever any topic is
created, deleted or gains partitions, so a group re-reads its subscribed topics only then.
:class:`StaticTopics` is a plain in-memory view for tests and for a broker without topics.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Protocol

import xxhash

TopicId = uuid.UUID


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """One topic as a consumer group uses it."""

    topic_id: TopicId
    name: str
    partitions: int
    racks: tuple[tuple[str, ...], ...] = ()
    """The racks of each partition's replicas, by partition (a partition past the end of the
    tuple has none): what Kafka feeds its topic hash."""

    def partition_racks(self, partition: int) -> tuple[str, ...]:
        return self.racks[partition] if partition < len(self.racks) else ()


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

    def create(
        self,
        name: str,
        partitions: int,
        topic_id: TopicId | None = None,
        racks: tuple[tuple[str, ...], ...] = (),
    ) -> TopicInfo:
        old = self._by_name.get(name)
        info = TopicInfo(
            topic_id or (old.topic_id if old else uuid.uuid5(uuid.NAMESPACE_OID, name)),
            name,
            partitions,
            racks,
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


# KIP-1101's metadata hash, bit-exact with Kafka 4.1+ (group-coordinator's computeTopicHash and
# computeGroupHash): XXH3-64 (seed 0) over a little-endian byte stream. A string goes in as its
# UTF-16 code units (2 bytes each, little-endian) followed by its length in code units (int32),
# and strings sort by UTF-16 code units, as Java's do.
_TOPIC_HASH_MAGIC = b"\x00"  # the layout's version; changes with any change of the layout
_I32 = struct.Struct("<i")
_I64 = struct.Struct("<q")


def _java_string(s: str) -> bytes:
    units = s.encode("utf-16-le", "surrogatepass")
    return units + _I32.pack(len(units) // 2)


def _java_order(s: str) -> bytes:
    return s.encode("utf-16-be", "surrogatepass")


def _signed(digest: int) -> int:
    return digest - (1 << 64) if digest >= 1 << 63 else digest


@lru_cache(maxsize=4096)
def topic_hash(info: TopicInfo) -> int:
    """A topic's hash: the magic byte, the topic id (most then least significant 64 bits),
    the name, the partition count, then per partition its index and its sorted racks, each
    rack as its length (int32) then the rack string. Cached per topic state (a topic changes
    into a new :class:`TopicInfo`), as Kafka caches it per topic until the topic changes."""
    raw = info.topic_id.bytes
    parts = [
        _TOPIC_HASH_MAGIC,
        raw[7::-1],  # the most significant long, little-endian
        raw[:7:-1],  # the least significant long, little-endian
        _java_string(info.name),
        _I32.pack(info.partitions),
    ]
    for partition in range(info.partitions):
        parts.append(_I32.pack(partition))
        for rack in sorted(info.partition_racks(partition), key=_java_order):
            parts.append(_I32.pack(len(rack.encode("utf-16-le", "surrogatepass")) // 2))
            parts.append(_java_string(rack))
    return _signed(xxhash.xxh3_64_intdigest(b"".join(parts)))


def metadata_hash(subscribed: Mapping[str, TopicInfo]) -> int:
    """The group's metadata hash over its subscribed (existing) topics, stored in its epoch
    record (ConsumerGroupMetadataValue / ShareGroupMetadataValue): 0 without topics, else the
    topic hashes (int64 each) in topic-name order, hashed again. It changes when a subscribed
    topic's id, partition count or partition racks do, and only then."""
    if not subscribed:
        return 0
    stream = b"".join(
        _I64.pack(topic_hash(subscribed[name])) for name in sorted(subscribed, key=_java_order)
    )
    return _signed(xxhash.xxh3_64_intdigest(stream))
