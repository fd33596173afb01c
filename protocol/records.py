"""Record batch v2 (magic 2) records: their layout, the record types, varints, and decoding.

``protocol.batch`` owns the 61-byte batch header; this module owns what follows it -- the
(possibly compressed) sequence of records -- and decodes it into records. Encoding records
into batches is ``protocol.record_encoding``'s; ``protocol.record_scan`` walks records without
building objects (the Produce path's check, ListOffsets' search). Each record is:

    length varint | attributes int8 | timestampDelta varlong | offsetDelta varint
    keyLength varint | key | valueLength varint | value
    headerCount varint | { keyLength varint | key (UTF-8) | valueLength varint | value }*

All varints are zig-zag encoded (the protobuf "sint" encoding); a length of -1 means null.
The module is sans-IO: bytes in, objects out.

Decoded timestamps: ``RecordBatch.iter_records`` yields absolute offsets and timestamps; for
a LogAppendTime batch every record's timestamp is the batch's ``max_timestamp``, as the Java
consumer reports it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from kcoord.protocol.batch import (
    HEADER_SIZE,
    BatchHeader,
    CorruptBatch,
    crc_ok,
    parse_header,
    peek_size,
)
from kcoord.protocol.compression import DEFAULT_DECOMPRESSION_LIMIT, Compression, decompress
from kcoord.protocol.key_values import read_varint_slow as _read_varint_slow
from kcoord.protocol.record_scan import MIN_RECORD_SIZE

Buffer = bytes | bytearray | memoryview


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
    if count > len(data) // MIN_RECORD_SIZE:
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
            if length < MIN_RECORD_SIZE - 1 or end > len(data):
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


__all__ = [
    "Compression",
    "CorruptBatch",
    "Record",
    "RecordBatch",
    "RecordHeader",
    "decode_batch",
    "decode_batches",
    "decode_records",
    "read_varint",
    "varint_size",
    "write_varint",
]
