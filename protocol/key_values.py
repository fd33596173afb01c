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
    data = decompress(header.compression, payload, limit)
    count = header.records_count
    if count > len(data) // MIN_RECORD_SIZE:
        raise CorruptBatch(f"record count {count} cannot fit in {len(data)} bytes")
    slow = read_varint_slow
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
            if length < MIN_RECORD_SIZE - 1 or end > size:
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
