"""The (key, value) of each record of a batch, and nothing else: the coordinator's replay path.

Loading ``__consumer_offsets`` at start-up reads every record of the partition; it needs only the
keys and values (the newest per key wins, :mod:`coordinator.loading`), so this skips record
objects, deltas and headers. A module of its own so that it can be compiled (compiled/build.py);
:mod:`protocol.records` decodes whole records and shares the varint reader.
"""

from __future__ import annotations

from kcoord.protocol.batch import BatchHeader, CorruptBatch
from kcoord.protocol.compression import DEFAULT_DECOMPRESSION_LIMIT, Buffer, decompress
from kcoord.protocol.record_scan import MIN_RECORD_SIZE


def read_varint_slow(data: bytes | bytearray, pos: int) -> tuple[int, int]:
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


def decode_key_values(
    header: BatchHeader, payload: Buffer, limit: int = DEFAULT_DECOMPRESSION_LIMIT
) -> list[tuple[bytes | None, bytes | None]]:
    """Only the (key, value) of each record of a batch (``payload`` still compressed, and
    decompressed to at most ``limit`` bytes).

    The replay path of the coordinator needs nothing else; skipping record objects, deltas
    and headers makes it several times cheaper than :func:`decode_records`.
    """
    pairs: list[tuple[bytes | None, bytes | None]] = []
    _walk(decompress(header.compression, payload, limit), header.records_count, pairs, [])
    return pairs


def split_key_values(
    header: BatchHeader, payload: Buffer, limit: int = DEFAULT_DECOMPRESSION_LIMIT
) -> list[bytes | None]:
    """:func:`decode_key_values` without a tuple per record: ``[key0, value0, key1, value1,
    ...]`` in one flat list (the start-up load folds millions of records, coordinator/loading.py)."""
    flat: list[bytes | None] = []
    _walk(decompress(header.compression, payload, limit), header.records_count, None, flat)
    return flat


def _walk(
    data: bytes,
    count: int,
    pairs: list[tuple[bytes | None, bytes | None]] | None,
    flat: list[bytes | None],
) -> None:
    """Append each record's (key, value) to ``pairs``, or key then value to ``flat`` if
    ``pairs`` is None. Raises CorruptBatch (with the lists partly filled) if ``data`` is not
    exactly ``count`` records."""
    if count > len(data) // MIN_RECORD_SIZE:
        raise CorruptBatch(f"record count {count} cannot fit in {len(data)} bytes")
    slow = read_varint_slow
    pos = 0
    size = len(data)
    key: bytes | None
    value: bytes | None
    # One- and two-byte varints (every length below 8 KiB) are decoded inline.
    try:
        for _ in range(count):
            b = data[pos]
            if b < 0x80:
                length = (b >> 1) ^ -(b & 1)
                pos += 1
            elif data[pos + 1] < 0x80:
                b = (b & 0x7F) | (data[pos + 1] << 7)
                length = (b >> 1) ^ -(b & 1)
                pos += 2
            else:
                length, pos = slow(data, pos)
            end = pos + length
            if length < MIN_RECORD_SIZE - 1 or end > size:
                raise CorruptBatch(f"bad record length {length}")
            # attributes, then the timestamp delta and the offset delta (skipped)
            if data[pos + 1] < 0x80:
                pos += 2
            elif data[pos + 2] < 0x80:
                pos += 3
            else:
                _, pos = slow(data, pos + 1)
            if data[pos] < 0x80:
                pos += 1
            else:
                _, pos = slow(data, pos)
            b = data[pos]
            if b < 0x80:
                n = (b >> 1) ^ -(b & 1)
                pos += 1
            elif data[pos + 1] < 0x80:
                b = (b & 0x7F) | (data[pos + 1] << 7)
                n = (b >> 1) ^ -(b & 1)
                pos += 2
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
            elif data[pos + 1] < 0x80:
                b = (b & 0x7F) | (data[pos + 1] << 7)
                n = (b >> 1) ^ -(b & 1)
                pos += 2
            else:
                n, pos = slow(data, pos)
            if n < 0:
                value = None
            else:
                value = data[pos : pos + n]
                pos += n
            if pos > end:
                raise CorruptBatch(f"record length {length} does not match its contents")
            if pairs is None:
                flat.append(key)
                flat.append(value)
            else:
                pairs.append((key, value))
            pos = end  # headers are skipped
    except IndexError:
        raise CorruptBatch("truncated record") from None
    if pos != size:
        raise CorruptBatch(f"{size - pos} bytes left over after {count} records")
