"""Walking the records of a batch without building record objects.

``protocol.records`` decodes records into objects; this module only walks them, for the
callers that must touch every record of a possibly large batch but keep nothing:

* :func:`check_layout` -- the Produce path's exact check of the records section (after
  decompression): the header's record count, every record's length, every varint, the key,
  value and header lengths within their record, offset deltas 0..n-1 in order, and nothing
  left over. Raises :class:`LayoutError` naming the first bad record.
* :func:`first_timestamp_outside` -- the Produce path's check of a topic's timestamp window
  (``protocol.append_rules``) on a records section already checked.
* :func:`batch_first_at_or_after` and :func:`batch_max_timestamp` -- the search inside the
  one stored batch that ListOffsets (and the pipeline's lag in time) decodes: decompression
  bounded by ``protocol.compression``, then only lengths, timestamp and offset deltas are read.

The walkers work on ``data[start:end]`` without slicing (no copies of keys or values). Field
layout: see ``protocol.records``. Sans-IO, pure functions.
"""

from __future__ import annotations

from collections.abc import Iterator

from kcoord.protocol.batch import HEADER_SIZE, BatchHeader, CorruptBatch, crc_ok, parse_header
from kcoord.protocol.compression import DEFAULT_DECOMPRESSION_LIMIT, Compression, decompress

Buffer = bytes | bytearray | memoryview

MIN_RECORD_SIZE = 7
"""length, attributes, timestamp delta, offset delta, key length, value length, header count:
one byte each at least."""

_MIN_BODY = MIN_RECORD_SIZE - 1  # everything after the length varint
_INT32_MAX = 2**31 - 1


class LayoutError(CorruptBatch):
    """A records section that does not parse exactly; ``index`` is the record's position in
    the batch (-1 when the section as a whole is wrong)."""

    def __init__(self, index: int, message: str) -> None:
        super().__init__(message if index < 0 else f"record {index}: {message}")
        self.index = index
        self.detail = message


def _varint(data: Buffer, pos: int, limit_bytes: int) -> tuple[int, int]:
    """A zig-zag varint of at most ``limit_bytes`` bytes (5 for int32 fields, 10 for int64),
    the first of which has its high bit set. IndexError past the end of ``data``."""
    raw = data[pos] & 0x7F
    shift = 7
    pos += 1
    used = 1
    while True:
        b = data[pos]
        pos += 1
        used += 1
        raw |= (b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
        if used >= limit_bytes:
            raise CorruptBatch(f"varint longer than {limit_bytes} bytes")
    return (raw >> 1) ^ -(raw & 1), pos


def check_layout(data: Buffer, start: int, end: int, count: int, keyed: bool = False) -> None:
    """Check that ``data[start:end]`` holds exactly ``count`` well-formed records whose offset
    deltas are 0, 1, ..., count - 1 (and, if ``keyed``, each with a key: a compacted topic's).
    Raises LayoutError."""
    if count > (end - start) // MIN_RECORD_SIZE:
        raise LayoutError(-1, f"{count} records cannot fit in {end - start} bytes")
    if end > len(data):
        raise LayoutError(-1, "records section runs past the data")
    slow = _varint
    pos = start
    i = 0
    # The hot loop of the Produce path: one- and two-byte varints (every length below 8 KiB)
    # are decoded inline, the rest by _varint.
    try:
        for i in range(count):
            b = data[pos]
            if b < 0x80:
                n = (b >> 1) ^ -(b & 1)
                pos += 1
            elif data[pos + 1] < 0x80:
                b = (b & 0x7F) | (data[pos + 1] << 7)
                n = (b >> 1) ^ -(b & 1)
                pos += 2
            else:
                n, pos = slow(data, pos, 5)
            record_end = pos + n
            if n < _MIN_BODY or record_end > end:
                raise LayoutError(i, f"bad record length {n}")
            # attributes (unused in v2: any value is accepted, as Kafka does), then the
            # timestamp delta (a varlong)
            if data[pos + 1] < 0x80:
                pos += 2
            elif data[pos + 2] < 0x80:
                pos += 3
            else:
                _, pos = slow(data, pos + 1, 10)
            b = data[pos]  # offset delta: must be i
            if b < 0x80:
                n = (b >> 1) ^ -(b & 1)
                pos += 1
            elif data[pos + 1] < 0x80:
                b = (b & 0x7F) | (data[pos + 1] << 7)
                n = (b >> 1) ^ -(b & 1)
                pos += 2
            else:
                n, pos = slow(data, pos, 5)
            if n != i:
                raise LayoutError(i, f"offset delta {n} where {i} was expected")
            b = data[pos]  # key length
            if b == 1:  # null
                if keyed:
                    raise LayoutError(i, "a record without a key in a compacted topic")
                pos += 1
            else:
                if b < 0x80:
                    n = (b >> 1) ^ -(b & 1)
                    pos += 1
                elif data[pos + 1] < 0x80:
                    b = (b & 0x7F) | (data[pos + 1] << 7)
                    n = (b >> 1) ^ -(b & 1)
                    pos += 2
                else:
                    n, pos = slow(data, pos, 5)
                if n < -1:
                    raise LayoutError(i, f"bad key length {n}")
                if n > 0:
                    pos += n
                if pos >= record_end:
                    raise LayoutError(i, "key runs past the end of the record")
            b = data[pos]  # value length
            if b < 0x80:
                n = (b >> 1) ^ -(b & 1)
                pos += 1
            elif data[pos + 1] < 0x80:
                b = (b & 0x7F) | (data[pos + 1] << 7)
                n = (b >> 1) ^ -(b & 1)
                pos += 2
            else:
                n, pos = slow(data, pos, 5)
            if n > 0:
                pos += n
            elif n < -1:
                raise LayoutError(i, f"bad value length {n}")
            if pos >= record_end:
                raise LayoutError(i, "value runs past the end of the record")
            if data[pos]:  # header count
                pos = _check_headers(data, pos, record_end, i)
            else:
                pos += 1
            if pos != record_end:
                raise LayoutError(i, "record length does not match its contents")
    except IndexError:
        raise LayoutError(i, "truncated record") from None
    except LayoutError:
        raise
    except CorruptBatch as exc:  # an over-long varint
        raise LayoutError(i, str(exc)) from None
    if pos != end:
        raise LayoutError(-1, f"{end - pos} bytes left over after {count} records")


def _check_headers(data: Buffer, pos: int, record_end: int, i: int) -> int:
    """Skip the headers of record ``i`` (``pos`` at their count); the position after them."""
    count, pos = _varint_any(data, pos, 5)
    if count < 0 or count > (record_end - pos) // 2:  # a header is 2 bytes at least
        raise LayoutError(i, f"bad header count {count}")
    for _ in range(count):
        b = data[pos]
        if b < 0x80:
            n = (b >> 1) ^ -(b & 1)
            pos += 1
        else:
            n, pos = _varint(data, pos, 5)
        if n < 0:
            raise LayoutError(i, f"bad header key length {n}")
        pos += n
        if pos >= record_end:
            raise LayoutError(i, "header key runs past the end of the record")
        b = data[pos]
        if b < 0x80:
            n = (b >> 1) ^ -(b & 1)
            pos += 1
        else:
            n, pos = _varint(data, pos, 5)
        if n >= 0:
            pos += n
        elif n != -1:
            raise LayoutError(i, f"bad header value length {n}")
        if pos > record_end:
            raise LayoutError(i, "header value runs past the end of the record")
    return pos


def _walk_deltas(data: Buffer, start: int, end: int, count: int) -> Iterator[tuple[int, int]]:
    """(offset delta, timestamp delta) of each record, reading nothing else."""
    if count > (end - start) // MIN_RECORD_SIZE or end > len(data):
        raise CorruptBatch(f"{count} records cannot fit in {end - start} bytes")
    pos = start
    try:
        for _ in range(count):
            b = data[pos]
            if b < 0x80:
                n = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                n, pos = _varint(data, pos, 5)
            record_end = pos + n
            if n < _MIN_BODY or record_end > end:
                raise CorruptBatch(f"bad record length {n}")
            ts, pos = _varint_any(data, pos + 1)
            od, pos = _varint_any(data, pos)
            yield od, ts
            pos = record_end
    except IndexError:
        raise CorruptBatch("truncated record") from None


def first_timestamp_outside(
    data: Buffer, start: int, end: int, count: int, base: int, low: int | None, high: int | None
) -> tuple[int, int] | None:
    """(index, timestamp) of the first record of ``data[start:end]`` (a checked records
    section, timestamps relative to ``base``) timestamped before ``low`` or after ``high``
    (None: no such bound); records without a timestamp (-1) are never outside. Raises
    CorruptBatch."""
    for index, (_od, td) in enumerate(_walk_deltas(data, start, end, count)):
        ts = base + td
        if ts == -1:
            continue
        if (low is not None and ts < low) or (high is not None and ts > high):
            return index, ts
    return None


def _varint_any(data: Buffer, pos: int, limit_bytes: int = 10) -> tuple[int, int]:
    b = data[pos]
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    return _varint(data, pos, limit_bytes)


def _records_of(batch: Buffer, limit: int) -> tuple[BatchHeader, Buffer, int, int]:
    """Header, buffer, start and end of a stored batch's (decompressed) records; the CRC is
    checked. Raises CorruptBatch (DecompressionLimitExceeded past ``limit``)."""
    h = parse_header(batch)
    if h.size > len(batch):
        raise CorruptBatch("truncated batch")
    if not crc_ok(batch, 0, h):
        raise CorruptBatch("CRC mismatch")
    if h.compression == Compression.NONE:
        return h, batch, HEADER_SIZE, h.size
    data = decompress(h.compression, memoryview(batch)[HEADER_SIZE : h.size], limit)
    return h, data, 0, len(data)


def batch_first_at_or_after(
    batch: Buffer, offset: int, timestamp: int, limit: int = DEFAULT_DECOMPRESSION_LIMIT
) -> tuple[int, int] | None:
    """(offset, timestamp) of the first record of the stored ``batch`` (offsets assigned) at
    or after ``offset`` whose timestamp is >= ``timestamp``; None if there is none. For a
    LogAppendTime batch every record's timestamp is the batch's max timestamp. Raises
    CorruptBatch."""
    h, data, start, end = _records_of(batch, limit)
    for od, td in _walk_deltas(data, start, end, h.records_count):
        o = h.base_offset + od
        t = h.max_timestamp if h.log_append_time else h.base_timestamp + td
        if o >= offset and t >= timestamp:
            return o, t
    return None


def batch_max_timestamp(
    batch: Buffer, limit: int = DEFAULT_DECOMPRESSION_LIMIT
) -> tuple[int, int] | None:
    """(offset, timestamp) of the first record of the stored ``batch`` with the largest
    timestamp; None for a batch without records. Raises CorruptBatch."""
    h, data, start, end = _records_of(batch, limit)
    best: tuple[int, int] | None = None
    for od, td in _walk_deltas(data, start, end, h.records_count):
        if h.log_append_time:  # all records share the batch's append time: the first wins
            return h.base_offset + od, h.max_timestamp
        if best is None or td > best[1]:
            best = (od, td)
    if best is None:
        return None
    return h.base_offset + best[0], h.base_timestamp + best[1]
