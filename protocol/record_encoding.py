"""Record batch v2 encoding: records into whole batches, CRC filled in.

:func:`encode_batch` encodes ``Record`` objects with every header field under the caller's
control, and :func:`build_batch` builds a batch from ``(key, value, headers, timestamp)`` tuples
(tests, tools, benchmarks). :func:`encode_kv_batch` is the coordinator's write path: keyed
records without headers, uncompressed, built from precomputed varints; the ``kv_*`` functions
give the sizes it would write without writing them, so a write can be checked against
``message.max.bytes`` first. The record layout and the record types are ``protocol.records``'s;
the batch header's are ``protocol.batch``'s. Sans-IO.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterable, Sequence

from kcoord.protocol.batch import (
    _HEADER,  # the header's struct layout: kept in one place
    COMPRESSION_MASK,
    CONTROL_FLAG,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_V2,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_FLAG,
    compute_crc,
)
from kcoord.protocol.compression import Compression, compress
from kcoord.protocol.records import Record, RecordHeader, varint_size, write_varint

_CRC = struct.Struct(">I")
_CRC_OFFSET = 17

_INT32_MIN = -(2**31)
_INT32_MAX = 2**31 - 1
_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1


def _check_range(name: str, value: int, lo: int, hi: int) -> None:
    if not lo <= value <= hi:
        raise ValueError(f"{name} {value} out of range [{lo}, {hi}]")


def encode_record(out: bytearray, record: Record) -> None:
    """Append one record (length-prefixed) to ``out``."""
    body = bytearray()
    body.append(record.attributes & 0xFF)
    write_varint(body, record.timestamp_delta)
    write_varint(body, record.offset_delta)
    key = record.key
    if key is None:
        body.append(1)  # zig-zag(-1)
    else:
        write_varint(body, len(key))
        body += key
    value = record.value
    if value is None:
        body.append(1)
    else:
        write_varint(body, len(value))
        body += value
    write_varint(body, len(record.headers))
    for h in record.headers:
        hkey = h.key.encode("utf-8")
        write_varint(body, len(hkey))
        body += hkey
        if h.value is None:
            body.append(1)
        else:
            write_varint(body, len(h.value))
            body += h.value
    write_varint(out, len(body))
    out += body


def encode_batch(
    records: Sequence[Record],
    *,
    base_offset: int = 0,
    base_timestamp: int | None = None,
    max_timestamp: int | None = None,
    compression: Compression | int = Compression.NONE,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    partition_leader_epoch: int = -1,
    is_transactional: bool = False,
    is_control: bool = False,
    log_append_time: bool = False,
    last_offset_delta: int | None = None,
    compression_level: int | None = None,
) -> bytes:
    """Encode ``records`` as one v2 batch and return its bytes, CRC filled in.

    ``base_timestamp`` defaults to the current wall-clock time in milliseconds (records
    carry only deltas from it). ``max_timestamp`` defaults to base_timestamp plus the largest
    timestamp delta. ``last_offset_delta`` defaults to the last record's offset delta (0 for
    an empty batch); pass it explicitly to keep the offset span of a compacted batch.
    The compressed payload is always written, even if it is larger than the raw records.
    """
    if base_timestamp is None:
        base_timestamp = time.time_ns() // 1_000_000
    if max_timestamp is None:
        max_delta = max((r.timestamp_delta for r in records), default=0)
        max_timestamp = base_timestamp + max(max_delta, 0)
    if last_offset_delta is None:
        last_offset_delta = records[-1].offset_delta if records else 0
    codec = Compression(compression)

    _check_range("base_offset", base_offset, _INT64_MIN, _INT64_MAX)
    _check_range("base_timestamp", base_timestamp, _INT64_MIN, _INT64_MAX)
    _check_range("max_timestamp", max_timestamp, _INT64_MIN, _INT64_MAX)
    _check_range("last_offset_delta", last_offset_delta, 0, _INT32_MAX)
    _check_range("record count", len(records), 0, _INT32_MAX)
    for r in records:
        _check_range("offset_delta", r.offset_delta, _INT32_MIN, _INT32_MAX)
        _check_range("timestamp_delta", r.timestamp_delta, _INT64_MIN, _INT64_MAX)

    raw = bytearray()
    for r in records:
        encode_record(raw, r)
    payload = compress(codec, raw, compression_level) if codec else raw

    attributes = int(codec) & COMPRESSION_MASK
    if log_append_time:
        attributes |= TIMESTAMP_TYPE_MASK
    if is_transactional:
        attributes |= TRANSACTIONAL_FLAG
    if is_control:
        attributes |= CONTROL_FLAG

    size = HEADER_SIZE + len(payload)
    out = bytearray(size)
    try:
        _HEADER.pack_into(
            out,
            0,
            base_offset,
            size - LOG_OVERHEAD,
            partition_leader_epoch,
            MAGIC_V2,
            0,  # CRC, patched below
            attributes,
            last_offset_delta,
            base_timestamp,
            max_timestamp,
            producer_id,
            producer_epoch,
            base_sequence,
            len(records),
        )
    except struct.error as exc:
        raise ValueError(f"batch header field out of range: {exc}") from None
    out[HEADER_SIZE:] = payload
    _CRC.pack_into(out, _CRC_OFFSET, compute_crc(out, 0, size))
    return bytes(out)


HeaderLike = RecordHeader | tuple[str, bytes | None]
RecordInput = tuple[bytes | None, bytes | None, Iterable[HeaderLike], int]


def _as_header(h: HeaderLike) -> RecordHeader:
    return h if isinstance(h, RecordHeader) else RecordHeader(h[0], h[1])


def build_batch(
    entries: Iterable[RecordInput],
    *,
    base_offset: int = 0,
    **options: object,
) -> bytes:
    """Encode ``(key, value, headers, timestamp_ms)`` tuples as one batch.

    Offsets are consecutive from ``base_offset``; the batch's base timestamp is the first
    record's timestamp and its max timestamp the largest one (unless ``max_timestamp`` is
    given, e.g. for LogAppendTime). Other keyword options are passed to :func:`encode_batch`.
    """
    items = list(entries)
    if "base_timestamp" in options:
        raise TypeError("build_batch derives base_timestamp from the records")
    base_ts = items[0][3] if items else -1
    records = [
        Record(i, ts - base_ts, key, value, tuple(_as_header(h) for h in headers))
        for i, (key, value, headers, ts) in enumerate(items)
    ]
    if "max_timestamp" not in options:
        options["max_timestamp"] = max((it[3] for it in items), default=base_ts)
    return encode_batch(
        records,
        base_offset=base_offset,
        base_timestamp=base_ts,
        **options,  # type: ignore[arg-type]
    )


# --------------------------------------------------------------------------- coordinator batches


def _varint_table(n: int) -> list[bytes]:
    table = []
    for v in range(n):
        out = bytearray()
        write_varint(out, v)
        table.append(bytes(out))
    return table


_SMALL_VARINTS = _varint_table(1 << 14)  # zig-zag varints of 0..16383, precomputed


_NULL_LENGTH = b"\x01"  # the zig-zag varint of -1: a null key or value


def _varint_bytes(value: int) -> bytes:
    if 0 <= value < len(_SMALL_VARINTS):
        return _SMALL_VARINTS[value]
    out = bytearray()
    write_varint(out, value)
    return bytes(out)


def _kv_records(pairs: Sequence[tuple[bytes, bytes | None]]) -> bytes:
    """The records of :func:`encode_kv_batch`, each after its length: attributes 0, timestamp
    delta 0, offset delta i, key, value (null: length -1), no headers.

    A coordinator batch holds one record per committed partition, so this is a hot loop: the
    pieces of every record go into one list joined once (no bytes object built per record),
    and the varints come from the precomputed table (offset deltas, keys, values and records
    are nearly always short)."""
    parts: list[bytes] = []
    extend = parts.extend
    small, limit = _SMALL_VARINTS, len(_SMALL_VARINTS)
    varint = _varint_bytes
    for i, (key, value) in enumerate(pairs):
        delta = small[i] if i < limit else varint(i)
        key_size = len(key)
        key_size_varint = small[key_size] if key_size < limit else varint(key_size)
        if value is None:
            value, value_size_varint = b"", _NULL_LENGTH
        else:
            value_size = len(value)
            value_size_varint = small[value_size] if value_size < limit else varint(value_size)
        # attributes + timestamp delta (2 bytes), the varints, key, value, header count (1)
        body = (
            3 + len(delta) + len(key_size_varint) + key_size + len(value_size_varint) + len(value)
        )
        extend(
            (
                small[body] if body < limit else varint(body),
                b"\x00\x00",
                delta,
                key_size_varint,
                key,
                value_size_varint,
                value,
                b"\x00",
            )
        )
    return b"".join(parts)


def encode_kv_batch(
    pairs: Sequence[tuple[bytes, bytes | None]],
    timestamp_ms: int,
    *,
    producer_id: int = -1,
    producer_epoch: int = -1,
    is_transactional: bool = False,
    base_sequence: int = -1,
) -> bytes:
    """One uncompressed batch of keyed records without headers, all stamped ``timestamp_ms``.

    The same bytes :func:`build_batch` would produce for these records, built faster: this is
    the coordinator's write path (one record per committed partition). A transactional offset
    commit passes its producer id and epoch, ``is_transactional`` and base sequence 0, as
    Kafka's coordinator runtime writes it.
    """
    payload = _kv_records(pairs)
    size = HEADER_SIZE + len(payload)
    out = bytearray(size)
    count = len(pairs)
    _HEADER.pack_into(
        out,
        0,
        0,
        size - LOG_OVERHEAD,
        -1,
        MAGIC_V2,
        0,
        TRANSACTIONAL_FLAG if is_transactional else 0,
        max(count - 1, 0),
        timestamp_ms,
        timestamp_ms,
        producer_id,
        producer_epoch,
        base_sequence,
        count,
    )
    out[HEADER_SIZE:] = payload
    _CRC.pack_into(out, _CRC_OFFSET, compute_crc(out, 0, size))
    return bytes(out)


# Sizes of what encode_kv_batch writes, without writing it: the coordinator checks a write
# against message.max.bytes before (or instead of) building it.

# Offset deltas below each bound take one more varint byte than the previous range.
_DELTA_BOUNDS = (64, 1 << 13, 1 << 20, 1 << 27, 1 << 34)


def kv_record_size(offset_delta: int, key_size: int, value_size: int | None) -> int:
    """Bytes one record of :func:`encode_kv_batch` takes, its length prefix included, for a
    key and value of these sizes (``value_size`` None: a tombstone) at ``offset_delta``."""
    body = (
        3  # attributes, timestamp delta 0, header count 0
        + varint_size(offset_delta)
        + varint_size(key_size)
        + key_size
        + (1 if value_size is None else varint_size(value_size) + value_size)
    )
    return varint_size(body) + body


def kv_run_size(first_delta: int, count: int, key_size: int, value_size: int | None) -> int:
    """:func:`kv_record_size` summed over ``count`` records of the same sizes at offset deltas
    ``first_delta`` .. ``first_delta + count - 1``, in a few steps however large ``count`` is."""
    total = 0
    delta, end = first_delta, first_delta + count
    while delta < end:
        bound = next((b for b in _DELTA_BOUNDS if delta < b), end)
        upto = min(end, bound)
        total += (upto - delta) * kv_record_size(delta, key_size, value_size)
        delta = upto
    return total


def kv_batch_size(pairs: Iterable[tuple[bytes, bytes | None]]) -> int:
    """``len(encode_kv_batch(pairs, t))``, computed without encoding."""
    total = HEADER_SIZE
    for i, (key, value) in enumerate(pairs):
        total += kv_record_size(i, len(key), None if value is None else len(value))
    return total


def kv_batches(
    pairs: Sequence[tuple[bytes, bytes | None]], max_bytes: int
) -> list[Sequence[tuple[bytes, bytes | None]]]:
    """``pairs`` cut, in order, into runs whose :func:`encode_kv_batch` fits in ``max_bytes``.
    A record too big for any batch gets a run of its own (which does not fit)."""
    runs: list[Sequence[tuple[bytes, bytes | None]]] = []
    start, size = 0, HEADER_SIZE
    for i, (key, value) in enumerate(pairs):
        record = kv_record_size(i - start, len(key), None if value is None else len(value))
        if size + record > max_bytes and i > start:
            runs.append(pairs[start:i])
            start, size = i, HEADER_SIZE
            record = kv_record_size(0, len(key), None if value is None else len(value))
        size += record
    if start < len(pairs):
        runs.append(pairs[start:])
    return runs


__all__ = [
    "build_batch",
    "encode_batch",
    "encode_kv_batch",
    "encode_record",
    "kv_batch_size",
    "kv_batches",
    "kv_record_size",
    "kv_run_size",
]
