"""protocol/fastcodec.py against kio: same bytes, same entities, every supported API version.

Entities are generated from each class's own field metadata (small arrays and strings keep the
run short); every value is one that round-trips through the wire (times in whole milliseconds,
no zero UUID, which kio decodes as None).
"""

from __future__ import annotations

import dataclasses
import datetime
import typing
import uuid
from functools import cache
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.index import UnknownEntity

from kcoord.protocol import fastcodec
from kcoord.protocol.apis import SUPPORTED
from kcoord.protocol.codec import (
    DecodeError,
    decode_request,
    encode_body,
    request_type,
    response_type,
)
from kcoord.protocol.errors import ErrorCode
from kcoord.protocol.responses import build

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_MAX_MS = 4102444800000  # 2100-01-01T00:00:00Z

_INTS = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "uint8": (0, 2**8 - 1),
    "uint16": (0, 2**16 - 1),
    "uint32": (0, 2**32 - 1),
    "uint64": (0, 2**64 - 1),
}


def _primitive(kafka_type: str) -> st.SearchStrategy[Any]:
    if kafka_type in _INTS:
        lo, hi = _INTS[kafka_type]
        return st.one_of(st.integers(-2, 2).filter(lambda v: lo <= v <= hi), st.integers(lo, hi))
    if kafka_type == "bool":
        return st.booleans()
    if kafka_type == "float64":
        return st.floats(allow_nan=False, allow_infinity=False)
    if kafka_type == "error_code":
        return st.sampled_from(list(ErrorCode))
    if kafka_type == "timedelta_i32":
        return st.integers(-(2**31), 2**31 - 1).map(lambda ms: datetime.timedelta(milliseconds=ms))
    if kafka_type == "timedelta_i64":
        return st.integers(-(10**15), 10**15).map(lambda ms: datetime.timedelta(milliseconds=ms))
    if kafka_type == "datetime_i64":
        # kio converts through float seconds both ways, exact to the millisecond until about
        # 2242; stay well inside that.
        return st.integers(0, _MAX_MS).map(lambda ms: _EPOCH + datetime.timedelta(milliseconds=ms))
    if kafka_type == "uuid":
        return st.uuids().filter(lambda u: u.int != 0)
    if kafka_type == "string":
        return st.text(max_size=12)
    if kafka_type in ("bytes", "records"):
        return st.binary(max_size=24)
    raise AssertionError(f"no strategy for {kafka_type}")


def _field(f: dataclasses.Field[Any]) -> st.SearchStrategy[Any]:
    tp = f.type
    optional = False
    if typing.get_origin(tp) in (typing.Union, __import__("types").UnionType):
        tp = next(a for a in typing.get_args(tp) if a is not type(None))
        optional = True
    is_array = typing.get_origin(tp) is tuple
    inner = typing.get_args(tp)[0] if is_array else tp
    item: st.SearchStrategy[Any]
    if dataclasses.is_dataclass(inner):
        item = st.deferred(lambda: entities(typing.cast(type, inner)))
    else:
        item = _primitive(f.metadata["kafka_type"])
    value = st.lists(item, max_size=3).map(tuple) if is_array else item
    if optional:
        value = st.none() | value
    if "tag" in f.metadata:
        value = st.just(f.default) | value
    return value


@cache
def entities(cls: type) -> st.SearchStrategy[Any]:
    """Instances of a kio entity class, built from its field metadata."""
    return st.builds(cls, **{f.name: _field(f) for f in dataclasses.fields(cls)})


def _classes() -> list[tuple[str, type]]:
    out = []
    for key, (lo, hi) in SUPPORTED.items():
        for version in range(lo, hi + 1):
            for kind, load in (("req", request_type), ("res", response_type)):
                try:
                    cls = load(key, version)
                except UnknownEntity:
                    continue  # versions decoded by hand (protocol/legacy.py)
                out.append((f"{int(key)}v{version}{kind}", cls))
    return out


CLASSES = _classes()
HOT = {
    "0v9req",
    "1v12res",
    "3v12res",
    "8v8req",
    "8v8res",
    "9v6req",
    "9v6res",
    "11v9res",
    "12v4req",
    "14v5req",
    "18v3res",
}


def test_every_supported_class_gets_a_generated_encoder() -> None:
    missing = [name for name, cls in CLASSES if fastcodec.generated_encoder(cls) is None]
    assert missing == []
    assert len(CLASSES) > 200


@pytest.mark.parametrize(("name", "cls"), CLASSES, ids=[n for n, _ in CLASSES])
def test_same_bytes_as_kio_and_round_trip(name: str, cls: type) -> None:
    generated = fastcodec.generated_encoder(cls)
    assert generated is not None
    reference = fastcodec.kio_encoder(cls)
    read = fastcodec.decoder(cls)

    @settings(
        max_examples=100 if name in HOT else 15,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(entities(cls))
    def check(entity: Any) -> None:
        expected = reference(entity)
        assert generated(entity) == expected
        assert fastcodec.encode(entity) == expected
        # Decoding at an offset inside a larger buffer, with trailing bytes after it.
        back, size = read(b"pre" + expected + b"post", 3)
        assert back == entity
        assert size == len(expected)

    check()


@pytest.mark.parametrize(("name", "cls"), CLASSES, ids=[n for n, _ in CLASSES])
def test_every_truncation_fails_or_consumes_less(name: str, cls: type) -> None:
    read = fastcodec.decoder(cls)

    @settings(max_examples=4, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(entities(cls))
    def check(entity: Any) -> None:
        raw = fastcodec.encode(entity)
        for cut in range(len(raw)):
            try:
                _, size = read(raw[:cut], 0)
            except Exception:
                continue
            assert size <= cut

    check()


def test_requests_truncated_through_decode_request_raise_decode_error() -> None:
    cls = request_type(8, 8)
    entity = build(
        cls,
        group_id="g",
        generation_id_or_member_epoch=1,
        member_id="m",
        group_instance_id=None,
        topics=[
            dict(
                name="t",
                partitions=[
                    dict(
                        partition_index=i,
                        committed_offset=i,
                        committed_leader_epoch=-1,
                        committed_metadata="meta",
                    )
                    for i in range(3)
                ],
            )
        ],
    )
    raw = encode_body(entity)
    assert decode_request(8, 8, b"xx" + raw, 2) == entity
    for cut in range(len(raw)):
        with pytest.raises(DecodeError):
            decode_request(8, 8, raw[:cut], 0)
    bad_utf8 = raw.replace(b"\x02g", b"\x02\xff", 1)
    with pytest.raises(DecodeError):
        decode_request(8, 8, bad_utf8, 0)


def test_unexpected_value_types_fall_back_to_kio() -> None:
    # bytes in a compact string field: kio's writer accepts it, so must we.
    cls = request_type(12, 4)
    entity = cls(group_id="g", generation_id=1, member_id=b"m", group_instance_id=None)  # type: ignore[arg-type]
    assert encode_body(entity) == fastcodec.kio_encoder(cls)(entity)
    # None in a non-nullable legacy array: kio writes length -1.
    res = response_type(16, 2)
    empty = res(throttle_time=datetime.timedelta(0), error_code=ErrorCode.none, groups=None)  # type: ignore[arg-type]
    assert encode_body(empty) == fastcodec.kio_encoder(res)(empty)
    # Values kio refuses are refused (with kio's own error).
    with pytest.raises(TypeError):
        encode_body(cls(group_id=None, generation_id=1, member_id="m", group_instance_id=None))  # type: ignore[arg-type]


def test_tagged_fields_written_only_when_not_default() -> None:
    cls = response_type(18, 3)
    api = typing.get_args(cls.__dataclass_fields__["api_keys"].type)[0]
    base = dict(
        error_code=ErrorCode.none,
        api_keys=(api(api_key=18, min_version=0, max_version=4),),
        throttle_time=datetime.timedelta(0),
    )
    plain = cls(**base)
    tagged = cls(**base, finalized_features_epoch=7, zk_migration_ready=True)
    for entity in (plain, tagged):
        raw = fastcodec.encode(entity)
        assert raw == fastcodec.kio_encoder(cls)(entity)
        assert fastcodec.decode(cls, raw) == (entity, len(raw))
    assert len(fastcodec.encode(tagged)) > len(fastcodec.encode(plain))


def test_uuid_none_and_zero_are_the_same_on_the_wire() -> None:
    cls = response_type(3, 12)
    topic = typing.get_args(cls.__dataclass_fields__["topics"].type)[0]
    fields = dict(
        error_code=ErrorCode.none,
        name="t",
        is_internal=False,
        partitions=(),
        topic_authorized_operations=-2147483648,
    )
    a = topic(topic_id=None, **fields)
    b = topic(topic_id=uuid.UUID(int=0), **fields)
    assert fastcodec.encode(a) == fastcodec.encode(b) == fastcodec.kio_encoder(topic)(a)


def _as_handler_fields(entity: Any, rnd: int) -> dict[str, Any]:
    """An entity as a handler would describe it: plain ints, lists, nested dicts, extras."""
    out: dict[str, Any] = {"not_a_field_of_any_version": rnd}
    for f in dataclasses.fields(entity):
        v = getattr(entity, f.name)
        kt = f.metadata.get("kafka_type")
        if dataclasses.is_dataclass(v):
            v = _as_handler_fields(v, rnd)
        elif isinstance(v, tuple):
            v = [_as_handler_fields(x, rnd) if dataclasses.is_dataclass(x) else x for x in v]
        elif isinstance(v, ErrorCode) and rnd % 2:
            v = int(v)
        elif isinstance(v, datetime.timedelta) and rnd % 3:
            v = v // datetime.timedelta(milliseconds=1)
        elif isinstance(v, datetime.datetime) and rnd % 2:
            v = (v - _EPOCH) // datetime.timedelta(milliseconds=1)
        elif v is None and kt == "datetime_i64" and rnd % 2:
            v = -1
        out[f.name] = v
    return out


RESPONSES = [(n, c) for n, c in CLASSES if n.endswith("res")]


@pytest.mark.parametrize(("name", "cls"), RESPONSES, ids=[n for n, _ in RESPONSES])
def test_build_matches_the_reference_builder(name: str, cls: type) -> None:
    from kcoord.protocol.responses import _build_slow

    @settings(max_examples=5, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(entities(cls), st.integers(0, 5))
    def check(entity: Any, rnd: int) -> None:
        fields = _as_handler_fields(entity, rnd)
        built = build(cls, **fields)
        assert built == entity
        assert built == _build_slow(cls, fields)
        assert fastcodec.encode(built) == fastcodec.kio_encoder(cls)(entity)

    check()


def test_build_missing_required_field_and_defaults() -> None:
    cls = response_type(9, 6)
    with pytest.raises(TypeError, match="topics"):
        build(cls, throttle_time=0)
    built = build(cls, throttle_time=5, topics=[])
    assert built.error_code is ErrorCode.none and built.topics == ()
    assert built.throttle_time == datetime.timedelta(milliseconds=5)
    with pytest.raises(ValueError):
        build(cls, throttle_time=0, topics=[], error_code=12345)


def test_a_response_of_many_chunks_is_joined_in_pieces_to_the_same_bytes() -> None:
    """400,000 groups in a ListGroups answer are millions of chunks: the generated encoder
    joins them every _SPILL_PARTS chunks (so no single join holds the interpreter long) and
    still writes exactly kio's bytes."""
    cls = response_type(16, 4)
    groups = 20_000  # 7 chunks each: past the spill threshold
    assert 7 * groups > fastcodec._SPILL_PARTS
    entity = build(
        cls,
        throttle_time=0,
        error_code=0,
        groups=[
            dict(group_id=f"group-{i}", protocol_type="consumer", group_state="Stable")
            for i in range(groups)
        ],
    )
    generated = fastcodec.generated_encoder(cls)
    assert generated is not None and "spilled.append" in generated.__fastcodec_source__  # type: ignore[attr-defined]
    assert generated(entity) == fastcodec.kio_encoder(cls)(entity)
