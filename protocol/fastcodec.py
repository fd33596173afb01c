"""Specialised per-class wire encoders for kio entities, and the matching decoders.

This module owns the fast path of request/response (de)serialisation. For a kio entity class (any
API, any version, request or response) :func:`encoder` generates, once, a Python function that
writes an instance to bytes exactly as ``kio.serial.entity_writer`` would: the field walk is
derived from kio's own field metadata (``kafka_type``, ``tag``, optionality, nested dataclasses,
the class's ``__flexible__`` flag) and turned into straight-line source code that is ``exec``-ed.
Runs of fixed-width fields (including the int16/int32 length prefixes of legacy strings, bytes
and arrays, and the empty tagged-field count of flexible structs) are packed with one precompiled
``struct.Struct`` call; the output is a list of chunks joined once, so large ``records`` payloads
are copied a single time.

If a schema uses something the generator does not model it raises ``NotImplementedError``
internally and :func:`encoder` quietly hands back a wrapper around kio's writer instead. The
generated code also does no per-field type checks: a value of an unexpected type (``bytes`` in a
string field, ``None`` in a non-nullable array, ...) makes it raise, and its ``except`` clause
re-encodes the entity with kio's writer, so such values give kio's bytes or kio's error.

Decoding: kio 0.6.5's ``entity_reader`` is implemented natively (``kio._kio_native``) and builds
entities several times faster than any pure-Python decoder can (creating a frozen slotted
dataclass instance from Python alone costs more than kio's whole per-partition decode), so
:func:`decoder` returns that reader, cached per class. Measurements: bench/codec.py.
"""

from __future__ import annotations

import dataclasses
import io
import struct
import types
import typing
from collections.abc import Callable
from functools import cache
from typing import Any

from kio.serial import entity_reader, entity_writer

Encoder = Callable[[Any], bytes]
# (buffer, offset) -> (entity, number of bytes it took), kio's reader convention.
Decoder = Callable[[bytes | memoryview, int], tuple[Any, int]]

_ZERO_UUID = bytes(16)

# struct format characters of the fixed-width kafka types (the value goes through an expression
# built by _fixed_expr first for the non-integer ones).
_FIXED_FORMAT = {
    "int8": "b",
    "int16": "h",
    "int32": "i",
    "int64": "q",
    "uint8": "B",
    "uint16": "H",
    "uint32": "I",
    "uint64": "Q",
    "float64": "d",
    "bool": "?",
    "error_code": "h",
    "timedelta_i32": "i",
    "timedelta_i64": "q",
}

# One-byte unsigned varints, the overwhelmingly common case for lengths and counts.
_SMALL_UVARINT: tuple[bytes, ...] = tuple(bytes((i,)) for i in range(128))


def _uvarint(value: int) -> bytes:
    """Unsigned varint (7 bits per byte, low group first, high bit = more follows)."""
    if value < 0:
        raise ValueError(f"negative unsigned varint {value}")
    if value < 128:
        return _SMALL_UVARINT[value]
    out = bytearray()
    while value > 127:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


# ---------------------------------------------------------------------------------------------
# Schema introspection (mirrors how kio classifies a dataclass field)


@dataclasses.dataclass(frozen=True, slots=True)
class FieldKind:
    """What a field holds, as kio sees it."""

    kafka_type: str | None  # None for nested entities
    entity: type | None  # nested dataclass (single or array item)
    is_array: bool
    optional: bool  # ``X | None`` on the field (on the array itself for arrays)


def _strip_none(tp: Any) -> tuple[Any, bool]:
    origin = typing.get_origin(tp)
    if origin in (types.UnionType, typing.Union):
        args = typing.get_args(tp)
        rest = [a for a in args if a is not type(None)]
        if len(args) != 2 or len(rest) != 1:
            raise NotImplementedError(f"union type {tp!r}")
        return rest[0], True
    return tp, False


def field_kind(field: dataclasses.Field[Any]) -> FieldKind:
    tp, optional = _strip_none(field.type)
    if isinstance(tp, str):
        raise NotImplementedError("string annotations")
    is_array = typing.get_origin(tp) is tuple
    if is_array:
        args = typing.get_args(tp)
        if len(args) != 2 or args[1] is not Ellipsis:
            raise NotImplementedError(f"tuple type {tp!r}")
        tp = args[0]
        # kio treats ``tuple[X | None, ...]`` as nullable too; no schema has it.
        tp, inner_optional = _strip_none(tp)
        if inner_optional:
            raise NotImplementedError("array of nullable items")
    if dataclasses.is_dataclass(tp):
        return FieldKind(None, typing.cast(type, tp), is_array, optional)
    kafka_type = field.metadata.get("kafka_type")
    if not isinstance(kafka_type, str):
        raise NotImplementedError(f"field {field.name} has no kafka_type")
    return FieldKind(kafka_type, None, is_array, optional)


def split_fields(
    cls: type,
) -> tuple[list[dataclasses.Field[Any]], list[tuple[int, dataclasses.Field[Any]]]]:
    """The fields of kio class ``cls``: (plain ones in wire order, [(tag, field)] tagged ones)."""
    plain: list[dataclasses.Field[Any]] = []
    tagged: list[tuple[int, dataclasses.Field[Any]]] = []
    for field in dataclasses.fields(cls):
        tag = field.metadata.get("tag")
        if tag is None:
            plain.append(field)
        else:
            tagged.append((int(tag), field))
    return plain, tagged


# ---------------------------------------------------------------------------------------------
# Encoder generation


class _Pending:
    """Fixed-width values waiting to be packed together: struct format chars and expressions."""

    __slots__ = ("formats", "exprs")

    def __init__(self) -> None:
        self.formats: list[str] = []
        self.exprs: list[str] = []

    def add(self, fmt: str, expr: str) -> None:
        self.formats.append(fmt)
        self.exprs.append(expr)


class _EncoderSource:
    """Accumulates the source of one generated encoder and the constants it refers to."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.namespace: dict[str, Any] = {
            "_uv": _uvarint,
            "_UV": _SMALL_UVARINT,
            "_ZU": _ZERO_UUID,
            "_spack": struct.pack,
        }
        self._structs: dict[str, str] = {}
        self._counter = 0

    def fresh(self, prefix: str) -> str:
        self._counter += 1
        return f"{prefix}{self._counter}"

    def const(self, value: Any, prefix: str = "_k") -> str:
        name = self.fresh(prefix)
        self.namespace[name] = value
        return name

    def line(self, indent: int, text: str) -> None:
        self.lines.append("    " * indent + text)

    def flush(self, indent: int, pending: _Pending) -> None:
        """Emit one ``struct.pack`` for everything pending (merging all pending values)."""
        if not pending.formats:
            return
        fmt = ">" + "".join(pending.formats)
        if all(e.isdigit() or e == "0" for e in pending.exprs):
            # Only constants (typically tagged-field counts of nested structs): precompute.
            packed = struct.pack(fmt, *(int(e) for e in pending.exprs))
            self.line(indent, f"w({self.const(packed, '_b')})")
        else:
            name = self._structs.get(fmt)
            if name is None:
                name = self.const(struct.Struct(fmt).pack, "_p")
                self._structs[fmt] = name
            self.line(indent, f"w({name}({', '.join(pending.exprs)}))")
        pending.formats.clear()
        pending.exprs.clear()

    def varint(self, indent: int, expr: str) -> None:
        """Write the unsigned varint of ``expr`` (a simple local name or small expression)."""
        var = self.fresh("n")
        self.line(indent, f"{var} = {expr}")
        self.line(indent, f"w(_UV[{var}] if {var} < 128 else _uv({var}))")


_PACKED_ARRAY_MAX = 32


@cache
def _array_packers(prefix: str, fmt: str) -> tuple[Callable[..., bytes], ...]:
    """``pack`` of a ``prefix`` length then ``n`` values of ``fmt``, for n < _PACKED_ARRAY_MAX."""
    return tuple(struct.Struct(f">{prefix}{n}{fmt}").pack for n in range(_PACKED_ARRAY_MAX))


def _fixed_expr(kafka_type: str, value: str) -> str:
    """Expression turning a field value into the integer/float struct packs (kio's arithmetic)."""
    if kafka_type in ("timedelta_i32", "timedelta_i64"):
        return f"round({value}.total_seconds() * 1000)"
    return value


def _emit_primitive(
    src: _EncoderSource,
    indent: int,
    pending: _Pending,
    kafka_type: str,
    value: str,
    flexible: bool,
    optional: bool,
) -> None:
    """Write one primitive value; mirrors kio's choice of writer for (type, flexible, optional)."""
    if kafka_type in _FIXED_FORMAT:
        if optional:
            raise NotImplementedError(f"nullable {kafka_type}")
        pending.add(_FIXED_FORMAT[kafka_type], _fixed_expr(kafka_type, value))
        return
    if kafka_type == "uuid":  # None and the zero UUID are the same on the wire
        v = src.fresh("u")
        src.line(indent, f"{v} = {value}")
        pending.add("16s", f"_ZU if {v} is None else {v}.bytes")
        return
    if kafka_type == "datetime_i64":
        if optional:
            v = src.fresh("t")
            src.line(indent, f"{v} = {value}")
            pending.add("q", f"-1 if {v} is None else round({v}.timestamp() * 1000)")
        else:
            pending.add("q", f"round({value}.timestamp() * 1000)")
        return
    if kafka_type not in ("string", "bytes", "records"):
        raise NotImplementedError(f"kafka type {kafka_type!r}")
    is_text = kafka_type == "string"
    v = src.fresh("s")
    if flexible:
        # Compact form: varint(length + 1), 0 for null.
        if optional:
            src.flush(indent, pending)
            src.line(indent, f"{v} = {value}")
            src.line(indent, f"if {v} is None:")
            src.line(indent + 1, "w(b'\\x00')")
            src.line(indent, "else:")
            indent += 1
            if is_text:
                src.line(indent, f"{v} = {v}.encode()")
        else:
            src.line(indent, f"{v} = {value}.encode()" if is_text else f"{v} = {value}")
            src.flush(indent, pending)
        src.varint(indent, f"len({v}) + 1")
        src.line(indent, f"w({v})")
        return
    # Legacy form: int16 (strings) or int32 (bytes) length, -1 for null; the length joins the
    # pending fixed-width run.
    fmt = "h" if is_text else "i"
    if optional:
        src.line(indent, f"{v} = {value}")
        n = src.fresh("s")
        if is_text:
            src.line(indent, f"{n} = b'' if {v} is None else {v}.encode()")
        else:
            src.line(indent, f"{n} = b'' if {v} is None else {v}")
        pending.add(fmt, f"-1 if {v} is None else len({n})")
        src.flush(indent, pending)
        src.line(indent, f"w({n})")
    else:
        src.line(indent, f"{v} = {value}.encode()" if is_text else f"{v} = {value}")
        pending.add(fmt, f"len({v})")
        src.flush(indent, pending)
        src.line(indent, f"w({v})")


def _emit_field(
    src: _EncoderSource,
    indent: int,
    pending: _Pending,
    owner: type,
    field: dataclasses.Field[Any],
    value: str,
    flexible: bool,
    tagged: bool,
) -> None:
    kind = field_kind(field)
    # Tagged fields are optional by their presence, so kio writes their values with the
    # non-nullable writer of the type.
    optional = False if tagged else kind.optional
    if owner.__name__ == "RequestHeader" and field.name == "client_id":
        # Kafka keeps the request header's client id a nullable int16-length string even in
        # flexible headers.
        _emit_primitive(src, indent, pending, "string", value, False, True)
        return
    if not kind.is_array:
        if kind.entity is not None:
            if optional:  # KIP-893 nullable struct: int8 marker -1 (null) or 1, then the struct
                src.flush(indent, pending)
                v = src.fresh("o")
                src.line(indent, f"{v} = {value}")
                src.line(indent, f"if {v} is None:")
                src.line(indent + 1, "w(b'\\xff')")
                src.line(indent, "else:")
                src.line(indent + 1, "w(b'\\x01')")
                inner = _Pending()
                _emit_entity(src, indent + 1, inner, kind.entity, v)
                src.flush(indent + 1, inner)
            else:
                v = src.fresh("o")
                src.line(indent, f"{v} = {value}")
                _emit_entity(src, indent, pending, kind.entity, v)
            return
        assert kind.kafka_type is not None
        _emit_primitive(src, indent, pending, kind.kafka_type, value, flexible, optional)
        return

    # Arrays: the nullability belongs to the array; items use the non-nullable writer.
    arr = src.fresh("a")
    src.line(indent, f"{arr} = {value}")
    fmt = _FIXED_FORMAT.get(kind.kafka_type or "")
    if (
        fmt is not None
        and not optional
        and kind.kafka_type not in ("timedelta_i32", "timedelta_i64")
    ):
        # A whole array of plain numbers, length prefix included, in one pack call
        # (precompiled for short arrays).
        src.flush(indent, pending)
        k = src.fresh("k")
        src.line(indent, f"{k} = len({arr})")
        if flexible:
            table = src.const(_array_packers("B", fmt), "_ap")
            slow = f"_uv({k} + 1) + _spack('>%d{fmt}' % {k}, *{arr})"
        else:
            table = src.const(_array_packers("i", fmt), "_ap")
            slow = f"_spack('>i%d{fmt}' % {k}, {k}, *{arr})"
        src.line(
            indent,
            f"w({table}[{k}]({k} + {int(flexible)}, *{arr}) if {k} < {_PACKED_ARRAY_MAX} else {slow})",
        )
        return
    body = indent
    if flexible:
        src.flush(indent, pending)
        if optional:
            src.line(indent, f"if {arr} is None:")
            src.line(indent + 1, "w(b'\\x00')")
            src.line(indent, "else:")
            body = indent + 1
        # A None in a non-nullable array makes len() raise; encode() then lets kio handle it.
        src.varint(body, f"len({arr}) + 1")
    else:
        if optional:
            pending.add("i", f"-1 if {arr} is None else len({arr})")
            src.flush(indent, pending)
            src.line(indent, f"if {arr} is not None:")
            body = indent + 1
        else:
            pending.add("i", f"len({arr})")
            src.flush(indent, pending)
    item = src.fresh("e")
    if kind.entity is not None:
        src.line(body, f"for {item} in {arr}:")
        inner = _Pending()
        _emit_entity(src, body + 1, inner, kind.entity, item)
        src.flush(body + 1, inner)
        _emit_spill(src, body + 1)
        return
    assert kind.kafka_type is not None
    src.line(body, f"for {item} in {arr}:")
    inner = _Pending()
    _emit_primitive(src, body + 1, inner, kind.kafka_type, item, flexible, False)
    src.flush(body + 1, inner)
    _emit_spill(src, body + 1)


_SPILL_PARTS = 65536
"""Chunks an encoder collects before joining them into one (see :func:`_emit_spill`)."""


def _emit_spill(src: _EncoderSource, indent: int) -> None:
    """After each array item: join the chunks so far once they are many. One ``b''.join`` of
    millions of chunks (a ListGroups of 400,000 groups) holds the interpreter lock for
    hundreds of milliseconds, and with it every other thread (the event loop, when big answers
    are encoded in a worker); joining every ``_SPILL_PARTS`` chunks bounds each hold. The
    bytes are the same."""
    src.line(indent, f"if len(parts) > {_SPILL_PARTS}:")
    src.line(indent + 1, "spilled.append(b''.join(parts))")
    src.line(indent + 1, "parts.clear()")


def _tagged_default(field: dataclasses.Field[Any]) -> Any:
    if field.default is not dataclasses.MISSING:
        return field.default
    # kio would derive an implicit default here; no schema we serve needs it.
    raise NotImplementedError(f"tagged field {field.name} without an explicit default")


def _emit_entity(src: _EncoderSource, indent: int, pending: _Pending, cls: type, obj: str) -> None:
    """Write every field of the struct held in local ``obj`` (of class ``cls``)."""
    if not dataclasses.is_dataclass(cls):
        raise NotImplementedError(f"{cls!r} is not a dataclass")
    flexible = bool(getattr(cls, "__flexible__", False))
    plain, tagged = split_fields(cls)
    if tagged and not flexible:
        raise NotImplementedError("tagged fields on a non-flexible struct")
    for field in plain:
        _emit_field(src, indent, pending, cls, field, f"{obj}.{field.name}", flexible, False)
    if not flexible:
        return
    if not tagged:
        pending.add("B", "0")  # empty tagged-field section
        return
    # Tagged fields, in tag order, each skipped when it equals its default (as kio does).
    src.flush(indent, pending)
    chunks = src.fresh("tg")
    src.line(indent, f"{chunks} = []")
    for tag, field in sorted(tagged, key=lambda t: t[0]):
        default = src.const(_tagged_default(field), "_d")
        v = src.fresh("x")
        src.line(indent, f"{v} = {obj}.{field.name}")
        # The identity test is a shortcut: values left at their default are usually the very
        # default object.
        src.line(indent, f"if {v} is not {default} and not ({v} == {default}):")
        # Encode the value into its own chunk list to learn its size.
        src.line(indent + 1, "_outer = w")
        src.line(indent + 1, "_parts = []")
        src.line(indent + 1, "w = _parts.append")
        inner = _Pending()
        _emit_field(src, indent + 1, inner, cls, field, v, flexible, True)
        src.flush(indent + 1, inner)
        src.line(indent + 1, "w = _outer")
        src.line(indent + 1, "_data = b''.join(_parts)")
        src.line(indent + 1, f"{chunks}.append(_uv({tag}) + _uv(len(_data)) + _data)")
    src.line(indent, f"if {chunks}:")
    src.varint(indent + 1, f"len({chunks})")
    src.line(indent + 1, f"for _c in {chunks}:")
    src.line(indent + 2, "w(_c)")
    src.line(indent, "else:")
    src.line(indent + 1, "w(b'\\x00')")


def _generate_encoder(cls: type, fallback: Encoder | None) -> Encoder:
    """Compile the encoder of ``cls``; with ``fallback``, any error inside it defers to that."""
    src = _EncoderSource()
    src.line(0, "def encode(entity):")
    body = 1
    if fallback is not None:
        src.namespace["_fallback"] = fallback
        src.line(1, "try:")
        body = 2
    src.line(body, "parts = []")
    src.line(body, "spilled = []")
    src.line(body, "w = parts.append")
    pending = _Pending()
    _emit_entity(src, body, pending, cls, "entity")
    src.flush(body, pending)
    src.line(body, "if spilled:")
    src.line(body + 1, "spilled.append(b''.join(parts))")
    src.line(body + 1, "return b''.join(spilled)")
    src.line(body, "return b''.join(parts)")
    if fallback is not None:
        src.line(1, "except Exception:")
        src.line(2, "return _fallback(entity)")
    code = "\n".join(src.lines) + "\n"
    namespace = src.namespace
    name = f"<fastcodec encoder {cls.__module__}.{cls.__qualname__}>"
    exec(compile(code, name, "exec"), namespace)
    fn = typing.cast(Encoder, namespace["encode"])
    fn.__fastcodec_source__ = code  # type: ignore[attr-defined]
    return fn


def _kio_encoder(cls: type) -> Encoder:
    write: Callable[[io.BytesIO, Any], None] = entity_writer(cls)  # type: ignore[assignment]

    def encode(entity: Any) -> bytes:
        buf = io.BytesIO()
        write(buf, entity)
        return buf.getvalue()

    return encode


@cache
def kio_encoder(cls: type) -> Encoder:
    """kio's own writer for ``cls``, as an ``entity -> bytes`` function (reference and fallback)."""
    return _kio_encoder(cls)


@cache
def generated_encoder(cls: type) -> Encoder | None:
    """The generated encoder for ``cls`` without fallback (None if the schema has a kind we
    do not model); for tests and inspection (``__fastcodec_source__``)."""
    try:
        return _generate_encoder(cls, None)
    except NotImplementedError:
        return None


# class -> the encoder ``encode`` uses; read directly by protocol.codec.encode_body.
ENCODERS: dict[type, Encoder] = {}


def encoder(cls: type) -> Encoder:
    """The fastest correct ``entity -> bytes`` function for ``cls``, cached per class.

    The generated code carries its own ``try``: any error inside it (a value of an unexpected
    type) is answered by kio's writer, so the result is kio's bytes or kio's exception.
    """
    found = ENCODERS.get(cls)
    if found is not None:
        return found
    slow = kio_encoder(cls)
    try:
        result = _generate_encoder(cls, slow)
    except NotImplementedError:
        result = slow
    ENCODERS[cls] = result
    return result


def encode(entity: Any) -> bytes:
    """The wire bytes of a kio entity (request or response body, no header)."""
    cls = entity.__class__
    enc = ENCODERS.get(cls)
    if enc is None:
        enc = encoder(cls)
    return enc(entity)


# ---------------------------------------------------------------------------------------------
# Decoding


@cache
def decoder(cls: type) -> Decoder:
    """``(buffer, offset) -> (entity, bytes consumed)`` for ``cls``: kio's native reader.

    It raises on truncated input, bad lengths and invalid UTF-8, and is faster than a generated
    Python decoder could be (see the module docstring), so there is nothing to specialise.
    """
    return typing.cast(Decoder, entity_reader(cls))


def decode(cls: type, buffer: bytes, offset: int = 0) -> tuple[Any, int]:
    """Decode one ``cls`` from ``buffer`` at ``offset``; returns it and the bytes it took."""
    return decoder(cls)(buffer, offset)
