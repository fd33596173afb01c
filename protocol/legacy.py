"""Old request versions kio does not model: Produce v0–v2 and OffsetCommit v0–v1.

Produce v0–v2 is decoded just enough to answer it with UNSUPPORTED_VERSION (below);
OffsetCommit v0/v1 is decoded fully into the shape of a kio v2 request (their responses are
byte-for-byte v2 responses, so kio encodes those).

These versions carry message format v0/v1, which kcoord does not store. Apache Kafka 4 advertises
Produce from v0 (librdkafka infers features from that range) and answers such requests with an
error per partition; so do we. Request: acks i16, timeout i32, [topic string, [partition i32,
message set bytes]]. Response: [topic string, [partition i32, error i16, base offset i64,
(v2) log append time i64]], (v1+) throttle time i32.
"""

from __future__ import annotations

import struct
from types import SimpleNamespace

from .errors import ErrorCode
from .framing import Frame
from .guard import DEFAULT_MAX_ELEMENTS

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class _Cursor:
    def __init__(self, buf: Frame, pos: int, max_elements: int) -> None:
        self.buf = buf
        self.pos = pos
        self.elements_left = max_elements

    def array(self, item_min_size: int) -> int:
        """An array's length, checked against the bytes left (each item takes at least
        ``item_min_size``) and against the request's element limit; null is refused."""
        n = self.take(_I32)
        if n < 0:
            raise ValueError("null array")
        if n * item_min_size > len(self.buf) - self.pos:
            raise ValueError(f"array claims {n} entries, more than the request can hold")
        self.elements_left -= n
        if self.elements_left < 0:
            raise ValueError("too many array entries (socket.request.max.elements)")
        return n

    def take(self, st: struct.Struct) -> int:
        if self.pos + st.size > len(self.buf):
            raise ValueError("truncated")
        (v,) = st.unpack_from(self.buf, self.pos)
        self.pos += st.size
        return int(v)

    def string(self) -> str:
        n = self.take(_I16)
        if n < 0 or self.pos + n > len(self.buf):
            raise ValueError("bad string")
        s = self.buf[self.pos : self.pos + n].decode("utf-8")
        self.pos += n
        return s

    def skip_bytes(self) -> None:
        n = self.take(_I32)
        if n > 0:
            if self.pos + n > len(self.buf):
                raise ValueError("bad bytes")
            self.pos += n


class LegacyDecodeError(ValueError):
    """An old-version request body that does not parse."""


def decode_legacy_produce(
    frame: Frame, pos: int, max_elements: int = DEFAULT_MAX_ELEMENTS
) -> tuple[int, list[tuple[str, list[int]]]] | None:
    """(acks, [(topic, [partitions])]) of a Produce v0–v2 body, or None if it does not parse
    (or holds more than ``max_elements`` array entries)."""
    try:
        c = _Cursor(frame, pos, max_elements)
        acks = c.take(_I16)
        c.take(_I32)
        topics = []
        for _ in range(c.array(6)):  # name, partitions
            name = c.string()
            parts = []
            for _ in range(c.array(8)):  # partition, message set
                parts.append(c.take(_I32))
                c.skip_bytes()
            topics.append((name, parts))
        return acks, topics
    except (ValueError, UnicodeDecodeError):
        return None


def encode_legacy_produce_response(version: int, topics: list[tuple[str, list[int]]]) -> bytes:
    out = bytearray(_I32.pack(len(topics)))
    for name, parts in topics:
        raw = name.encode("utf-8")
        out += _I16.pack(len(raw)) + raw + _I32.pack(len(parts))
        for p in parts:
            out += _I32.pack(p) + _I16.pack(ErrorCode.unsupported_version) + _I64.pack(-1)
            if version >= 2:
                out += _I64.pack(-1)
    if version >= 1:
        out += _I32.pack(0)
    return bytes(out)


def _nullable_string(c: _Cursor) -> str | None:
    n = c.take(_I16)
    if n == -1:
        return None
    c.pos -= 2
    return c.string()


def decode_offset_commit_v0_v1(
    frame: Frame, pos: int, version: int, max_elements: int = DEFAULT_MAX_ELEMENTS
) -> SimpleNamespace:
    """OffsetCommit v0 (group, topics) or v1 (+ generation, member id, per-partition timestamp),
    as an object with the fields of a kio OffsetCommitRequest v2; LegacyDecodeError if it does
    not parse or holds more than ``max_elements`` array entries."""
    try:
        c = _Cursor(frame, pos, max_elements)
        group_id = c.string()
        generation, member_id = -1, ""
        if version >= 1:
            generation = c.take(_I32)
            member_id = c.string()
        topics = []
        for _ in range(c.array(6)):  # name, partitions
            name = c.string()
            partitions = []
            for _ in range(c.array(22 if version >= 1 else 14)):
                index = c.take(_I32)
                offset = c.take(_I64)
                if version >= 1:
                    c.take(_I64)  # commit timestamp chosen by the client: the broker's clock wins
                metadata = _nullable_string(c)
                partitions.append(
                    SimpleNamespace(
                        partition_index=index,
                        committed_offset=offset,
                        committed_leader_epoch=-1,
                        committed_metadata=metadata,
                    )
                )
            topics.append(SimpleNamespace(name=name, partitions=partitions))
    except (ValueError, UnicodeDecodeError) as e:
        raise LegacyDecodeError(f"cannot decode OffsetCommit v{version}: {e}") from e
    return SimpleNamespace(
        group_id=group_id,
        generation_id_or_member_epoch=generation,
        member_id=member_id,
        group_instance_id=None,
        topics=topics,
    )
