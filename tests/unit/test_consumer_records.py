"""KIP-848 consumer-group records of __consumer_offsets: golden bytes built by hand from
Kafka's ConsumerGroup*.json schemas, round trips, malformed input."""

from __future__ import annotations

import struct
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kcoord.coordinator.consumer.records import (
    MEMBER_STATE_UNREVOKED_PARTITIONS,
    ClassicMemberMetadata,
    ClassicProtocol,
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupPartitionMetadataValue,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupRegularExpressionValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    ConsumerRecordKey,
    ConsumerRecordValue,
    TopicMetadata,
    decode_consumer_key,
    decode_consumer_value,
    encode_consumer_key,
    encode_consumer_value,
)
from kcoord.coordinator.schemas import SchemaError, UnsupportedVersionError, decode_key, encode_key

T1 = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")
T2 = uuid.UUID("0f0e0d0c-0b0a-0908-0706-050403020100")


def i16(v: int) -> bytes:
    return struct.pack(">h", v)


def i32(v: int) -> bytes:
    return struct.pack(">i", v)


def i64(v: int) -> bytes:
    return struct.pack(">q", v)


# ---- keys: int16 record type, then classic (int16-length) strings ---------------------------

KEYS: list[tuple[ConsumerRecordKey, bytes]] = [
    (ConsumerGroupMetadataKey("g"), b"\x00\x03" + b"\x00\x01g"),
    (ConsumerGroupPartitionMetadataKey("g"), b"\x00\x04" + b"\x00\x01g"),
    (ConsumerGroupMemberMetadataKey("g", "m1"), b"\x00\x05" + b"\x00\x01g" + b"\x00\x02m1"),
    (ConsumerGroupTargetAssignmentMetadataKey("g"), b"\x00\x06" + b"\x00\x01g"),
    (ConsumerGroupTargetAssignmentMemberKey("g", "m1"), b"\x00\x07" + b"\x00\x01g" + b"\x00\x02m1"),
    (
        ConsumerGroupCurrentMemberAssignmentKey("g", "m1"),
        b"\x00\x08" + b"\x00\x01g" + b"\x00\x02m1",
    ),
    (ConsumerGroupRegularExpressionKey("g", "t.*"), b"\x00\x10" + b"\x00\x01g" + b"\x00\x03t.*"),
]


@pytest.mark.parametrize(("key", "raw"), KEYS)
def test_key_bytes_and_round_trip(key: ConsumerRecordKey, raw: bytes) -> None:
    assert encode_consumer_key(key) == raw
    assert decode_consumer_key(raw) == key
    # Through the __consumer_offsets key codec of coordinator.schemas too.
    assert encode_key(key) == raw
    assert decode_key(raw) == key


def test_unicode_key_uses_utf8_byte_lengths() -> None:
    key = ConsumerGroupMemberMetadataKey("grüppe", "mé")
    raw = encode_consumer_key(key)
    assert raw == b"\x00\x05" + i16(7) + "grüppe".encode() + i16(3) + "mé".encode()
    assert decode_key(raw) == key


@pytest.mark.parametrize(
    "raw",
    [
        b"\x00\x05\x00\x01g",  # member key without its member id
        b"\x00\x05\x00\x01g\x00\x05m1",  # member id runs past the end
        b"\x00\x03\x00\x01g\x00",  # trailing byte
        b"\x00\x03\xff\xff",  # null group (not nullable)
        b"\x00\x03\x00\x02\xff\xfe",  # invalid UTF-8
        b"\x00\x10\x00\x01g",  # regex key without its expression
    ],
)
def test_malformed_keys_raise_schema_error(raw: bytes) -> None:
    with pytest.raises(SchemaError):
        decode_key(raw)
    with pytest.raises(SchemaError):
        decode_consumer_key(raw)


def test_decode_consumer_key_rejects_other_versions() -> None:
    with pytest.raises(UnsupportedVersionError):
        decode_consumer_key(b"\x00\x02\x00\x01g")


def test_string_too_long_for_a_key() -> None:
    with pytest.raises(SchemaError):
        encode_consumer_key(ConsumerGroupMetadataKey("x" * 0x8000))


# ---- golden value bytes, built from the JSON schemas ----------------------------------------


CLASSIC = ClassicMemberMetadata(45000, (ClassicProtocol("range", b"\x01\x02"),))
MEMBER = ConsumerGroupMemberMetadataValue(
    instance_id=None,
    rack_id="r1",
    client_id="c",
    client_host="/h",
    subscribed_topic_names=("a", "bc"),
    subscribed_topic_regex=None,
    rebalance_timeout_ms=300_000,
    server_assignor="uniform",
    classic_member_metadata=CLASSIC,
)
MEMBER_BYTES = (
    b"\x00\x00"  # value version 0 (flexible)
    + b"\x00"  # InstanceId: compact nullable string, null
    + b"\x03r1"  # RackId: length 2 + 1, then UTF-8
    + b"\x02c"  # ClientId
    + b"\x03/h"  # ClientHost
    + b"\x03"  # SubscribedTopicNames: compact array, 2 + 1 elements
    + b"\x02a"  # "a"
    + b"\x03bc"  # "bc"
    + b"\x00"  # SubscribedTopicRegex: null
    + b"\x00\x04\x93\xe0"  # RebalanceTimeoutMs: int32 300000
    + b"\x08uniform"  # ServerAssignor
    + b"\x01"  # tagged fields: 1
    + b"\x00"  # tag 0: ClassicMemberMetadata
    + b"\x11"  # its size: 17 bytes (struct 16 + the presence varint)
    + b"\x01"  # nullable struct in a tagged field: varint 1 = present
    + b"\x00\x00\xaf\xc8"  # SessionTimeoutMs: int32 45000
    + b"\x02"  # SupportedProtocols: 1 + 1 elements
    + b"\x06range"  # Name
    + b"\x03\x01\x02"  # Metadata: compact bytes, 2 + 1
    + b"\x00"  # the protocol's tagged fields: none
    + b"\x00"  # ClassicMemberMetadata's tagged fields: none
)

ASSIGNMENT = ConsumerGroupCurrentMemberAssignmentValue(
    member_epoch=7,
    previous_member_epoch=6,
    state=MEMBER_STATE_UNREVOKED_PARTITIONS,
    assigned_partitions=((T1, (0, 2)),),
    partitions_pending_revocation=((T2, (1,)),),
)
ASSIGNMENT_BYTES = (
    b"\x00\x00"  # value version 0
    + b"\x00\x00\x00\x07"  # MemberEpoch
    + b"\x00\x00\x00\x06"  # PreviousMemberEpoch
    + b"\x01"  # State: int8, UNREVOKED_PARTITIONS
    + b"\x02"  # AssignedPartitions: 1 + 1 elements
    + T1.bytes  # TopicId: 16 bytes, most significant first
    + b"\x03"  # Partitions: 2 + 1 int32s
    + b"\x00\x00\x00\x00\x00\x00\x00\x02"  # 0, 2
    + b"\x00"  # TopicPartitions' tagged fields
    + b"\x02"  # PartitionsPendingRevocation: 1 + 1 elements
    + T2.bytes
    + b"\x02"  # Partitions: 1 + 1
    + b"\x00\x00\x00\x01"  # 1
    + b"\x00"  # TopicPartitions' tagged fields
    + b"\x00"  # the value's tagged fields
)


def test_member_metadata_value_golden_bytes() -> None:
    key = ConsumerGroupMemberMetadataKey("g", "m")
    assert encode_consumer_value(MEMBER) == MEMBER_BYTES
    assert decode_consumer_value(key, MEMBER_BYTES) == MEMBER


def test_member_metadata_without_classic_metadata_has_no_tagged_field() -> None:
    value = ConsumerGroupMemberMetadataValue("inst", None, "c", "h", (), "t-.*", -1, None)
    raw = encode_consumer_value(value)
    assert raw == (
        b"\x00\x00"
        + b"\x05inst"
        + b"\x00"
        + b"\x02c"
        + b"\x02h"
        + b"\x01"  # empty array
        + b"\x05t-.*"
        + b"\xff\xff\xff\xff"
        + b"\x00"
        + b"\x00"  # no tagged fields
    )
    assert decode_consumer_value(ConsumerGroupMemberMetadataKey("g", "m"), raw) == value


def test_classic_member_metadata_tag_with_null_marker_decodes_as_none() -> None:
    raw = MEMBER_BYTES[: MEMBER_BYTES.index(b"\x08uniform") + 8] + b"\x01\x00\x01\x00"
    value = decode_consumer_value(ConsumerGroupMemberMetadataKey("g", "m"), raw)
    assert value.classic_member_metadata is None


def test_current_assignment_value_golden_bytes() -> None:
    key = ConsumerGroupCurrentMemberAssignmentKey("g", "m")
    assert encode_consumer_value(ASSIGNMENT) == ASSIGNMENT_BYTES
    assert decode_consumer_value(key, ASSIGNMENT_BYTES) == ASSIGNMENT


def test_group_metadata_value_golden_bytes_with_and_without_metadata_hash() -> None:
    key = ConsumerGroupMetadataKey("g")
    plain = b"\x00\x00" + i32(5) + b"\x00"  # epoch 5, no tagged fields
    assert encode_consumer_value(ConsumerGroupMetadataValue(5)) == plain
    assert decode_consumer_value(key, plain) == ConsumerGroupMetadataValue(5, 0)
    # MetadataHash: tagged field 0, int64, written only when not the default 0.
    hashed = b"\x00\x00" + i32(5) + b"\x01" + b"\x00" + b"\x08" + i64(-2)
    assert encode_consumer_value(ConsumerGroupMetadataValue(5, -2)) == hashed
    assert decode_consumer_value(key, hashed) == ConsumerGroupMetadataValue(5, -2)


def test_other_value_golden_bytes() -> None:
    target = ConsumerGroupTargetAssignmentMetadataValue(9)
    assert encode_consumer_value(target) == b"\x00\x00" + i32(9) + b"\x00"
    member = ConsumerGroupTargetAssignmentMemberValue(((T1, ()),))
    assert encode_consumer_value(member) == b"\x00\x00\x02" + T1.bytes + b"\x01\x00" + b"\x00"
    regex = ConsumerGroupRegularExpressionValue(("t1",), 42, 1_700_000_000_000)
    assert encode_consumer_value(regex) == (
        b"\x00\x00" + b"\x02\x03t1" + i64(42) + i64(1_700_000_000_000) + b"\x00"
    )
    partitions = ConsumerGroupPartitionMetadataValue(
        (TopicMetadata(T2, "t", 3, ((0, ("r1", "r2")),)),)
    )
    assert encode_consumer_value(partitions) == (
        b"\x00\x00"
        + b"\x02"  # Topics: 1 + 1
        + T2.bytes
        + b"\x02t"  # TopicName
        + i32(3)  # NumPartitions
        + b"\x02"  # PartitionMetadata: 1 + 1
        + i32(0)  # Partition
        + b"\x03\x03r1\x03r2"  # Racks
        + b"\x00"  # PartitionMetadata's tagged fields
        + b"\x00"  # TopicMetadata's tagged fields
        + b"\x00"  # the value's tagged fields
    )


# ---- round trips ----------------------------------------------------------------------------

VALUES: list[tuple[ConsumerRecordKey, ConsumerRecordValue]] = [
    (ConsumerGroupMetadataKey("g"), ConsumerGroupMetadataValue(0)),
    (ConsumerGroupMetadataKey("g"), ConsumerGroupMetadataValue(2**31 - 1, 2**63 - 1)),
    (ConsumerGroupPartitionMetadataKey("g"), ConsumerGroupPartitionMetadataValue(())),
    (
        ConsumerGroupPartitionMetadataKey("g"),
        ConsumerGroupPartitionMetadataValue(
            (TopicMetadata(T1, "tøpic", 2), TopicMetadata(T2, "u", 1, ((0, ()), (1, ("ř",)))))
        ),
    ),
    (ConsumerGroupMemberMetadataKey("g", "m"), MEMBER),
    (
        ConsumerGroupMemberMetadataKey("g", "m"),
        ConsumerGroupMemberMetadataValue(None, None, "", "", (), None, 0, None, None),
    ),
    (
        ConsumerGroupMemberMetadataKey("g", "m"),
        ConsumerGroupMemberMetadataValue(
            "ïd",
            "räck",
            "clïent",
            "höst",
            ("ü", ""),
            "ß.*",
            1,
            "range",
            ClassicMemberMetadata(1, ()),
        ),
    ),
    (ConsumerGroupTargetAssignmentMetadataKey("g"), ConsumerGroupTargetAssignmentMetadataValue(-1)),
    (
        ConsumerGroupTargetAssignmentMemberKey("g", "m"),
        ConsumerGroupTargetAssignmentMemberValue(()),
    ),
    (
        ConsumerGroupTargetAssignmentMemberKey("g", "m"),
        ConsumerGroupTargetAssignmentMemberValue(((T1, (0, 1, 2)), (T2, (5,)))),
    ),
    (ConsumerGroupCurrentMemberAssignmentKey("g", "m"), ASSIGNMENT),
    (
        ConsumerGroupCurrentMemberAssignmentKey("g", "m"),
        ConsumerGroupCurrentMemberAssignmentValue(0, -1, 0, (), ()),
    ),
    (ConsumerGroupRegularExpressionKey("g", "x"), ConsumerGroupRegularExpressionValue((), 0, 0)),
    (
        ConsumerGroupRegularExpressionKey("g", "x"),
        ConsumerGroupRegularExpressionValue(("a", "ü"), -1, -(2**63)),
    ),
]


@pytest.mark.parametrize(("key", "value"), VALUES)
def test_value_round_trip(key: ConsumerRecordKey, value: ConsumerRecordValue) -> None:
    raw = encode_consumer_value(value)
    assert raw[:2] == b"\x00\x00"
    assert decode_consumer_value(key, raw) == value


_text = st.text(max_size=20)
_tps = st.lists(
    st.tuples(st.uuids(), st.lists(st.integers(0, 2**31 - 1), max_size=5).map(tuple)), max_size=4
).map(tuple)


@given(
    st.builds(
        ConsumerGroupMemberMetadataValue,
        st.none() | _text,
        st.none() | _text,
        _text,
        _text,
        st.lists(_text, max_size=4).map(tuple),
        st.none() | _text,
        st.integers(-(2**31), 2**31 - 1),
        st.none() | _text,
        st.none()
        | st.builds(
            ClassicMemberMetadata,
            st.integers(-(2**31), 2**31 - 1),
            st.lists(st.builds(ClassicProtocol, _text, st.binary(max_size=300)), max_size=3).map(
                tuple
            ),
        ),
    ),
    st.builds(
        ConsumerGroupCurrentMemberAssignmentValue,
        st.integers(-(2**31), 2**31 - 1),
        st.integers(-(2**31), 2**31 - 1),
        st.integers(-128, 127),
        _tps,
        _tps,
    ),
)
def test_round_trip_property(
    member: ConsumerGroupMemberMetadataValue, assignment: ConsumerGroupCurrentMemberAssignmentValue
) -> None:
    assert (
        decode_consumer_value(
            ConsumerGroupMemberMetadataKey("g", "m"), encode_consumer_value(member)
        )
        == member
    )
    assert (
        decode_consumer_value(
            ConsumerGroupCurrentMemberAssignmentKey("g", "m"), encode_consumer_value(assignment)
        )
        == assignment
    )


# ---- malformed values -----------------------------------------------------------------------


@pytest.mark.parametrize(("key", "value"), VALUES)
def test_every_truncation_and_trailing_bytes_raise(
    key: ConsumerRecordKey, value: ConsumerRecordValue
) -> None:
    raw = encode_consumer_value(value)
    for n in range(len(raw)):
        with pytest.raises(SchemaError):
            decode_consumer_value(key, raw[:n])
    with pytest.raises(SchemaError):
        decode_consumer_value(key, raw + b"\x00")


@pytest.mark.parametrize("version", [1, 2, -1, 0x7FFF])
def test_unknown_value_version(version: int) -> None:
    raw = i16(version) + encode_consumer_value(ConsumerGroupMetadataValue(1))[2:]
    with pytest.raises(UnsupportedVersionError):
        decode_consumer_value(ConsumerGroupMetadataKey("g"), raw)
    assert issubclass(UnsupportedVersionError, SchemaError)


MEMBER_KEY = ConsumerGroupMemberMetadataKey("g", "m")
_MEMBER_HEAD = b"\x00\x00" + b"\x00" + b"\x00"  # version, instance and rack null


@pytest.mark.parametrize(
    ("key", "raw"),
    [
        (MEMBER_KEY, _MEMBER_HEAD + b"\x00"),  # ClientId null (not nullable)
        (MEMBER_KEY, _MEMBER_HEAD + b"\x03\xff\xfe"),  # ClientId not UTF-8
        (MEMBER_KEY, _MEMBER_HEAD + b"\x09c"),  # ClientId runs past the end
        (MEMBER_KEY, _MEMBER_HEAD + b"\x02c\x02h\x00"),  # topic names null (not nullable)
        (MEMBER_KEY, _MEMBER_HEAD + b"\x02c\x02h\x7f"),  # topic count beyond the bytes left
        (MEMBER_KEY, _MEMBER_HEAD + b"\xff\xff\xff\xff\xff\x01"),  # varint longer than 5 bytes
        (MEMBER_KEY, _MEMBER_HEAD + b"\xff\xff\xff\xff\x0f"),  # varint beyond int32
        # ClassicMemberMetadata whose declared size is larger than its struct.
        (MEMBER_KEY, MEMBER_BYTES.replace(b"\x00\x11\x01", b"\x00\x12\x01") + b"\x00"),
        # Tagged field size beyond the end of the value.
        (ConsumerGroupMetadataKey("g"), b"\x00\x00" + i32(1) + b"\x01\x05\x09\x00"),
        # MetadataHash with a size that is not 8 bytes.
        (ConsumerGroupMetadataKey("g"), b"\x00\x00" + i32(1) + b"\x01\x00\x04" + i32(0)),
        # ClassicProtocol metadata bytes null (not nullable).
        (MEMBER_KEY, MEMBER_BYTES.replace(b"\x03\x01\x02", b"\x00\x00\x00")),
    ],
)
def test_malformed_values_raise_schema_error(key: ConsumerRecordKey, raw: bytes) -> None:
    with pytest.raises(SchemaError):
        decode_consumer_value(key, raw)


def test_unknown_tagged_fields_are_skipped_at_every_level() -> None:
    key = ConsumerGroupCurrentMemberAssignmentKey("g", "m")
    # ASSIGNMENT_BYTES with an unknown tag 5 (3 bytes) in the first TopicPartitions struct and
    # unknown tags 1 and 7 in the value's own section.
    first_tags = 2 + 4 + 4 + 1 + 1 + 16 + 1 + 8  # up to the first TopicPartitions' tags
    raw = (
        ASSIGNMENT_BYTES[:first_tags]
        + b"\x01"
        + b"\x05\x03abc"
        + ASSIGNMENT_BYTES[first_tags + 1 : -1]
        + b"\x02"
        + b"\x01\x00"
        + b"\x07\x02\xff\xff"
    )
    assert decode_consumer_value(key, raw) == ASSIGNMENT
    # The member value: an unknown tag next to ClassicMemberMetadata (tag 0) and one inside it.
    member = MEMBER_BYTES.replace(b"\x01\x00\x11\x01", b"\x02\x00\x14\x01")
    member = member[:-1] + b"\x01\x09\x01z" + b"\x03\x01\x00"
    assert decode_consumer_value(MEMBER_KEY, member) == MEMBER
    # Re-encoding drops them.
    assert encode_consumer_value(decode_consumer_value(MEMBER_KEY, member)) == MEMBER_BYTES


def test_encoders_reject_what_kafka_cannot_hold() -> None:
    with pytest.raises(SchemaError):
        encode_consumer_value(ConsumerGroupRegularExpressionValue(("x" * 0x8000,), 0, 0))
    with pytest.raises(TypeError):
        encode_consumer_value(object())  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        decode_consumer_value(object(), b"\x00\x00")  # type: ignore[call-overload]
