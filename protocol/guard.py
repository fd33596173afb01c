"""The bounded pre-pass over a request body: no length in a request is trusted.

kio's native reader reserves room for as many elements as an array's length prefix claims before
it reads any of them, so a few bytes claiming four billion entries made the process abort on a
failed allocation. Before a body reaches that reader, :func:`guard` walks it once and checks:

* every array length against the bytes left in the frame (each element takes at least the
  smallest encoding of its type, so a count that cannot fit is refused before anything is
  allocated);
* null (length -1, or 0 in compact form) only where the schema allows a null array;
* the total number of array elements against a limit (``socket.request.max.elements``), so a
  large frame cannot turn into tens of millions of Python objects;
* tagged fields by their declared size (no request schema has an array in one).

Strings and bytes are only skipped here (kio checks their lengths against the buffer and refuses
null where the schema has none). Anything malformed raises :class:`GuardError`; the caller turns
it into a closed connection, as for any body that does not parse.

Like the encoders of ``protocol/fastcodec.py``, the walk is generated once per request class
from kio's field metadata as straight-line Python; fixed-width runs are skipped in one addition
and arrays of fixed-width items in one multiplication.
"""

from __future__ import annotations

import dataclasses
import struct
import typing
from collections.abc import Callable
from functools import cache
from typing import Any

from .fastcodec import field_kind, split_fields

DEFAULT_MAX_ELEMENTS = 100_000
"""Array entries a request may hold unless the broker says otherwise (socket.request.max.elements)."""

Guard = Callable[[bytes | memoryview, int, int], int]
"""``(frame, body offset, element limit) -> elements found``; raises GuardError."""


class GuardError(ValueError):
    """A request body whose lengths do not add up, or that holds too many elements."""


# Wire size of the fixed-width kafka types.
FIXED_SIZE = {
    "int8": 1,
    "int16": 2,
    "int32": 4,
    "int64": 8,
    "uint8": 1,
    "uint16": 2,
    "uint32": 4,
    "uint64": 8,
    "float64": 8,
    "bool": 1,
    "error_code": 2,
    "timedelta_i32": 4,
    "timedelta_i64": 8,
    "datetime_i64": 8,
    "uuid": 16,
}
_VARIABLE = ("string", "bytes", "records")

_I16 = struct.Struct(">h").unpack_from
_I32 = struct.Struct(">i").unpack_from


def _uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    """A multi-byte unsigned varint (at most 5 bytes, as Kafka's lengths are int32)."""
    value = 0
    shift = 0
    while True:
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7
        if shift > 28:
            raise GuardError("varint longer than 5 bytes")


def _too_many(count: int, what: str) -> GuardError:
    return GuardError(f"array {what} claims {count} entries, more than the request can hold")


def _over_limit(limit: int) -> GuardError:
    return GuardError(f"request holds more than {limit} array entries (socket.request.max.elements)")


def _null(what: str) -> GuardError:
    return GuardError(f"null array {what} where the schema allows none")


# ---------------------------------------------------------------------------------------------
# Schema facts


def _flexible(cls: type) -> bool:
    return bool(getattr(cls, "__flexible__", False))


def _primitive_min(kafka_type: str, flexible: bool) -> int:
    if kafka_type in FIXED_SIZE:
        return FIXED_SIZE[kafka_type]
    if kafka_type not in _VARIABLE:
        raise NotImplementedError(f"kafka type {kafka_type!r}")
    if flexible:
        return 1  # compact length varint
    return 2 if kafka_type == "string" else 4


@cache
def _entity_min(cls: type) -> int:
    """The fewest bytes an instance of ``cls`` can take on the wire."""
    flexible = _flexible(cls)
    plain, _ = split_fields(cls)
    total = 1 if flexible else 0  # tagged-field count
    for f in plain:
        total += _field_min(f, flexible)
    return max(total, 1)


def _field_min(f: dataclasses.Field[Any], flexible: bool) -> int:
    kind = field_kind(f)
    if kind.is_array:
        return 1 if flexible else 4
    if kind.entity is not None:
        return 1 if kind.optional else _entity_min(kind.entity)
    assert kind.kafka_type is not None
    return _primitive_min(kind.kafka_type, flexible)


def _fixed_size(f: dataclasses.Field[Any]) -> int | None:
    """Wire size of a field whose size never varies (None if it can)."""
    kind = field_kind(f)
    if kind.is_array:
        return None
    if kind.entity is not None:
        return None if kind.optional else _entity_fixed_size(kind.entity)
    return FIXED_SIZE.get(kind.kafka_type or "")


@cache
def _entity_fixed_size(cls: type) -> int | None:
    if _flexible(cls):
        return None  # tagged fields may follow
    total = 0
    for f in dataclasses.fields(cls):
        size = _fixed_size(f)
        if size is None:
            return None
        total += size
    return total


# ---------------------------------------------------------------------------------------------
# Generation


class _Source:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.namespace: dict[str, Any] = {
            "_uv": _uvarint,
            "_skip_compact": _skip_compact,
            "_skip_tags": _skip_tags,
            "_i16": _I16,
            "_i32": _I32,
            "_E": GuardError,
            "_many": _too_many,
            "_over": _over_limit,
            "_null": _null,
            "struct_error": struct.error,
        }
        self._n = 0
        self.pending = 0  # fixed-width bytes walked over but not yet added to p

    def fresh(self, prefix: str) -> str:
        self._n += 1
        return f"{prefix}{self._n}"

    def const(self, value: Any) -> str:
        name = self.fresh("_k")
        self.namespace[name] = value
        return name

    def line(self, indent: int, text: str) -> None:
        self.lines.append("    " * indent + text)

    def here(self) -> str:
        """The current position: p plus the fixed-width bytes pending."""
        return f"p + {self.pending}" if self.pending else "p"

    def settle(self, indent: int) -> None:
        """Add the pending fixed-width bytes to p."""
        if self.pending:
            self.line(indent, f"p += {self.pending}")
            self.pending = 0

    def uvarint(self, indent: int, var: str) -> None:
        """Read an unsigned varint at the current position into ``var``, advancing p."""
        at, k = self.here(), self.pending
        self.pending = 0
        self.line(indent, f"{var} = b[{at}]")
        self.line(indent, f"if {var} < 128:")
        self.line(indent + 1, f"p += {k + 1}")
        self.line(indent, "else:")
        self.line(indent + 1, f"{var}, p = _uv(b, {at})")

    def skip_tags(self, indent: int) -> None:
        """Skip a tagged-field section (one zero byte, nearly always)."""
        at, k = self.here(), self.pending
        self.pending = 0
        self.line(indent, f"if b[{at}]:")
        self.line(indent + 1, f"p = _skip_tags(b, {at}, n)")
        self.line(indent, "else:")
        self.line(indent + 1, f"p += {k + 1}")


def _skip_compact(buf: bytes, pos: int) -> int:
    """The position after the compact string/bytes at ``pos`` whose length took several bytes."""
    length, pos = _uvarint(buf, pos)
    return pos + length - 1 if length > 1 else pos


def _skip_tags(buf: bytes, pos: int, end: int) -> int:
    """The position after the tagged-field section at ``pos``, its tags unwalked."""
    count, pos = _uvarint(buf, pos)
    for _ in range(count):
        _tag, pos = _uvarint(buf, pos)
        size, pos = _uvarint(buf, pos)
        if size > end - pos:
            raise GuardError("tagged field runs past the frame")
        pos += size
    return pos


def _emit_skip_variable(src: _Source, indent: int, kafka_type: str, flexible: bool) -> None:
    """Skip a string/bytes/records value (kio checks its length and nullability itself)."""
    v = src.fresh("s")
    at, k = src.here(), src.pending
    src.pending = 0
    if flexible:
        src.line(indent, f"{v} = b[{at}]")
        src.line(indent, f"if {v} < 128:")
        src.line(indent + 1, f"p += {k} + ({v} or 1)" if k else f"p += {v} or 1")
        src.line(indent, "else:")
        src.line(indent + 1, f"p = _skip_compact(b, {at})")
        return
    reader = "_i16" if kafka_type == "string" else "_i32"
    width = k + (2 if kafka_type == "string" else 4)
    src.line(indent, f"{v} = {reader}(b, {at})[0]")
    src.line(indent, f"p += {width} + {v} if {v} > 0 else {width}")


def _emit_field(
    src: _Source, indent: int, owner: type, f: dataclasses.Field[Any], flexible: bool
) -> None:
    kind = field_kind(f)
    where = f"{owner.__name__}.{f.name}"
    if not kind.is_array:
        if kind.entity is not None:
            if kind.optional:
                # A nullable struct: int8 marker (-1 null, 1 present), then the struct.
                m = src.fresh("m")
                at, k = src.here(), src.pending
                src.pending = 0
                src.line(indent, f"{m} = b[{at}]")
                src.line(indent, f"p += {k + 1}")
                src.line(indent, f"if {m} == 1:")
                _emit_entity(src, indent + 1, kind.entity)
                src.settle(indent + 1)
                src.line(indent, f"elif {m} != 255:")
                src.line(indent + 1, f"raise _E('bad null marker of {where}')")
                return
            _emit_entity(src, indent, kind.entity)
            return
        assert kind.kafka_type is not None
        size = FIXED_SIZE.get(kind.kafka_type)
        if size is not None:
            src.pending += size
        else:
            _emit_skip_variable(src, indent, kind.kafka_type, flexible)
        return

    # An array: check its count before anything could be allocated for it.
    optional = kind.optional
    count = src.fresh("c")
    if flexible:
        src.uvarint(indent, count)
        src.line(indent, f"if {count} == 0:")
        src.line(indent + 1, "pass" if optional else f"raise _null({where!r})")
        src.line(indent, "else:")
        src.line(indent + 1, f"{count} -= 1")
    else:
        at, k = src.here(), src.pending
        src.pending = 0
        src.line(indent, f"{count} = _i32(b, {at})[0]")
        src.line(indent, f"p += {k + 4}")
        src.line(indent, f"if {count} < 0:")
        if optional:
            src.line(indent + 1, f"if {count} != -1:")
            src.line(indent + 2, f"raise _E('bad length of array {where}')")
        else:
            src.line(indent + 1, f"raise _null({where!r})")
        src.line(indent, "else:")
    body = indent + 1
    if kind.entity is not None:
        item_min = _entity_min(kind.entity)
        item_fixed = _entity_fixed_size(kind.entity)
    else:
        assert kind.kafka_type is not None
        item_min = _primitive_min(kind.kafka_type, flexible)
        item_fixed = FIXED_SIZE.get(kind.kafka_type)
    src.line(body, f"if {count} * {item_min} > n - p:")
    src.line(body + 1, f"raise _many({count}, {where!r})")
    src.line(body, f"e += {count}")
    src.line(body, "if e > limit:")
    src.line(body + 1, "raise _over(limit)")
    if item_fixed is not None:
        src.line(body, f"p += {count} * {item_fixed}")
        return
    src.line(body, f"for _ in range({count}):")
    if kind.entity is not None:
        _emit_entity(src, body + 1, kind.entity)
    else:
        assert kind.kafka_type is not None
        _emit_skip_variable(src, body + 1, kind.kafka_type, flexible)
    src.settle(body + 1)


def _emit_entity(src: _Source, indent: int, cls: type) -> None:
    """Walk the struct at p (leaving p after it, with fixed-width bytes possibly pending)."""
    if not dataclasses.is_dataclass(cls):
        raise NotImplementedError(f"{cls!r} is not a dataclass")
    flexible = _flexible(cls)
    plain, tagged = split_fields(cls)
    for f in plain:
        _emit_field(src, indent, cls, f, flexible)
    if not flexible:
        return
    # Tagged fields are skipped by their declared size. None of the request schemas served has
    # a tagged field holding an array; if one appears, walking it is still to be written.
    for _number, f in tagged:
        if _holds_array(f):
            raise NotImplementedError(f"tagged array field {cls.__name__}.{f.name}")
    src.skip_tags(indent)


def _holds_array(f: dataclasses.Field[Any]) -> bool:
    kind = field_kind(f)
    if kind.is_array:
        return True
    if kind.entity is None:
        return False
    return any(_holds_array(inner) for inner in dataclasses.fields(kind.entity))


@cache
def guard(cls: type) -> Guard | None:
    """The pre-pass for request class ``cls`` (see the module docstring), cached per class;
    None for a class without arrays, which has nothing to check (kio checks string and bytes
    lengths itself)."""
    if not any(_holds_array(f) for f in dataclasses.fields(cls)):
        return None
    src = _Source()
    src.line(1, "n = len(b)")
    src.line(1, "e = 0")
    src.line(1, "try:")
    _emit_entity(src, 2, cls)
    src.settle(2)
    src.line(2, "if p > n:")
    src.line(3, "raise _E('the body runs past the frame')")
    src.line(1, "except (IndexError, struct_error):")
    src.line(2, "raise _E('the body runs past the frame') from None")
    src.line(1, "return e")
    code = "\n".join(["def check(b, p, limit):", *src.lines]) + "\n"
    exec(compile(code, f"<guard {cls.__qualname__}>", "exec"), src.namespace)
    check = typing.cast(Guard, src.namespace["check"])
    check.__guard_source__ = code  # type: ignore[attr-defined]
    return check
