"""protocol/offset_fetch.py against kio: the hand-written OffsetFetch answers are kio's bytes, and
the hand-read requests are what kio reads (or left to it)."""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from kcoord.protocol.codec import (
    decode_request_frame,
    encode_body,
    encode_response,
    request_type,
    response_type,
)
from kcoord.protocol.offset_fetch import decode_offset_fetch_request, encode_offset_fetch_response
from kcoord.protocol.responses import build

i32 = st.integers(-(2**31), 2**31 - 1)
partitions = st.lists(
    st.tuples(i32, st.integers(-(2**63), 2**63 - 1), i32, st.none() | st.text(max_size=300),
              st.integers(0, 120)),
    max_size=5,
)
topics = st.lists(st.tuples(st.text(max_size=200), partitions), max_size=4)


@settings(max_examples=150, deadline=None)
@given(version=st.integers(0, 7), correlation=i32, error=st.integers(0, 120), topics=topics)
def test_same_bytes_as_the_generic_encoder(
    version: int, correlation: int, error: int, topics: list[tuple[str, list[tuple[int, int, int, str | None, int]]]]
) -> None:
    expected = encode_response(
        correlation,
        build(
            response_type(9, version),
            throttle_time=0,
            error_code=error,
            topics=[
                dict(
                    name=name,
                    partitions=[
                        dict(partition_index=p, committed_offset=o, committed_leader_epoch=e,
                             metadata=m if m is not None else "", error_code=c)
                        for p, o, e, m, c in parts
                    ],
                )
                for name, parts in topics
            ],
        ),
        version >= 6,
    )
    got = encode_offset_fetch_response(version, correlation, error, topics)
    assert got == expected
    assert struct.unpack_from(">i", got)[0] == len(got) - 4


def test_v0_v1_group_error_is_repeated_on_every_requested_partition() -> None:
    from kcoord.broker.groups.offset_api import _error_on_every_partition

    r = _error_on_every_partition((("t", (0, 2)),), 14)  # COORDINATOR_LOAD_IN_PROGRESS
    assert r.error == 14
    assert r.topics == (("t", ((0, -1, -1, "", 14), (2, -1, -1, "", 14))),)


def request_frame(version: int, client_id: str | None, group_id: str, topics: list[tuple[str, list[int]]] | None,
                  require_stable: bool = False) -> bytes:
    fields: dict[str, object] = dict(
        group_id=group_id,
        topics=None if topics is None else [dict(name=n, partition_indexes=ps) for n, ps in topics],
    )
    if version >= 7:
        fields["require_stable"] = require_stable
    body = encode_body(build(request_type(9, version), **fields))
    cid = b"\xff\xff" if client_id is None else struct.pack(">h", len(client_id.encode())) + client_id.encode()
    return struct.pack(">hhi", 9, version, 5) + cid + (b"\x00" if version >= 6 else b"") + body


names = st.text(max_size=40)
wanted = st.none() | st.lists(st.tuples(names, st.lists(i32, max_size=8)), max_size=4)


@settings(max_examples=200, deadline=None)
@given(version=st.integers(0, 7), client_id=st.none() | names, group_id=names, topics=wanted,
       stable=st.booleans())
def test_a_request_is_read_as_the_generic_decoder_reads_it(
    version: int, client_id: str | None, group_id: str, topics: list[tuple[str, list[int]]] | None, stable: bool
) -> None:
    if topics is None and version < 2:
        topics = []  # null topics only from v2 on
    frame = request_frame(version, client_id, group_id, topics, stable)
    got = decode_offset_fetch_request(frame, version)
    req = decode_request_frame(9, version, frame)
    assert got is not None  # short names and few partitions: always the hand-read path
    expected_topics = None if req.topics is None else tuple((t.name, tuple(t.partition_indexes)) for t in req.topics)
    assert got == (req.group_id, expected_topics, version >= 7 and bool(req.require_stable))


def test_long_names_many_partitions_tags_and_trailing_bytes_go_to_the_generic_decoder() -> None:
    for version in range(8):
        long_name = decode_offset_fetch_request(request_frame(version, "c", "g" * 200, [("t", [0])]), version)
        # Compact lengths of two bytes are left to kio; int16 lengths are read here.
        assert long_name is None if version >= 6 else long_name == ("g" * 200, (("t", (0,)),), False)
        many = [("t", list(range(200)))]
        assert decode_offset_fetch_request(request_frame(version, "c", "g", many), version) is None
        frame = request_frame(version, "c", "g", [("t", [0, 1])])
        assert decode_offset_fetch_request(frame + b"\x00", version) is None
        assert decode_offset_fetch_request(frame[:-1], version) is None
        assert decode_offset_fetch_request(bytearray(frame), version) is None
    frame = request_frame(6, "c", "g", [("t", [0])])
    assert decode_offset_fetch_request(frame[:-1] + b"\x01\x00\x00", 6) is None  # a tagged field
    assert decode_offset_fetch_request(frame, 8) is None


@settings(max_examples=300, deadline=None)
@given(version=st.integers(0, 7), cut=st.integers(0, 200), junk=st.binary(max_size=40))
def test_no_frame_makes_the_reader_raise(version: int, cut: int, junk: bytes) -> None:
    frame = request_frame(version, "c", "grp", [("t", [0, 1, 2]), ("u", [4])])
    for data in (frame[:cut], frame[:cut] + junk, junk):
        got = decode_offset_fetch_request(data, version)
        assert got is None or len(got) == 3
