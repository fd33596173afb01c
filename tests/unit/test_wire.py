"""Framing, request headers, the response builder and the API table."""

from __future__ import annotations

import struct

import pytest

from kcoord.protocol.apis import SUPPORTED, ApiKey, is_flexible, is_supported
from kcoord.protocol.codec import (
    DecodeError,
    decode_request,
    encode_body,
    encode_response,
    request_type,
    response_type,
)
from kcoord.protocol.errors import ErrorCode
from kcoord.protocol.framing import FrameDecoder, FrameError, frame
from kcoord.protocol.headers import HeaderError, parse_request_header, response_header
from kcoord.protocol.legacy import decode_legacy_produce, encode_legacy_produce_response
from kcoord.protocol.responses import build, to_millis


def _drain(d: FrameDecoder) -> list[bytes]:
    out = []
    while (f := d.next_frame()) is not None:
        out.append(bytes(f))
    return out


def test_frames_split_across_and_within_reads() -> None:
    d = FrameDecoder(1000)
    data = frame(b"abc") + frame(b"") + frame(b"hello")
    got = []
    for i in range(len(data)):
        d.append(data[i : i + 1])
        got += _drain(d)
    assert got == [b"abc", b"", b"hello"]
    assert d.partial == 0
    d.append(data + data[:5])
    assert _drain(d) == [b"abc", b"", b"hello"]
    assert d.partial == 5


def test_frames_are_handed_out_one_at_a_time() -> None:
    d = FrameDecoder(1000)
    d.append(frame(b"abc") + frame(b"de") + frame(b"fgh")[:5])
    assert d.has_frame() and d.head_size() == 3  # the third's prefix is here, its bytes not
    assert d.next_frame() == b"abc"
    assert d.has_frame()
    assert d.next_frame() == b"de"
    assert not d.has_frame()
    assert d.next_frame() is None
    d.append(b"gh")
    assert d.head_size() is None and d.next_frame() == b"fgh"
    assert d.next_frame() is None and not d.has_frame()


def test_a_large_frame_alone_is_handed_over_without_a_copy() -> None:
    d = FrameDecoder(1 << 20)
    payload = bytes(range(256)) * 1000
    data = frame(payload)
    d.append(data[:1000])
    d.append(data[1000:])
    got = d.next_frame()
    assert got == payload and isinstance(got, bytearray)
    assert d.partial == 0 and d.next_frame() is None
    d.append(frame(b"next"))  # the decoder goes on with a fresh buffer
    assert d.next_frame() == b"next"


def test_a_large_frame_decodes_from_the_handed_over_buffer() -> None:
    cls = request_type(ApiKey.JOIN_GROUP, 3)
    join = build(
        cls,
        group_id="g",
        session_timeout=10000,
        rebalance_timeout=10000,
        member_id="",
        group_instance_id=None,
        protocol_type="consumer",
        protocols=[dict(name="range", metadata=b"m" * 200_000)],
    )
    head = struct.pack(">hhih", ApiKey.JOIN_GROUP, 3, 7, 1) + b"c"
    d = FrameDecoder(1 << 20)
    d.append(frame(head + encode_body(join)))
    got = d.next_frame()
    assert isinstance(got, bytearray)
    header, body_at = parse_request_header(got, flexible=False)
    assert header.correlation_id == 7
    assert decode_request(ApiKey.JOIN_GROUP, 3, got, body_at) == join


@pytest.mark.parametrize("size", [-1, 1001, 2**31 - 1])
def test_frame_size_outside_limit_is_refused(size: int) -> None:
    d = FrameDecoder(1000)
    with pytest.raises(FrameError):
        d.append(frame(b"ok") + struct.pack(">i", size))
    assert d.next_frame() == b"ok"  # what came before is whole, but the connection is done


def test_request_header_v1_and_v2() -> None:
    raw = struct.pack(">hhih", 3, 9, 77, 3) + b"cli" + b"\x01\x05\x02ab" + b"BODY"
    header, pos = parse_request_header(raw, flexible=True)
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == (
        3,
        9,
        77,
        "cli",
    )
    assert raw[pos:] == b"BODY"
    header, pos = parse_request_header(struct.pack(">hhih", 0, 3, 1, -1) + b"X", flexible=False)
    assert header.client_id is None and pos == 10


@pytest.mark.parametrize(
    "raw",
    [
        b"\x00\x03",
        struct.pack(">hhih", 3, 9, 1, 10) + b"abc",
        struct.pack(">hhih", 3, 9, 1, -7),
        struct.pack(">hhih", 3, 9, 1, -1) + b"\x01\x05\x09",
    ],
)
def test_bad_request_headers_raise(raw: bytes) -> None:
    with pytest.raises(HeaderError):
        parse_request_header(raw, flexible=True)


def test_response_headers() -> None:
    assert response_header(5, False) == b"\x00\x00\x00\x05"
    assert response_header(5, True) == b"\x00\x00\x00\x05\x00"


def test_api_table_and_flexible_versions() -> None:
    assert is_supported(ApiKey.API_VERSIONS, 4) and not is_supported(ApiKey.API_VERSIONS, 5)
    assert not is_supported(9999, 0)
    assert is_flexible(ApiKey.METADATA, 9) and not is_flexible(ApiKey.METADATA, 8)
    assert not is_flexible(ApiKey.PRODUCE, 0)  # kio has no schema for it
    for key, (lo, hi) in SUPPORTED.items():
        assert 0 <= lo <= hi, key


def test_build_keeps_fields_of_the_version_and_coerces_types() -> None:
    fields = dict(
        throttle_time=25,
        error_code=ErrorCode.none,
        api_keys=[dict(api_key=18, min_version=0, max_version=4)],
        supported_features=[],
        finalized_features_epoch=-1,
        finalized_features=[],
        zk_migration_ready=False,
    )
    v0 = build(response_type(ApiKey.API_VERSIONS, 0), **fields)
    v3 = build(response_type(ApiKey.API_VERSIONS, 3), **fields)
    assert not hasattr(v0, "throttle_time")
    assert to_millis(v3.throttle_time) == 25
    assert v3.api_keys[0].max_version == 4
    encoded = encode_response(9, v0, False)
    assert encoded[4:8] == b"\x00\x00\x00\x09"


def test_decode_request_rejects_garbage() -> None:
    with pytest.raises(DecodeError):
        decode_request(ApiKey.METADATA, 12, b"\xff" * 8, 0)


def test_legacy_produce_round_trip() -> None:
    body = struct.pack(">hii", 1, 100, 1) + struct.pack(">h", 1) + b"t" + struct.pack(">i", 2)
    body += struct.pack(">ii", 0, 2) + b"xy" + struct.pack(">ii", 1, -1)
    assert decode_legacy_produce(body, 0) == (1, [("t", [0, 1])])
    assert decode_legacy_produce(body[:-3], 0) is None
    v2 = encode_legacy_produce_response(2, [("t", [0])])
    # [topics: 1][name "t"][partitions: 1][partition 0][error][base offset][append time][throttle]
    assert v2 == (
        struct.pack(">ih", 1, 1) + b"t" + struct.pack(">iihqqi", 1, 0, 35, -1, -1, 0)
    )
    v0 = encode_legacy_produce_response(0, [("t", [0])])
    assert v0 == struct.pack(">ih", 1, 1) + b"t" + struct.pack(">iihq", 1, 0, 35, -1)
