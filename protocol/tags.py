"""Unknown tagged fields of flexible requests: found and dropped before kio reads the body.

Kafka's protocol lets a newer client add tagged fields to any flexible struct; a reader skips
the tags it does not know. kio's native reader refuses them instead (``KeyError: Unknown tagged
field tag``), which would close the connection. :func:`strip_unknown_tags` walks a request body
by its schema (kio's field metadata, as ``protocol/guard.py`` does) and returns a copy without
the tagged fields its structs do not declare, or None when there are none; known tagged fields
are kept byte for byte (a known tag holding a struct is walked too, for unknown tags inside).

It runs only when kio has refused a body (``protocol/codec.py``), so the usual request costs
nothing more; the bounded pre-pass has already checked the body's arrays by then. Anything that
does not add up raises :class:`TagWalkError` (the caller keeps kio's error).
"""

from __future__ import annotations

import dataclasses
import struct
from functools import cache
from typing import Any

from .fastcodec import field_kind, split_fields
from .guard import FIXED_SIZE

_I16 = struct.Struct(">h").unpack_from
_I32 = struct.Struct(">i").unpack_from


class TagWalkError(ValueError):
    """The body does not parse as its schema."""


def _uvarint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    value = 0
    shift = 0
    while True:
        if pos >= len(buf):
            raise TagWalkError("truncated varint")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7
        if shift > 28:
            raise TagWalkError("varint longer than 5 bytes")


def _uvarint_bytes(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


@cache
def _known_tags(cls: type) -> dict[int, dataclasses.Field[Any]]:
    return dict(split_fields(cls)[1])


class _Walk:
    """One walk over a body: copies what it keeps into ``parts`` as slices of the input."""

    def __init__(self, buf: bytes | memoryview) -> None:
        self.buf = buf
        self.parts: list[bytes | memoryview] = []
        self.copied = 0  # input before this position is in parts already

    def _need(self, pos: int) -> int:
        if pos > len(self.buf):
            raise TagWalkError("the body runs past the frame")
        return pos

    def entity(self, cls: type, pos: int) -> int:
        flexible = bool(getattr(cls, "__flexible__", False))
        plain, _tagged = split_fields(cls)
        for f in plain:
            pos = self.field(f, flexible, pos)
        if flexible:
            pos = self.tags(cls, pos)
        return pos

    def field(self, f: dataclasses.Field[Any], flexible: bool, pos: int) -> int:
        kind = field_kind(f)
        if kind.is_array:
            if flexible:
                count, pos = _uvarint(self.buf, pos)
                count -= 1  # 0: null
            else:
                count = _I32(self.buf, self._need(pos + 4) - 4)[0]
                pos += 4
            for _ in range(max(count, 0)):
                pos = self.one(kind.entity, kind.kafka_type, flexible, pos)
            return pos
        if kind.entity is not None and kind.optional:
            marker = self.buf[pos] if pos < len(self.buf) else None
            if marker == 0xFF:
                return pos + 1
            if marker != 1:
                raise TagWalkError(f"bad null marker of {f.name}")
            return self.entity(kind.entity, pos + 1)
        return self.one(kind.entity, kind.kafka_type, flexible, pos)

    def one(self, entity: type | None, kafka_type: str | None, flexible: bool, pos: int) -> int:
        if entity is not None:
            return self.entity(entity, pos)
        assert kafka_type is not None
        size = FIXED_SIZE.get(kafka_type)
        if size is not None:
            return self._need(pos + size)
        if flexible:
            length, pos = _uvarint(self.buf, pos)
            return self._need(pos + max(length - 1, 0))
        if kafka_type == "string":
            length = _I16(self.buf, self._need(pos + 2) - 2)[0]
            pos += 2
        else:
            length = _I32(self.buf, self._need(pos + 4) - 4)[0]
            pos += 4
        return self._need(pos + max(length, 0))

    def tags(self, cls: type, pos: int) -> int:
        """The tagged-field section at ``pos``: unknown tags dropped, known struct tags walked."""
        start = pos
        count, pos = _uvarint(self.buf, pos)
        if not count:
            return pos
        known = _known_tags(cls)
        kept: list[bytes] = []
        changed = False
        for _ in range(count):
            tag, pos = _uvarint(self.buf, pos)
            size, at = _uvarint(self.buf, pos)
            end = self._need(at + size)
            f = known.get(tag)
            if f is None:
                changed = True
            else:
                data = bytes(self.buf[at:end])
                kind = field_kind(f)
                if kind.entity is not None and not kind.is_array:
                    inner = strip_unknown_tags(kind.entity, data, 0)
                    if inner is not None:
                        data, changed = inner, True
                kept.append(_uvarint_bytes(tag) + _uvarint_bytes(len(data)) + data)
            pos = end
        if changed:
            self.parts.append(self.buf[self.copied : start])
            self.parts.append(_uvarint_bytes(len(kept)) + b"".join(kept))
            self.copied = pos
        return pos


def strip_unknown_tags(cls: type, buf: bytes | memoryview, offset: int) -> bytes | None:
    """The body of ``cls`` at ``offset`` without its unknown tagged fields (from ``offset`` to
    the end of ``buf``), or None if it has none. TagWalkError if it does not parse."""
    walk = _Walk(buf)
    walk.copied = offset
    try:
        walk.entity(cls, offset)
    except (IndexError, struct.error) as e:
        raise TagWalkError("the body runs past the frame") from e
    if walk.copied == offset and not walk.parts:
        return None
    walk.parts.append(buf[walk.copied :])
    return b"".join(walk.parts)
