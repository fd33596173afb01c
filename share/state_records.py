"""The records of ``__share_group_state``: keys and values, bit-exact with Apache Kafka 4.2.

This module owns the binary layout of what the share coordinator appends to and replays from
its ``__share_group_state`` partitions (Kafka's ``share-coordinator/.../common/message/
Share{Snapshot,Update}{Key,Value}.json``, record types 0 and 1).

Keys are non-flexible: an int16 record type (0 ShareSnapshotKey, 1 ShareUpdateKey), then the
group id as a classic string (int16 length, UTF-8), the topic id as 16 bytes and the partition
as an int32. Both key types name the same share partition; a share partition's snapshot and its
updates are therefore different keys of the log.

Values are flexible, version 0: an int16 version, then the fields, arrays as compact arrays
(unsigned varint of count + 1), each state batch and the value ending with a tagged-field
section.

- ShareSnapshotValue: the whole state of a share partition. SnapshotEpoch, StateEpoch and
  LeaderEpoch (int32), StartOffset, CreateTimestamp and WriteTimestamp (int64), StateBatches;
  tagged field 0, DeliveryCompleteCount (int32, Kafka 4.2, KIP-1226), written only when it is
  not its default, -1.
- ShareUpdateValue: a change laid over the snapshot (and the updates since). SnapshotEpoch and
  LeaderEpoch (int32), StartOffset (int64; -1: unchanged), StateBatches, and the same tagged
  DeliveryCompleteCount. It carries no state epoch.
- StateBatch: FirstOffset, LastOffset (int64), DeliveryState (int8: 0 available, 2
  acknowledged, 4 archived), DeliveryCount (int16).

A ``None`` value is a tombstone; it never reaches these codecs. Decoders raise
:class:`~coordinator.schema_errors.SchemaError` on truncated input, trailing bytes, bad
lengths, invalid UTF-8 and unknown record types or versions; they check the layout, not the
meaning (a batch whose last offset precedes its first decodes). Unknown tagged fields are
skipped. The primitives are ``coordinator.consumer.record_codec``'s.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from kcoord.coordinator.consumer.record_codec import Reader, Writer, reader
from kcoord.coordinator.schema_errors import UnsupportedVersionError
from kcoord.share.model import SharePartitionKey, StateBatch

__all__ = [
    "SHARE_SNAPSHOT",
    "SHARE_UPDATE",
    "UNKNOWN_DELIVERY_COMPLETE_COUNT",
    "VALUE_VERSION",
    "ShareSnapshotKey",
    "ShareSnapshotValue",
    "ShareStateKey",
    "ShareStateValue",
    "ShareUpdateKey",
    "ShareUpdateValue",
    "decode_key",
    "decode_value",
    "encode_key",
    "encode_value",
]

SHARE_SNAPSHOT = 0
"""Record type (key version) of ShareSnapshotKey / ShareSnapshotValue."""
SHARE_UPDATE = 1
"""Record type (key version) of ShareUpdateKey / ShareUpdateValue."""
VALUE_VERSION = 0
"""The only version of both values (validVersions "0")."""
UNKNOWN_DELIVERY_COMPLETE_COUNT = -1
"""DeliveryCompleteCount's default: not known (and then not written)."""
_DELIVERY_COMPLETE_COUNT_TAG = 0


@dataclass(frozen=True, slots=True)
class ShareSnapshotKey:
    """Record type 0: the snapshot of one share partition."""

    group_id: str
    topic_id: uuid.UUID
    partition: int

    @property
    def share_key(self) -> SharePartitionKey:
        return SharePartitionKey(self.group_id, self.topic_id, self.partition)


@dataclass(frozen=True, slots=True)
class ShareUpdateKey:
    """Record type 1: an update of one share partition since its snapshot."""

    group_id: str
    topic_id: uuid.UUID
    partition: int

    @property
    def share_key(self) -> SharePartitionKey:
        return SharePartitionKey(self.group_id, self.topic_id, self.partition)


ShareStateKey = ShareSnapshotKey | ShareUpdateKey


@dataclass(frozen=True, slots=True)
class ShareSnapshotValue:
    """The whole persisted state of a share partition (timestamps in ms since the epoch)."""

    snapshot_epoch: int
    state_epoch: int
    leader_epoch: int
    start_offset: int
    create_timestamp: int
    write_timestamp: int
    state_batches: tuple[StateBatch, ...] = ()
    delivery_complete_count: int = UNKNOWN_DELIVERY_COMPLETE_COUNT


@dataclass(frozen=True, slots=True)
class ShareUpdateValue:
    """A change of a share partition's state: ``start_offset`` -1 leaves it, the batches are
    laid over the held ones."""

    snapshot_epoch: int
    leader_epoch: int
    start_offset: int
    state_batches: tuple[StateBatch, ...] = ()
    delivery_complete_count: int = UNKNOWN_DELIVERY_COMPLETE_COUNT


ShareStateValue = ShareSnapshotValue | ShareUpdateValue


# --------------------------------------------------------------------------------------------
# Keys


def encode_key(key: ShareStateKey) -> bytes:
    w = Writer()
    w.int16(SHARE_SNAPSHOT if isinstance(key, ShareSnapshotKey) else SHARE_UPDATE)
    w.short_string(key.group_id)
    w.uuid(key.topic_id)
    w.int32(key.partition)
    return w.getvalue()


def decode_key(buf: bytes) -> ShareStateKey:
    """Decode a key (the int16 record type included)."""
    r = reader(buf, "share state key")
    record_type = r.int16("record type")
    if record_type not in (SHARE_SNAPSHOT, SHARE_UPDATE):
        raise UnsupportedVersionError(f"share state key: unknown record type {record_type}")
    group_id = r.short_string("group_id")
    topic_id = r.uuid("topic_id")
    partition = r.int32("partition")
    r.end()
    if record_type == SHARE_SNAPSHOT:
        return ShareSnapshotKey(group_id, topic_id, partition)
    return ShareUpdateKey(group_id, topic_id, partition)


# --------------------------------------------------------------------------------------------
# Values


def _write_batches(w: Writer, batches: tuple[StateBatch, ...]) -> None:
    w.array_len(len(batches))
    for b in batches:
        w.int64(b.first_offset)
        w.int64(b.last_offset)
        w.int8(b.delivery_state)
        w.int16(b.delivery_count)
        w.no_tags()


def _write_tags(w: Writer, delivery_complete_count: int) -> None:
    if delivery_complete_count == UNKNOWN_DELIVERY_COMPLETE_COUNT:
        w.no_tags()
        return
    count = Writer()
    count.int32(delivery_complete_count)
    w.tags([(_DELIVERY_COMPLETE_COUNT_TAG, count.getvalue())])


def encode_value(value: ShareStateValue) -> bytes:
    """Encode a value as version 0, the version Kafka 4.2 writes."""
    w = Writer()
    w.int16(VALUE_VERSION)
    if isinstance(value, ShareSnapshotValue):
        w.int32(value.snapshot_epoch)
        w.int32(value.state_epoch)
        w.int32(value.leader_epoch)
        w.int64(value.start_offset)
        w.int64(value.create_timestamp)
        w.int64(value.write_timestamp)
    else:
        w.int32(value.snapshot_epoch)
        w.int32(value.leader_epoch)
        w.int64(value.start_offset)
    _write_batches(w, value.state_batches)
    _write_tags(w, value.delivery_complete_count)
    return w.getvalue()


def _read_batches(r: Reader) -> tuple[StateBatch, ...]:
    out = []
    for _ in range(r.array_len("state_batches")):
        batch = StateBatch(
            first_offset=r.int64("first_offset"),
            last_offset=r.int64("last_offset"),
            delivery_state=r.int8("delivery_state"),
            delivery_count=r.int16("delivery_count"),
        )
        r.tags()
        out.append(batch)
    return tuple(out)


def _read_delivery_complete_count(r: Reader) -> int:
    found = [UNKNOWN_DELIVERY_COMPLETE_COUNT]

    def read_count(sub: Reader) -> None:
        found[0] = sub.int32("delivery_complete_count")

    r.tags({_DELIVERY_COMPLETE_COUNT_TAG: read_count})
    return found[0]


def decode_value(record_type: int, buf: bytes) -> ShareStateValue:
    """Decode the value of a record whose key has ``record_type`` (0 or 1)."""
    what = "share snapshot value" if record_type == SHARE_SNAPSHOT else "share update value"
    if record_type not in (SHARE_SNAPSHOT, SHARE_UPDATE):
        raise UnsupportedVersionError(f"share state value: unknown record type {record_type}")
    r = reader(buf, what)
    version = r.int16("version")
    if version != VALUE_VERSION:
        raise UnsupportedVersionError(f"{what}: unknown version {version}")
    value: ShareStateValue
    if record_type == SHARE_SNAPSHOT:
        snapshot_epoch = r.int32("snapshot_epoch")
        state_epoch = r.int32("state_epoch")
        leader_epoch = r.int32("leader_epoch")
        start_offset = r.int64("start_offset")
        create_timestamp = r.int64("create_timestamp")
        write_timestamp = r.int64("write_timestamp")
        batches = _read_batches(r)
        value = ShareSnapshotValue(
            snapshot_epoch, state_epoch, leader_epoch, start_offset, create_timestamp,
            write_timestamp, batches, _read_delivery_complete_count(r),
        )
    else:
        snapshot_epoch = r.int32("snapshot_epoch")
        leader_epoch = r.int32("leader_epoch")
        start_offset = r.int64("start_offset")
        batches = _read_batches(r)
        value = ShareUpdateValue(
            snapshot_epoch, leader_epoch, start_offset, batches, _read_delivery_complete_count(r)
        )
    r.end()
    return value
