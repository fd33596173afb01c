"""The data plane APIs: Produce, Fetch and ListOffsets over the partition logs.

Produce appends the client's record batches as they are (validated, offsets patched into the
batch header) and acknowledges only once the group-commit fsync has them on disk. Fetch serves
whole batches up to the high watermark (what is durable) and long-polls on ``max_wait_ms`` /
``min_bytes``. ListOffsets answers earliest, latest, max-timestamp and by-timestamp queries.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from protocol.batch import BatchHeader, CorruptBatch, parse_header, peek_size
from protocol.codec import RawBody
from protocol.errors import ErrorCode
from protocol.legacy import encode_legacy_produce_response
from protocol.records import decode_batch, decode_batches
from storage.log import PartitionLog

from .connection import NO_RESPONSE, RequestContext
from .topics import TopicError

if TYPE_CHECKING:
    from .app import Broker

log = logging.getLogger("kcoord.data")

EARLIEST = -2
LATEST = -1
MAX_TIMESTAMP = -3


def high_watermark(plog: PartitionLog) -> int:
    """The last offset + 1 that consumers may read: what is durable (flushed)."""
    return plog.flushed_offset


def first_record_at_or_after(plog: PartitionLog, ts_ms: int) -> tuple[int, int] | None:
    """(offset, timestamp) of the first record whose timestamp is >= ``ts_ms`` (ListOffsets).

    The log's time index finds the first batch whose max timestamp qualifies; that batch is
    decoded to answer with the exact record, as Kafka does.
    """
    found = plog.offset_for_timestamp(ts_ms)
    if found is None:
        return None
    for batch in decode_batches(plog.read(found[0], 1)):
        for offset, timestamp, _record in batch.iter_records():
            if offset >= found[0] and timestamp >= ts_ms:
                return offset, timestamp
    return found


def max_timestamp_offset(plog: PartitionLog) -> tuple[int, int] | None:
    """(offset, timestamp) of the record with the largest timestamp (ListOffsets -3)."""
    best: tuple[int, BatchHeader, bytes] | None = None
    for base, header, data in plog.iter_batches():
        if best is None or header.max_timestamp > best[1].max_timestamp:
            best = (base, header, bytes(data))
    if best is None:
        return None
    batch = decode_batch(best[2])
    top: tuple[int, int] | None = None
    for offset, timestamp, _record in batch.iter_records():
        if top is None or timestamp > top[1]:
            top = (offset, timestamp)
    return top


_RECENT_BATCHES = 5  # batches per producer and partition remembered for de-duplication


@dataclass(frozen=True, slots=True)
class _SentBatch:
    epoch: int
    first_seq: int
    last_seq: int
    base_offset: int


class DataApi:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.topics = broker.topics
        # Idempotent producers: (topic, partition, producer id) -> its last few batches, so a
        # retried batch is answered with its original offset instead of being appended twice.
        # Kept in memory only: after a restart a retry of an old batch is appended again.
        self._recent: dict[tuple[str, int, int], deque[_SentBatch]] = {}
        self._next_producer_id = int(time.time() * 1000) * 1000

    # InitProducerId -------------------------------------------------------------------------------
    def init_producer_id(self, ctx: RequestContext, req: Any) -> Any:
        """Producer ids for idempotent producers; transactions are not supported yet."""
        if req.transactional_id is not None:
            log.warning(
                "InitProducerId for transactional id %r refused: no transactions",
                req.transactional_id,
            )
            return ctx.respond(
                throttle_time=0,
                error_code=ErrorCode.transactional_id_authorization_failed,
                producer_id=-1,
                producer_epoch=-1,
            )
        pid = getattr(req, "producer_id", -1)
        epoch = getattr(req, "producer_epoch", -1)
        if pid >= 0 and 0 <= epoch < 32767:
            producer_id, producer_epoch = pid, epoch + 1  # KIP-360: bump the epoch
        else:
            producer_id, producer_epoch = self._next_producer_id, 0
            self._next_producer_id += 1
        return ctx.respond(
            throttle_time=0, error_code=0, producer_id=producer_id, producer_epoch=producer_epoch
        )

    # Produce --------------------------------------------------------------------------------------
    def produce(self, ctx: RequestContext, req: Any) -> Any:
        if ctx.version <= 2:
            return self._legacy_produce(ctx, req)
        touched: list[PartitionLog] = []
        topics_out = []
        for topic in req.topic_data:
            parts_out = []
            for p in topic.partition_data:
                err, base, start = self._append_one(topic.name, p.index, p.records, touched)
                parts_out.append(
                    dict(
                        index=p.index,
                        error_code=err,
                        base_offset=base,
                        log_append_time=-1,
                        log_start_offset=start,
                        record_errors=[],
                        error_message=None,
                    )
                )
            topics_out.append(dict(name=topic.name, partition_responses=parts_out))
        response = dict(responses=topics_out, throttle_time=0)
        if req.acks == 0:
            if touched:
                asyncio.ensure_future(self._sync_quietly(touched))
            return NO_RESPONSE
        if not touched:
            return ctx.respond(**response)
        return self._respond_when_durable(ctx, touched, response)

    async def _respond_when_durable(
        self, ctx: RequestContext, touched: list[PartitionLog], response: dict[str, Any]
    ) -> Any:
        await self.broker.flusher.sync(touched)
        return ctx.respond(**response)

    async def _sync_quietly(self, touched: list[PartitionLog]) -> None:
        try:
            await self.broker.flusher.sync(touched)
        except Exception:
            log.exception("fsync after an acks=0 produce failed")

    def _append_one(
        self, name: str, index: int, records: bytes | None, touched: list[PartitionLog]
    ) -> tuple[int, int, int]:
        """Append one partition's batches; returns (error, base offset, log start offset)."""
        topics = self.topics
        topic = topics.get(name)
        if topic is None and self.broker.config["auto.create.topics.enable"]:
            try:
                topic = topics.create(name, self.broker.config["num.partitions"])
            except TopicError:
                topic = None
        if topic is None:
            return ErrorCode.unknown_topic_or_partition, -1, -1
        if topic.internal:
            return ErrorCode.invalid_topic_exception, -1, -1
        plog = topics.partition(name, index)
        if plog is None:
            return ErrorCode.unknown_topic_or_partition, -1, -1
        if not records:
            return ErrorCode.corrupt_message, -1, plog.log_start_offset
        if len(records) > self.broker.config["message.max.bytes"]:
            return ErrorCode.message_too_large, -1, plog.log_start_offset
        try:
            first = parse_header(records, 0)
        except CorruptBatch:
            if len(records) > 16 and records[16] in (0, 1):
                return ErrorCode.unsupported_for_message_format, -1, plog.log_start_offset
            return ErrorCode.corrupt_message, -1, plog.log_start_offset
        key = (name, index, first.producer_id)
        idempotent = first.producer_id >= 0 and first.base_sequence >= 0
        if idempotent:
            last_seq = first.base_sequence + first.last_offset_delta
            for sent in self._recent.get(key, ()):
                if (sent.epoch, sent.first_seq, sent.last_seq) == (
                    first.producer_epoch,
                    first.base_sequence,
                    last_seq,
                ):
                    return ErrorCode.none, sent.base_offset, plog.log_start_offset
        try:
            started = time.perf_counter()
            base, _last = plog.append(bytes(records))
            self.broker.metrics_append(time.perf_counter() - started)
        except CorruptBatch as e:
            log.info("rejected produce to %s-%d: %s", name, index, e)
            return ErrorCode.corrupt_message, -1, plog.log_start_offset
        touched.append(plog)
        if idempotent:
            recent = self._recent.setdefault(key, deque(maxlen=_RECENT_BATCHES))
            recent.append(_SentBatch(first.producer_epoch, first.base_sequence, last_seq, base))
        return ErrorCode.none, base, plog.log_start_offset

    def _legacy_produce(self, ctx: RequestContext, req: Any) -> Any:
        acks, topics = req
        if acks == 0:
            return NO_RESPONSE
        return RawBody(encode_legacy_produce_response(ctx.version, topics))

    # Fetch ----------------------------------------------------------------------------------------
    async def fetch(self, ctx: RequestContext, req: Any) -> Any:
        from protocol.responses import to_millis

        max_wait_ms = max(0, to_millis(req.max_wait))
        min_bytes = max(0, req.min_bytes)
        deadline = time.monotonic() + max_wait_ms / 1000.0
        while True:
            waiter = self.topics.appended_future()
            responses, total, errors = self._fetch_once(req)
            remaining = deadline - time.monotonic()
            if total >= min_bytes or errors or remaining <= 0 or ctx.connection.closed:
                break
            try:
                await asyncio.wait_for(asyncio.shield(waiter), remaining)
            except TimeoutError:
                responses, total, errors = self._fetch_once(req)
                break
        return ctx.respond(throttle_time=0, error_code=0, session_id=0, responses=responses)

    def _fetch_once(self, req: Any) -> tuple[list[dict[str, Any]], int, bool]:
        budget = req.max_bytes if req.max_bytes > 0 else 1 << 30
        total = 0
        errors = False
        responses = []
        for t in req.topics:
            parts = []
            for p in t.partitions:
                plog = self.topics.partition(t.topic, p.partition)
                entry: dict[str, Any] = dict(
                    partition_index=p.partition,
                    error_code=0,
                    high_watermark=-1,
                    last_stable_offset=-1,
                    log_start_offset=-1,
                    aborted_transactions=None,
                    preferred_read_replica=-1,
                    records=b"",
                )
                if plog is None:
                    entry["error_code"] = ErrorCode.unknown_topic_or_partition
                    errors = True
                    parts.append(entry)
                    continue
                if plog.offline is not None:
                    entry["error_code"] = ErrorCode.kafka_storage_error
                    errors = True
                    parts.append(entry)
                    continue
                hw = high_watermark(plog)
                start = plog.log_start_offset
                entry.update(high_watermark=hw, last_stable_offset=hw, log_start_offset=start)
                offset = p.fetch_offset
                if offset < start or offset > hw:
                    entry["error_code"] = ErrorCode.offset_out_of_range
                    errors = True
                elif offset < hw and budget > 0:
                    limit = min(p.partition_max_bytes, budget) if p.partition_max_bytes > 0 else 0
                    if limit > 0 or total == 0:
                        try:
                            data = _cap(plog.read(offset, max(limit, 1)), hw)
                        except OSError as e:  # an unreadable segment, a log gone offline
                            log.error("fetch from %s-%d failed: %s", t.topic, p.partition, e)
                            entry["error_code"] = ErrorCode.kafka_storage_error
                            errors = True
                            parts.append(entry)
                            continue
                        entry["records"] = data
                        total += len(data)
                        budget -= len(data)
                parts.append(entry)
            responses.append(dict(topic=t.topic, partitions=parts))
        return responses, total, errors

    # ListOffsets ----------------------------------------------------------------------------------
    def list_offsets(self, ctx: RequestContext, req: Any) -> Any:
        topics_out = []
        for t in req.topics:
            parts = []
            for p in t.partitions:
                plog = self.topics.partition(t.name, p.partition_index)
                entry = dict(
                    partition_index=p.partition_index,
                    error_code=0,
                    timestamp=-1,
                    offset=-1,
                    leader_epoch=0,
                )
                try:
                    if plog is None:
                        entry["error_code"] = ErrorCode.unknown_topic_or_partition
                    elif plog.offline is not None:
                        entry["error_code"] = ErrorCode.kafka_storage_error
                    elif p.timestamp == LATEST:
                        entry["offset"] = high_watermark(plog)
                    elif p.timestamp == EARLIEST:
                        entry["offset"] = plog.log_start_offset
                    elif p.timestamp == MAX_TIMESTAMP:
                        found = max_timestamp_offset(plog)
                        if found is not None:
                            entry["offset"], entry["timestamp"] = found
                    elif p.timestamp < 0:
                        entry["error_code"] = ErrorCode.invalid_request
                    else:
                        found = first_record_at_or_after(plog, p.timestamp)
                        if found is not None and found[0] < high_watermark(plog):
                            entry["offset"], entry["timestamp"] = found
                except OSError as e:  # an unreadable segment, a log gone offline
                    log.error("ListOffsets of %s-%d failed: %s", t.name, p.partition_index, e)
                    entry.update(error_code=ErrorCode.kafka_storage_error, offset=-1, timestamp=-1)
                parts.append(entry)
            topics_out.append(dict(name=t.name, partitions=parts))
        return ctx.respond(throttle_time=0, topics=topics_out)


def _cap(data: bytes, high_watermark: int) -> bytes:
    """Drop whole batches at or past the high watermark (appended but not yet durable)."""
    pos = 0
    n = len(data)
    while pos < n:
        size = peek_size(data, pos)
        if size is None or pos + size > n:
            break
        base = int.from_bytes(data[pos : pos + 8], "big", signed=True)
        if base >= high_watermark:
            break
        pos += size
    return data if pos == n else data[:pos]
