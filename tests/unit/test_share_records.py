"""Share-group records 9-15 of __consumer_offsets: keys and values against bytes built by hand
from Kafka 4.2's message definitions, round trips, and bad input refused with SchemaError."""

from __future__ import annotations

import struct
import uuid

import pytest

from kcoord.coordinator.schemas import SchemaError, decode_key, encode_key
from kcoord.coordinator.share.records import (
    ShareGroupCurrentMemberAssignmentKey,
    ShareGroupCurrentMemberAssignmentValue,
    ShareGroupMemberMetadataKey,
    ShareGroupMemberMetadataValue,
    ShareGroupMetadataKey,
    ShareGroupMetadataValue,
    ShareGroupPartitionMetadataKey,
    ShareGroupPartitionMetadataValue,
    ShareGroupStatePartitionMetadataKey,
    ShareGroupStatePartitionMetadataValue,
    ShareGroupTargetAssignmentMemberKey,
    ShareGroupTargetAssignmentMemberValue,
    ShareGroupTargetAssignmentMetadataKey,
    ShareGroupTargetAssignmentMetadataValue,
    ShareTopicMetadata,
    StateTopic,
    decode_share_value,
    encode_share_value,
)

T = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")


def s16(text: str) -> bytes:
    return struct.pack(">h", len(text)) + text.encode()


def cs(text: str | None) -> bytes:  # compact (nullable) string
    return b"\x00" if text is None else bytes([len(text) + 1]) + text.encode()


def test_keys_are_the_record_type_then_classic_strings() -> None:
    cases = [
        (ShareGroupPartitionMetadataKey("g"), b"\x00\x09" + s16("g")),
        (ShareGroupMemberMetadataKey("g", "m"), b"\x00\x0a" + s16("g") + s16("m")),
        (ShareGroupMetadataKey("g"), b"\x00\x0b" + s16("g")),
        (ShareGroupTargetAssignmentMetadataKey("g"), b"\x00\x0c" + s16("g")),
        (ShareGroupTargetAssignmentMemberKey("g", "m"), b"\x00\x0d" + s16("g") + s16("m")),
        (ShareGroupCurrentMemberAssignmentKey("g", "m"), b"\x00\x0e" + s16("g") + s16("m")),
        (ShareGroupStatePartitionMetadataKey("g"), b"\x00\x0f" + s16("g")),
    ]
    for key, raw in cases:
        assert encode_key(key) == raw
        assert decode_key(raw) == key


def test_values_match_hand_built_bytes() -> None:
    tps = b"\x02" + T.bytes + b"\x03" + struct.pack(">ii", 0, 2) + b"\x00"  # one topic, [0, 2]
    cases = [
        (
            ShareGroupMemberMetadataKey("g", "m"),
            ShareGroupMemberMetadataValue(None, "cid", "/h", ("a", "b")),
            b"\x00\x00" + cs(None) + cs("cid") + cs("/h") + b"\x03" + cs("a") + cs("b") + b"\x00",
        ),
        (
            ShareGroupMetadataKey("g"),
            ShareGroupMetadataValue(7, -2),
            b"\x00\x00" + struct.pack(">iq", 7, -2) + b"\x00",
        ),
        (
            ShareGroupTargetAssignmentMetadataKey("g"),
            ShareGroupTargetAssignmentMetadataValue(7),
            b"\x00\x00" + struct.pack(">i", 7) + b"\x00",
        ),
        (
            ShareGroupTargetAssignmentMemberKey("g", "m"),
            ShareGroupTargetAssignmentMemberValue(((T, (0, 2)),)),
            b"\x00\x00" + tps + b"\x00",
        ),
        (
            ShareGroupCurrentMemberAssignmentKey("g", "m"),
            ShareGroupCurrentMemberAssignmentValue(7, 6, 0, ((T, (0, 2)),)),
            b"\x00\x00" + struct.pack(">iib", 7, 6, 0) + tps + b"\x00",
        ),
        (
            ShareGroupStatePartitionMetadataKey("g"),
            ShareGroupStatePartitionMetadataValue(
                initialized=(StateTopic(T, "t", (0, 1), 99),), deleting=(StateTopic(T, "t"),)
            ),
            b"\x00\x00"
            + b"\x01"  # no initializing topics
            + b"\x02" + T.bytes + cs("t") + b"\x03" + struct.pack(">iiq", 0, 1, 99) + b"\x00"
            + b"\x02" + T.bytes + cs("t") + b"\x00"
            + b"\x00",
        ),
        (
            ShareGroupPartitionMetadataKey("g"),
            ShareGroupPartitionMetadataValue((ShareTopicMetadata(T, "t", 4, ((0, ("r1",)),)),)),
            b"\x00\x00" + b"\x02" + T.bytes + cs("t") + struct.pack(">i", 4)
            + b"\x02" + struct.pack(">i", 0) + b"\x02" + cs("r1") + b"\x00" + b"\x00" + b"\x00",
        ),
    ]  # fmt: skip
    for key, value, raw in cases:
        assert encode_share_value(value) == raw, key
        assert decode_share_value(key, raw) == value


def test_unknown_tagged_fields_are_skipped() -> None:
    raw = b"\x00\x00" + struct.pack(">i", 3) + b"\x01\x05\x02\xab\xcd"
    assert decode_share_value(ShareGroupTargetAssignmentMetadataKey("g"), raw).assignment_epoch == 3  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "raw",
    [
        b"\x00\x01" + struct.pack(">i", 3) + b"\x00",  # unknown version
        b"\x00\x00" + struct.pack(">i", 3),  # no tagged-field section
        b"\x00\x00" + struct.pack(">i", 3) + b"\x00\x00",  # trailing byte
        b"\x00\x00\x00",  # truncated
    ],
)
def test_bad_values_are_refused(raw: bytes) -> None:
    with pytest.raises(SchemaError):
        decode_share_value(ShareGroupTargetAssignmentMetadataKey("g"), raw)


def test_a_truncated_member_key_is_refused() -> None:
    with pytest.raises(SchemaError):
        decode_key(b"\x00\x0a" + s16("g"))
