"""Steady ConsumerGroupHeartbeats: the frame reader and answer writer (protocol/
consumer_heartbeat.py) agree with the generic codec, and the shard's on-the-spot answer
(coordinator/consumer/steady.py) is the full path's answer, or declines without touching anything."""

from __future__ import annotations

import struct
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kcoord.coordinator.consumer.messages import ConsumerGroupHeartbeatRequest
from kcoord.coordinator.messages import JoinGroupRequest
from kcoord.protocol.apis import ApiKey
from kcoord.protocol.codec import encode_body, encode_response, request_type, response_type
from kcoord.protocol.consumer_heartbeat import decode_steady_heartbeat, steady_answer
from kcoord.protocol.errors import ErrorCode
from kcoord.protocol.responses import build
from tests.unit.test_consumer_group import SESSION, Group

CGH = ApiKey.CONSUMER_GROUP_HEARTBEAT


def request_frame(version: int, client_id: str | None = "cli", **fields: Any) -> bytes:
    """A whole request frame (size prefix excluded) through the generic encoder."""
    fields.setdefault("group_id", "g")
    fields.setdefault("member_id", "m-1")
    fields.setdefault("member_epoch", 3)
    fields.setdefault("rebalance_timeout", -1)
    fields.setdefault("topic_partitions", None)
    body = encode_body(build(request_type(CGH, version), **fields))
    cid = b"\xff\xff" if client_id is None else struct.pack(">h", len(client_id.encode())) + client_id.encode()
    return struct.pack(">hhi", CGH, version, 7) + cid + b"\x00" + body


@pytest.mark.parametrize("version", [0, 1])
def test_a_steady_frame_is_read_as_the_generic_decoder_reads_it(version: int) -> None:
    assert decode_steady_heartbeat(request_frame(version), version) == ("cli", "g", "m-1", 3)
    assert decode_steady_heartbeat(request_frame(version, None), version) == ("", "g", "m-1", 3)
    frame = request_frame(version, "ü", group_id="gé", member_id="x" * 126, member_epoch=-5)
    assert decode_steady_heartbeat(frame, version) == ("ü", "gé", "x" * 126, -5)
    # A frame in a bytearray is a big one handed over by the frame decoder: never steady.
    assert decode_steady_heartbeat(bytearray(frame), version) is None


@pytest.mark.parametrize(
    "fields",
    [
        {"instance_id": "i"},
        {"rack_id": "r"},
        {"rebalance_timeout": 5000},
        {"subscribed_topic_names": ["t"]},
        {"server_assignor": "uniform"},
        {"topic_partitions": []},
        {"group_id": ""},
        {"member_id": ""},
        {"member_id": "x" * 127},
        {"group_id": "g" * 200},
    ],
)
def test_any_other_heartbeat_goes_to_the_generic_path(fields: dict[str, Any]) -> None:
    for version in (0, 1):
        assert decode_steady_heartbeat(request_frame(version, **fields), version) is None
    assert decode_steady_heartbeat(request_frame(1, subscribed_topic_regex="a.*"), 1) is None


def test_tagged_fields_trailing_bytes_and_unknown_versions_go_to_the_generic_path() -> None:
    frame = request_frame(1)
    assert decode_steady_heartbeat(frame + b"\x00", 1) is None
    assert decode_steady_heartbeat(frame[:-1] + b"\x01\x00\x00", 1) is None  # a tagged field
    header_tags = frame.index(b"\x00", 10)
    assert decode_steady_heartbeat(frame[:header_tags] + b"\x01" + frame[header_tags + 1 :], 1) is None
    assert decode_steady_heartbeat(request_frame(0), 1) is None  # v0's frame read as v1
    assert decode_steady_heartbeat(frame, 2) is None


@given(st.binary(max_size=80), st.integers(0, 1))
def test_no_frame_makes_the_reader_raise(junk: bytes, version: int) -> None:
    frame = request_frame(version)
    for data in (junk, frame[: len(junk) % len(frame)], frame[:12] + junk):
        result = decode_steady_heartbeat(data, version)
        assert result is None or len(result) == 4


@pytest.mark.parametrize("version", [0, 1])
def test_the_answer_is_the_generic_encoders(version: int) -> None:
    for member_id, epoch, interval in (("m-1", 3, 5000), ("x" * 126, 2**31 - 1, 1), ("é", 1, 0)):
        generic = encode_response(
            99,
            build(
                response_type(CGH, version),
                throttle_time=0,
                error_code=0,
                error_message=None,
                member_id=member_id,
                member_epoch=epoch,
                heartbeat_interval=interval,
                assignment=None,
            ),
            True,
        )
        assert struct.pack(">i", len(generic) - 4) == generic[:4]
        assert steady_answer(99, member_id, epoch, interval) == generic


# ---- the shard's on-the-spot answer ------------------------------------------------------


def steady(g: Group, member: str, epoch: int, client_id: str = "", host: str = "") -> int | None:
    return g.shard.consumer_heartbeat_now("g", member, epoch, client_id, host, g.now)


def joined(g: Group, member: str = "a") -> int:
    reply = g.hb(member, 0)
    assert reply.error == ErrorCode.none
    reply = g.hb(member, reply.member_epoch, topic_partitions=g.owned(reply))
    return reply.member_epoch


def test_a_steady_heartbeat_answers_what_the_full_path_answers_and_keeps_the_session() -> None:
    g = Group()
    epoch = joined(g)
    full = g.hb("a", epoch)
    assert (full.error, full.member_epoch, full.assignment) == (ErrorCode.none, epoch, None)
    assert full.heartbeat_interval_ms == 500 and g.last_records == []
    written = len(g.log)
    for _ in range(3):  # each steady heartbeat pushes the session deadline out
        g.advance(SESSION - 1000)
        assert steady(g, "a", epoch) == full.heartbeat_interval_ms
    g.advance(SESSION - 1000)
    assert len(g.log) == written  # no record, no fencing
    assert g.group().members["a"].member_epoch == epoch


def test_the_steady_path_declines_and_changes_nothing_otherwise() -> None:
    g = Group()
    epoch = joined(g)
    before, written = g.group(), len(g.log)
    assert steady(g, "a", epoch + 1) is None  # fenced on the full path
    assert steady(g, "a", epoch - 1) is None
    assert steady(g, "a", 0) is None and steady(g, "a", -1) is None
    assert steady(g, "nobody", epoch) is None
    assert steady(g, "a", epoch, client_id="other") is None  # the member record changes
    assert steady(g, "a", epoch, host="/10.0.0.9") is None
    assert g.shard.consumer_heartbeat_now("h", "a", epoch, "", "", g.now) is None  # no such group
    assert g.group() is before and len(g.log) == written
    g.hb("b", 0)  # a rebalance under way: "a" must hear of it on the full path
    assert steady(g, "a", epoch) is None
    reply = g.hb("a", epoch)
    assert reply.member_epoch > epoch or reply.assignment is not None


def test_a_classic_group_of_the_same_name_is_not_answered() -> None:
    g = Group()
    req = JoinGroupRequest(
        group_id="c",
        member_id="",
        group_instance_id=None,
        session_timeout_ms=10_000,
        rebalance_timeout_ms=10_000,
        protocol_type="consumer",
        protocols=(("range", b""),),
        client_id="c",
        client_host="/h",
        require_known_member_id=False,
    )
    g.shard.join_group("j", req, g.now)
    assert g.shard.classic.groups.get("c") is not None
    assert g.shard.consumer_heartbeat_now("c", "m", 1, "", "", g.now) is None


def test_the_request_the_steady_frame_stands_for() -> None:
    # What the generic path builds from a steady frame: every optional field null or -1, so the
    # member is unchanged (with_request returns itself).
    g = Group()
    epoch = joined(g)
    member = g.group().members["a"]
    req = ConsumerGroupHeartbeatRequest(group_id="g", member_id="a", member_epoch=epoch)
    assert member.with_request(
        instance_id=req.instance_id,
        rack_id=req.rack_id,
        rebalance_timeout_ms=req.rebalance_timeout_ms,
        server_assignor=req.server_assignor,
        subscribed_topic_names=req.subscribed_topic_names,
        subscribed_topic_regex=req.subscribed_topic_regex,
        client_id=req.client_id,
        client_host=req.client_host,
    ) is member
