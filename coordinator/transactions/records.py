"""The ``__transaction_state`` records: Kafka's TransactionLogKey and TransactionLogValue.

Key (version 0): ``int16 version, string transactional_id``. Value version 0 (what Kafka writes
before transaction.version 1, and what we write): ``int16 version, int64 producer_id, int16
producer_epoch, int32 timeout_ms, int8 state, nullable [topic string, [int32 partition]],
int64 last_update_ms, int64 start_ms``. Version 1 is the flexible encoding of the same fields
(compact strings and arrays, tagged fields: 0 previous producer id, 1 next producer id, 2 client
transaction version); it is read, not written. A null value (tombstone) removes the id.

Decoders raise :class:`coordinator.schema_errors.SchemaError` on anything malformed.
"""

from __future__ import annotations

import struct
from collections import defaultdict

from kcoord.coordinator.schema_errors import SchemaError, UnsupportedVersionError

from .model import NO_PRODUCER_ID, TopicPartition, TxnMetadata, TxnState

KEY_VERSION = 0
VALUE_VERSION = 0

_H = struct.Struct(">h")
_I = struct.Struct(">i")
_Q = struct.Struct(">q")
_HEAD = struct.Struct(">qhib")  # producer id, epoch, timeout, state
_TIMES = struct.Struct(">qq")  # last update, start


def _string(s: str) -> bytes:
    data = s.encode()
    return _H.pack(len(data)) + data


def encode_key(transactional_id: str) -> bytes:
    return _H.pack(KEY_VERSION) + _string(transactional_id)


def encode_value(meta: TxnMetadata) -> bytes:
    parts = [_H.pack(VALUE_VERSION)]
    parts.append(
        _HEAD.pack(meta.producer_id, meta.producer_epoch, meta.timeout_ms, int(meta.state))
    )
    if meta.state == TxnState.EMPTY:
        parts.append(_I.pack(-1))  # Kafka writes no partition list for Empty
    else:
        by_topic: dict[str, list[int]] = defaultdict(list)
        for topic, partition in sorted(meta.partitions):
            by_topic[topic].append(partition)
        parts.append(_I.pack(len(by_topic)))
        for topic, ids in by_topic.items():
            parts.append(_string(topic))
            parts.append(_I.pack(len(ids)))
            parts.append(struct.pack(f">{len(ids)}i", *ids))
    parts.append(_TIMES.pack(meta.last_update_ms, meta.start_ms))
    return b"".join(parts)


class _Reader:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise SchemaError("truncated transaction log record")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def unpack(self, s: struct.Struct) -> tuple[int, ...]:
        return s.unpack(self.take(s.size))

    def uvarint(self) -> int:
        shift = result = 0
        while True:
            b = self.take(1)[0]
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7
            if shift > 28:
                raise SchemaError("varint too long")

    def text(self, n: int) -> str:
        try:
            return self.take(n).decode()
        except UnicodeDecodeError as e:
            raise SchemaError(f"invalid UTF-8: {e}") from None

    def string(self) -> str:
        (n,) = self.unpack(_H)
        return self.text(n)

    def compact_string(self) -> str:
        n = self.uvarint() - 1
        if n < 0:
            raise SchemaError("null string where none is allowed")
        return self.text(n)

    def skip_tags(self) -> dict[int, bytes]:
        tags: dict[int, bytes] = {}
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            tags[tag] = self.take(self.uvarint())
        return tags

    def done(self) -> None:
        if self.pos != len(self.data):
            raise SchemaError(f"{len(self.data) - self.pos} trailing bytes")


def decode_key(data: bytes) -> str:
    r = _Reader(data)
    (version,) = r.unpack(_H)
    if version != KEY_VERSION:
        raise UnsupportedVersionError(f"transaction log key version {version}")
    txn_id = r.string()
    r.done()
    return txn_id


def decode_value(transactional_id: str, data: bytes) -> TxnMetadata:
    r = _Reader(data)
    (version,) = r.unpack(_H)
    if version not in (0, 1):
        raise UnsupportedVersionError(f"transaction log value version {version}")
    flexible = version == 1
    pid, epoch, timeout, state_id = r.unpack(_HEAD)
    try:
        state = TxnState(state_id)
    except ValueError:
        raise SchemaError(f"unknown transaction state {state_id}") from None
    partitions: set[TopicPartition] = set()
    count = r.uvarint() - 1 if flexible else r.unpack(_I)[0]
    if count < -1:
        raise SchemaError("negative partition count")
    for _ in range(max(count, 0)):
        topic = r.compact_string() if flexible else r.string()
        n = r.uvarint() - 1 if flexible else r.unpack(_I)[0]
        if n < 0:
            raise SchemaError("negative partition id count")
        ids = struct.unpack(f">{n}i", r.take(4 * n))
        partitions.update((topic, p) for p in ids)
        if flexible:
            r.skip_tags()
    last_update, start = r.unpack(_TIMES)
    previous = NO_PRODUCER_ID
    if flexible:
        tags = r.skip_tags()
        if len(tags.get(0, b"")) == 8:
            (previous,) = _Q.unpack(tags[0])
    r.done()
    return TxnMetadata(
        transactional_id=transactional_id,
        producer_id=pid,
        producer_epoch=epoch,
        timeout_ms=timeout,
        state=state,
        partitions=frozenset(partitions),
        start_ms=start,
        last_update_ms=last_update,
        previous_producer_id=previous,
    )
