"""One way to build a response of any version: ``build(ResponseClass, **fields)``.

kio generates one dataclass per message version, and each version has a different set of fields.
Handlers describe the answer once, with every field the newest version has, as keyword arguments
(nested entities as dicts or lists of dicts); ``build`` keeps the fields this version has, builds
the nested entities of this version, and converts plain values to kio's types (error codes to
ErrorCode, milliseconds to timedelta or datetime). Responses are built on every request, so the
per-class work (which fields exist, which need converting) is done once, into a generated
function per class.
"""

from __future__ import annotations

import dataclasses
import datetime
import types
import typing
from collections.abc import Callable
from functools import cache
from typing import Any

from .errors import ErrorCode

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


@dataclasses.dataclass(frozen=True, slots=True)
class _FieldSpec:
    kafka_type: str | None
    entity: type | None  # nested entity class (for entity or tuple-of-entity fields)
    is_tuple: bool
    optional: bool


def _unwrap(tp: Any) -> tuple[Any, bool]:
    """Strip ``X | None``; returns (X, optional)."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return (args[0] if len(args) == 1 else tp), True
    return tp, False


@cache
def _spec(cls: type) -> dict[str, _FieldSpec]:
    out: dict[str, _FieldSpec] = {}
    for f in dataclasses.fields(cls):
        tp, optional = _unwrap(f.type)
        is_tuple = typing.get_origin(tp) is tuple
        inner = typing.get_args(tp)[0] if is_tuple else tp
        entity = inner if isinstance(inner, type) and dataclasses.is_dataclass(inner) else None
        out[f.name] = _FieldSpec(f.metadata.get("kafka_type"), entity, is_tuple, optional)
    return out


def _coerce(spec: _FieldSpec, value: Any) -> Any:
    if value is None:
        return None
    if spec.entity is not None:
        if spec.is_tuple:
            return tuple(build(spec.entity, **v) if isinstance(v, dict) else v for v in value)
        return build(spec.entity, **value) if isinstance(value, dict) else value
    kt = spec.kafka_type
    if kt == "error_code":
        return value if isinstance(value, ErrorCode) else ErrorCode(value)
    if kt in ("timedelta_i32", "timedelta_i64"):
        if isinstance(value, datetime.timedelta):
            return value
        return datetime.timedelta(milliseconds=value)
    if kt == "datetime_i64":
        if isinstance(value, datetime.datetime):
            return value
        if value == -1 and spec.optional:
            return None
        return _EPOCH + datetime.timedelta(milliseconds=value)
    if spec.is_tuple and not isinstance(value, tuple):
        return tuple(value)
    return value


def _build_slow(cls: type, fields: dict[str, Any]) -> Any:
    """The reference behaviour of :func:`build`, used for classes the generator does not cover."""
    spec = _spec(cls)
    args = {name: _coerce(spec[name], v) for name, v in fields.items() if name in spec}
    return cls(**args)


# Generated per-class makers ``fields dict -> entity`` (see _generate_maker).
_MAKERS: dict[type, Callable[[dict[str, Any]], Any]] = {}
_MISSING = object()
_ERROR_BY_INT: dict[int, ErrorCode] = {int(m): m for m in ErrorCode}


def _missing(cls: type, name: str) -> TypeError:
    return TypeError(
        f"{cls.__qualname__}.__init__() missing 1 required keyword-only argument: {name!r}"
    )


def _generate_maker(cls: type) -> Callable[[dict[str, Any]], Any]:
    """Generate a function doing what ``_build_slow(cls, fields)`` does, field by field.

    kio's entities are frozen slotted dataclasses without ``__post_init__``, so the instance is
    made with ``object.__new__`` and each slot set through its member descriptor, which is what
    the generated ``__init__`` amounts to, minus the keyword-argument handling. Each field's
    conversion is the branch of ``_coerce`` its spec selects, decided here once; plain values
    (ints, strings, bools, bytes) are stored as given.
    """
    ns: dict[str, Any] = {
        "_new": object.__new__,
        "_C": cls,
        "_M": _MISSING,
        "_missing": _missing,
        "_EC": ErrorCode,
        "_ECI": _ERROR_BY_INT,
        "_TD": datetime.timedelta,
        "_DT": datetime.datetime,
        "_EPOCH": _EPOCH,
    }
    lines = ["def make(f):", "    o = _new(_C)"]
    spec = _spec(cls)
    for i, field in enumerate(dataclasses.fields(cls)):
        name = field.name
        fs = spec[name]
        ns[f"_set{i}"] = cls.__dict__[name].__set__
        lines.append(f"    v = f.get({name!r}, _M)")
        lines.append("    if v is _M:")
        if field.default is not dataclasses.MISSING:
            ns[f"_def{i}"] = field.default
            lines.append(f"        v = _def{i}")
        elif field.default_factory is not dataclasses.MISSING:
            ns[f"_fac{i}"] = field.default_factory
            lines.append(f"        v = _fac{i}()")
        else:
            lines.append(f"        raise _missing(_C, {name!r})")
        body = _coercion_lines(fs, i, ns)
        if body:
            lines.append("    elif v is not None:")
            lines.extend("        " + line for line in body)
        lines.append(f"    _set{i}(o, v)")
    lines.append("    return o")
    exec(compile("\n".join(lines) + "\n", f"<build {cls.__qualname__}>", "exec"), ns)
    return typing.cast(Callable[[dict[str, Any]], Any], ns["make"])


def _coercion_lines(fs: _FieldSpec, i: int, ns: dict[str, Any]) -> list[str]:
    """Statements converting a non-None ``v`` the way ``_coerce`` would for this spec."""
    if fs.entity is not None:
        ns[f"_mk{i}"] = _maker(fs.entity)  # nested makers first (schemas are not recursive)
        if fs.is_tuple:
            return [f"v = tuple([_mk{i}(x) if isinstance(x, dict) else x for x in v])"]
        return ["if isinstance(v, dict):", f"    v = _mk{i}(v)"]
    kt = fs.kafka_type
    if kt == "error_code":
        return [
            "if v.__class__ is not _EC:",
            "    m = _ECI.get(v) if v.__class__ is int else None",
            "    v = _EC(v) if m is None else m",
        ]
    if kt in ("timedelta_i32", "timedelta_i64"):
        return ["if not isinstance(v, _TD):", "    v = _TD(milliseconds=v)"]
    if kt == "datetime_i64":
        null = "v == -1" if fs.optional else "False"
        return [
            "if not isinstance(v, _DT):",
            f"    v = None if {null} else _EPOCH + _TD(milliseconds=v)",
        ]
    if fs.is_tuple:
        return ["if not isinstance(v, tuple):", "    v = tuple(v)"]
    return []


def _maker(cls: type) -> Callable[[dict[str, Any]], Any]:
    make = _MAKERS.get(cls)
    if make is None:
        slotted = all(
            type(cls.__dict__.get(f.name)) is types.MemberDescriptorType
            for f in dataclasses.fields(cls)
        )
        if slotted and not hasattr(cls, "__post_init__"):
            make = _generate_maker(cls)
        else:

            def make(fields: dict[str, Any]) -> Any:
                return _build_slow(cls, fields)

        _MAKERS[cls] = make
    return make


def build(cls: type, **fields: Any) -> Any:
    """Instantiate ``cls`` from the fields it has; extra fields (of other versions) are dropped."""
    make = _MAKERS.get(cls)
    if make is None:
        make = _maker(cls)
    return make(fields)


def has_field(cls: type, name: str) -> bool:
    return name in _spec(cls)


def to_millis(value: datetime.timedelta | datetime.datetime | int | None) -> int:
    """Milliseconds of a kio timedelta/datetime request field (or -1 for None)."""
    if value is None:
        return -1
    if isinstance(value, datetime.timedelta):
        return int(value / datetime.timedelta(milliseconds=1))
    if isinstance(value, datetime.datetime):
        return round(value.timestamp() * 1000)
    return int(value)
