"""__consumer_offsets key/value schemas (I2): hand-built byte vectors and round trips."""

from __future__ import annotations

import contextlib
import struct
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kcoord.coordinator.schemas import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    SchemaError,
    UnknownKey,
    UnsupportedVersionError,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
    encode_group_metadata_value,
    encode_key,
    encode_offset_commit_value,
    offset_commit_value_size,
)


def i16(v: int) -> bytes:
    return struct.pack(">h", v)


def i32(v: int) -> bytes:
    return struct.pack(">i", v)


def i64(v: int) -> bytes:
    return struct.pack(">q", v)


def s(v: str | None) -> bytes:
    if v is None:
        return i16(-1)
    raw = v.encode()
    return i16(len(raw)) + raw


def b(v: bytes) -> bytes:
    return i32(len(v)) + v


# ---- keys ---------------------------------------------------------------------------------


def test_I2_offset_commit_key_v1_bytes() -> None:
    key = OffsetCommitKey("grp", "topic-a", 7)
    expected = b"\x00\x01" + b"\x00\x03grp" + b"\x00\x07topic-a" + b"\x00\x00\x00\x07"
    assert encode_key(key) == expected
    assert decode_key(expected) == key


def test_I2_offset_commit_key_v0_decodes() -> None:
    raw = i16(0) + s("g") + s("t") + i32(3)
    assert decode_key(raw) == OffsetCommitKey("g", "t", 3)


def test_I2_group_metadata_key_v2_bytes() -> None:
    expected = b"\x00\x02\x00\x08my-group"
    assert encode_key(GroupMetadataKey("my-group")) == expected
    assert decode_key(expected) == GroupMetadataKey("my-group")


@pytest.mark.parametrize("version", [17, 42])  # 9-15 are share-group keys (test_share_records.py)
def test_unmodelled_key_versions_are_unknown_keys(version: int) -> None:
    raw = i16(version) + s("g") + s("member")
    assert decode_key(raw) == UnknownKey(version, raw[2:])


def test_kip848_key_versions_decode_to_consumer_keys() -> None:
    # The consumer-group keys themselves are tested in test_consumer_records.py.
    from kcoord.coordinator.consumer.records import (
        ConsumerGroupMemberMetadataKey,
        ConsumerGroupMetadataKey,
        ConsumerGroupRegularExpressionKey,
    )

    assert decode_key(i16(3) + s("g")) == ConsumerGroupMetadataKey("g")
    assert decode_key(i16(5) + s("g") + s("m")) == ConsumerGroupMemberMetadataKey("g", "m")
    assert decode_key(i16(16) + s("g") + s("t.*")) == ConsumerGroupRegularExpressionKey("g", "t.*")
    assert encode_key(ConsumerGroupMemberMetadataKey("g", "m")) == i16(5) + s("g") + s("m")
    with pytest.raises(SchemaError):
        decode_key(i16(5) + s("g"))  # no member id


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"\x00",
        i16(2) + i16(5) + b"abc",  # string runs past the end
        i16(1) + s("g") + s("t"),  # missing partition
        i16(2) + s("g") + b"\x00",  # trailing byte
        i16(2) + i16(-1),  # null group
        i16(2) + i16(2) + b"\xff\xfe",  # invalid UTF-8
        i16(-3) + s("g"),
    ],
)
def test_malformed_keys_raise_schema_error(raw: bytes) -> None:
    with pytest.raises(SchemaError):
        decode_key(raw)
    assert issubclass(SchemaError, ValueError)


def test_unicode_strings_use_utf8_byte_lengths() -> None:
    key = GroupMetadataKey("grüppe")
    assert encode_key(key) == i16(2) + i16(7) + "grüppe".encode()
    assert decode_key(encode_key(key)) == key


# ---- OffsetCommitValue ----------------------------------------------------------------------


def test_I2_offset_commit_value_v4_bytes_field_by_field() -> None:
    """Written as Kafka 4.2 writes a commit: v4, flexible, the topic id only when named by id."""
    value = OffsetCommitValue(
        offset=42, metadata="md", commit_timestamp=1_700_000_000_000, leader_epoch=5
    )
    raw = encode_offset_commit_value(value)
    assert raw[0:2] == b"\x00\x04"  # version 4
    assert raw[2:10] == b"\x00\x00\x00\x00\x00\x00\x00\x2a"  # offset 42
    assert raw[10:14] == b"\x00\x00\x00\x05"  # leader epoch 5
    assert raw[14:15] == b"\x03" and raw[15:17] == b"md"  # compact metadata (length + 1)
    assert raw[17:25] == (1_700_000_000_000).to_bytes(8, "big")  # commit timestamp
    assert raw[25:] == b"\x00"  # no tagged field
    assert decode_offset_commit_value(raw) == value
    by_id = value._replace(topic_id=uuid.UUID(int=7))
    raw = encode_offset_commit_value(by_id)
    assert raw[25:] == b"\x01\x00\x10" + uuid.UUID(int=7).bytes  # one field: tag 0, 16 bytes
    assert decode_offset_commit_value(raw) == by_id


def test_offset_commit_value_v4_unknown_epoch_is_minus_one() -> None:
    raw = encode_offset_commit_value(OffsetCommitValue(0, "", 0))
    assert raw == i16(4) + i64(0) + b"\xff\xff\xff\xff" + b"\x01" + i64(0) + b"\x00"


def test_offset_commit_value_v4_sizes() -> None:
    for metadata in ("", "x" * 126, "x" * 127, "x" * 16383, "x" * 20000):
        for topic_id in (None, uuid.UUID(int=1)):
            raw = encode_offset_commit_value(OffsetCommitValue(1, metadata, 2, topic_id=topic_id))
            assert len(raw) == offset_commit_value_size(len(metadata), topic_id is not None)


def test_offset_commit_value_v3_still_decodes() -> None:
    raw = i16(3) + i64(42) + i32(5) + s("md") + i64(7)
    assert decode_offset_commit_value(raw) == OffsetCommitValue(42, "md", 7, leader_epoch=5)


def test_an_expire_timestamp_is_written_as_v1_as_kafka_does() -> None:
    value = OffsetCommitValue(11, "b", 101, expire_timestamp=999)
    assert encode_offset_commit_value(value) == i16(1) + i64(11) + s("b") + i64(101) + i64(999)


def test_offset_commit_value_v0_v1_v2_decode() -> None:
    v0 = i16(0) + i64(10) + s("a") + i64(100)
    v1 = i16(1) + i64(11) + s("b") + i64(101) + i64(999)
    v2 = i16(2) + i64(12) + s("c") + i64(102)
    assert decode_offset_commit_value(v0) == OffsetCommitValue(10, "a", 100)
    assert decode_offset_commit_value(v1) == OffsetCommitValue(11, "b", 101, expire_timestamp=999)
    assert decode_offset_commit_value(v2) == OffsetCommitValue(12, "c", 102)
    assert decode_offset_commit_value(v2).leader_epoch == -1


@pytest.mark.parametrize(
    "raw",
    [
        i16(4) + i64(1) + i32(0) + s("") + i64(0),  # a classic (null compact) string in v4
        i16(4) + i64(1) + i32(0) + b"\x01" + i64(0),  # v4 without its tagged fields
        i16(4) + i64(1) + i32(0) + b"\x01" + i64(0) + b"\x01\x00\x10" + b"\x00" * 8,  # short id
        i16(5) + i64(1) + i32(0) + b"\x01" + i64(0) + b"\x00",
        i16(3) + i64(1),
        i16(3) + i64(1) + i32(0) + s("") + i64(0) + b"x",
        i16(0) + i64(1) + i16(-1) + i64(0),  # null metadata is not allowed
    ],
)
def test_malformed_offset_commit_values_raise(raw: bytes) -> None:
    with pytest.raises(SchemaError):
        decode_offset_commit_value(raw)


def test_unknown_value_version_is_unsupported_version_error() -> None:
    with pytest.raises(UnsupportedVersionError):
        decode_offset_commit_value(i16(9) + i64(1))
    with pytest.raises(UnsupportedVersionError):
        decode_group_metadata_value(i16(5) + s("consumer"))


# ---- GroupMetadataValue ----------------------------------------------------------------------


def test_I2_group_metadata_value_v3_bytes_field_by_field() -> None:
    member = MemberMetadata(
        member_id="m-1",
        group_instance_id="i1",
        client_id="c",
        client_host="/h",
        rebalance_timeout=300,
        session_timeout=100,
        subscription=b"\x01\x02",
        assignment=b"\x03",
    )
    value = GroupMetadataValue("consumer", 7, "range", "m-1", 1234, (member,))
    raw = encode_group_metadata_value(value)
    expected = (
        b"\x00\x03"  # version 3
        + b"\x00\x08consumer"  # protocol_type
        + b"\x00\x00\x00\x07"  # generation
        + b"\x00\x05range"  # protocol
        + b"\x00\x03m-1"  # leader
        + b"\x00\x00\x00\x00\x00\x00\x04\xd2"  # current_state_timestamp 1234
        + b"\x00\x00\x00\x01"  # one member
        + b"\x00\x03m-1"  # member_id
        + b"\x00\x02i1"  # group_instance_id
        + b"\x00\x01c"  # client_id
        + b"\x00\x02/h"  # client_host
        + b"\x00\x00\x01\x2c"  # rebalance_timeout 300
        + b"\x00\x00\x00\x64"  # session_timeout 100
        + b"\x00\x00\x00\x02\x01\x02"  # subscription
        + b"\x00\x00\x00\x01\x03"  # assignment
    )
    assert raw == expected
    assert decode_group_metadata_value(raw) == value


def test_I6_empty_group_value_v3_nulls() -> None:
    value = GroupMetadataValue("consumer", 3, None, None, 99, ())
    raw = encode_group_metadata_value(value)
    assert raw == i16(3) + s("consumer") + i32(3) + b"\xff\xff" + b"\xff\xff" + i64(99) + i32(0)
    assert decode_group_metadata_value(raw) == value


def test_group_metadata_value_v3_null_instance_id() -> None:
    m = MemberMetadata("m", None, "c", "h", 1, 2, b"", b"")
    raw = encode_group_metadata_value(GroupMetadataValue("", 0, None, None, -1, (m,)))
    assert (s("m") + i16(-1) + s("c")) in raw
    assert decode_group_metadata_value(raw).members == (m,)


def test_group_metadata_value_v0_v1_v2_decode() -> None:
    member_v0 = s("m") + s("c") + s("h") + i32(10) + b(b"sub") + b(b"asg")
    v0 = i16(0) + s("consumer") + i32(1) + s("range") + s("m") + i32(1) + member_v0
    got = decode_group_metadata_value(v0)
    assert got == GroupMetadataValue(
        "consumer",
        1,
        "range",
        "m",
        -1,
        (MemberMetadata("m", None, "c", "h", -1, 10, b"sub", b"asg"),),
    )
    member_v1 = s("m") + s("c") + s("h") + i32(20) + i32(10) + b(b"sub") + b(b"asg")
    v1 = i16(1) + s("consumer") + i32(1) + s("range") + s("m") + i32(1) + member_v1
    assert decode_group_metadata_value(v1).members[0].rebalance_timeout == 20
    v2 = i16(2) + s("consumer") + i32(1) + s("range") + s("m") + i64(555) + i32(1) + member_v1
    got2 = decode_group_metadata_value(v2)
    assert got2.current_state_timestamp == 555
    assert got2.members[0] == MemberMetadata("m", None, "c", "h", 20, 10, b"sub", b"asg")


@pytest.mark.parametrize(
    "raw",
    [
        i16(3) + s("consumer") + i32(1),  # truncated
        i16(3) + s("consumer") + i32(1) + s(None) + s(None) + i64(0) + i32(-1),  # negative count
        i16(3) + s("consumer") + i32(1) + s(None) + s(None) + i64(0) + i32(1000),  # count too big
        i16(3) + s("consumer") + i32(1) + s(None) + s(None) + i64(0) + i32(0) + b"\x00",
        i16(3) + i16(-1) + i32(1) + s(None) + s(None) + i64(0) + i32(0),  # null protocol type
        i16(3)
        + s("c")
        + i32(1)
        + s(None)
        + s(None)
        + i64(0)
        + i32(1)
        + s("m")
        + s(None)
        + s("c")
        + s("h")
        + i32(1)
        + i32(1)
        + i32(-1)
        + b(b""),  # null bytes
    ],
)
def test_malformed_group_values_raise(raw: bytes) -> None:
    with pytest.raises(SchemaError):
        decode_group_metadata_value(raw)


_text = st.text(max_size=20)
_opt_text = st.none() | _text
_bytes = st.binary(max_size=40)
_i32 = st.integers(-(2**31), 2**31 - 1)
_i64 = st.integers(-(2**63), 2**63 - 1)


@given(
    st.builds(
        GroupMetadataValue,
        _text,
        _i32,
        _opt_text,
        _opt_text,
        _i64,
        st.lists(
            st.builds(MemberMetadata, _text, _opt_text, _text, _text, _i32, _i32, _bytes, _bytes),
            max_size=4,
        ).map(tuple),
    )
)
def test_group_metadata_value_round_trip(value: GroupMetadataValue) -> None:
    assert decode_group_metadata_value(encode_group_metadata_value(value)) == value


@given(
    st.builds(
        OffsetCommitValue, _i64, _text, _i64, _i32, st.just(-1), st.none() | st.uuids().filter(lambda u: u.int != 0)
    )
)
def test_offset_commit_value_round_trip(value: OffsetCommitValue) -> None:
    assert decode_offset_commit_value(encode_offset_commit_value(value)) == value


@given(st.builds(OffsetCommitKey, _text, _text, _i32) | st.builds(GroupMetadataKey, _text))
def test_key_round_trip(key: OffsetCommitKey | GroupMetadataKey) -> None:
    assert decode_key(encode_key(key)) == key


@given(st.binary(max_size=64))
def test_decoders_never_raise_anything_but_schema_error(raw: bytes) -> None:
    for decode in (decode_key, decode_offset_commit_value, decode_group_metadata_value):
        with contextlib.suppress(SchemaError):
            decode(raw)
