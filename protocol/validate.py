"""What a produced record batch must satisfy before it is appended (Produce v3 and later).

Kafka checks a client's batches in three places -- ``ProduceRequest.validateRecords``, the log's
``analyzeAndValidateRecords`` and ``LogValidator`` -- and this module holds kcoord's version of
those rules, as two steps:

* :func:`check_batch` reads only the batch header and the CRC (cheap, done at once):
  the framing, magic 2 and the CRC of every batch first (CORRUPT_MESSAGE; first, so that a
  good batch followed by a corrupt one is still CORRUPT_MESSAGE), then exactly one batch
  (INVALID_RECORD), base offset 0, ``lastOffsetDelta + 1 == recordsCount > 0``, no control
  batch, no producer id with a negative base sequence (INVALID_RECORD), a known codec and
  zstd only from Produce v7 (UNSUPPORTED_COMPRESSION_TYPE).
* :func:`check_records` decompresses (bounded: ``protocol.compression``) and walks every
  record (``protocol.record_scan.check_layout``). Records expanding past the limit:
  MESSAGE_TOO_LARGE; compressed data the codec cannot read: CORRUPT_MESSAGE; records that do
  not parse exactly, or whose offset deltas are not 0..n-1: INVALID_RECORD. It costs time in
  proportion to the records, so the broker may run it off the event loop.

Both raise :class:`Refused` with the partition's error code, a short message for the
response's ``error_message`` and, where Kafka gives them, ``record_errors``.
The rules that depend on the topic's configs (timestamps, LogAppendTime, compression.type)
follow in ``protocol.append_rules``, on the section :func:`check_records` returns.

Where kcoord is stricter than Kafka (each noted at its rule): Kafka accepts any offset deltas
in an uncompressed batch and rewrites a compressed batch whose inner offsets are not 0..n-1;
kcoord stores batches verbatim, so both are refused. Kafka reports an unknown codec id as an
internal error; kcoord answers UNSUPPORTED_COMPRESSION_TYPE. Kafka checks the number of batches
before the CRC; kcoord checks the CRC of everything first (see above).
"""

from __future__ import annotations

from crc32c import crc32c

from kcoord.protocol.batch import (
    _HEADER,  # the header's struct layout: kept in one place
    CRC_START,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_V2,
    BatchHeader,
)
from kcoord.protocol.compression import (
    Compression,
    DecompressionError,
    DecompressionLimitExceeded,
    decompress,
)
from kcoord.protocol.errors import ErrorCode
from kcoord.protocol.record_scan import LayoutError, check_layout

Buffer = bytes | bytearray | memoryview

_MAGIC_AT = 16
_MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD
_ZSTD_SINCE_VERSION = 7  # Produce v7 (KIP-110)


class Refused(Exception):
    """A partition's batch is refused: nothing of it is appended. ``record_errors`` holds
    (index of the record in the batch, message) pairs."""

    def __init__(
        self, error_code: int, message: str, record_errors: tuple[tuple[int, str], ...] = ()
    ) -> None:
        super().__init__(message)
        self.error_code = error_code
        self.message = message
        self.record_errors = record_errors


def _crc_ok(buf: Buffer, pos: int, size: int, expected: int) -> bool:
    return crc32c(memoryview(buf)[pos + CRC_START : pos + size]) == expected


def check_batch(records: Buffer, api_version: int) -> BatchHeader:
    """The header checks of one partition's records; returns the (single) batch's header.

    Raises Refused. Nothing here looks at the records section.
    """
    n = len(records)
    if n == 0:
        raise Refused(ErrorCode.invalid_record, "no record batch")
    headers: list[BatchHeader] = []
    pos = 0
    while pos < n:
        if n - pos < HEADER_SIZE:
            if n - pos > _MAGIC_AT and records[pos + _MAGIC_AT] in (0, 1):
                raise _old_magic(records[pos + _MAGIC_AT])
            raise Refused(ErrorCode.corrupt_message, "truncated record batch")
        h = BatchHeader(*_HEADER.unpack_from(records, pos))
        if h.magic != MAGIC_V2:
            if h.magic in (0, 1):
                raise _old_magic(h.magic)
            raise Refused(ErrorCode.corrupt_message, f"unknown magic {h.magic}")
        if h.batch_length < _MIN_BATCH_LENGTH or pos + h.size > n:
            raise Refused(ErrorCode.corrupt_message, "truncated record batch")
        if not _crc_ok(records, pos, h.size, h.crc):
            raise Refused(ErrorCode.corrupt_message, "CRC mismatch")
        headers.append(h)
        pos += h.size
    if len(headers) != 1:
        # Kafka's ProduceRequest.validateRecords: one batch per partition from v3 on.
        raise Refused(
            ErrorCode.invalid_record,
            f"{len(headers)} record batches: exactly one per partition is allowed",
        )
    h = headers[0]
    if h.base_offset != 0:
        raise Refused(ErrorCode.invalid_record, f"base offset {h.base_offset}, not 0")
    if h.records_count <= 0:
        raise Refused(ErrorCode.invalid_record, f"record count {h.records_count}")
    if h.last_offset_delta + 1 != h.records_count:
        raise Refused(
            ErrorCode.invalid_record,
            f"last offset delta {h.last_offset_delta} does not match the record count"
            f" {h.records_count}",
        )
    if h.is_control:
        raise Refused(ErrorCode.invalid_record, "clients may not write control batches")
    if h.producer_id >= 0 and h.base_sequence < 0:
        raise Refused(
            ErrorCode.invalid_record,
            f"producer id {h.producer_id} with base sequence {h.base_sequence}",
        )
    codec = h.compression
    if codec > Compression.ZSTD:
        # Kafka fails this one as an internal error (unknown codec id): a clear code is better.
        raise Refused(ErrorCode.unsupported_compression_type, f"unknown compression codec {codec}")
    if codec == Compression.ZSTD and api_version < _ZSTD_SINCE_VERSION:
        raise Refused(
            ErrorCode.unsupported_compression_type,
            f"zstd needs Produce v{_ZSTD_SINCE_VERSION} or later (this is v{api_version})",
        )
    return h


def _old_magic(magic: int) -> Refused:
    return Refused(ErrorCode.invalid_record, f"magic {magic}: only record batches v2 are accepted")


def check_records(
    header: BatchHeader, records: Buffer, limit: int, keys_required: bool = False
) -> tuple[Buffer, int, int]:
    """Decompress (at most ``limit`` bytes) and check every record of the batch that
    :func:`check_batch` accepted; ``keys_required``: a compacted topic's batch, whose records
    must all have a key (Kafka's LogValidator: INVALID_RECORD). Returns the records section
    as (buffer, start, end). Raises Refused."""
    if header.compression == Compression.NONE:
        data: Buffer = records
        start, end = HEADER_SIZE, header.size
    else:
        try:
            data = decompress(
                header.compression, memoryview(records)[HEADER_SIZE : header.size], limit
            )
        except DecompressionLimitExceeded as exc:
            # Kafka has no such bound (it decompresses as a stream); MESSAGE_TOO_LARGE is what
            # it answers for a batch over message.max.bytes, and a Java producer splits a batch
            # refused that way and retries the halves.
            raise Refused(ErrorCode.message_too_large, str(exc)) from None
        except DecompressionError as exc:
            raise Refused(ErrorCode.corrupt_message, str(exc)) from None
        start, end = 0, len(data)
    try:
        check_layout(data, start, end, header.records_count, keys_required)
    except LayoutError as exc:
        # Kafka's record reader throws InvalidRecordException (INVALID_RECORD) for every such
        # fault. Offset deltas other than 0..n-1 are accepted (uncompressed) or rewritten
        # (compressed) by Kafka; kcoord stores the batch verbatim, so it refuses them.
        errors = ((exc.index, exc.detail),) if exc.index >= 0 else ()
        raise Refused(ErrorCode.invalid_record, str(exc), errors) from None
    return data, start, end


def needs_worker(header: BatchHeader, inline_bytes: int) -> bool:
    """Whether checking this batch's records may take long enough (decompression, or many
    bytes of records to walk) that it should not run on the event loop."""
    return header.compression != Compression.NONE or header.size > inline_bytes
