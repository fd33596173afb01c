"""Kafka's ``__consumer_offsets`` record schemas: keys and values, bit-exact.

This module owns the binary layout of the records a group-coordinator shard appends to (and
replays from) its ``__consumer_offsets`` partition. Layouts follow Kafka's own message
definitions (``OffsetCommitKey``, ``OffsetCommitValue``, ``GroupMetadataKey``,
``GroupMetadataValue``) in their classic, non-flexible encoding: big-endian integers, strings
as an int16 length followed by UTF-8 bytes (length -1 = null for nullable strings), bytes as an
int32 length followed by the bytes, arrays as an int32 count followed by the elements.

Every key and value starts with an int16 schema version:

- key v0/v1: ``OffsetCommitKey`` (group, topic, partition); we write v1 as Kafka does.
- key v2: ``GroupMetadataKey`` (group).
- key v3-v8 and v16: KIP-848 consumer-group records, whose keys and values are
  ``coordinator.consumer.records``'s (:func:`decode_key` returns its key types for them,
  :func:`encode_key` encodes them).
- key v9-v15: KIP-932 share-group records, ``coordinator.share.records``'s likewise.
  Any other version >= 3 comes back as :class:`UnknownKey` so a loader can skip it.

Values: ``OffsetCommitValue`` v0-v4 and ``GroupMetadataValue`` v0-v4, written as Kafka 4.2
writes them: OffsetCommitValue v4 (its first flexible version, the topic id a tagged field when
the commit named its topic by id), v1 for a commit with an expire timestamp, and
GroupMetadataValue v3 (Kafka keeps the newest non-flexible version until a tagged field needs
v4; v4 is read). A ``None`` value is a tombstone; it never reaches these codecs.

Decoders raise :class:`SchemaError` (a ``ValueError``) on truncated input, trailing bytes,
negative lengths other than the null marker, invalid UTF-8 and unknown versions.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass
from typing import Final, NamedTuple

from kcoord.coordinator.consumer.record_codec import Reader, Writer
from kcoord.coordinator.consumer.records import (
    CONSUMER_KEY_VERSIONS,
    ConsumerRecordKey,
    decode_consumer_key,
    encode_consumer_key,
)
from kcoord.coordinator.schema_errors import SchemaError, UnsupportedVersionError
from kcoord.coordinator.share.records import (
    SHARE_KEY_TYPES,
    SHARE_KEY_VERSIONS,
    ShareRecordKey,
    decode_share_key,
    encode_share_key,
)

__all__ = [
    "GROUP_METADATA_KEY_VERSION",
    "GROUP_METADATA_VALUE_VERSION",
    "OFFSET_COMMIT_KEY_VERSION",
    "OFFSET_COMMIT_VALUE_VERSION",
    "encode_offset_commit_fields",
    "GroupMetadataKey",
    "GroupMetadataValue",
    "MemberMetadata",
    "OffsetCommitKey",
    "OffsetCommitValue",
    "RecordKey",
    "SchemaError",
    "UnknownKey",
    "UnsupportedVersionError",
    "decode_group_metadata_value",
    "decode_key",
    "decode_offset_commit_value",
    "encode_group_metadata_value",
    "encode_key",
    "encode_offset_commit_value",
    "group_metadata_key_size",
    "group_metadata_value_size",
    "offset_commit_key_size",
    "offset_commit_value_size",
]

OFFSET_COMMIT_KEY_VERSION: Final = 1
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSION: Final = 4
GROUP_METADATA_VALUE_VERSION = 3


# --------------------------------------------------------------------------------------------
# Records


@dataclass(frozen=True, slots=True)
class OffsetCommitKey:
    """Key versions 0 and 1: the committed offset of one partition for one group."""

    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupMetadataKey:
    """Key version 2: the metadata (generation, members, assignment) of one classic group."""

    group: str


@dataclass(frozen=True, slots=True)
class UnknownKey:
    """A key whose version no codec models (3+, but not a consumer-group key version).

    ``version`` is the key's version prefix and ``data`` its bytes after the prefix.
    """

    version: int
    data: bytes


RecordKey = OffsetCommitKey | GroupMetadataKey | ConsumerRecordKey | ShareRecordKey | UnknownKey


class OffsetCommitValue(NamedTuple):
    """An offset commit. ``leader_epoch`` is -1 when unknown (and for versions < 3);
    ``expire_timestamp`` is -1 unless a v1 record carried one; ``topic_id`` is the id the
    commit named its topic by (OffsetCommit v10; v4's tagged field), else None. A named tuple:
    one is made per committed partition, and a tuple is several times cheaper to make than a
    frozen dataclass."""

    offset: int
    metadata: str
    commit_timestamp: int
    leader_epoch: int = -1
    expire_timestamp: int = -1
    topic_id: uuid.UUID | None = None


@dataclass(frozen=True, slots=True)
class MemberMetadata:
    """One member inside a :class:`GroupMetadataValue`.

    ``rebalance_timeout`` is -1 when read from a v0 record (which has none); loaders use the
    session timeout instead, as Kafka does.
    """

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout: int
    session_timeout: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    """A classic group's persisted state. ``current_state_timestamp`` is -1 when unknown
    (always for versions < 2)."""

    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int
    members: tuple[MemberMetadata, ...]


# --------------------------------------------------------------------------------------------
# Primitive writer / reader

_I16: Final = struct.Struct(">h")
_I32: Final = struct.Struct(">i")
_I64: Final = struct.Struct(">q")


class _Writer:
    __slots__ = ("_parts",)

    def __init__(self) -> None:
        self._parts: list[bytes] = []

    def int16(self, v: int) -> None:
        self._parts.append(_I16.pack(v))

    def int32(self, v: int) -> None:
        self._parts.append(_I32.pack(v))

    def int64(self, v: int) -> None:
        self._parts.append(_I64.pack(v))

    def string(self, v: str) -> None:
        raw = v.encode("utf-8")
        if len(raw) > 0x7FFF:
            raise SchemaError(f"string of {len(raw)} bytes does not fit an int16 length")
        self._parts.append(_I16.pack(len(raw)))
        self._parts.append(raw)

    def nullable_string(self, v: str | None) -> None:
        if v is None:
            self._parts.append(_I16.pack(-1))
        else:
            self.string(v)

    def bytes_(self, v: bytes) -> None:
        self._parts.append(_I32.pack(len(v)))
        self._parts.append(bytes(v))

    def getvalue(self) -> bytes:
        return b"".join(self._parts)


class _Reader:
    __slots__ = ("_buf", "_pos", "_what")

    def __init__(self, buf: bytes, what: str) -> None:
        self._buf = memoryview(buf)
        self._pos = 0
        self._what = what

    def _take(self, n: int, field: str) -> memoryview:
        end = self._pos + n
        if end > len(self._buf):
            raise SchemaError(
                f"{self._what}: truncated reading {field} at byte {self._pos} "
                f"(need {n}, have {len(self._buf) - self._pos})"
            )
        out = self._buf[self._pos : end]
        self._pos = end
        return out

    def int16(self, field: str) -> int:
        return int(_I16.unpack(self._take(2, field))[0])

    def int32(self, field: str) -> int:
        return int(_I32.unpack(self._take(4, field))[0])

    def int64(self, field: str) -> int:
        return int(_I64.unpack(self._take(8, field))[0])

    def _utf8(self, n: int, field: str) -> str:
        raw = self._take(n, field)
        try:
            return bytes(raw).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise SchemaError(f"{self._what}: {field} is not valid UTF-8") from exc

    def string(self, field: str) -> str:
        n = self.int16(field)
        if n < 0:
            raise SchemaError(f"{self._what}: {field} has negative length {n} (not nullable)")
        return self._utf8(n, field)

    def nullable_string(self, field: str) -> str | None:
        n = self.int16(field)
        if n == -1:
            return None
        if n < 0:
            raise SchemaError(f"{self._what}: {field} has invalid length {n}")
        return self._utf8(n, field)

    def bytes_(self, field: str) -> bytes:
        n = self.int32(field)
        if n < 0:
            # Kafka's non-nullable bytes; a null here is malformed.
            raise SchemaError(f"{self._what}: {field} has negative length {n}")
        return bytes(self._take(n, field))

    def array_len(self, field: str) -> int:
        n = self.int32(field)
        if n < 0:
            raise SchemaError(f"{self._what}: {field} has negative count {n}")
        # Each element takes at least one byte; reject absurd counts before looping.
        if n > len(self._buf) - self._pos:
            raise SchemaError(f"{self._what}: {field} count {n} exceeds the remaining bytes")
        return n

    def end(self) -> None:
        if self._pos != len(self._buf):
            raise SchemaError(
                f"{self._what}: {len(self._buf) - self._pos} trailing bytes after the record"
            )


def _version(buf: bytes, what: str) -> tuple[int, _Reader]:
    if not isinstance(buf, bytes | bytearray | memoryview):
        raise SchemaError(f"{what}: expected bytes, got {type(buf).__name__}")
    r = _Reader(bytes(buf), what)
    return r.int16("version"), r


# --------------------------------------------------------------------------------------------
# Keys


_KEY_HEAD: Final = struct.Struct(">hh")
_VALUE_HEAD: Final = struct.Struct(">hqi")  # v4: version, offset, leader epoch; then the metadata
_VALUE_EMPTY: Final = struct.Struct(">hqiBqB")  # v4, empty metadata (length 0 + 1), no tagged field
_TOPIC_ID_TAG: Final = b"\x00\x10"  # tag 0, 16 bytes: v4's topic id


def _short_string(v: str) -> bytes:
    raw = v.encode("utf-8")
    if len(raw) > 0x7FFF:
        raise SchemaError(f"string of {len(raw)} bytes does not fit an int16 length")
    return raw


def offset_commit_key_size(group_bytes: int, topic_bytes: int) -> int:
    """Bytes of an OffsetCommitKey (v1) whose group and topic take these many UTF-8 bytes."""
    return 2 + 2 + group_bytes + 2 + topic_bytes + 4


def group_metadata_key_size(group_bytes: int) -> int:
    """Bytes of a GroupMetadataKey (v2) whose group takes this many UTF-8 bytes."""
    return 2 + 2 + group_bytes


def offset_commit_key_prefix(group: str, topic: str) -> bytes:
    """Everything of an OffsetCommitKey but its partition: the key of partition p is
    ``prefix + int32(p)``, so a commit of many partitions encodes group and topic once."""
    g = _short_string(group)
    t = _short_string(topic)
    return b"".join((_KEY_HEAD.pack(OFFSET_COMMIT_KEY_VERSION, len(g)), g, _I16.pack(len(t)), t))


def encode_key(
    key: OffsetCommitKey | GroupMetadataKey | ConsumerRecordKey | ShareRecordKey,
) -> bytes:
    """Encode a key: OffsetCommitKey as version 1, GroupMetadataKey as version 2, a
    consumer-group key as its record type (3-8, 16), a share-group key as its (9-15)."""
    if type(key) is OffsetCommitKey:  # the hot path: one per committed partition
        group = _short_string(key.group)
        topic = _short_string(key.topic)
        return b"".join(
            (
                _KEY_HEAD.pack(OFFSET_COMMIT_KEY_VERSION, len(group)),
                group,
                _I16.pack(len(topic)),
                topic,
                _I32.pack(key.partition),
            )
        )
    w = _Writer()
    if isinstance(key, OffsetCommitKey):
        w.int16(OFFSET_COMMIT_KEY_VERSION)
        w.string(key.group)
        w.string(key.topic)
        w.int32(key.partition)
    elif isinstance(key, GroupMetadataKey):
        w.int16(GROUP_METADATA_KEY_VERSION)
        w.string(key.group)
    elif isinstance(key, SHARE_KEY_TYPES):
        return encode_share_key(key)
    else:
        return encode_consumer_key(key)  # TypeError for anything else
    return w.getvalue()


def _decode_offset_commit_key(buf: bytes) -> OffsetCommitKey:
    """Versions 0 and 1 straight from the bytes (one key per offset loaded at start-up); a
    malformed key is read again by :class:`_Reader`, which says what is wrong with it."""
    size = len(buf)
    if size >= 10 and buf[2] < 0x80:  # the lengths are int16: >= 0x8000 is negative
        end_group = 4 + ((buf[2] << 8) | buf[3])
        if end_group + 6 <= size and buf[end_group] < 0x80:
            end_topic = end_group + 2 + ((buf[end_group] << 8) | buf[end_group + 1])
            if end_topic + 4 == size:
                try:
                    group = buf[4:end_group].decode()
                    topic = buf[end_group + 2 : end_topic].decode()
                except UnicodeDecodeError:
                    pass
                else:
                    return OffsetCommitKey(group, topic, _I32.unpack_from(buf, end_topic)[0])
    r = _Reader(buf, "key")
    r.int16("version")
    group, topic, partition = r.string("group"), r.string("topic"), r.int32("partition")
    r.end()
    return OffsetCommitKey(group, topic, partition)


def _decode_group_metadata_key(r: _Reader) -> GroupMetadataKey:
    group = r.string("group")
    r.end()
    return GroupMetadataKey(group)


def decode_key(buf: bytes) -> RecordKey:
    """Decode a ``__consumer_offsets`` key: versions 3-8 and 16 as the consumer-group key
    types of ``coordinator.consumer.records``, 9-15 as the share-group ones of
    ``coordinator.share.records``, other versions >= 3 as :class:`UnknownKey`."""
    if type(buf) is bytes and len(buf) >= 2 and buf[0] == 0 and buf[1] < 2:
        return _decode_offset_commit_key(buf)  # the hot path: most keys are offsets
    version, r = _version(buf, "key")
    if version == 2:
        return _decode_group_metadata_key(r)
    if 0 <= version < 2:
        return _decode_offset_commit_key(bytes(buf))
    if version in CONSUMER_KEY_VERSIONS:
        return decode_consumer_key(buf)
    if version in SHARE_KEY_VERSIONS:
        return decode_share_key(buf)
    if version < 0:
        raise UnsupportedVersionError(f"key: negative version {version}")
    return UnknownKey(version, bytes(buf[2:]))


# --------------------------------------------------------------------------------------------
# OffsetCommitValue


def encode_offset_commit_value(value: OffsetCommitValue) -> bytes:
    """Encode as Kafka does (GroupCoordinatorRecordHelpers.offsetCommitValueVersion): version
    1 when the value has an expire timestamp (an OffsetCommit v2-v4 with a retention time, or a
    record read from an old log), else version 4."""
    if value.expire_timestamp != -1:
        w = _Writer()
        w.int16(1)
        w.int64(value.offset)
        w.string(value.metadata)
        w.int64(value.commit_timestamp)
        w.int64(value.expire_timestamp)
        return w.getvalue()
    return encode_offset_commit_fields(
        value.offset, value.leader_epoch, value.metadata, value.commit_timestamp, value.topic_id
    )


def offset_commit_value_size(metadata_bytes: int, by_id: bool = False) -> int:
    """Bytes of an OffsetCommitValue v4 whose metadata takes this many UTF-8 bytes (and that
    carries a topic id if ``by_id``)."""
    n = metadata_bytes + 1
    length = 1 if n < 0x80 else 2 if n < 0x4000 else 3  # the compact string's varint
    return _VALUE_HEAD.size + length + metadata_bytes + 8 + (19 if by_id else 1)


def encode_offset_commit_fields(
    offset: int,
    leader_epoch: int,
    metadata: str,
    commit_timestamp: int,
    topic_id: uuid.UUID | None = None,
) -> bytes:
    """:func:`encode_offset_commit_value` (v4) from the fields (the commit path's, without a
    value object); a commit without metadata or topic id takes one struct call."""
    if not metadata:
        if topic_id is None:
            return _VALUE_EMPTY.pack(OFFSET_COMMIT_VALUE_VERSION, offset, leader_epoch, 1, commit_timestamp, 0)
        head = _VALUE_HEAD.pack(OFFSET_COMMIT_VALUE_VERSION, offset, leader_epoch) + b"\x01"
    else:
        raw = metadata.encode("utf-8")
        if len(raw) < 0x7F:  # the compact string's length + 1 in one varint byte
            text = bytes((len(raw) + 1,)) + raw
        else:
            w = Writer()  # SchemaError over 32,767 bytes, Kafka's limit for a string field
            w.string(metadata)
            text = w.getvalue()
        head = _VALUE_HEAD.pack(OFFSET_COMMIT_VALUE_VERSION, offset, leader_epoch) + text
    if topic_id is None:
        return head + _I64.pack(commit_timestamp) + b"\x00"
    return head + _I64.pack(commit_timestamp) + b"\x01" + _TOPIC_ID_TAG + topic_id.bytes


def _decode_offset_commit_v4(buf: bytes) -> OffsetCommitValue:
    """Version 4: flexible (compact metadata string, tagged fields; tag 0 the topic id)."""
    if len(buf) == _VALUE_EMPTY.size and buf[14] == 1 and buf[23] == 0:
        _, offset, epoch, _, commit_ts, _ = _VALUE_EMPTY.unpack(buf)
        return OffsetCommitValue(offset, "", commit_ts, epoch)
    r = Reader(memoryview(buf), "OffsetCommitValue", 2)
    offset = r.int64("offset")
    epoch = r.int32("leader_epoch")
    metadata = r.string("metadata")
    commit_ts = r.int64("commit_timestamp")
    ids: list[uuid.UUID] = []
    r.tags({0: lambda t: ids.append(t.uuid("topic_id"))})
    r.end()
    topic_id = ids[-1] if ids and ids[-1].int else None  # the zero id is Kafka's "none"
    return OffsetCommitValue(offset, metadata, commit_ts, epoch, topic_id=topic_id)


def decode_offset_commit_value(buf: bytes) -> OffsetCommitValue:
    """Decode an OffsetCommitValue of version 0-4."""
    if type(buf) is bytes and len(buf) >= 2 and buf[0] == 0 and buf[1] == 4:
        return _decode_offset_commit_v4(buf)  # Kafka 4's, and ours
    version, r = _version(buf, "OffsetCommitValue")
    if version == 4:
        return _decode_offset_commit_v4(bytes(buf))
    if version in (0, 2):
        offset = r.int64("offset")
        metadata = r.string("metadata")
        commit_ts = r.int64("commit_timestamp")
        r.end()
        return OffsetCommitValue(offset, metadata, commit_ts)
    if version == 1:
        offset = r.int64("offset")
        metadata = r.string("metadata")
        commit_ts = r.int64("commit_timestamp")
        expire_ts = r.int64("expire_timestamp")
        r.end()
        return OffsetCommitValue(offset, metadata, commit_ts, expire_timestamp=expire_ts)
    if version == 3:
        offset = r.int64("offset")
        epoch = r.int32("leader_epoch")
        metadata = r.string("metadata")
        commit_ts = r.int64("commit_timestamp")
        r.end()
        return OffsetCommitValue(offset, metadata, commit_ts, leader_epoch=epoch)
    raise UnsupportedVersionError(f"OffsetCommitValue: unsupported version {version}")


# --------------------------------------------------------------------------------------------
# GroupMetadataValue


def encode_group_metadata_value(value: GroupMetadataValue) -> bytes:
    """Encode as version 3 (state timestamp and group instance ids included)."""
    w = _Writer()
    w.int16(GROUP_METADATA_VALUE_VERSION)
    w.string(value.protocol_type)
    w.int32(value.generation)
    w.nullable_string(value.protocol)
    w.nullable_string(value.leader)
    w.int64(value.current_state_timestamp)
    w.int32(len(value.members))
    for m in value.members:
        w.string(m.member_id)
        w.nullable_string(m.group_instance_id)
        w.string(m.client_id)
        w.string(m.client_host)
        w.int32(m.rebalance_timeout)
        w.int32(m.session_timeout)
        w.bytes_(m.subscription)
        w.bytes_(m.assignment)
    return w.getvalue()


def _string_size(v: str | None) -> int:
    """Bytes of a (nullable) string field; SchemaError as :class:`_Writer` raises it."""
    if v is None:
        return 2
    n = len(v) if v.isascii() else len(v.encode("utf-8"))
    if n > 0x7FFF:
        raise SchemaError(f"string of {n} bytes does not fit an int16 length")
    return 2 + n


def group_metadata_value_size(value: GroupMetadataValue) -> int:
    """``len(encode_group_metadata_value(value))`` without encoding it (no member's
    subscription or assignment is copied); SchemaError where the encoder would raise one."""
    size = 2 + _string_size(value.protocol_type) + 4 + _string_size(value.protocol)
    size += _string_size(value.leader) + 8 + 4
    for m in value.members:
        size += _string_size(m.member_id) + _string_size(m.group_instance_id)
        size += _string_size(m.client_id) + _string_size(m.client_host)
        size += 4 + 4 + 4 + len(m.subscription) + 4 + len(m.assignment)
    return size


def decode_group_metadata_value(buf: bytes) -> GroupMetadataValue:
    """Decode a GroupMetadataValue of version 0-4 (v4: the same fields, flexible: compact
    strings, bytes and array, a tagged-field section after each member and at the end)."""
    version, classic = _version(buf, "GroupMetadataValue")
    if not 0 <= version <= 4:
        raise UnsupportedVersionError(f"GroupMetadataValue: unsupported version {version}")
    r = Reader(memoryview(buf), "GroupMetadataValue", 2) if version == 4 else classic
    protocol_type = r.string("protocol_type")
    generation = r.int32("generation")
    protocol = r.nullable_string("protocol")
    leader = r.nullable_string("leader")
    state_ts = r.int64("current_state_timestamp") if version >= 2 else -1
    members: list[MemberMetadata] = []
    for _ in range(r.array_len("members")):
        member_id = r.string("member_id")
        instance_id = r.nullable_string("group_instance_id") if version >= 3 else None
        client_id = r.string("client_id")
        client_host = r.string("client_host")
        rebalance_timeout = r.int32("rebalance_timeout") if version >= 1 else -1
        session_timeout = r.int32("session_timeout")
        subscription = r.bytes_("subscription")
        assignment = r.bytes_("assignment")
        if isinstance(r, Reader):
            r.tags()
        members.append(
            MemberMetadata(
                member_id,
                instance_id,
                client_id,
                client_host,
                rebalance_timeout,
                session_timeout,
                subscription,
                assignment,
            )
        )
    if isinstance(r, Reader):
        r.tags()
    r.end()
    return GroupMetadataValue(protocol_type, generation, protocol, leader, state_ts, tuple(members))
