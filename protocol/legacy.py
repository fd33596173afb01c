"""Produce v0–v2, which kio does not model: enough to answer them with UNSUPPORTED_VERSION.

These versions carry message format v0/v1, which kcoord does not store. Apache Kafka 4 advertises
Produce from v0 (librdkafka infers features from that range) and answers such requests with an
error per partition; so do we. Request: acks i16, timeout i32, [topic string, [partition i32,
message set bytes]]. Response: [topic string, [partition i32, error i16, base offset i64,
(v2) log append time i64]], (v1+) throttle time i32.
"""

from __future__ import annotations

import struct

from .errors import ErrorCode

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class _Cursor:
    def __init__(self, buf: bytes, pos: int) -> None:
        self.buf = buf
        self.pos = pos

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


def decode_legacy_produce(frame: bytes, pos: int) -> tuple[int, list[tuple[str, list[int]]]] | None:
    """(acks, [(topic, [partitions])]) of a Produce v0–v2 body, or None if it does not parse."""
    try:
        c = _Cursor(frame, pos)
        acks = c.take(_I16)
        c.take(_I32)
        topics = []
        for _ in range(max(0, c.take(_I32))):
            name = c.string()
            parts = []
            for _ in range(max(0, c.take(_I32))):
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
