"""Malformed requests: lengths that lie, nulls where the schema has none, too many elements.

Finding 1 of the hardening issue: the native request decoder reserved memory for the element
count an array claimed before reading anything, so a 27-byte request killed the process.
Every length is now checked against the bytes left before anything is decoded.
"""

from __future__ import annotations

import struct

from kcoord.protocol.apis import ApiKey
from kcoord.protocol.codec import encode_body, request_type
from kcoord.protocol.errors import ErrorCode
from kcoord.protocol.responses import build
from tests.integration.harness import BrokerProcess
from tests.integration.rawclient import RawClient

from .conftest import assert_survived
from .healthy import TOPIC, HealthyGroup


def test_array_claiming_four_billion_entries_closes_the_connection(
    abuse_broker: BrokerProcess, healthy: HealthyGroup
) -> None:
    with RawClient(abuse_broker.port) as c:
        # ListGroups v4: a states filter (compact array) claiming 0xFFFFFFFE entries.
        c.send(ApiKey.LIST_GROUPS, 4, bytes([0xFF, 0xFF, 0xFF, 0xFF, 0x0F]) + b"\x00")
        assert c.closed_by_peer(timeout=10)
    with RawClient(abuse_broker.port) as c:
        # ListOffsets v1: a legacy topics array claiming 2**31-1 entries.
        c.send(ApiKey.LIST_OFFSETS, 1, struct.pack(">ii", -1, 2**31 - 1) + b"x" * 10)
        assert c.closed_by_peer(timeout=10)
    assert_survived(abuse_broker, healthy, "arrays with huge counts")


def _commit_body(partitions: int | None) -> bytes:
    """OffsetCommit v8 of ``partitions`` partitions of the healthy topic (None: no topic)."""
    return encode_body(
        build(
            request_type(ApiKey.OFFSET_COMMIT, 8),
            group_id="g",
            generation_id_or_member_epoch=-1,
            member_id="",
            group_instance_id=None,
            topics=[
                dict(
                    name=TOPIC,
                    partitions=[
                        dict(
                            partition_index=i % 2,
                            committed_offset=0,
                            committed_leader_epoch=-1,
                            committed_metadata="",
                        )
                        for i in range(partitions)
                    ],
                )
            ]
            if partitions is not None
            else [],
        )
    )


def test_null_where_the_schema_has_no_null_array_closes_the_connection(
    abuse_broker: BrokerProcess, healthy: HealthyGroup
) -> None:
    null_topics = _commit_body(None)
    assert null_topics[-2] == 1  # the topics array's compact length (empty: 1)
    null_topics = null_topics[:-2] + b"\x00" + null_topics[-1:]
    cases = {
        "OffsetCommit v8 topics": (ApiKey.OFFSET_COMMIT, 8, null_topics),
        # DescribeGroups v0: groups (int32 length -1)
        "DescribeGroups v0 groups": (ApiKey.DESCRIBE_GROUPS, 0, struct.pack(">i", -1)),
        # DeleteGroups v1: groups_names
        "DeleteGroups v1 groups": (ApiKey.DELETE_GROUPS, 1, struct.pack(">i", -1)),
        # JoinGroup v5: group, session, rebalance, member, instance (null), type, protocols null
        "JoinGroup v5 protocols": (
            ApiKey.JOIN_GROUP,
            5,
            struct.pack(">h", 1) + b"g" + struct.pack(">ii", 10000, 10000)
            + struct.pack(">h", 0) + struct.pack(">h", -1) + struct.pack(">h", 8) + b"consumer"
            + struct.pack(">i", -1),
        ),  # fmt: skip
    }
    for name, (api_key, version, body) in cases.items():
        with RawClient(abuse_broker.port) as c:
            c.send(api_key, version, body)
            assert c.closed_by_peer(timeout=10), name
    assert_survived(abuse_broker, healthy, "null arrays the schema forbids")


def test_a_request_over_the_element_limit_closes_the_connection(
    abuse_broker: BrokerProcess, healthy: HealthyGroup
) -> None:
    # socket.request.max.elements is 100,000 by default: one topic plus 99,999 partitions fit.
    with RawClient(abuse_broker.port) as c:
        c.send(ApiKey.OFFSET_COMMIT, 8, _commit_body(99_999))
        frame = c.recv_frame()
        assert struct.unpack_from(">i", frame)[0] == c.correlation
    with RawClient(abuse_broker.port) as c:
        c.send(ApiKey.OFFSET_COMMIT, 8, _commit_body(100_000))
        assert c.closed_by_peer(timeout=10)
    assert "socket.request.max.elements" in abuse_broker.log()
    assert_survived(abuse_broker, healthy, "a request over the element limit")


def test_the_largest_data_plane_requests_are_answered_in_full(
    abuse_broker: BrokerProcess, healthy: HealthyGroup
) -> None:
    """99,999 entries (with their topic, the element limit): answered completely, read in
    slices and built off the loop (broker/net/offload.py), while the healthy group goes on."""
    n = 99_999
    with RawClient(abuse_broker.port, timeout=120) as c:
        meta = c.request(
            ApiKey.METADATA,
            12,
            topics=[dict(name=f"absent-{i}", topic_id=None) for i in range(n)],
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
        assert [t.name for t in meta.topics] == [f"absent-{i}" for i in range(n)]
        assert {int(t.error_code) for t in meta.topics} == {ErrorCode.unknown_topic_or_partition}
        fetch = c.request(
            ApiKey.FETCH,
            12,
            cluster_id=None,
            replica_id=-1,
            max_wait=0,
            min_bytes=0,
            max_bytes=1 << 20,
            isolation_level=0,
            session_id=0,
            session_epoch=-1,
            topics=[
                dict(
                    topic=TOPIC,
                    partitions=[
                        dict(
                            partition=i % 3,  # 2 does not exist
                            current_leader_epoch=-1,
                            fetch_offset=0,
                            last_fetched_epoch=-1,
                            log_start_offset=-1,
                            partition_max_bytes=1,
                        )
                        for i in range(n)
                    ],
                )
            ],
            forgotten_topics_data=[],
            rack_id="",
        )
        parts = fetch.responses[0].partitions
        assert [p.partition_index for p in parts] == [i % 3 for i in range(n)]
        assert [int(p.error_code) for p in parts[:3]] == [0, 0, ErrorCode.unknown_topic_or_partition]
        assert parts[0].high_watermark > 0 and parts[n - 3].high_watermark >= parts[0].high_watermark
        listed = c.request(
            ApiKey.LIST_OFFSETS,
            7,
            replica_id=-1,
            isolation_level=0,
            topics=[
                dict(
                    name=TOPIC,
                    partitions=[
                        dict(partition_index=i % 2, current_leader_epoch=-1, timestamp=-2)
                        for i in range(n)
                    ],
                )
            ],
        )
        offsets = listed.topics[0].partitions
        assert len(offsets) == n and {(int(p.error_code), p.offset) for p in offsets} == {(0, 0)}
    assert_survived(abuse_broker, healthy, "Metadata, Fetch and ListOffsets of 99,999 entries")
