"""The flexible-version primitives of the consumer-group record codecs (``records``).

Kafka's flexible encoding as the ``__consumer_offsets`` consumer-group values use it: compact
strings, arrays and bytes (unsigned varint of length + 1, 0 = null), UUIDs as 16 bytes, and
tagged-field sections (varint count, then per field a varint tag, a varint size and the data).
Keys use classic int16-length strings (:meth:`Writer.short_string`). The reader bounds every
length by the bytes left and raises :class:`~coordinator.schema_errors.SchemaError`.
Also the topic-partition list the assignment values share (:func:`write_topic_partitions`,
:func:`read_topic_partitions`), with KIP-1251's per-partition assignment epochs.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable, Sequence

from kcoord.coordinator.schema_errors import SchemaError

__all__ = [
    "I64",
    "Reader",
    "TopicPartitions",
    "Writer",
    "read_topic_partitions",
    "reader",
    "write_topic_partitions",
]

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
I64 = struct.Struct(">q")
_MAX_STRING = 0x7FFF  # Kafka's limit for string fields, compact ones included
_MAX_VARINT = 0x7FFFFFFF


def _utf8(v: str) -> bytes:
    raw = v.encode("utf-8")
    if len(raw) > _MAX_STRING:
        raise SchemaError(f"string of {len(raw)} bytes is too long for a string field")
    return raw


def _uvarint(v: int) -> bytes:
    out = bytearray()
    while v > 0x7F:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


class Writer:
    __slots__ = ("_parts",)

    def __init__(self) -> None:
        self._parts: list[bytes] = []

    def raw(self, v: bytes) -> None:
        self._parts.append(v)

    def int8(self, v: int) -> None:
        self._parts.append(_I8.pack(v))

    def int16(self, v: int) -> None:
        self._parts.append(_I16.pack(v))

    def int32(self, v: int) -> None:
        self._parts.append(_I32.pack(v))

    def int64(self, v: int) -> None:
        self._parts.append(I64.pack(v))

    def uuid(self, v: uuid.UUID) -> None:
        self._parts.append(v.bytes)

    def uvarint(self, v: int) -> None:
        self._parts.append(_uvarint(v))

    def short_string(self, v: str) -> None:  # keys: classic, int16 length
        raw = _utf8(v)
        self._parts.append(_I16.pack(len(raw)))
        self._parts.append(raw)

    def string(self, v: str | None) -> None:  # compact (nullable when v may be None)
        if v is None:
            self._parts.append(b"\x00")
            return
        raw = _utf8(v)
        self._parts.append(_uvarint(len(raw) + 1))
        self._parts.append(raw)

    def bytes_(self, v: bytes) -> None:
        self._parts.append(_uvarint(len(v) + 1))
        self._parts.append(bytes(v))

    def array_len(self, n: int) -> None:
        self._parts.append(_uvarint(n + 1))

    def int32s(self, values: Sequence[int]) -> None:
        """A compact int32 array."""
        self.array_len(len(values))
        self._parts.append(struct.pack(f">{len(values)}i", *values))

    def no_tags(self) -> None:
        self._parts.append(b"\x00")

    def tags(self, fields: Sequence[tuple[int, bytes]]) -> None:
        """A tagged-field section: (tag, data) in ascending tag order."""
        self._parts.append(_uvarint(len(fields)))
        for tag, data in fields:
            self._parts.append(_uvarint(tag))
            self._parts.append(_uvarint(len(data)))
            self._parts.append(data)

    def getvalue(self) -> bytes:
        return b"".join(self._parts)


class Reader:
    __slots__ = ("_buf", "_pos", "_end", "_what")

    def __init__(self, buf: memoryview, what: str, pos: int = 0, end: int | None = None) -> None:
        self._buf = buf
        self._pos = pos
        self._end = len(buf) if end is None else end
        self._what = what

    def error(self, message: str) -> SchemaError:
        return SchemaError(f"{self._what}: {message}")

    def remaining(self) -> int:
        return self._end - self._pos

    def take(self, n: int, field: str) -> memoryview:
        end = self._pos + n
        if n < 0 or end > self._end:
            raise self.error(
                f"truncated reading {field} at byte {self._pos} (need {n}, have {self.remaining()})"
            )
        out = self._buf[self._pos : end]
        self._pos = end
        return out

    def int8(self, field: str) -> int:
        return int(_I8.unpack(self.take(1, field))[0])

    def int16(self, field: str) -> int:
        return int(_I16.unpack(self.take(2, field))[0])

    def int32(self, field: str) -> int:
        return int(_I32.unpack(self.take(4, field))[0])

    def int64(self, field: str) -> int:
        return int(I64.unpack(self.take(8, field))[0])

    def uuid(self, field: str) -> uuid.UUID:
        return uuid.UUID(bytes=bytes(self.take(16, field)))

    def uvarint(self, field: str) -> int:
        value = shift = 0
        for _ in range(5):
            b = self.take(1, field)[0]
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                if value > _MAX_VARINT:
                    raise self.error(f"{field}: varint {value} out of range")
                return value
            shift += 7
        raise self.error(f"{field}: varint longer than 5 bytes")

    def _text(self, n: int, field: str) -> str:
        if n > _MAX_STRING:
            raise self.error(f"{field} has invalid length {n}")
        try:
            return bytes(self.take(n, field)).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise self.error(f"{field} is not valid UTF-8") from exc

    def short_string(self, field: str) -> str:  # keys: classic, int16 length, not nullable
        n = self.int16(field)
        if n < 0:
            raise self.error(f"{field} has negative length {n} (not nullable)")
        return self._text(n, field)

    def nullable_string(self, field: str) -> str | None:
        n = self.uvarint(field) - 1
        return None if n < 0 else self._text(n, field)

    def string(self, field: str) -> str:
        v = self.nullable_string(field)
        if v is None:
            raise self.error(f"{field} is null (not nullable)")
        return v

    def bytes_(self, field: str) -> bytes:
        n = self.uvarint(field) - 1
        if n < 0:
            raise self.error(f"{field} is null (not nullable)")
        return bytes(self.take(n, field))

    def array_len(self, field: str) -> int:
        n = self.uvarint(field) - 1
        if n < 0:
            raise self.error(f"{field} is null (not nullable)")
        # Every element takes at least one byte: reject absurd counts before looping.
        if n > self.remaining():
            raise self.error(f"{field} count {n} exceeds the remaining bytes")
        return n

    def int32s(self, field: str) -> tuple[int, ...]:
        """A compact int32 array (not nullable), unpacked at once."""
        n = self.array_len(field)
        if n < 0:
            raise self.error(f"{field} has invalid length {n}")
        return struct.unpack(f">{n}i", self.take(4 * n, field))

    def tags(self, known: dict[int, Callable[[Reader], None]] | None = None) -> None:
        """A tagged-field section: known tags go to their reader (which must consume exactly
        the field's bytes), unknown ones are skipped."""
        for _ in range(self.uvarint("tagged field count")):
            tag = self.uvarint("tag")
            size = self.uvarint(f"size of tagged field {tag}")
            if size > self.remaining():
                raise self.error(f"tagged field {tag} of {size} bytes runs past the end")
            read = known.get(tag) if known else None
            if read is None:
                self._pos += size
                continue
            sub = Reader(self._buf, f"{self._what} tag {tag}", self._pos, self._pos + size)
            read(sub)
            sub.end()
            self._pos += size

    def end(self) -> None:
        if self._pos != self._end:
            raise self.error(f"{self.remaining()} trailing bytes")


def reader(buf: bytes, what: str) -> Reader:
    if not isinstance(buf, bytes | bytearray | memoryview):
        raise SchemaError(f"{what}: expected bytes, got {type(buf).__name__}")
    return Reader(memoryview(bytes(buf)), what)


TopicPartitions = tuple[tuple[uuid.UUID, tuple[int, ...]], ...]
"""(topic id, partitions) pairs: an assignment as the records carry it."""


def write_topic_partitions(
    w: Writer, tps: TopicPartitions, epochs: Sequence[Sequence[int]] = ()
) -> None:
    """``epochs``: per topic entry, its partitions' assignment epochs (KIP-1251, tagged field
    0 of the entry, written only when non-empty); () writes none."""
    w.array_len(len(tps))
    for i, (topic_id, partitions) in enumerate(tps):
        w.uuid(topic_id)
        w.int32s(partitions)
        topic_epochs = epochs[i] if i < len(epochs) else ()
        if topic_epochs:
            e = Writer()
            e.int32s(topic_epochs)
            w.tags([(0, e.getvalue())])
        else:
            w.no_tags()


def read_topic_partitions(
    r: Reader, field: str
) -> tuple[TopicPartitions, tuple[tuple[int, ...], ...]]:
    """A topic list and, per entry, the assignment epochs of its partitions (KIP-1251, tagged
    field 0 of the entry); the epochs are () when no entry has any."""
    out = []
    all_epochs: list[tuple[int, ...]] = []
    for _ in range(r.array_len(field)):
        topic_id = r.uuid("topic_id")
        partitions = r.int32s("partitions")
        epochs: list[tuple[int, ...]] = [()]

        def read_epochs(t: Reader, into: list[tuple[int, ...]] = epochs) -> None:
            into[0] = t.int32s("assignment_epochs")

        r.tags({0: read_epochs})
        out.append((topic_id, partitions))
        all_epochs.append(epochs[0])
    return tuple(out), (tuple(all_epochs) if any(all_epochs) else ())
