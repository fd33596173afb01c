"""The versions of the ``__consumer_offsets`` values kcoord writes and reads, against a second
codec: kafka-python's generic one, driven by a description of Kafka 4.2's OffsetCommitValue and
GroupMetadataValue schemas (field names, types, versions, tags; written out below). Each test
names the version rule it checks."""

from __future__ import annotations

import io
import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.data_container import DataContainer
from kafka.protocol.schemas import StructField

from kcoord.coordinator.schemas import (
    GROUP_METADATA_VALUE_VERSION,
    OFFSET_COMMIT_VALUE_VERSION,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitValue,
    decode_group_metadata_value,
    decode_offset_commit_value,
    encode_group_metadata_value,
    encode_offset_commit_value,
)

_OFFSET_COMMIT_VALUE = {
    "name": "OffsetCommitValue",
    "type": "data",
    "validVersions": "0-4",
    "flexibleVersions": "4+",
    "fields": [
        {"name": "offset", "type": "int64", "versions": "0+"},
        {"name": "leaderEpoch", "type": "int32", "versions": "3+", "default": -1},
        {"name": "metadata", "type": "string", "versions": "0+"},
        {"name": "commitTimestamp", "type": "int64", "versions": "0+"},
        {"name": "expireTimestamp", "type": "int64", "versions": "1", "default": -1},
        {"name": "topicId", "type": "uuid", "versions": "4+", "taggedVersions": "4+", "tag": 0},
    ],
}
_GROUP_METADATA_VALUE = {
    "name": "GroupMetadataValue",
    "type": "data",
    "validVersions": "0-4",
    "flexibleVersions": "4+",
    "fields": [
        {"name": "protocolType", "type": "string", "versions": "0+"},
        {"name": "generation", "type": "int32", "versions": "0+"},
        {"name": "protocol", "type": "string", "versions": "0+", "nullableVersions": "0+"},
        {"name": "leader", "type": "string", "versions": "0+", "nullableVersions": "0+"},
        {"name": "currentStateTimestamp", "type": "int64", "versions": "2+", "default": -1},
        {"name": "members", "type": "[]MemberMetadata", "versions": "0+", "fields": [
            {"name": "memberId", "type": "string", "versions": "0+"},
            {"name": "groupInstanceId", "type": "string", "versions": "3+",
             "nullableVersions": "3+", "default": "null"},
            {"name": "clientId", "type": "string", "versions": "0+"},
            {"name": "clientHost", "type": "string", "versions": "0+"},
            {"name": "rebalanceTimeout", "type": "int32", "versions": "1+", "default": -1},
            {"name": "sessionTimeout", "type": "int32", "versions": "0+"},
            {"name": "subscription", "type": "bytes", "versions": "0+"},
            {"name": "assignment", "type": "bytes", "versions": "0+"},
        ]},
    ],
}  # fmt: skip


def _codec(spec: dict[str, Any]) -> type[DataContainer]:
    struct = StructField(spec)
    cls = type(spec["name"], (DataContainer,), {"_struct": struct})
    struct.set_data_class(cls)
    return cls


OffsetCommitValueK = _codec(_OFFSET_COMMIT_VALUE)
GroupMetadataValueK = _codec(_GROUP_METADATA_VALUE)


def _kafka_encode(cls: type[DataContainer], version: int, **fields: Any) -> bytes:
    """The value as Kafka's schema encodes it at ``version``, its int16 version first."""
    flexible = version >= 4
    body = cls(version=version, **fields).encode(version=version, compact=flexible, tagged=flexible)
    return version.to_bytes(2, "big") + bytes(body)


def kafka_decode(cls: type[DataContainer], raw: bytes) -> Any:
    version = int.from_bytes(raw[:2], "big")
    flexible = version >= 4
    return cls.decode(io.BytesIO(raw[2:]), version=version, compact=flexible, tagged=flexible)


_text = st.text(max_size=20)
_i32 = st.integers(-(2**31), 2**31 - 1)
_i64 = st.integers(-(2**63), 2**63 - 1)


@settings(max_examples=50, deadline=None)
@given(_i64, _i32, _text, _i64, st.none() | st.uuids().filter(lambda u: u.int != 0))
def test_offset_commits_are_written_as_v4_the_way_kafka_4_2_writes_them(
    offset: int, epoch: int, metadata: str, ts: int, topic_id: uuid.UUID | None
) -> None:
    """Rule: Kafka 4.2 writes every commit without an expire timestamp as v4 (flexible), its
    topic id a tagged field present only when the commit named the topic by id."""
    value = OffsetCommitValue(offset, metadata, ts, epoch, topic_id=topic_id)
    ours = encode_offset_commit_value(value)
    assert OFFSET_COMMIT_VALUE_VERSION == 4 and ours[:2] == b"\x00\x04"
    fields: dict[str, Any] = dict(
        offset=offset, leader_epoch=epoch, metadata=metadata, commit_timestamp=ts
    )
    if topic_id is not None:
        fields["topic_id"] = topic_id
    assert ours == _kafka_encode(OffsetCommitValueK, 4, **fields)
    theirs = kafka_decode(OffsetCommitValueK, ours)
    assert (theirs.offset, theirs.leader_epoch, theirs.metadata, theirs.commit_timestamp) == (
        offset, epoch, metadata, ts)  # fmt: skip
    assert decode_offset_commit_value(ours) == value


def test_an_offset_commit_with_an_expire_timestamp_is_v1() -> None:
    """Rule: Kafka writes v1, the only version with an expire timestamp, when a commit has one
    (OffsetCommit v1-v4's retention time); kcoord keeps one only from a record it read."""
    value = OffsetCommitValue(5, "m", 6, expire_timestamp=7)
    ours = encode_offset_commit_value(value)
    expected = _kafka_encode(
        OffsetCommitValueK, 1, offset=5, metadata="m", commit_timestamp=6, expire_timestamp=7
    )
    assert ours == expected
    assert decode_offset_commit_value(ours) == value


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_every_offset_commit_version_kafka_wrote_is_read(version: int) -> None:
    """Rule: a data directory of any Kafka version loads: v0-v3 (Kafka up to 4.1) and v4 (4.2),
    with the fields each version has and -1 for the rest."""
    fields: dict[str, Any] = dict(offset=42, metadata="md", commit_timestamp=1000)
    if version == 1:
        fields["expire_timestamp"] = 2000
    if version >= 3:
        fields["leader_epoch"] = 9
    if version == 4:
        fields["topic_id"] = uuid.UUID(int=0xABC)
    got = decode_offset_commit_value(_kafka_encode(OffsetCommitValueK, version, **fields))
    assert got == OffsetCommitValue(
        42,
        "md",
        1000,
        leader_epoch=9 if version >= 3 else -1,
        expire_timestamp=2000 if version == 1 else -1,
        topic_id=uuid.UUID(int=0xABC) if version == 4 else None,
    )


def test_unknown_tagged_fields_of_an_offset_commit_v4_are_skipped() -> None:
    """Rule (KIP-915): later versions add only tagged fields, which a v4 reader skips."""
    raw = _kafka_encode(OffsetCommitValueK, 4, offset=1, metadata="", commit_timestamp=2)
    assert raw.endswith(b"\x00")
    extended = raw[:-1] + b"\x02" + b"\x00\x10" + uuid.UUID(int=3).bytes + b"\x05\x02hi"
    assert decode_offset_commit_value(extended) == OffsetCommitValue(
        1, "", 2, topic_id=uuid.UUID(int=3)
    )


def _group() -> GroupMetadataValue:
    members = (
        MemberMetadata("m-1", "static", "c1", "/10.0.0.1", 300_000, 45_000, b"sub", b"as"),
        MemberMetadata("m-2", None, "c2", "/10.0.0.2", 60_000, 10_000, b"", b"\x00\x01"),
    )
    return GroupMetadataValue("consumer", 7, "range", "m-1", 1_700_000_000_000, members)


def _group_fields(value: GroupMetadataValue) -> dict[str, Any]:
    members = [
        GroupMetadataValueK.MemberMetadata(
            member_id=m.member_id, group_instance_id=m.group_instance_id, client_id=m.client_id,
            client_host=m.client_host, rebalance_timeout=m.rebalance_timeout,
            session_timeout=m.session_timeout, subscription=m.subscription,
            assignment=m.assignment,
        )
        for m in value.members
    ]  # fmt: skip
    return dict(
        protocol_type=value.protocol_type,
        generation=value.generation,
        protocol=value.protocol,
        leader=value.leader,
        current_state_timestamp=value.current_state_timestamp,
        members=members,
    )


def test_group_metadata_is_written_as_v3_as_kafka_4_2_writes_it() -> None:
    """Rule: Kafka 4.2 writes GroupMetadataValue v3, the newest non-flexible version, and
    keeps it until a tagged field needs v4."""
    value = _group()
    ours = encode_group_metadata_value(value)
    assert GROUP_METADATA_VALUE_VERSION == 3
    assert ours == _kafka_encode(GroupMetadataValueK, 3, **_group_fields(value))


def test_group_metadata_v4_is_read() -> None:
    """Rule: v4 (flexible: compact strings, bytes and array, tagged fields after each member
    and at the end; the same fields) is read, unknown tags skipped."""
    value = _group()
    raw = _kafka_encode(GroupMetadataValueK, 4, **_group_fields(value))
    assert decode_group_metadata_value(raw) == value
    assert raw.endswith(b"\x00")
    with_tag = raw[:-1] + b"\x01\x07\x01x"  # a tag 7 this reader does not know
    assert decode_group_metadata_value(with_tag) == value
