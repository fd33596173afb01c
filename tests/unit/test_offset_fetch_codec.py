"""protocol/offset_fetch.py against kio: the hand-written OffsetFetch answers are kio's bytes."""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.codec import encode_response, response_type
from protocol.offset_fetch import encode_offset_fetch_response
from protocol.responses import build

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
    from broker.offset_api import _error_on_every_partition
    from protocol.codec import request_type

    req = build(request_type(9, 1), group_id="g", topics=[dict(name="t", partition_indexes=[0, 2])])
    r = _error_on_every_partition(req, 14)  # COORDINATOR_LOAD_IN_PROGRESS
    assert r.error == 14
    assert r.topics == (("t", ((0, -1, -1, "", 14), (2, -1, -1, "", 14))),)
