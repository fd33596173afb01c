"""One way to build a response of any version: ``build(ResponseClass, **fields)``.

kio generates one dataclass per message version, and each version has a different set of fields.
Handlers describe the answer once, with every field the newest version has, as keyword arguments
(nested entities as dicts or lists of dicts); ``build`` keeps the fields this version has, builds
the nested entities of this version, and converts plain values to kio's types (error codes to
ErrorCode, milliseconds to timedelta or datetime).
"""

from __future__ import annotations

import dataclasses
import datetime
import types
import typing
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
            return tuple(
                build(spec.entity, **v) if isinstance(v, dict) else v for v in value
            )
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


def build(cls: type, **fields: Any) -> Any:
    """Instantiate ``cls`` from the fields it has; extra fields (of other versions) are dropped."""
    spec = _spec(cls)
    args = {name: _coerce(spec[name], v) for name, v in fields.items() if name in spec}
    return cls(**args)


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
