"""protocol/heartbeat.py against kio: the hand decoder reads what kio writes, every version."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kcoord.protocol.apis import is_flexible
from kcoord.protocol.codec import (
    DecodeError,
    RawBody,
    encode_body,
    encode_response,
    request_type,
    response_type,
)
from kcoord.protocol.heartbeat import decode_heartbeat
from kcoord.protocol.responses import build

texts = st.text(max_size=40)


def _frame(version: int, client_id: str | None, **fields: object) -> bytes:
    body = encode_body(build(request_type(12, version), **fields))
    if client_id is None:
        header = struct.pack(">hhih", 12, version, 7, -1)
    else:
        raw = client_id.encode()
        header = struct.pack(">hhih", 12, version, 7, len(raw)) + raw
    if is_flexible(12, version):
        header += b"\x00"
    return header + body


@settings(max_examples=60, deadline=None)
@given(
    version=st.integers(0, 4),
    client_id=st.none() | texts,
    group_id=texts,
    generation=st.integers(-(2**31), 2**31 - 1),
    member_id=texts,
    instance_id=st.none() | texts,
)
def test_decodes_what_kio_encodes(
    version: int, client_id: str | None, group_id: str, generation: int, member_id: str,
    instance_id: str | None,
) -> None:
    frame = _frame(version, client_id, group_id=group_id, generation_id=generation,
                   member_id=member_id, group_instance_id=instance_id)
    expected_instance = instance_id if version >= 3 else None
    assert decode_heartbeat(frame, version) == (group_id, generation, member_id, expected_instance)


@pytest.mark.parametrize("version", range(5))
def test_every_truncation_is_a_decode_error(version: int) -> None:
    frame = _frame(version, "client", group_id="group", generation_id=3, member_id="member",
                   group_instance_id="instance")
    for end in range(len(frame)):
        with pytest.raises(DecodeError):
            decode_heartbeat(frame[:end], version)


def test_bad_utf8_and_bad_lengths_are_decode_errors() -> None:
    good = _frame(2, "c", group_id="ab", generation_id=1, member_id="m")
    at = good.index(b"ab")
    with pytest.raises(DecodeError):
        decode_heartbeat(good[:at] + b"\xff\xfe" + good[at + 2 :], 2)
    with pytest.raises(DecodeError):
        decode_heartbeat(good[:8] + struct.pack(">h", -5) + good[10:], 2)
    null_member = _frame(2, "c", group_id="g", generation_id=1, member_id="m")
    with pytest.raises(DecodeError):
        decode_heartbeat(null_member[:-3] + struct.pack(">h", -1), 2)


@pytest.mark.parametrize("version", range(5))
def test_answers_are_whole_frames(version: int) -> None:
    body = RawBody(encode_body(build(response_type(12, version), throttle_time=0, error_code=27)))
    data = encode_response(0x01020304, body, version >= 4)
    size, correlation = struct.unpack_from(">ii", data)
    assert size == len(data) - 4 and correlation == 0x01020304
    assert data[8:].startswith(b"\x00" if version >= 4 else b"")  # response header v1
    assert data.endswith(struct.pack(">h", 27) + (b"\x00" if version >= 4 else b""))
    assert encode_response(5, body, version >= 4)[8:] == data[8:]
