"""The consumer protocol embedded in classic JoinGroup and SyncGroup (Kafka's
ConsumerProtocolSubscription and ConsumerProtocolAssignment), for classic members of consumer
groups and for converting a group between the two types.

Subscription, by version: v0 topics (int32 count of int16-length strings) and nullable user
data (int32 length); v1 adds owned partitions (int32 count of: topic, int32 count of int32
partitions); v2 a generation id (int32); v3 a nullable rack id (int16 length). Assignment: the
assigned partitions (as owned partitions above) and nullable user data, the same in v0-v3.
Decoders raise :class:`SubscriptionError` on anything malformed.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")

TopicPartitionNames = tuple[tuple[str, tuple[int, ...]], ...]


class SubscriptionError(ValueError):
    """Embedded consumer-protocol bytes that do not parse."""


@dataclass(frozen=True, slots=True)
class Subscription:
    version: int
    topics: tuple[str, ...]
    owned: TopicPartitionNames = ()
    rack_id: str | None = None


class _Reader:
    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes) -> None:
        self.buf = buf
        self.pos = 0

    def _take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.buf):
            raise SubscriptionError("truncated consumer protocol data")
        out = self.buf[self.pos : self.pos + n]
        self.pos += n
        return out

    def i16(self) -> int:
        return int(_I16.unpack(self._take(2))[0])

    def i32(self) -> int:
        return int(_I32.unpack(self._take(4))[0])

    def string(self, nullable: bool = False) -> str | None:
        n = self.i16()
        if n == -1 and nullable:
            return None
        try:
            return self._take(n).decode("utf-8")
        except UnicodeDecodeError:
            raise SubscriptionError("a string is not UTF-8") from None

    def count(self) -> int:
        n = self.i32()
        if n < 0 or n > len(self.buf) - self.pos:
            raise SubscriptionError("bad array length")
        return n

    def user_data(self) -> None:
        n = self.i32()
        if n >= 0:
            self._take(n)
        elif n != -1:
            raise SubscriptionError("bad user data length")

    def partitions(self) -> TopicPartitionNames:
        out = []
        for _ in range(self.count()):
            topic = self.string()
            assert topic is not None
            out.append((topic, tuple(self.i32() for _ in range(self.count()))))
        return tuple(out)

    def at_end(self) -> bool:
        return self.pos >= len(self.buf)


def decode_subscription(metadata: bytes) -> Subscription:
    """A member's subscription (newer versions' extra fields are ignored, as Kafka does)."""
    r = _Reader(bytes(metadata))
    version = r.i16()
    if version < 0:
        raise SubscriptionError(f"subscription version {version}")
    topics = tuple(t for t in (r.string() for _ in range(r.count())) if t is not None)
    r.user_data()
    owned: TopicPartitionNames = ()
    rack: str | None = None
    if version >= 1 and not r.at_end():
        owned = r.partitions()
        if version >= 2 and not r.at_end():
            r.i32()  # generation id
            if version >= 3 and not r.at_end():
                rack = r.string(nullable=True)
    return Subscription(version, topics, owned, rack)


def decode_assignment(data: bytes) -> TopicPartitionNames:
    """The partitions of an assignment (empty bytes: none, as a member without one has)."""
    if not data:
        return ()
    r = _Reader(bytes(data))
    if r.i16() < 0:
        raise SubscriptionError("bad assignment version")
    return r.partitions()


def encode_assignment(partitions: Mapping[str, Iterable[int]], version: int = 0) -> bytes:
    """An assignment of ``version`` (0-3 share one layout; newer answers are written as 3)."""
    out = [_I16.pack(max(0, min(version, 3))), _I32.pack(len(partitions))]
    for topic in sorted(partitions):
        name = topic.encode("utf-8")
        parts = sorted(partitions[topic])
        out.append(_I16.pack(len(name)) + name + _I32.pack(len(parts)))
        out.extend(_I32.pack(p) for p in parts)
    out.append(_I32.pack(-1))  # no user data
    return b"".join(out)


def version_of(metadata: bytes) -> int:
    """The version of an embedded subscription (0 if unreadable)."""
    return int(_I16.unpack(metadata[:2])[0]) if len(metadata) >= 2 else 0
