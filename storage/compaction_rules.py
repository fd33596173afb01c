"""The engine-neutral rules of key-based compaction: which records of a run of batches survive.

``storage.compaction`` states the rules (its module docstring) and applies them to the files
engine's segments; ``storage.postgres.compaction`` applies them to batch rows. Both hand this
module their batches as ``(base offset, header, bytes)`` in offset order and get back:

* :func:`surviving_offsets`: the offsets of the records that survive in the part of the log
  that may be rewritten (the "cleanable" part, below ``cleanable_end``), built from the
  key -> newest offset map over every durable batch (below ``durable_end``) with the
  transaction rules;
* :class:`BatchFilter`: for each batch of the cleanable part, in order, whether it is kept
  verbatim, dropped, or rebuilt from its survivors (:func:`rebuild_batch`: same base offset,
  offset span, timestamps, codec, producer fields and leader epoch).

Also here: what every engine's compaction reports (:class:`CompactionStats`) and the base of
every engine's plan (:class:`PreparedCompaction`), so that the storage interface names one type.
Pure computation over bytes: no files, no database.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from kcoord.protocol.batch import HEADER_SIZE, BatchHeader, CorruptBatch
from kcoord.protocol.compression import decompress
from kcoord.protocol.control import decode_marker
from kcoord.protocol.key_values import decode_key_values
from kcoord.protocol.record_encoding import encode_batch
from kcoord.protocol.records import decode_batch, read_varint

DEFAULT_DELETE_RETENTION_MS = 86_400_000  # Kafka's delete.retention.ms


@dataclass(slots=True)
class CompactionStats:
    """What a compaction did to the part of the log it considered (the files engine: its sealed
    segments, the active one excluded; PostgreSQL: its flushed batch rows, and no segments).

    ``tombstones_dropped`` counts tombstones removed because they outlived the retention (older
    tombstones superseded by a newer record for their key are counted only as records).
    ``stale`` is True if the plan was discarded at commit because the log had changed; the
    ``*_after`` fields then equal the ``*_before`` ones.
    """

    segments_before: int = 0
    segments_after: int = 0
    bytes_before: int = 0
    bytes_after: int = 0
    records_before: int = 0
    records_after: int = 0
    tombstones_dropped: int = 0
    seconds: float = 0.0
    stale: bool = False

    def discard(self) -> None:
        """Mark the plan these stats describe as discarded: nothing changed."""
        self.stale = True
        self.segments_after = self.segments_before
        self.bytes_after = self.bytes_before
        self.records_after = self.records_before
        self.tombstones_dropped = 0


class PreparedCompaction:
    """The result of any engine's first phase, passed back to the same log's commit or abort
    (each engine subclasses it with what it needs)."""

    stats: CompactionStats


Batch = tuple[int, BatchHeader, memoryview]
"""(base offset, header, the whole batch's bytes)."""


def surviving_offsets(
    batches: Iterable[Batch], *, durable_end: int, cleanable_end: int, horizon_ms: int
) -> tuple[list[int], int]:
    """The sorted offsets below ``cleanable_end`` whose records survive, and how many
    tombstones are dropped for having outlived the retention.

    ``batches`` is the whole log in offset order; only those wholly below ``durable_end`` are
    read (the iteration stops at the first that is not). A tombstone may be dropped only in a
    batch wholly below ``cleanable_end`` whose max timestamp is before ``horizon_ms``.
    """
    offsets: dict[bytes, int] = {}
    open_txns: dict[int, dict[bytes, int]] = {}  # producer id -> key -> newest offset
    tombstones: dict[bytes, list[int]] = {}  # of keys pending somewhere when written
    for _, h, data in batches:
        if h.next_offset > durable_end:
            break
        if h.is_control:
            if h.is_transactional:
                _end_txn(h, data, offsets, open_txns)
            continue
        if h.is_transactional and h.producer_id >= 0:
            held = open_txns.setdefault(h.producer_id, {})
            _map_keys(_records_bytes(h, data), h.records_count, h.base_offset, held, False)
            continue
        droppable = h.next_offset <= cleanable_end and h.max_timestamp < horizon_ms
        if open_txns:
            _map_around_txns(h, data, offsets, droppable, open_txns, tombstones)
            continue
        _map_keys(_records_bytes(h, data), h.records_count, h.base_offset, offsets, droppable)
    pending = _pending(offsets, open_txns, tombstones)
    surviving = sorted(
        {v for v in offsets.values() if 0 <= v < cleanable_end}
        | {v for v in pending if v < cleanable_end}
    )
    return surviving, sum(1 for v in offsets.values() if v < 0)


@dataclass(frozen=True, slots=True)
class Verdict:
    """What becomes of one batch: ``keep`` it byte for byte, ``drop`` it, or replace it with
    ``data``, re-encoded from its ``records`` survivors."""

    action: Literal["keep", "drop", "rebuild"]
    records: int
    data: bytes | None = None


class BatchFilter:
    """Decides, batch by batch in offset order, what survives of the cleanable part given
    :func:`surviving_offsets`. Control batches are always kept verbatim."""

    def __init__(self, surviving: list[int]) -> None:
        self._surviving = surviving
        self._ptr = 0

    def decide(self, h: BatchHeader, data: memoryview) -> Verdict:
        if h.is_control:
            return Verdict("keep", h.records_count)
        surviving = self._surviving
        lo = ptr = bisect_left(surviving, h.base_offset, self._ptr)
        last = h.last_offset
        while ptr < len(surviving) and surviving[ptr] <= last:
            ptr += 1
        self._ptr = ptr
        kept = ptr - lo
        if kept == 0:
            return Verdict("drop", 0)
        if kept == h.records_count:
            return Verdict("keep", kept)
        out, n = rebuild_batch(h, data, set(surviving[lo:ptr]))
        return Verdict("rebuild", n, out)


# -- the key map -------------------------------------------------------------------------------


def _map_keys(
    data: bytes, count: int, base_offset: int, offsets: dict[bytes, int], droppable: bool
) -> None:
    """Record ``key -> offset`` for each keyed record of a batch's (decompressed) records.

    Reads only up to each key and the first byte of the value length; a tombstone that may be
    dropped is stored as ``~offset`` (negative). Keyless records are skipped.
    """
    pos = 0
    n_data = len(data)
    try:
        for _ in range(count):
            b = data[pos]
            if b < 0x80:
                length = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                length, pos = read_varint(data, pos)
            end = pos + length
            if length < 6 or end > n_data:
                raise CorruptBatch(f"bad record length {length}")
            pos += 1  # attributes
            while data[pos] & 0x80:  # timestampDelta: skipped
                pos += 1
            pos += 1
            b = data[pos]
            if b < 0x80:
                offset_delta = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                offset_delta, pos = read_varint(data, pos)
            b = data[pos]
            if b < 0x80:
                key_len = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                key_len, pos = read_varint(data, pos)
            if key_len >= 0:
                key = data[pos : pos + key_len]
                # valueLength -1 (null) is the single byte zig-zag(-1) == 1.
                if data[pos + key_len] == 1:
                    offset = base_offset + offset_delta
                    offsets[key] = ~offset if droppable else offset
                else:
                    offsets[key] = base_offset + offset_delta
            elif key_len != -1:
                raise CorruptBatch(f"bad key length {key_len}")
            pos = end
    except IndexError:
        raise CorruptBatch("truncated record") from None
    if pos != n_data:
        raise CorruptBatch(f"{n_data - pos} bytes left over after {count} records")


def _end_txn(
    h: BatchHeader, data: memoryview, offsets: dict[bytes, int], open_txns: dict[int, dict[bytes, int]]
) -> None:
    """A marker: a COMMIT lets its producer's records compete for their keys by offset."""
    held = open_txns.pop(h.producer_id, None)
    if not held:
        return
    for key, value in decode_key_values(h, data[HEADER_SIZE:]):
        marker = decode_marker(key, value)
        if marker is not None and marker.commit:
            for k, offset in held.items():
                current = offsets.get(k)
                if current is None or offset > (current if current >= 0 else ~current):
                    offsets[k] = offset
            return


def _map_around_txns(
    h: BatchHeader,
    data: memoryview,
    offsets: dict[bytes, int],
    droppable: bool,
    open_txns: dict[int, dict[bytes, int]],
    tombstones: dict[bytes, list[int]],
) -> None:
    """:func:`_map_keys` of a plain batch while transactions are open, noting the tombstones
    of keys they hold pending."""
    batch: dict[bytes, int] = {}
    _map_keys(_records_bytes(h, data), h.records_count, h.base_offset, batch, True)
    for key, v in batch.items():
        if v < 0:
            if any(key in held for held in open_txns.values()):
                tombstones.setdefault(key, []).append(~v)
            offsets[key] = v if droppable else ~v
        else:
            offsets[key] = v


def _pending(
    offsets: dict[bytes, int],
    open_txns: dict[int, dict[bytes, int]],
    tombstones: dict[bytes, list[int]],
) -> list[int]:
    """The offsets to keep for still-pending transactional records: theirs, and that of the
    first tombstone of the key after each (it removes the record on replay; it is made
    non-droppable if it is the key's newest record)."""
    kept: list[int] = []
    for held in open_txns.values():
        for key, offset in held.items():
            kept.append(offset)
            after = [t for t in tombstones.get(key, ()) if t > offset]
            if after:
                kept.append(after[0])
                current = offsets.get(key)
                if current is not None and current < 0 and ~current == after[0]:
                    offsets[key] = after[0]
    return kept


def _records_bytes(h: BatchHeader, data: memoryview) -> bytes:
    payload = data[HEADER_SIZE:]
    if h.compression:
        return decompress(h.compression, payload)
    return bytes(payload)


# -- rebuilding ----------------------------------------------------------------------------------


def rebuild_batch(h: BatchHeader, data: memoryview, keep: set[int]) -> tuple[bytes, int]:
    """Re-encode a batch with only the records at offsets in ``keep``; (bytes, records)."""
    batch = decode_batch(data, verify_crc=False)
    base = h.base_offset
    kept = [r for r in batch.records if base + r.offset_delta in keep]
    out = encode_batch(
        kept,
        base_offset=base,
        base_timestamp=h.base_timestamp,
        max_timestamp=h.max_timestamp,
        compression=h.compression,
        producer_id=h.producer_id,
        producer_epoch=h.producer_epoch,
        base_sequence=h.base_sequence,
        partition_leader_epoch=h.partition_leader_epoch,
        is_transactional=h.is_transactional,
        log_append_time=h.log_append_time,
        last_offset_delta=h.last_offset_delta,
    )
    return out, len(kept)
