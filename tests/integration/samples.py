"""A small valid request of every API version kcoord advertises, built from kio's schemas.

Each field gets a small value of its type (numbers 1, strings "ab", two entries per array,
nullable fields filled in, tagged fields left at their defaults), so the body exercises every
field the version has. Used as the seed corpus of the request fuzzers and by the decoder tests. Versions kio does not
model (Produce v0-v2, OffsetCommit v0-v1, decoded by protocol/legacy.py) come from
:func:`legacy_bodies`, written out by hand. :func:`tagged_body` is a flexible sample with a
tagged field no schema declares in every struct (a newer client's request).
"""

from __future__ import annotations

import dataclasses
import datetime
import struct
import uuid
from collections.abc import Iterator
from functools import cache
from typing import Any

from kcoord.protocol.apis import SUPPORTED, is_flexible
from kcoord.protocol.codec import encode_body, request_type
from kcoord.protocol.fastcodec import encoder, field_kind

ARRAY_ENTRIES = 2

_PRIMITIVE_SAMPLES: dict[str, Any] = {
    "int8": 1,
    "int16": 1,
    "int32": 1,
    "int64": 1,
    "uint8": 1,
    "uint16": 1,
    "uint32": 1,
    "uint64": 1,
    "float64": 1.0,
    "bool": True,
    "string": "ab",
    "bytes": b"xy",
    "records": b"",
    "uuid": uuid.UUID(int=1),
    "timedelta_i32": datetime.timedelta(milliseconds=1),
    "timedelta_i64": datetime.timedelta(milliseconds=1),
    "datetime_i64": datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC),
}


def sample(cls: type) -> Any:
    """An instance of kio entity class ``cls`` with a small value in every plain field."""
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.metadata.get("tag") is not None:
            continue  # tagged fields keep their defaults (absent on the wire)
        kind = field_kind(f)
        if kind.entity is not None:
            one = sample(kind.entity)
        else:
            assert kind.kafka_type is not None
            one = _PRIMITIVE_SAMPLES[kind.kafka_type]
        values[f.name] = tuple([one] * ARRAY_ENTRIES) if kind.is_array else one
    return cls(**values)


def array_entries(cls: type) -> int:
    """How many array entries :func:`sample` puts in an instance of ``cls``."""
    total = 0
    for f in dataclasses.fields(cls):
        if f.metadata.get("tag") is not None:
            continue
        kind = field_kind(f)
        inner = array_entries(kind.entity) if kind.entity is not None else 0
        total += ARRAY_ENTRIES * (1 + inner) if kind.is_array else inner
    return total


def sample_bodies() -> Iterator[tuple[int, int, bytes]]:
    """(api key, version, encoded body) of every advertised version kio models."""
    for api_key, (low, high) in sorted(SUPPORTED.items()):
        for version in range(low, high + 1):
            try:
                cls = request_type(api_key, version)
            except Exception:  # a version decoded by hand (protocol/legacy.py)
                continue
            yield api_key, version, encode_body(sample(cls))


def _legacy_string(text: str) -> bytes:
    raw = text.encode()
    return struct.pack(">h", len(raw)) + raw


def legacy_bodies() -> Iterator[tuple[int, int, bytes]]:
    """(api key, version, body) of the advertised versions decoded by hand."""
    for version in (0, 1, 2):
        # Produce: acks, timeout, [topic, [partition, message set]]
        yield 0, version, (
            struct.pack(">hii", 1, 1, 1) + _legacy_string("ab")
            + struct.pack(">iii", 1, 1, 2) + b"xy"
        )  # fmt: skip
    for version in (0, 1):
        # OffsetCommit: group, (v1: generation, member), [topic, [partition, offset,
        # (v1: timestamp), metadata]]
        head = _legacy_string("ab")
        if version:
            head += struct.pack(">i", 1) + _legacy_string("ab")
        partition = struct.pack(">iq", 1, 1) + (struct.pack(">q", 1) if version else b"")
        yield 8, version, (
            head + struct.pack(">i", 1) + _legacy_string("ab")
            + struct.pack(">i", 1) + partition + _legacy_string("ab")
        )  # fmt: skip


# ---- unknown tagged fields ------------------------------------------------------------------

UNKNOWN_TAG = 4242  # no schema declares it
UNKNOWN_VALUE = 0x5EC12E7


@cache
def twin(cls: type) -> type:
    """``cls`` with one more tagged int32 (tag ``UNKNOWN_TAG``) in each flexible struct."""
    flexible = bool(getattr(cls, "__flexible__", False))
    fields: list[tuple[str, Any, Any]] = []
    for f in dataclasses.fields(cls):
        kind = field_kind(f)
        tp: Any = f.type
        if kind.entity is not None:
            tp = twin(kind.entity)
            if kind.is_array:
                tp = tuple[tp, ...]
            if kind.optional:
                tp = tp | None
        default = f.default if f.default is not dataclasses.MISSING else dataclasses.MISSING
        fields.append((f.name, tp, dataclasses.field(default=default, metadata=f.metadata)))
    if flexible:
        meta = {"kafka_type": "int32", "tag": UNKNOWN_TAG}
        fields.append(("unknown_extra", int, dataclasses.field(default=0, metadata=meta)))
    return dataclasses.make_dataclass(
        cls.__name__ + "Twin",
        fields,
        frozen=True,
        kw_only=True,
        namespace={"__flexible__": flexible},
    )


def to_twin(value: Any) -> Any:
    cls = type(value)
    values: dict[str, Any] = {}
    for f in dataclasses.fields(value):
        v = getattr(value, f.name)
        if field_kind(f).entity is not None and v is not None:
            v = tuple(to_twin(x) for x in v) if isinstance(v, tuple) else to_twin(v)
        values[f.name] = v
    if getattr(cls, "__flexible__", False):
        values["unknown_extra"] = UNKNOWN_VALUE
    return twin(cls)(**values)


def flexible_versions() -> list[tuple[int, int]]:
    return [
        (api_key, version)
        for api_key, (low, high) in sorted(SUPPORTED.items())
        for version in range(low, high + 1)
        if is_flexible(api_key, version)
    ]


def tagged_body(api_key: int, version: int) -> tuple[bytes, bytes]:
    """(the sample request's body, the same with an unknown tag in every struct)."""
    entity = sample(request_type(api_key, version))
    return encode_body(entity), encoder(twin(type(entity)))(to_twin(entity))
