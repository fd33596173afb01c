"""KIP-848 consumer-group records of ``__consumer_offsets``: keys and values, bit-exact.

This module owns the binary layout of the consumer-group (KIP-848) records a coordinator shard
appends to and replays from its ``__consumer_offsets`` partition, as Apache Kafka 4.x writes
them (``group-coordinator/.../common/message/ConsumerGroup*.json``). The classic records
(offset commits, classic group metadata) are ``coordinator.schemas``'s, which hands key
versions 3-8 and 16 to :func:`decode_consumer_key`.

Keys are non-flexible: an int16 record type (the "key version": 3-8, 16), then the fields in
the classic encoding (strings as an int16 length and UTF-8 bytes). Values are flexible, version
0: an int16 version, then compact strings, arrays and bytes (unsigned varint of length + 1, 0 =
null), UUIDs as 16 bytes, and a tagged-field section (varint count, then tag, size and data per
field) at the end of the value and of every struct nested in it. Tagged fields this module does
not know are skipped when decoding and never written.

The records, by key version (record type):

- 3 ConsumerGroupMetadataKey -> ConsumerGroupMetadataValue: the group epoch and, since Kafka
  4.1 (KIP-1101), the subscribed topics' MetadataHash: tagged field 0, int64, written only
  when non-zero.
- 4 ConsumerGroupPartitionMetadataKey -> ConsumerGroupPartitionMetadataValue: the subscribed
  topics' metadata. Deprecated: Kafka 4.1+ no longer writes it, it only deletes (tombstones)
  old ones it loads; decoded here, and encodable for tests and tools, but not to be written.
- 5 ConsumerGroupMemberMetadataKey -> ConsumerGroupMemberMetadataValue: a member's
  subscription and client, with tagged field 0, the nullable ClassicMemberMetadata of a member
  that joined through the classic protocol (a nullable struct in a tagged field starts with a
  varint presence marker, 1 = present).
- 6 ConsumerGroupTargetAssignmentMetadataKey -> ConsumerGroupTargetAssignmentMetadataValue:
  the target assignment's epoch; since Kafka 4.3 (KIP-1263) tagged field 0, when it was computed.
- 7 ConsumerGroupTargetAssignmentMemberKey -> ConsumerGroupTargetAssignmentMemberValue: a
  member's target partitions.
- 8 ConsumerGroupCurrentMemberAssignmentKey -> ConsumerGroupCurrentMemberAssignmentValue: a
  member's epoch, state, assigned partitions and partitions pending revocation; since Kafka
  4.3 (KIP-1251) each topic entry of both lists carries the assignment epoch of every
  partition (the member epoch at which it was assigned), tagged field 0 of the topic struct,
  an int32 array parallel to its partitions, absent in older records.
- 16 ConsumerGroupRegularExpressionKey -> ConsumerGroupRegularExpressionValue: the topics a
  subscription regular expression resolved to, with the metadata version and time.

A ``None`` value is a tombstone; it never reaches these codecs. Decoders raise
:class:`~coordinator.schema_errors.SchemaError` (a ``ValueError``) on truncated input, trailing
bytes, bad lengths, invalid UTF-8 and unknown versions. The primitives (compact strings, varints,
tagged sections) are ``record_codec``'s.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import overload

from kcoord.coordinator.schema_errors import UnsupportedVersionError

from .record_codec import (
    I64,
    Reader,
    TopicPartitions,
    Writer,
    read_topic_partitions,
    reader,
    write_topic_partitions,
)

__all__ = [
    "CONSUMER_KEY_VERSIONS",
    "CONSUMER_VALUE_VERSION",
    "MEMBER_STATE_STABLE",
    "MEMBER_STATE_UNKNOWN",
    "MEMBER_STATE_UNRELEASED_PARTITIONS",
    "MEMBER_STATE_UNREVOKED_PARTITIONS",
    "ClassicMemberMetadata",
    "ClassicProtocol",
    "ConsumerGroupCurrentMemberAssignmentKey",
    "ConsumerGroupCurrentMemberAssignmentValue",
    "ConsumerGroupMemberMetadataKey",
    "ConsumerGroupMemberMetadataValue",
    "ConsumerGroupMetadataKey",
    "ConsumerGroupMetadataValue",
    "ConsumerGroupPartitionMetadataKey",
    "ConsumerGroupPartitionMetadataValue",
    "ConsumerGroupRegularExpressionKey",
    "ConsumerGroupRegularExpressionValue",
    "ConsumerGroupTargetAssignmentMemberKey",
    "ConsumerGroupTargetAssignmentMemberValue",
    "ConsumerGroupTargetAssignmentMetadataKey",
    "ConsumerGroupTargetAssignmentMetadataValue",
    "ConsumerRecordKey",
    "ConsumerRecordValue",
    "TopicMetadata",
    "TopicPartitions",
    "decode_consumer_key",
    "decode_consumer_value",
    "encode_consumer_key",
    "encode_consumer_value",
]

CONSUMER_VALUE_VERSION = 0  # the only version of every value (validVersions "0")

# The member state byte of ConsumerGroupCurrentMemberAssignmentValue (Kafka's MemberState).
MEMBER_STATE_STABLE = 0
MEMBER_STATE_UNREVOKED_PARTITIONS = 1
MEMBER_STATE_UNRELEASED_PARTITIONS = 2
MEMBER_STATE_UNKNOWN = 127

# --------------------------------------------------------------------------------------------
# Keys


@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadataKey:
    """Key 3: the group epoch record of one consumer group."""

    group: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupPartitionMetadataKey:
    """Key 4: the subscribed topics' metadata (deprecated; Kafka 4.1+ only deletes it)."""

    group: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupMemberMetadataKey:
    """Key 5: one member's metadata (subscription, client, timeouts)."""

    group: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMetadataKey:
    """Key 6: the epoch of the group's target assignment."""

    group: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMemberKey:
    """Key 7: one member's share of the target assignment."""

    group: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupCurrentMemberAssignmentKey:
    """Key 8: one member's current assignment and member epoch."""

    group: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupRegularExpressionKey:
    """Key 16: the topics one subscription regular expression of the group resolved to."""

    group: str
    regex: str


ConsumerRecordKey = (
    ConsumerGroupMetadataKey
    | ConsumerGroupPartitionMetadataKey
    | ConsumerGroupMemberMetadataKey
    | ConsumerGroupTargetAssignmentMetadataKey
    | ConsumerGroupTargetAssignmentMemberKey
    | ConsumerGroupCurrentMemberAssignmentKey
    | ConsumerGroupRegularExpressionKey
)

_KEY_VERSION: dict[type, int] = {
    ConsumerGroupMetadataKey: 3,
    ConsumerGroupPartitionMetadataKey: 4,
    ConsumerGroupMemberMetadataKey: 5,
    ConsumerGroupTargetAssignmentMetadataKey: 6,
    ConsumerGroupTargetAssignmentMemberKey: 7,
    ConsumerGroupCurrentMemberAssignmentKey: 8,
    ConsumerGroupRegularExpressionKey: 16,
}
CONSUMER_KEY_VERSIONS = frozenset(_KEY_VERSION.values())

# --------------------------------------------------------------------------------------------
# Values


@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadataValue:
    """The group epoch. ``metadata_hash`` (Kafka 4.1+, KIP-1101) is a hash of the subscribed
    topics' metadata, tagged field 0: written only when non-zero, 0 when absent."""

    epoch: int
    metadata_hash: int = 0


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    """One subscribed topic in a ConsumerGroupPartitionMetadataValue. ``partition_racks``:
    (partition, racks of its replicas) pairs, deprecated and empty since Kafka 4.0."""

    topic_id: uuid.UUID
    name: str
    num_partitions: int
    partition_racks: tuple[tuple[int, tuple[str, ...]], ...] = ()


@dataclass(frozen=True, slots=True)
class ConsumerGroupPartitionMetadataValue:
    topics: tuple[TopicMetadata, ...]


@dataclass(frozen=True, slots=True)
class ClassicProtocol:
    """A protocol a classic-protocol member of a consumer group supports (name, metadata)."""

    name: str
    metadata: bytes


@dataclass(frozen=True, slots=True)
class ClassicMemberMetadata:
    """Set for a member that joined with the classic protocol (JoinGroup) after an upgrade."""

    session_timeout_ms: int
    supported_protocols: tuple[ClassicProtocol, ...]


@dataclass(frozen=True, slots=True)
class ConsumerGroupMemberMetadataValue:
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    rebalance_timeout_ms: int
    server_assignor: str | None
    classic_member_metadata: ClassicMemberMetadata | None = None


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMetadataValue:
    """``assignment_timestamp`` (Kafka 4.3, KIP-1263): when the target's computation finished,
    tagged field 0, written only when non-zero (0: unknown, as an older writer leaves it)."""

    assignment_epoch: int
    assignment_timestamp: int = 0


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMemberValue:
    topic_partitions: TopicPartitions


@dataclass(frozen=True, slots=True)
class ConsumerGroupCurrentMemberAssignmentValue:
    """``state``: a ``MEMBER_STATE_*`` code. ``assigned_epochs`` and
    ``pending_revocation_epochs`` (KIP-1251) hold, per topic entry of the matching list, the
    assignment epochs of its partitions in the same order; () when the record has none (an
    older writer), and a topic entry without the tagged field reads as ()."""

    member_epoch: int
    previous_member_epoch: int
    state: int
    assigned_partitions: TopicPartitions
    partitions_pending_revocation: TopicPartitions
    assigned_epochs: tuple[tuple[int, ...], ...] = ()
    pending_revocation_epochs: tuple[tuple[int, ...], ...] = ()


@dataclass(frozen=True, slots=True)
class ConsumerGroupRegularExpressionValue:
    """``version``: the metadata image version the regex was resolved against;
    ``timestamp``: when (ms)."""

    topics: tuple[str, ...]
    version: int
    timestamp: int


ConsumerRecordValue = (
    ConsumerGroupMetadataValue
    | ConsumerGroupPartitionMetadataValue
    | ConsumerGroupMemberMetadataValue
    | ConsumerGroupTargetAssignmentMetadataValue
    | ConsumerGroupTargetAssignmentMemberValue
    | ConsumerGroupCurrentMemberAssignmentValue
    | ConsumerGroupRegularExpressionValue
)

# --------------------------------------------------------------------------------------------
# Keys


def encode_consumer_key(key: ConsumerRecordKey) -> bytes:
    """Encode a consumer-group key: int16 record type, group id, then the member id or the
    regular expression for the keys that have one."""
    version = _KEY_VERSION.get(type(key))
    if version is None:
        raise TypeError(f"cannot encode key of type {type(key).__name__}")
    w = Writer()
    w.int16(version)
    w.short_string(key.group)
    if isinstance(key, ConsumerGroupRegularExpressionKey):
        w.short_string(key.regex)
    elif isinstance(
        key,
        ConsumerGroupMemberMetadataKey
        | ConsumerGroupTargetAssignmentMemberKey
        | ConsumerGroupCurrentMemberAssignmentKey,
    ):
        w.short_string(key.member_id)
    return w.getvalue()


_GROUP_KEYS: dict[int, Callable[[str], ConsumerRecordKey]] = {
    3: ConsumerGroupMetadataKey,
    4: ConsumerGroupPartitionMetadataKey,
    6: ConsumerGroupTargetAssignmentMetadataKey,
}
_MEMBER_KEYS: dict[int, Callable[[str, str], ConsumerRecordKey]] = {
    5: ConsumerGroupMemberMetadataKey,
    7: ConsumerGroupTargetAssignmentMemberKey,
    8: ConsumerGroupCurrentMemberAssignmentKey,
}


def decode_consumer_key(buf: bytes) -> ConsumerRecordKey:
    """Decode a key of version 3-8 or 16 (the int16 prefix included)."""
    r = reader(buf, "key")
    version = r.int16("version")
    if version in _GROUP_KEYS:
        key = _GROUP_KEYS[version](r.short_string("group"))
    elif version in _MEMBER_KEYS:
        group = r.short_string("group")
        key = _MEMBER_KEYS[version](group, r.short_string("member_id"))
    elif version == 16:
        group = r.short_string("group")
        key = ConsumerGroupRegularExpressionKey(group, r.short_string("regular_expression"))
    else:
        raise UnsupportedVersionError(f"key: version {version} is not a consumer-group key")
    r.end()
    return key


# --------------------------------------------------------------------------------------------
# Values: encoding (version 0, as Kafka 4.x writes them)


def _write_strings(w: Writer, items: Sequence[str]) -> None:
    w.array_len(len(items))
    for s in items:
        w.string(s)


def _classic_member_metadata(m: ClassicMemberMetadata) -> bytes:
    """Tagged field 0 of the member value: a nullable struct, so a varint 1 (present) first."""
    w = Writer()
    w.uvarint(1)
    w.int32(m.session_timeout_ms)
    w.array_len(len(m.supported_protocols))
    for p in m.supported_protocols:
        w.string(p.name)
        w.bytes_(p.metadata)
        w.no_tags()
    w.no_tags()
    return w.getvalue()


def encode_consumer_value(value: ConsumerRecordValue) -> bytes:
    """Encode a consumer-group value as version 0, the version Kafka 4.x writes."""
    w = Writer()
    w.int16(CONSUMER_VALUE_VERSION)
    if isinstance(value, ConsumerGroupMetadataValue):
        w.int32(value.epoch)
        if value.metadata_hash:
            w.tags([(0, I64.pack(value.metadata_hash))])
        else:
            w.no_tags()
    elif isinstance(value, ConsumerGroupPartitionMetadataValue):
        w.array_len(len(value.topics))
        for t in value.topics:
            w.uuid(t.topic_id)
            w.string(t.name)
            w.int32(t.num_partitions)
            w.array_len(len(t.partition_racks))
            for partition, racks in t.partition_racks:
                w.int32(partition)
                _write_strings(w, racks)
                w.no_tags()
            w.no_tags()
        w.no_tags()
    elif isinstance(value, ConsumerGroupMemberMetadataValue):
        w.string(value.instance_id)
        w.string(value.rack_id)
        w.string(value.client_id)
        w.string(value.client_host)
        _write_strings(w, value.subscribed_topic_names)
        w.string(value.subscribed_topic_regex)
        w.int32(value.rebalance_timeout_ms)
        w.string(value.server_assignor)
        classic = value.classic_member_metadata
        if classic is None:
            w.no_tags()
        else:
            w.tags([(0, _classic_member_metadata(classic))])
    elif isinstance(value, ConsumerGroupTargetAssignmentMetadataValue):
        w.int32(value.assignment_epoch)
        if value.assignment_timestamp:
            w.tags([(0, I64.pack(value.assignment_timestamp))])
        else:
            w.no_tags()
    elif isinstance(value, ConsumerGroupTargetAssignmentMemberValue):
        write_topic_partitions(w, value.topic_partitions)
        w.no_tags()
    elif isinstance(value, ConsumerGroupCurrentMemberAssignmentValue):
        w.int32(value.member_epoch)
        w.int32(value.previous_member_epoch)
        w.int8(value.state)
        write_topic_partitions(w, value.assigned_partitions, value.assigned_epochs)
        write_topic_partitions(
            w, value.partitions_pending_revocation, value.pending_revocation_epochs
        )
        w.no_tags()
    elif isinstance(value, ConsumerGroupRegularExpressionValue):
        _write_strings(w, value.topics)
        w.int64(value.version)
        w.int64(value.timestamp)
        w.no_tags()
    else:
        raise TypeError(f"cannot encode value of type {type(value).__name__}")
    return w.getvalue()


# --------------------------------------------------------------------------------------------
# Values: decoding


def _read_strings(r: Reader, field: str) -> tuple[str, ...]:
    return tuple(r.string(field) for _ in range(r.array_len(field)))


def _decode_metadata(r: Reader) -> ConsumerGroupMetadataValue:
    epoch = r.int32("epoch")
    hashes: list[int] = []
    r.tags({0: lambda t: hashes.append(t.int64("metadata_hash"))})
    return ConsumerGroupMetadataValue(epoch, hashes[-1] if hashes else 0)


def _decode_partition_metadata(r: Reader) -> ConsumerGroupPartitionMetadataValue:
    topics = []
    for _ in range(r.array_len("topics")):
        topic_id = r.uuid("topic_id")
        name = r.string("topic_name")
        num_partitions = r.int32("num_partitions")
        racks = []
        for _ in range(r.array_len("partition_metadata")):
            partition = r.int32("partition")
            racks.append((partition, _read_strings(r, "racks")))
            r.tags()
        r.tags()
        topics.append(TopicMetadata(topic_id, name, num_partitions, tuple(racks)))
    r.tags()
    return ConsumerGroupPartitionMetadataValue(tuple(topics))


def _read_classic_member_metadata(r: Reader) -> ClassicMemberMetadata | None:
    if r.uvarint("classic_member_metadata presence") <= 0:
        return None
    session_timeout = r.int32("session_timeout_ms")
    protocols = []
    for _ in range(r.array_len("supported_protocols")):
        name = r.string("name")
        metadata = r.bytes_("metadata")
        r.tags()
        protocols.append(ClassicProtocol(name, metadata))
    r.tags()
    return ClassicMemberMetadata(session_timeout, tuple(protocols))


def _decode_member_metadata(r: Reader) -> ConsumerGroupMemberMetadataValue:
    instance_id = r.nullable_string("instance_id")
    rack_id = r.nullable_string("rack_id")
    client_id = r.string("client_id")
    client_host = r.string("client_host")
    topics = _read_strings(r, "subscribed_topic_names")
    regex = r.nullable_string("subscribed_topic_regex")
    rebalance_timeout = r.int32("rebalance_timeout_ms")
    assignor = r.nullable_string("server_assignor")
    classic: list[ClassicMemberMetadata | None] = [None]

    def read_classic(t: Reader) -> None:
        classic[0] = _read_classic_member_metadata(t)

    r.tags({0: read_classic})
    return ConsumerGroupMemberMetadataValue(
        instance_id,
        rack_id,
        client_id,
        client_host,
        topics,
        regex,
        rebalance_timeout,
        assignor,
        classic[0],
    )


def _decode_target_metadata(r: Reader) -> ConsumerGroupTargetAssignmentMetadataValue:
    epoch = r.int32("assignment_epoch")
    stamps: list[int] = []
    r.tags({0: lambda t: stamps.append(t.int64("assignment_timestamp"))})
    return ConsumerGroupTargetAssignmentMetadataValue(epoch, stamps[-1] if stamps else 0)


def _decode_target_member(r: Reader) -> ConsumerGroupTargetAssignmentMemberValue:
    tps, _ = read_topic_partitions(r, "topic_partitions")
    r.tags()
    return ConsumerGroupTargetAssignmentMemberValue(tps)


def _decode_current_assignment(r: Reader) -> ConsumerGroupCurrentMemberAssignmentValue:
    epoch = r.int32("member_epoch")
    previous = r.int32("previous_member_epoch")
    state = r.int8("state")
    assigned, assigned_epochs = read_topic_partitions(r, "assigned_partitions")
    pending, pending_epochs = read_topic_partitions(r, "partitions_pending_revocation")
    r.tags()
    return ConsumerGroupCurrentMemberAssignmentValue(
        epoch, previous, state, assigned, pending, assigned_epochs, pending_epochs
    )


def _decode_regex(r: Reader) -> ConsumerGroupRegularExpressionValue:
    topics = _read_strings(r, "topics")
    version = r.int64("version")
    timestamp = r.int64("timestamp")
    r.tags()
    return ConsumerGroupRegularExpressionValue(topics, version, timestamp)


_VALUE_DECODERS: dict[type, Callable[[Reader], ConsumerRecordValue]] = {
    ConsumerGroupMetadataKey: _decode_metadata,
    ConsumerGroupPartitionMetadataKey: _decode_partition_metadata,
    ConsumerGroupMemberMetadataKey: _decode_member_metadata,
    ConsumerGroupTargetAssignmentMetadataKey: _decode_target_metadata,
    ConsumerGroupTargetAssignmentMemberKey: _decode_target_member,
    ConsumerGroupCurrentMemberAssignmentKey: _decode_current_assignment,
    ConsumerGroupRegularExpressionKey: _decode_regex,
}


@overload
def decode_consumer_value(
    key: ConsumerGroupMetadataKey, buf: bytes
) -> ConsumerGroupMetadataValue: ...
@overload
def decode_consumer_value(
    key: ConsumerGroupPartitionMetadataKey, buf: bytes
) -> ConsumerGroupPartitionMetadataValue: ...
@overload
def decode_consumer_value(
    key: ConsumerGroupMemberMetadataKey, buf: bytes
) -> ConsumerGroupMemberMetadataValue: ...
@overload
def decode_consumer_value(
    key: ConsumerGroupTargetAssignmentMetadataKey, buf: bytes
) -> ConsumerGroupTargetAssignmentMetadataValue: ...
@overload
def decode_consumer_value(
    key: ConsumerGroupTargetAssignmentMemberKey, buf: bytes
) -> ConsumerGroupTargetAssignmentMemberValue: ...
@overload
def decode_consumer_value(
    key: ConsumerGroupCurrentMemberAssignmentKey, buf: bytes
) -> ConsumerGroupCurrentMemberAssignmentValue: ...
@overload
def decode_consumer_value(
    key: ConsumerGroupRegularExpressionKey, buf: bytes
) -> ConsumerGroupRegularExpressionValue: ...
@overload
def decode_consumer_value(key: ConsumerRecordKey, buf: bytes) -> ConsumerRecordValue: ...
def decode_consumer_value(key: ConsumerRecordKey, buf: bytes) -> ConsumerRecordValue:
    """Decode the (non-tombstone) value of a consumer-group record with this key."""
    decoder = _VALUE_DECODERS.get(type(key))
    if decoder is None:
        raise TypeError(f"not a consumer-group key: {type(key).__name__}")
    what = type(key).__name__.removesuffix("Key") + "Value"
    r = reader(buf, what)
    version = r.int16("version")
    if version != CONSUMER_VALUE_VERSION:
        raise UnsupportedVersionError(f"{what}: unsupported version {version}")
    value = decoder(r)
    r.end()
    return value
