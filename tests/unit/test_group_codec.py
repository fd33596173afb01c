"""protocol/group_codec.py against kio: JoinGroup and SyncGroup requests read by hand as kio reads
them, answers written byte for byte as kio writes them, every version; frames the hand reader
does not take are left to the generic decoder."""

from __future__ import annotations

import datetime
import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kcoord.protocol.apis import is_flexible
from kcoord.protocol.codec import decode_request_frame, encode_body, request_type, response_type
from kcoord.protocol.group_codec import (
    decode_join_group,
    decode_sync_group,
    join_group_body,
    sync_group_body,
)
from kcoord.protocol.responses import build, to_millis

texts = st.text(max_size=40) | st.text(min_size=120, max_size=300)  # one- and two-byte lengths
blobs = st.binary(max_size=300)
int32s = st.integers(-(2**31), 2**31 - 1)
MAX_ELEMENTS = 1000


def _frame(api_key: int, version: int, client_id: str | None, **fields: Any) -> bytes:
    body = encode_body(build(request_type(api_key, version), **fields))
    if client_id is None:
        header = struct.pack(">hhih", api_key, version, 7, -1)
    else:
        raw = client_id.encode()
        header = struct.pack(">hhih", api_key, version, 7, len(raw)) + raw
    if is_flexible(api_key, version):
        header += b"\x00"
    return header + body


def _join_frame(version: int, client_id: str | None = "client", **over: Any) -> bytes:
    fields: dict[str, Any] = dict(
        group_id="group", session_timeout=datetime.timedelta(milliseconds=10_000),
        rebalance_timeout=datetime.timedelta(milliseconds=30_000), member_id="", group_instance_id=None,
        protocol_type="consumer", protocols=[dict(name="range", metadata=b"\x00\x01")], reason=None,
    )
    fields.update(over)
    return _frame(11, version, client_id, **fields)


def _kio_join(frame: bytes, version: int) -> tuple[Any, ...]:
    """What the generic path makes of a JoinGroup frame, as group_codec's fields."""
    req = decode_request_frame(11, version, frame)
    session = to_millis(req.session_timeout)
    return (
        _client_id(frame), req.group_id, session,
        to_millis(req.rebalance_timeout) if version >= 1 else session, req.member_id,
        getattr(req, "group_instance_id", None), req.protocol_type,
        tuple((p.name, p.metadata) for p in req.protocols), getattr(req, "reason", None),
    )


def _client_id(frame: bytes) -> str:
    n = struct.unpack_from(">h", frame, 8)[0]
    return "" if n < 0 else frame[10 : 10 + n].decode()


@settings(max_examples=80, deadline=None)
@given(
    version=st.integers(0, 9), client_id=st.none() | texts, group_id=texts, member_id=texts,
    session=int32s, rebalance=int32s, instance_id=st.none() | texts, protocol_type=texts,
    protocols=st.lists(st.tuples(texts, blobs), max_size=4), reason=st.none() | texts,
)
def test_join_group_requests_read_as_kio_reads_them(
    version: int, client_id: str | None, group_id: str, member_id: str, session: int,
    rebalance: int, instance_id: str | None, protocol_type: str,
    protocols: list[tuple[str, bytes]], reason: str | None,
) -> None:
    frame = _join_frame(
        version, client_id, group_id=group_id, member_id=member_id,
        session_timeout=datetime.timedelta(milliseconds=session),
        rebalance_timeout=datetime.timedelta(milliseconds=rebalance), group_instance_id=instance_id,
        protocol_type=protocol_type, protocols=[dict(name=n, metadata=m) for n, m in protocols],
        reason=reason,
    )
    assert decode_join_group(frame, version, MAX_ELEMENTS) == _kio_join(frame, version)


@settings(max_examples=80, deadline=None)
@given(
    version=st.integers(0, 5), group_id=texts, generation=int32s, member_id=texts,
    instance_id=st.none() | texts, protocol_type=st.none() | texts, protocol_name=st.none() | texts,
    assignments=st.lists(st.tuples(texts, blobs), max_size=4),
)
def test_sync_group_requests_read_as_kio_reads_them(
    version: int, group_id: str, generation: int, member_id: str, instance_id: str | None,
    protocol_type: str | None, protocol_name: str | None, assignments: list[tuple[str, bytes]],
) -> None:
    frame = _frame(
        14, version, "client", group_id=group_id, generation_id=generation, member_id=member_id,
        group_instance_id=instance_id, protocol_type=protocol_type, protocol_name=protocol_name,
        assignments=[dict(member_id=m, assignment=a) for m, a in assignments],
    )
    req = decode_request_frame(14, version, frame)
    assert decode_sync_group(frame, version, MAX_ELEMENTS) == (
        req.group_id, req.generation_id, req.member_id, getattr(req, "group_instance_id", None),
        getattr(req, "protocol_type", None), getattr(req, "protocol_name", None),
        tuple((a.member_id, a.assignment) for a in req.assignments),
    )


@pytest.mark.parametrize("version", range(10))
def test_join_group_frames_left_to_the_generic_decoder(version: int) -> None:
    frame = _join_frame(version, protocols=[dict(name="range", metadata=b"m"), dict(name="rr", metadata=b"")])
    assert decode_join_group(frame, version, MAX_ELEMENTS) is not None
    for cut in range(8, len(frame)):  # every truncation
        assert decode_join_group(frame[:cut], version, MAX_ELEMENTS) is None
    assert decode_join_group(frame + b"\x00", version, MAX_ELEMENTS) is None  # trailing bytes
    assert decode_join_group(bytearray(frame), version, MAX_ELEMENTS) is None  # a big frame's buffer
    assert decode_join_group(frame, version, 1) is None  # more protocols than allowed
    if is_flexible(11, version):
        # A tagged field in the body (unknown to this version): the generic path skips it.
        tagged = frame[:-1] + b"\x01\x05\x01\x00"
        assert decode_join_group(tagged, version, MAX_ELEMENTS) is None
        assert decode_request_frame(11, version, tagged).group_id == "group"
    bad_text = frame.replace(b"group", b"gr\xffup", 1)
    assert decode_join_group(bad_text, version, MAX_ELEMENTS) is None


@pytest.mark.parametrize("version", range(6))
def test_sync_group_frames_left_to_the_generic_decoder(version: int) -> None:
    frame = _frame(14, version, "c", group_id="g", generation_id=1, member_id="m",
                   group_instance_id=None, protocol_type="consumer", protocol_name="range",
                   assignments=[dict(member_id="m", assignment=b"a")])
    assert decode_sync_group(frame, version, MAX_ELEMENTS) is not None
    for cut in range(8, len(frame)):
        assert decode_sync_group(frame[:cut], version, MAX_ELEMENTS) is None
    assert decode_sync_group(frame + b"\x00", version, MAX_ELEMENTS) is None
    assert decode_sync_group(frame, version, 0) is None


@settings(max_examples=80, deadline=None)
@given(
    version=st.integers(0, 9), error=st.integers(0, 120), generation=int32s,
    protocol_type=st.none() | texts, protocol_name=st.none() | texts, leader=texts,
    skip=st.booleans(), member_id=texts,
    members=st.lists(st.tuples(texts, st.none() | texts, blobs), max_size=4),
)
def test_join_group_answers_written_as_kio_writes_them(
    version: int, error: int, generation: int, protocol_type: str | None,
    protocol_name: str | None, leader: str, skip: bool, member_id: str,
    members: list[tuple[str, str | None, bytes]],
) -> None:
    kio = encode_body(build(
        response_type(11, version), throttle_time=0, error_code=error, generation_id=generation,
        protocol_type=protocol_type,
        protocol_name=protocol_name if version >= 7 else (protocol_name or ""), leader=leader,
        skip_assignment=skip, member_id=member_id,
        members=[dict(member_id=m, group_instance_id=i, metadata=d) for m, i, d in members],
    ))
    mine = join_group_body(version, error, generation, protocol_type, protocol_name, leader, skip,
                           member_id, members)
    assert mine == kio


@settings(max_examples=60, deadline=None)
@given(
    version=st.integers(0, 5), error=st.integers(0, 120), protocol_type=st.none() | texts,
    protocol_name=st.none() | texts, assignment=blobs,
)
def test_sync_group_answers_written_as_kio_writes_them(
    version: int, error: int, protocol_type: str | None, protocol_name: str | None,
    assignment: bytes,
) -> None:
    kio = encode_body(build(
        response_type(14, version), throttle_time=0, error_code=error, protocol_type=protocol_type,
        protocol_name=protocol_name, assignment=assignment,
    ))
    assert sync_group_body(version, error, protocol_type, protocol_name, assignment) == kio
