"""Record batch v2 (magic 2) record codec: decode batches into records and encode them back.

``protocol.batch`` owns the 61-byte batch header; this module owns what follows it -- the
(possibly compressed) sequence of records -- plus whole-batch encoding. Each record is:

    length varint | attributes int8 | timestampDelta varlong | offsetDelta varint
    keyLength varint | key | valueLength varint | value
    headerCount varint | { keyLength varint | key (UTF-8) | valueLength varint | value }*

All varints are zig-zag encoded (the protobuf "sint" encoding); a length of -1 means null.
The module is sans-IO: bytes in, objects out, and back.

Decoded timestamps: ``RecordBatch.iter_records`` yields absolute offsets and timestamps; for
a LogAppendTime batch every record's timestamp is the batch's ``max_timestamp``, as the Java
consumer reports it.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from protocol.batch import (
    _HEADER,  # the header's struct layout: kept in one place
    COMPRESSION_MASK,
    CONTROL_FLAG,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_V2,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_FLAG,
    BatchHeader,
    CorruptBatch,
    compute_crc,
    crc_ok,
    parse_header,
    peek_size,
)
from protocol.compression import DEFAULT_DECOMPRESSION_LIMIT, Compression, compress, decompress

Buffer = bytes | bytearray | memoryview

_CRC = struct.Struct(">I")
_CRC_OFFSET = 17

# The smallest possible record: length, attributes, timestamp delta, offset delta, key
# length, value length and header count, one byte each.
_MIN_RECORD_SIZE = 7

_INT32_MIN = -(2**31)
_INT32_MAX = 2**31 - 1
_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1


@dataclass(frozen=True, slots=True)
class RecordHeader:
    key: str
    value: bytes | None


@dataclass(frozen=True, slots=True)
class Record:
    offset_delta: int
    timestamp_delta: int
    key: bytes | None
    value: bytes | None
    headers: tuple[RecordHeader, ...] = ()
    attributes: int = 0


@dataclass(frozen=True, slots=True)
class RecordBatch:
    header: BatchHeader
    records: list[Record]

    def __len__(self) -> int:
        return len(self.records)

    @property
    def base_offset(self) -> int:
        return self.header.base_offset

    @property
    def compression(self) -> Compression:
        return Compression(self.header.compression)

    def offset_of(self, record: Record) -> int:
        return self.header.base_offset + record.offset_delta

    def timestamp_of(self, record: Record) -> int:
        if self.header.log_append_time:
            return self.header.max_timestamp
        return self.header.base_timestamp + record.timestamp_delta

    def iter_records(self) -> Iterator[tuple[int, int, Record]]:
        """Yield ``(absolute offset, absolute timestamp, record)`` in batch order."""
        base_offset = self.header.base_offset
        if self.header.log_append_time:
            ts = self.header.max_timestamp
            for r in self.records:
                yield base_offset + r.offset_delta, ts, r
        else:
            base_ts = self.header.base_timestamp
            for r in self.records:
                yield base_offset + r.offset_delta, base_ts + r.timestamp_delta, r


# --------------------------------------------------------------------------- varints


def _read_varint_slow(data: bytes | bytearray, pos: int) -> tuple[int, int]:
    """Decode a multi-byte zig-zag varint starting at ``pos`` (first byte has the MSB set).

    Accepts up to 10 bytes (a varlong). Raises IndexError past the end of ``data``, which
    the caller turns into CorruptBatch.
    """
    b = data[pos]
    raw = b & 0x7F
    shift = 7
    pos += 1
    while True:
        b = data[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
        if shift > 63:
            raise CorruptBatch("varint longer than 10 bytes")
    return (raw >> 1) ^ -(raw & 1), pos


def read_varint(data: bytes | bytearray, pos: int) -> tuple[int, int]:
    """Decode one zig-zag varint at ``pos``; returns (value, next position)."""
    try:
        return _read_varint_fast(data, pos)
    except IndexError:
        raise CorruptBatch("truncated varint") from None


def write_varint(out: bytearray, value: int) -> None:
    """Append ``value`` as a zig-zag varint (valid for the whole int64 range)."""
    z = (value << 1) ^ (value >> 63)
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)


def varint_size(value: int) -> int:
    z = (value << 1) ^ (value >> 63)
    n = 1
    while z >= 0x80:
        z >>= 7
        n += 1
    return n


# --------------------------------------------------------------------------- decoding

# A frozen dataclass's __init__ goes through object.__setattr__ once per field, which is
# about half the cost of decoding a small record. The decoder fills the slots directly via
# their descriptors instead; the resulting objects are indistinguishable from Record(...).
_new = object.__new__
_set_offset_delta = Record.__dict__["offset_delta"].__set__
_set_timestamp_delta = Record.__dict__["timestamp_delta"].__set__
_set_key = Record.__dict__["key"].__set__
_set_value = Record.__dict__["value"].__set__
_set_headers = Record.__dict__["headers"].__set__
_set_attributes = Record.__dict__["attributes"].__set__


def _decode_records(data: bytes, count: int) -> list[Record]:
    """Decode exactly ``count`` records that must fill ``data`` completely."""
    if count > len(data) // _MIN_RECORD_SIZE:
        raise CorruptBatch(f"record count {count} cannot fit in {len(data)} bytes")
    slow = _read_varint_slow
    new, record_cls = _new, Record
    set_od, set_td, set_k = _set_offset_delta, _set_timestamp_delta, _set_key
    set_v, set_h, set_a = _set_value, _set_headers, _set_attributes
    records: list[Record] = []
    append = records.append
    pos = 0
    try:
        for _ in range(count):
            # Every field's one-byte fast path is inlined: most lengths and deltas are small.
            b = data[pos]
            if b < 0x80:
                length = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                length, pos = slow(data, pos)
            end = pos + length
            if length < _MIN_RECORD_SIZE - 1 or end > len(data):
                raise CorruptBatch(f"bad record length {length}")
            attributes = data[pos]
            pos += 1
            b = data[pos]
            if b < 0x80:
                ts_delta = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                ts_delta, pos = slow(data, pos)
            b = data[pos]
            if b < 0x80:
                off_delta = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                off_delta, pos = slow(data, pos)

            b = data[pos]
            if b < 0x80:
                n = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                n, pos = slow(data, pos)
            if n < 0:
                if n != -1:
                    raise CorruptBatch(f"bad key length {n}")
                key = None
            else:
                key = data[pos : pos + n]
                pos += n

            b = data[pos]
            if b < 0x80:
                n = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                n, pos = slow(data, pos)
            if n < 0:
                if n != -1:
                    raise CorruptBatch(f"bad value length {n}")
                value = None
            else:
                value = data[pos : pos + n]
                pos += n

            b = data[pos]
            if b < 0x80:
                n = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                n, pos = slow(data, pos)
            if n == 0:
                headers: tuple[RecordHeader, ...] = ()
            else:
                headers, pos = _decode_headers(data, pos, n, end)

            if pos != end:
                raise CorruptBatch(f"record length {length} does not match its contents")
            rec = new(record_cls)
            set_od(rec, off_delta)
            set_td(rec, ts_delta)
            set_k(rec, key)
            set_v(rec, value)
            set_h(rec, headers)
            set_a(rec, attributes)
            append(rec)
    except IndexError:
        raise CorruptBatch("truncated record") from None
    if pos != len(data):
        raise CorruptBatch(f"{len(data) - pos} bytes left over after {count} records")
    return records


def decode_key_values(
    header: BatchHeader, payload: Buffer, limit: int = DEFAULT_DECOMPRESSION_LIMIT
) -> list[tuple[bytes | None, bytes | None]]:
    """Only the (key, value) of each record of a batch (``payload`` still compressed, and
    decompressed to at most ``limit`` bytes).

    The replay path of the coordinator needs nothing else; skipping record objects, deltas
    and headers makes it several times cheaper than :func:`decode_records`.
    """
    data = decompress(header.compression, payload, limit)
    count = header.records_count
    if count > len(data) // _MIN_RECORD_SIZE:
        raise CorruptBatch(f"record count {count} cannot fit in {len(data)} bytes")
    slow = _read_varint_slow
    out: list[tuple[bytes | None, bytes | None]] = []
    append = out.append
    pos = 0
    size = len(data)
    try:
        for _ in range(count):
            b = data[pos]
            if b < 0x80:
                length = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                length, pos = slow(data, pos)
            end = pos + length
            if length < _MIN_RECORD_SIZE - 1 or end > size:
                raise CorruptBatch(f"bad record length {length}")
            pos += 1  # attributes
            for _skip in (0, 1):  # timestamp delta, offset delta
                if data[pos] < 0x80:
                    pos += 1
                else:
                    _, pos = slow(data, pos)
            b = data[pos]
            if b < 0x80:
                n = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                n, pos = slow(data, pos)
            if n < 0:
                key = None
            else:
                key = data[pos : pos + n]
                pos += n
            b = data[pos]
            if b < 0x80:
                n = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                n, pos = slow(data, pos)
            if n < 0:
                value = None
            else:
                value = data[pos : pos + n]
                pos += n
            if pos > end:
                raise CorruptBatch(f"record length {length} does not match its contents")
            append((key, value))
            pos = end  # headers are skipped
    except IndexError:
        raise CorruptBatch("truncated record") from None
    if pos != size:
        raise CorruptBatch(f"{size - pos} bytes left over after {count} records")
    return out


def _decode_headers(
    data: bytes, pos: int, count: int, end: int
) -> tuple[tuple[RecordHeader, ...], int]:
    if count < 0 or count > (end - pos) // 2:
        raise CorruptBatch(f"bad header count {count}")
    out: list[RecordHeader] = []
    for _ in range(count):
        n, pos = _read_varint_fast(data, pos)
        if n < 0 or pos + n > end:
            raise CorruptBatch(f"bad header key length {n}")
        try:
            hkey = data[pos : pos + n].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CorruptBatch(f"header key is not UTF-8: {exc}") from None
        pos += n
        n, pos = _read_varint_fast(data, pos)
        if n < 0:
            if n != -1:
                raise CorruptBatch(f"bad header value length {n}")
            hval = None
        else:
            if pos + n > end:
                raise CorruptBatch(f"bad header value length {n}")
            hval = data[pos : pos + n]
            pos += n
        out.append(RecordHeader(hkey, hval))
    return tuple(out), pos


def _read_varint_fast(data: bytes | bytearray, pos: int) -> tuple[int, int]:
    b = data[pos]
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    return _read_varint_slow(data, pos)


def decode_records(
    header: BatchHeader, payload: Buffer, limit: int = DEFAULT_DECOMPRESSION_LIMIT
) -> list[Record]:
    """Decode the records section of a batch (``payload`` is still compressed; it may expand
    to at most ``limit`` bytes, see ``protocol.compression.decompress``)."""
    data = decompress(header.compression, payload, limit)
    return _decode_records(data, header.records_count)


def decode_batch(
    buf: Buffer, pos: int = 0, verify_crc: bool = True, limit: int = DEFAULT_DECOMPRESSION_LIMIT
) -> RecordBatch:
    """Decode the whole batch starting at ``pos`` in ``buf``.

    Raises CorruptBatch if the batch is truncated, has the wrong magic, fails its CRC (when
    ``verify_crc``), cannot be decompressed (or would expand past ``limit`` bytes), or its
    records do not match its header.
    """
    header = parse_header(buf, pos)
    end = pos + header.size
    if end > len(buf):
        raise CorruptBatch(f"truncated batch: need {header.size} bytes, have {len(buf) - pos}")
    if verify_crc and not crc_ok(buf, pos, header):
        raise CorruptBatch("CRC mismatch")
    payload = memoryview(buf)[pos + HEADER_SIZE : end]
    return RecordBatch(header, decode_records(header, payload, limit))


def decode_batches(buf: Buffer, verify_crc: bool = True) -> list[RecordBatch]:
    """Decode every complete batch in ``buf``, in order.

    A partial batch at the end (as a Fetch response may carry when it hits its size limit)
    is silently dropped; anything wrong with a complete batch raises CorruptBatch.
    """
    out: list[RecordBatch] = []
    pos = 0
    n = len(buf)
    while pos < n:
        size = peek_size(buf, pos)
        if size is None or pos + size > n:
            break
        batch = decode_batch(buf, pos, verify_crc)
        out.append(batch)
        pos += batch.header.size
    return out


# --------------------------------------------------------------------------- encoding


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


def _varint_table(n: int) -> list[bytes]:
    table = []
    for v in range(n):
        out = bytearray()
        write_varint(out, v)
        table.append(bytes(out))
    return table


_SMALL_VARINTS = _varint_table(1 << 14)  # zig-zag varints of 0..16383, precomputed


def _varint_bytes(value: int) -> bytes:
    if 0 <= value < len(_SMALL_VARINTS):
        return _SMALL_VARINTS[value]
    out = bytearray()
    write_varint(out, value)
    return bytes(out)


def encode_kv_batch(pairs: Sequence[tuple[bytes, bytes | None]], timestamp_ms: int) -> bytes:
    """One uncompressed batch of keyed records without headers, all stamped ``timestamp_ms``.

    The same bytes :func:`build_batch` would produce for these records, built faster: this is
    the coordinator's write path (one record per committed partition).
    """
    parts: list[bytes] = []
    append = parts.append
    varint = _varint_bytes
    for i, (key, value) in enumerate(pairs):
        # attributes 0, timestamp delta 0, offset delta i, key, value, no headers
        head = b"\x00\x00" + varint(i) + varint(len(key)) + key
        tail = b"\x01\x00" if value is None else varint(len(value)) + value + b"\x00"
        body = head + tail
        append(varint(len(body)))
        append(body)
    payload = b"".join(parts)
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
        0,
        max(count - 1, 0),
        timestamp_ms,
        timestamp_ms,
        -1,
        -1,
        -1,
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


__all__ = [
    "Compression",
    "CorruptBatch",
    "Record",
    "RecordBatch",
    "RecordHeader",
    "build_batch",
    "decode_batch",
    "decode_batches",
    "decode_records",
    "encode_batch",
    "encode_kv_batch",
    "encode_record",
    "kv_batch_size",
    "kv_batches",
    "kv_record_size",
    "kv_run_size",
    "read_varint",
    "varint_size",
    "write_varint",
]
