"""Record batch v2 header layout: parse, validate and patch a batch without decoding its records.

Layout (big-endian), offsets from the start of the batch:

    0  baseOffset int64          8  batchLength int32 (bytes after this field)
    12 partitionLeaderEpoch i32  16 magic int8 (2)
    17 crc uint32 (CRC-32C of bytes 21..end)   21 attributes int16
    23 lastOffsetDelta int32     27 baseTimestamp int64    35 maxTimestamp int64
    43 producerId int64          51 producerEpoch int16    53 baseSequence int32
    57 recordsCount int32        61 records...

The storage layer and the Produce path only ever need this header: offsets are assigned by
patching ``baseOffset``, which lies outside the CRC.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from crc32c import crc32c

HEADER_SIZE = 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: bytes not counted in batchLength
MAGIC_V2 = 2
CRC_START = 21

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_FLAG = 0x10
CONTROL_FLAG = 0x20

_HEADER = struct.Struct(">qiibIhiqqqhii")
_LEADER_EPOCH = struct.Struct(">i")
_BASE_OFFSET = struct.Struct(">q")
_LENGTH_PREFIX = struct.Struct(">qi")


class CorruptBatch(ValueError):
    """A batch whose framing, magic or CRC is wrong."""


@dataclass(frozen=True, slots=True)
class BatchHeader:
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        """Total bytes of the batch, header included."""
        return LOG_OVERHEAD + self.batch_length

    def rebased(self, base_offset: int) -> BatchHeader:
        """This header at ``base_offset`` (what ``dataclasses.replace`` makes, without its
        generic field walk: every append to a log rebases its batches)."""
        return BatchHeader(
            base_offset,
            self.batch_length,
            self.partition_leader_epoch,
            self.magic,
            self.crc,
            self.attributes,
            self.last_offset_delta,
            self.base_timestamp,
            self.max_timestamp,
            self.producer_id,
            self.producer_epoch,
            self.base_sequence,
            self.records_count,
        )

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_FLAG)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_FLAG)

    @property
    def log_append_time(self) -> bool:
        return bool(self.attributes & TIMESTAMP_TYPE_MASK)


def peek_size(buf: bytes | bytearray | memoryview, pos: int = 0) -> int | None:
    """Total size of the batch starting at ``pos``, or None if fewer than 12 bytes remain."""
    if len(buf) - pos < LOG_OVERHEAD:
        return None
    _, length = _LENGTH_PREFIX.unpack_from(buf, pos)
    return LOG_OVERHEAD + length


def parse_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """Parse the 61-byte header at ``pos``; raises CorruptBatch if it cannot be a v2 batch."""
    if len(buf) - pos < HEADER_SIZE:
        raise CorruptBatch("truncated batch header")
    h = BatchHeader(*_HEADER.unpack_from(buf, pos))
    if h.magic != MAGIC_V2:
        raise CorruptBatch(f"unsupported magic {h.magic}")
    if h.batch_length < HEADER_SIZE - LOG_OVERHEAD:
        raise CorruptBatch(f"batch length {h.batch_length} too small")
    if h.last_offset_delta < 0 or h.records_count < 0:
        raise CorruptBatch("negative record count or offset delta")
    return h


def crc_ok(buf: bytes | bytearray | memoryview, pos: int, header: BatchHeader) -> bool:
    """Whether the CRC-32C over attributes..end matches (the batch must be fully in ``buf``)."""
    end = pos + header.size
    if len(buf) < end:
        return False
    return crc32c(memoryview(buf)[pos + CRC_START : end]) == header.crc


def compute_crc(buf: bytes | bytearray | memoryview, pos: int, size: int) -> int:
    return crc32c(memoryview(buf)[pos + CRC_START : pos + size])


def set_base_offset(buf: bytearray | memoryview, pos: int, base_offset: int) -> None:
    """Patch baseOffset in place (it lies outside the CRC)."""
    _BASE_OFFSET.pack_into(buf, pos, base_offset)


def set_leader_epoch(buf: bytearray | memoryview, pos: int, epoch: int) -> None:
    """Patch partitionLeaderEpoch in place (outside the CRC too): the epoch of the leader
    that appended the batch, as Kafka stamps it."""
    _LEADER_EPOCH.pack_into(buf, pos + 12, epoch)


def iter_headers(
    buf: bytes | bytearray | memoryview, verify_crc: bool = True
) -> list[tuple[int, BatchHeader]]:
    """Split a buffer holding whole batches into (position, header) pairs.

    Raises CorruptBatch on a truncated batch, bad magic or (if asked) a CRC mismatch.
    """
    out: list[tuple[int, BatchHeader]] = []
    pos = 0
    n = len(buf)
    while pos < n:
        h = parse_header(buf, pos)
        if pos + h.size > n:
            raise CorruptBatch("truncated batch")
        if verify_crc and not crc_ok(buf, pos, h):
            raise CorruptBatch("CRC mismatch")
        out.append((pos, h))
        pos += h.size
    return out
