"""Unit tests of share/state_records.py: ``__share_group_state`` keys and values against bytes
laid out by hand from Kafka 4.2's Share{Snapshot,Update}{Key,Value}.json, round trips, and
SchemaError on bad input."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kcoord.coordinator.schema_errors import SchemaError, UnsupportedVersionError
from kcoord.share.model import SharePartitionKey, StateBatch
from kcoord.share.state_records import (
    SHARE_SNAPSHOT,
    SHARE_UPDATE,
    ShareSnapshotKey,
    ShareSnapshotValue,
    ShareUpdateKey,
    ShareUpdateValue,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)

TOPIC = uuid.UUID(bytes=bytes(range(16)))


def _i32(v: int) -> bytes:
    return v.to_bytes(4, "big", signed=True)


def _i64(v: int) -> bytes:
    return v.to_bytes(8, "big", signed=True)


SNAPSHOT_KEY_BYTES = b"\x00\x00" + b"\x00\x02gr" + TOPIC.bytes + _i32(7)
UPDATE_KEY_BYTES = b"\x00\x01" + b"\x00\x02gr" + TOPIC.bytes + _i32(7)

BATCH = StateBatch(first_offset=10, last_offset=12, delivery_state=2, delivery_count=1)
BATCH_BYTES = _i64(10) + _i64(12) + b"\x02" + b"\x00\x01" + b"\x00"  # no tags

SNAPSHOT = ShareSnapshotValue(
    snapshot_epoch=3, state_epoch=1, leader_epoch=5, start_offset=10,
    create_timestamp=1_700_000_000_000, write_timestamp=1_700_000_000_500,
    state_batches=(BATCH,), delivery_complete_count=3,
)
SNAPSHOT_BYTES = (
    b"\x00\x00"  # value version 0
    + _i32(3) + _i32(1) + _i32(5) + _i64(10) + _i64(1_700_000_000_000) + _i64(1_700_000_000_500)
    + b"\x02" + BATCH_BYTES  # compact array: 1 element
    + b"\x01" + b"\x00" + b"\x04" + _i32(3)  # one tagged field: tag 0, 4 bytes, DeliveryCompleteCount
)

UPDATE = ShareUpdateValue(snapshot_epoch=3, leader_epoch=-1, start_offset=-1, state_batches=(BATCH,))
UPDATE_BYTES = b"\x00\x00" + _i32(3) + _i32(-1) + _i64(-1) + b"\x02" + BATCH_BYTES + b"\x00"


def test_snapshot_key_layout() -> None:
    key = ShareSnapshotKey("gr", TOPIC, 7)
    assert encode_key(key) == SNAPSHOT_KEY_BYTES
    assert decode_key(SNAPSHOT_KEY_BYTES) == key
    assert key.share_key == SharePartitionKey("gr", TOPIC, 7)


def test_update_key_layout() -> None:
    key = ShareUpdateKey("gr", TOPIC, 7)
    assert encode_key(key) == UPDATE_KEY_BYTES
    assert decode_key(UPDATE_KEY_BYTES) == key


def test_snapshot_value_layout_with_the_delivery_complete_count_tag() -> None:
    assert encode_value(SNAPSHOT) == SNAPSHOT_BYTES
    assert decode_value(SHARE_SNAPSHOT, SNAPSHOT_BYTES) == SNAPSHOT


def test_update_value_layout_without_tags_when_the_count_is_unknown() -> None:
    assert encode_value(UPDATE) == UPDATE_BYTES
    assert decode_value(SHARE_UPDATE, UPDATE_BYTES) == UPDATE


def test_a_value_with_no_batches() -> None:
    empty = ShareSnapshotValue(0, 2, -1, -1, 5, 5)
    raw = encode_value(empty)
    assert raw == b"\x00\x00" + _i32(0) + _i32(2) + _i32(-1) + _i64(-1) + _i64(5) + _i64(5) + b"\x01\x00"
    assert decode_value(SHARE_SNAPSHOT, raw) == empty


def test_unknown_tagged_fields_are_skipped() -> None:
    raw = UPDATE_BYTES[:-1] + b"\x01" + b"\x05" + b"\x02" + b"\xaa\xbb"  # tag 5, 2 bytes
    assert decode_value(SHARE_UPDATE, raw) == UPDATE


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        SNAPSHOT_KEY_BYTES[:-1],  # truncated partition
        SNAPSHOT_KEY_BYTES + b"\x00",  # trailing byte
        b"\x00\x00\xff\xff" + TOPIC.bytes + _i32(0),  # negative string length
        b"\x00\x00\x00\x02\xff\xfe" + TOPIC.bytes + _i32(0),  # invalid UTF-8
    ],
)
def test_bad_keys_raise_schema_error(raw: bytes) -> None:
    with pytest.raises(SchemaError):
        decode_key(raw)


def test_an_unknown_record_type_is_an_unsupported_version() -> None:
    with pytest.raises(UnsupportedVersionError):
        decode_key(b"\x00\x02" + SNAPSHOT_KEY_BYTES[2:])
    with pytest.raises(UnsupportedVersionError):
        decode_value(2, UPDATE_BYTES)


@pytest.mark.parametrize(
    ("record_type", "raw"),
    [
        (SHARE_UPDATE, b"\x00\x01" + UPDATE_BYTES[2:]),  # value version 1
        (SHARE_UPDATE, UPDATE_BYTES[:-1]),  # no tag section
        (SHARE_UPDATE, UPDATE_BYTES + b"\x00"),  # trailing
        (SHARE_UPDATE, UPDATE_BYTES[:18] + b"\x7f"),  # array count past the bytes left
        (SHARE_SNAPSHOT, SNAPSHOT_BYTES[:-2] + b"\x00"),  # tagged field shorter than its size
        (SHARE_SNAPSHOT, b"\x00"),  # truncated version
    ],
)
def test_bad_values_raise_schema_error(record_type: int, raw: bytes) -> None:
    with pytest.raises(SchemaError):
        decode_value(record_type, raw)


def test_a_snapshot_is_not_read_as_an_update() -> None:
    with pytest.raises(SchemaError):
        decode_value(SHARE_UPDATE, SNAPSHOT_BYTES)


_i16s = st.integers(-(2**15), 2**15 - 1)
_i32s = st.integers(-(2**31), 2**31 - 1)
_i64s = st.integers(-(2**63), 2**63 - 1)
_batches = st.lists(
    st.builds(StateBatch, _i64s, _i64s, st.integers(-128, 127), _i16s), max_size=5
).map(tuple)


@given(st.text(max_size=50), st.uuids(), _i32s, st.booleans())
def test_keys_round_trip(group: str, topic: uuid.UUID, partition: int, snapshot: bool) -> None:
    key = (ShareSnapshotKey if snapshot else ShareUpdateKey)(group, topic, partition)
    assert decode_key(encode_key(key)) == key


@given(_i32s, _i32s, _i32s, _i64s, _i64s, _i64s, _batches, _i32s)
def test_snapshot_values_round_trip(
    se: int, st_e: int, le: int, so: int, ct: int, wt: int, b: tuple[StateBatch, ...], dcc: int
) -> None:
    value = ShareSnapshotValue(se, st_e, le, so, ct, wt, b, dcc)
    assert decode_value(SHARE_SNAPSHOT, encode_value(value)) == value


@given(_i32s, _i32s, _i64s, _batches, _i32s)
def test_update_values_round_trip(
    se: int, le: int, so: int, b: tuple[StateBatch, ...], dcc: int
) -> None:
    value = ShareUpdateValue(se, le, so, b, dcc)
    assert decode_value(SHARE_UPDATE, encode_value(value)) == value
