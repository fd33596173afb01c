"""Share-group (KIP-932) records of ``__consumer_offsets``: keys 9-15 and their values, bit-exact.

The layouts are Kafka 4.2's (``group-coordinator/.../common/message/ShareGroup*.json``), encoded
as the consumer-group records are (:mod:`coordinator.consumer.records`, whose primitives in
:mod:`coordinator.consumer.record_codec` this module reuses): a key is an int16 record type then
the group id (and the member id for the member keys) as classic int16-length strings; a value is
an int16 version (0, the only one) then flexible fields (compact strings and arrays, 16-byte
UUIDs) and a tagged-field section after the value and after every nested struct.

- 9 ShareGroupPartitionMetadata: the subscribed topics' metadata. Kafka 4.1+ no longer writes
  it (the group epoch record carries a hash of the topics instead); decoded so that an old log
  loads, deleted with the group, never written.
- 10 ShareGroupMemberMetadata: a member's rack, client id and host, subscribed topic names.
- 11 ShareGroupMetadata: the group epoch and the subscribed topics' metadata hash (int64).
- 12 ShareGroupTargetAssignmentMetadata: the target assignment's epoch.
- 13 ShareGroupTargetAssignmentMember: a member's target partitions.
- 14 ShareGroupCurrentMemberAssignment: a member's epoch, previous epoch, state, partitions.
- 15 ShareGroupStatePartitionMetadata: which topic partitions have their share state
  initializing, initialized, or being deleted (in the share coordinator).

A ``None`` value is a tombstone and never reaches these codecs. Decoders raise
:class:`~coordinator.schema_errors.SchemaError` on bad input.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass

from kcoord.coordinator.consumer.record_codec import Reader, Writer, reader
from kcoord.coordinator.schema_errors import UnsupportedVersionError

__all__ = [
    "SHARE_KEY_TYPES",
    "SHARE_KEY_VERSIONS",
    "ShareGroupCurrentMemberAssignmentKey",
    "ShareGroupCurrentMemberAssignmentValue",
    "ShareGroupMemberMetadataKey",
    "ShareGroupMemberMetadataValue",
    "ShareGroupMetadataKey",
    "ShareGroupMetadataValue",
    "ShareGroupPartitionMetadataKey",
    "ShareGroupPartitionMetadataValue",
    "ShareGroupStatePartitionMetadataKey",
    "ShareGroupStatePartitionMetadataValue",
    "ShareGroupTargetAssignmentMemberKey",
    "ShareGroupTargetAssignmentMemberValue",
    "ShareGroupTargetAssignmentMetadataKey",
    "ShareGroupTargetAssignmentMetadataValue",
    "ShareRecordKey",
    "ShareRecordValue",
    "ShareTopicMetadata",
    "StateTopic",
    "decode_share_key",
    "decode_share_value",
    "encode_share_key",
    "encode_share_value",
]

TopicPartitions = tuple[tuple[uuid.UUID, tuple[int, ...]], ...]
"""(topic id, partitions) pairs, as the assignment records carry them."""

SHARE_VALUE_VERSION = 0

# --------------------------------------------------------------------------------------------
# Keys


@dataclass(frozen=True, slots=True)
class ShareGroupPartitionMetadataKey:
    """Key 9 (deprecated: read, deleted, never written)."""

    group: str


@dataclass(frozen=True, slots=True)
class ShareGroupMemberMetadataKey:
    """Key 10: one member's subscription and client."""

    group: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ShareGroupMetadataKey:
    """Key 11: the group epoch record."""

    group: str


@dataclass(frozen=True, slots=True)
class ShareGroupTargetAssignmentMetadataKey:
    """Key 12: the target assignment epoch."""

    group: str


@dataclass(frozen=True, slots=True)
class ShareGroupTargetAssignmentMemberKey:
    """Key 13: one member's target assignment."""

    group: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ShareGroupCurrentMemberAssignmentKey:
    """Key 14: one member's current assignment and epoch."""

    group: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ShareGroupStatePartitionMetadataKey:
    """Key 15: the share-state initialization of the group's topic partitions."""

    group: str


ShareRecordKey = (
    ShareGroupPartitionMetadataKey
    | ShareGroupMemberMetadataKey
    | ShareGroupMetadataKey
    | ShareGroupTargetAssignmentMetadataKey
    | ShareGroupTargetAssignmentMemberKey
    | ShareGroupCurrentMemberAssignmentKey
    | ShareGroupStatePartitionMetadataKey
)

_KEY_VERSION: dict[type, int] = {
    ShareGroupPartitionMetadataKey: 9,
    ShareGroupMemberMetadataKey: 10,
    ShareGroupMetadataKey: 11,
    ShareGroupTargetAssignmentMetadataKey: 12,
    ShareGroupTargetAssignmentMemberKey: 13,
    ShareGroupCurrentMemberAssignmentKey: 14,
    ShareGroupStatePartitionMetadataKey: 15,
}
SHARE_KEY_VERSIONS = frozenset(_KEY_VERSION.values())
SHARE_KEY_TYPES = (
    ShareGroupPartitionMetadataKey,
    ShareGroupMemberMetadataKey,
    ShareGroupMetadataKey,
    ShareGroupTargetAssignmentMetadataKey,
    ShareGroupTargetAssignmentMemberKey,
    ShareGroupCurrentMemberAssignmentKey,
    ShareGroupStatePartitionMetadataKey,
)
_GROUP_KEYS: dict[int, Callable[[str], ShareRecordKey]] = {
    9: ShareGroupPartitionMetadataKey,
    11: ShareGroupMetadataKey,
    12: ShareGroupTargetAssignmentMetadataKey,
    15: ShareGroupStatePartitionMetadataKey,
}
_MEMBER_KEYS: dict[int, Callable[[str, str], ShareRecordKey]] = {
    10: ShareGroupMemberMetadataKey,
    13: ShareGroupTargetAssignmentMemberKey,
    14: ShareGroupCurrentMemberAssignmentKey,
}

# --------------------------------------------------------------------------------------------
# Values


@dataclass(frozen=True, slots=True)
class ShareTopicMetadata:
    """One topic of a (deprecated) ShareGroupPartitionMetadataValue; ``partition_racks``:
    (partition, racks) pairs."""

    topic_id: uuid.UUID
    name: str
    num_partitions: int
    partition_racks: tuple[tuple[int, tuple[str, ...]], ...] = ()


@dataclass(frozen=True, slots=True)
class ShareGroupPartitionMetadataValue:
    topics: tuple[ShareTopicMetadata, ...]


@dataclass(frozen=True, slots=True)
class ShareGroupMemberMetadataValue:
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ShareGroupMetadataValue:
    epoch: int
    metadata_hash: int = 0


@dataclass(frozen=True, slots=True)
class ShareGroupTargetAssignmentMetadataValue:
    assignment_epoch: int


@dataclass(frozen=True, slots=True)
class ShareGroupTargetAssignmentMemberValue:
    topic_partitions: TopicPartitions


@dataclass(frozen=True, slots=True)
class ShareGroupCurrentMemberAssignmentValue:
    """``state``: Kafka's MemberState byte (0 stable)."""

    member_epoch: int
    previous_member_epoch: int
    state: int
    assigned_partitions: TopicPartitions


@dataclass(frozen=True, slots=True)
class StateTopic:
    """A topic of the state partition metadata: its partitions (empty for a deleting topic,
    whose entry has none) and, for the initializing and initialized ones, when it was added
    (``create_timestamp``, ms)."""

    topic_id: uuid.UUID
    name: str
    partitions: tuple[int, ...] = ()
    create_timestamp: int = 0


@dataclass(frozen=True, slots=True)
class ShareGroupStatePartitionMetadataValue:
    initializing: tuple[StateTopic, ...] = ()
    initialized: tuple[StateTopic, ...] = ()
    deleting: tuple[StateTopic, ...] = ()


ShareRecordValue = (
    ShareGroupPartitionMetadataValue
    | ShareGroupMemberMetadataValue
    | ShareGroupMetadataValue
    | ShareGroupTargetAssignmentMetadataValue
    | ShareGroupTargetAssignmentMemberValue
    | ShareGroupCurrentMemberAssignmentValue
    | ShareGroupStatePartitionMetadataValue
)

# --------------------------------------------------------------------------------------------
# Keys: encoding and decoding


def encode_share_key(key: ShareRecordKey) -> bytes:
    version = _KEY_VERSION.get(type(key))
    if version is None:
        raise TypeError(f"cannot encode key of type {type(key).__name__}")
    w = Writer()
    w.int16(version)
    w.short_string(key.group)
    member_id = getattr(key, "member_id", None)
    if member_id is not None:
        w.short_string(member_id)
    return w.getvalue()


def decode_share_key(buf: bytes) -> ShareRecordKey:
    """Decode a key of version 9-15 (the int16 prefix included)."""
    r = reader(buf, "key")
    version = r.int16("version")
    key: ShareRecordKey
    if version in _GROUP_KEYS:
        key = _GROUP_KEYS[version](r.short_string("group"))
    elif version in _MEMBER_KEYS:
        group = r.short_string("group")
        key = _MEMBER_KEYS[version](group, r.short_string("member_id"))
    else:
        raise UnsupportedVersionError(f"key: version {version} is not a share-group key")
    r.end()
    return key


# --------------------------------------------------------------------------------------------
# Values: encoding


def _write_topic_partitions(w: Writer, tps: TopicPartitions) -> None:
    w.array_len(len(tps))
    for topic_id, partitions in tps:
        w.uuid(topic_id)
        _write_ints(w, partitions)
        w.no_tags()


def _write_ints(w: Writer, items: tuple[int, ...]) -> None:
    w.array_len(len(items))
    for p in items:
        w.int32(p)


def _write_strings(w: Writer, items: tuple[str, ...]) -> None:
    w.array_len(len(items))
    for s in items:
        w.string(s)


def _write_state_topics(w: Writer, topics: tuple[StateTopic, ...], with_partitions: bool) -> None:
    w.array_len(len(topics))
    for t in topics:
        w.uuid(t.topic_id)
        w.string(t.name)
        if with_partitions:
            _write_ints(w, t.partitions)
            w.int64(t.create_timestamp)
        w.no_tags()


def encode_share_value(value: ShareRecordValue) -> bytes:
    """Encode a share-group value as version 0."""
    w = Writer()
    w.int16(SHARE_VALUE_VERSION)
    if isinstance(value, ShareGroupMemberMetadataValue):
        w.string(value.rack_id)
        w.string(value.client_id)
        w.string(value.client_host)
        _write_strings(w, value.subscribed_topic_names)
    elif isinstance(value, ShareGroupMetadataValue):
        w.int32(value.epoch)
        w.int64(value.metadata_hash)
    elif isinstance(value, ShareGroupTargetAssignmentMetadataValue):
        w.int32(value.assignment_epoch)
    elif isinstance(value, ShareGroupTargetAssignmentMemberValue):
        _write_topic_partitions(w, value.topic_partitions)
    elif isinstance(value, ShareGroupCurrentMemberAssignmentValue):
        w.int32(value.member_epoch)
        w.int32(value.previous_member_epoch)
        w.int8(value.state)
        _write_topic_partitions(w, value.assigned_partitions)
    elif isinstance(value, ShareGroupStatePartitionMetadataValue):
        _write_state_topics(w, value.initializing, True)
        _write_state_topics(w, value.initialized, True)
        _write_state_topics(w, value.deleting, False)
    elif isinstance(value, ShareGroupPartitionMetadataValue):
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
    else:
        raise TypeError(f"cannot encode value of type {type(value).__name__}")
    w.no_tags()
    return w.getvalue()


# --------------------------------------------------------------------------------------------
# Values: decoding


def _read_ints(r: Reader, field: str) -> tuple[int, ...]:
    return tuple(r.int32(field) for _ in range(r.array_len(field)))


def _read_strings(r: Reader, field: str) -> tuple[str, ...]:
    return tuple(r.string(field) for _ in range(r.array_len(field)))


def _read_topic_partitions(r: Reader, field: str) -> TopicPartitions:
    out = []
    for _ in range(r.array_len(field)):
        topic_id = r.uuid("topic_id")
        partitions = _read_ints(r, "partitions")
        r.tags()
        out.append((topic_id, partitions))
    return tuple(out)


def _read_state_topics(r: Reader, field: str, with_partitions: bool) -> tuple[StateTopic, ...]:
    out = []
    for _ in range(r.array_len(field)):
        topic_id = r.uuid("topic_id")
        name = r.string("topic_name")
        partitions: tuple[int, ...] = ()
        created = 0
        if with_partitions:
            partitions = _read_ints(r, "partitions")
            created = r.int64("create_timestamp")
        r.tags()
        out.append(StateTopic(topic_id, name, partitions, created))
    return tuple(out)


def _decode_partition_metadata(r: Reader) -> ShareGroupPartitionMetadataValue:
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
        topics.append(ShareTopicMetadata(topic_id, name, num_partitions, tuple(racks)))
    return ShareGroupPartitionMetadataValue(tuple(topics))


def _decode_member(r: Reader) -> ShareGroupMemberMetadataValue:
    rack_id = r.nullable_string("rack_id")
    client_id = r.string("client_id")
    client_host = r.string("client_host")
    return ShareGroupMemberMetadataValue(
        rack_id, client_id, client_host, _read_strings(r, "subscribed_topic_names")
    )


def _decode_metadata(r: Reader) -> ShareGroupMetadataValue:
    epoch = r.int32("epoch")
    return ShareGroupMetadataValue(epoch, r.int64("metadata_hash"))


def _decode_target_metadata(r: Reader) -> ShareGroupTargetAssignmentMetadataValue:
    return ShareGroupTargetAssignmentMetadataValue(r.int32("assignment_epoch"))


def _decode_target_member(r: Reader) -> ShareGroupTargetAssignmentMemberValue:
    return ShareGroupTargetAssignmentMemberValue(_read_topic_partitions(r, "topic_partitions"))


def _decode_current(r: Reader) -> ShareGroupCurrentMemberAssignmentValue:
    epoch = r.int32("member_epoch")
    previous = r.int32("previous_member_epoch")
    state = r.int8("state")
    return ShareGroupCurrentMemberAssignmentValue(
        epoch, previous, state, _read_topic_partitions(r, "assigned_partitions")
    )


def _decode_state(r: Reader) -> ShareGroupStatePartitionMetadataValue:
    initializing = _read_state_topics(r, "initializing_topics", True)
    initialized = _read_state_topics(r, "initialized_topics", True)
    deleting = _read_state_topics(r, "deleting_topics", False)
    return ShareGroupStatePartitionMetadataValue(initializing, initialized, deleting)


_VALUE_DECODERS: dict[type, Callable[[Reader], ShareRecordValue]] = {
    ShareGroupPartitionMetadataKey: _decode_partition_metadata,
    ShareGroupMemberMetadataKey: _decode_member,
    ShareGroupMetadataKey: _decode_metadata,
    ShareGroupTargetAssignmentMetadataKey: _decode_target_metadata,
    ShareGroupTargetAssignmentMemberKey: _decode_target_member,
    ShareGroupCurrentMemberAssignmentKey: _decode_current,
    ShareGroupStatePartitionMetadataKey: _decode_state,
}


def decode_share_value(key: ShareRecordKey, buf: bytes) -> ShareRecordValue:
    """Decode the (non-tombstone) value of a share-group record with this key."""
    decoder = _VALUE_DECODERS.get(type(key))
    if decoder is None:
        raise TypeError(f"not a share-group key: {type(key).__name__}")
    what = type(key).__name__.removesuffix("Key") + "Value"
    r = reader(buf, what)
    version = r.int16("version")
    if version != SHARE_VALUE_VERSION:
        raise UnsupportedVersionError(f"{what}: unsupported version {version}")
    value = decoder(r)
    r.tags()
    r.end()
    return value
