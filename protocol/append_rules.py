"""What a topic's configs make of a produced batch once ``protocol.validate`` accepted its
framing: Kafka's LogValidator rules that depend on the topic, applied to kcoord's one batch.

* ``message.timestamp.type=CreateTime`` (the default): every record's timestamp (base timestamp
  plus its delta; records without one are skipped) must lie within
  ``[now - message.timestamp.before.max.ms, now + message.timestamp.after.max.ms]``, else the
  batch is refused with INVALID_TIMESTAMP and the records at fault in ``record_errors``, worded
  as Kafka's. Records are walked only when a bound can bite: the upper one when the header's
  max timestamp passes it, the lower one whenever it is finite (it is not by default).
* ``LogAppendTime``: the batch is stamped: its timestamp-type attribute set and its max
  timestamp the broker's clock, as Kafka does in place (records keep their deltas; readers use
  the max timestamp for every record). A client batch that claims LogAppendTime itself is
  refused with INVALID_TIMESTAMP, as Kafka refuses it.
* ``compression.type``: ``producer`` keeps the producer's codec; a codec (``uncompressed``
  included) different from the batch's makes the broker rebuild the batch with it (level from
  ``compression.<codec>.level``): the records section is the same bytes whatever the codec, so
  only it is re-encoded and the header rewritten. A rebuilt batch larger than the topic's
  ``max.message.bytes`` is refused with MESSAGE_TOO_LARGE, as Kafka refuses it.

Any change rewrites the header's CRC. Sans-IO: the caller passes the clock.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from kcoord.protocol.batch import (
    _HEADER,  # the header's struct layout: kept in one place
    COMPRESSION_MASK,
    HEADER_SIZE,
    LOG_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
    compute_crc,
)
from kcoord.protocol.compression import Compression, compress
from kcoord.protocol.errors import ErrorCode
from kcoord.protocol.record_scan import first_timestamp_outside
from kcoord.protocol.validate import Buffer, Refused, check_records

LONG_MAX = 2**63 - 1
_CRC = struct.Struct(">I")
_CRC_AT = 17

CODEC_IDS = {
    "uncompressed": Compression.NONE,
    "gzip": Compression.GZIP,
    "snappy": Compression.SNAPPY,
    "lz4": Compression.LZ4,
    "zstd": Compression.ZSTD,
}
"""compression.type's codec names (``producer`` is none: the producer's codec is kept)."""


@dataclass(frozen=True, slots=True)
class AppendRules:
    """A topic's rules for the batches appended to it (module docstring)."""

    keys_required: bool = False
    """A compacted topic: every record needs a key (INVALID_RECORD)."""
    log_append_time: bool = False
    before_max_ms: int = LONG_MAX
    after_max_ms: int = LONG_MAX
    codec: int | None = None
    """The codec batches are stored with; None: the producer's."""
    level: int | None = None
    max_bytes: int = LONG_MAX
    """max.message.bytes: the most a rebuilt batch may hold."""


PLAIN = AppendRules()
"""No rules but validity: nothing changed, any timestamp."""


def accept(
    header: BatchHeader, records: bytes, limit: int, rules: AppendRules, now_ms: int
) -> bytes:
    """Check the records of a batch ``check_batch`` accepted (``check_records``, at most
    ``limit`` bytes decompressed) against the topic's rules; the batch to append (module
    docstring). Raises Refused."""
    data, start, end = check_records(header, records, limit, rules.keys_required)
    check_timestamps(header, data, start, end, rules, now_ms)
    return rewrite(header, records, memoryview(data)[start:end], rules, now_ms)


def check_timestamps(
    header: BatchHeader, data: Buffer, start: int, end: int, rules: AppendRules, now_ms: int
) -> None:
    """Refuse (INVALID_TIMESTAMP) a batch whose timestamps the topic does not accept."""
    if rules.log_append_time:
        if header.log_append_time:
            raise Refused(
                ErrorCode.invalid_timestamp,
                "One or more records have been rejected due to invalid timestamp",
                ((0, "Producer should not set timestamp type to LogAppendTime."),),
            )
        return
    low = now_ms - rules.before_max_ms if rules.before_max_ms < now_ms else None
    high = now_ms + rules.after_max_ms if rules.after_max_ms < LONG_MAX - now_ms else None
    if low is None and (high is None or header.max_timestamp <= high):
        return
    found = first_timestamp_outside(
        data, start, end, header.records_count, header.base_timestamp, low, high
    )
    if found is not None:
        index, ts = found
        window = f"[{now_ms - rules.before_max_ms}, {now_ms + rules.after_max_ms}]"
        raise Refused(
            ErrorCode.invalid_timestamp,
            "One or more records have been rejected due to invalid timestamp",
            ((index, f"Timestamp {ts} of message with offset {index} is out of range."
                     f" The timestamp should be within {window}"),),
        )


def rewrite(
    header: BatchHeader, records: bytes, section: Buffer, rules: AppendRules, now_ms: int
) -> bytes:
    """The batch to append: ``records`` itself when the rules change nothing, else a copy
    stamped (LogAppendTime) and/or re-encoded with the topic's codec. ``section``: the
    decompressed records section."""
    codec = header.compression if rules.codec is None else rules.codec
    if codec == header.compression and not rules.log_append_time:
        return records
    attributes = (header.attributes & ~COMPRESSION_MASK) | codec
    max_timestamp = header.max_timestamp
    if rules.log_append_time:
        attributes |= TIMESTAMP_TYPE_MASK
        max_timestamp = now_ms
    if codec == header.compression:
        body: Buffer = memoryview(records)[HEADER_SIZE : header.size]
    else:
        body = compress(codec, section, rules.level)
    size = HEADER_SIZE + len(body)
    if codec != header.compression and size > rules.max_bytes:
        raise Refused(
            ErrorCode.message_too_large,
            f"the batch is {size} bytes once compressed as the topic's compression.type says;"
            f" its max.message.bytes is {rules.max_bytes}",
        )
    out = bytearray(size)
    _HEADER.pack_into(
        out,
        0,
        header.base_offset,
        size - LOG_OVERHEAD,
        header.partition_leader_epoch,
        header.magic,
        0,  # the CRC, below
        attributes,
        header.last_offset_delta,
        header.base_timestamp,
        max_timestamp,
        header.producer_id,
        header.producer_epoch,
        header.base_sequence,
        header.records_count,
    )
    out[HEADER_SIZE:] = body
    _CRC.pack_into(out, _CRC_AT, compute_crc(out, 0, size))
    return bytes(out)
