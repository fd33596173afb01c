"""What an OffsetCommit's hot loop reuses from one commit to the next (coordinator/offsets.py).

A committer commits the same partitions of the same group again and again, so the commit path
keeps, per shard:

- :class:`CommitKeys`: the OffsetCommitKey bytes of each (group, topic, partition) committed
  lately, so that a commit encodes no key (bounded: forgotten whole past :data:`MAX_KEYS`);
- :func:`stored_answer`: a topic's answer when every partition named was stored, made of
  shared (partition, NONE) pairs, so that a commit builds no pair per partition
  (:func:`stored_before` starts a topic's own list when one of its partitions is refused).

The bytes are those of :func:`coordinator.schemas.offset_commit_key_prefix` plus the partition:
this module only remembers them.
"""

from __future__ import annotations

import struct
from typing import Final

from kcoord.coordinator.messages import OffsetCommitPartition
from kcoord.coordinator.schemas import SchemaError, offset_commit_key_prefix
from kcoord.protocol.errors import ErrorCode

MAX_KEYS: Final = 2048
"""Keys one shard remembers before it forgets them all (some 200 kB at most)."""

_I32: Final = struct.Struct(">i")
_STORED: Final = tuple((p, ErrorCode.none) for p in range(4096))

Answer = tuple[tuple[int, int], ...]


class TopicKeys:
    """The keys of one (group, topic): ``prefix`` + int32(partition), made once each."""

    __slots__ = ("keys", "owner", "prefix")

    def __init__(self, owner: CommitKeys, prefix: bytes) -> None:
        self.owner = owner
        self.prefix = prefix
        self.keys: dict[int, bytes] = {}

    def key(self, partition: int) -> bytes:
        found = self.keys.get(partition)
        if found is not None:
            return found
        made = self.prefix + _I32.pack(partition)
        owner = self.owner
        if owner.count >= MAX_KEYS:
            owner.forget()
        owner.count += 1
        self.keys[partition] = made
        return made


class CommitKeys:
    """The OffsetCommitKey bytes of the (group, topic, partition)s a shard stored lately."""

    __slots__ = ("by_name", "count")

    def __init__(self) -> None:
        self.by_name: dict[tuple[str, str], TopicKeys | None] = {}
        self.count = 0

    def of(self, group_id: str, topic: str) -> TopicKeys | None:
        """The keys of ``topic``'s partitions for ``group_id``; None when a name is too long
        for a key (then no such topic can exist)."""
        name = (group_id, topic)
        by_name = self.by_name
        if name in by_name:
            return by_name[name]
        try:
            found: TopicKeys | None = TopicKeys(self, offset_commit_key_prefix(group_id, topic))
        except SchemaError:
            found = None
        if len(by_name) >= MAX_KEYS:
            self.forget()
        self.by_name[name] = found
        return found

    def forget(self) -> None:
        """Drop every key (the keys handed out stay valid: they are only bytes)."""
        self.by_name = {}
        self.count = 0


def _stored(partition: int) -> tuple[int, int]:
    """The answer (partition, NONE), shared for the partitions numbered below 4096."""
    if 0 <= partition < len(_STORED):
        return _STORED[partition]
    return (partition, ErrorCode.none)


def stored_answer(partitions: tuple[OffsetCommitPartition, ...]) -> Answer:
    """A topic's answer when each of its ``partitions`` was stored: NONE each, in order."""
    return tuple([_stored(p[0]) for p in partitions])


def stored_before(
    partitions: tuple[OffsetCommitPartition, ...], count: int
) -> list[tuple[int, int]]:
    """The answers of a topic's first ``count`` partitions, all stored (NONE): where the
    topic's own list of answers starts when a later partition is refused."""
    return [_stored(p[0]) for p in partitions[:count]]
