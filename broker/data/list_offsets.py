"""ListOffsets over the partition logs: earliest, latest (the last stable offset for
``read_committed``), max-timestamp and by-timestamp queries.

The last two find one batch from the log's batch headers or time index and decode only that
batch to answer the exact record, with bounded decompression. Three kinds of work leave the
event loop for a worker thread (the checking threads of ``broker.data.appender``):

- decoding a big or compressed batch;
- a timestamp lookup in a log that answers it with a database query (``Log.looks_up_locally``
  is false: PostgreSQL);
- reading the found batch from below what the engine keeps in memory (``Log.reads_locally``).

A stored batch that cannot be decoded is answered at batch granularity and logged.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from kcoord.protocol.batch import BatchHeader, CorruptBatch, parse_header
from kcoord.protocol.compression import Compression
from kcoord.protocol.errors import ErrorCode
from kcoord.protocol.record_scan import batch_first_at_or_after, batch_max_timestamp
from kcoord.storage.engine import Log, OffsetOutOfRange

from ..net.connection import RequestContext
from ..net.offload import SLICE, Sliced, encoded_off_loop, is_big, run_now, run_sliced
from ..security.acl.model import Operation
from .appender import INLINE_BYTES, Appender
from .log_read import TOPIC_REFUSED, high_watermark, refused_topics
from .topics import storage_error_code

if TYPE_CHECKING:
    from ..cluster.view import ClusterView
    from .topics import TopicStore

log = logging.getLogger("kcoord.data")

EARLIEST = -2
LATEST = -1
MAX_TIMESTAMP = -3
READ_COMMITTED = 1

# (a partition's answer, its log, the timestamp asked for or MAX_TIMESTAMP)
_Query = tuple[dict[str, Any], Log, int]


class _Answers:
    """One request's answers at batch granularity and what is left to narrow them."""

    __slots__ = ("batches", "queries", "slow", "topics", "unread")

    def __init__(self) -> None:
        self.topics: list[dict[str, Any]] = []
        self.queries: list[tuple[_Query, int]] = []  # lookups for a worker, with the high watermark
        self.unread: list[_Query] = []  # found batches for a worker to read
        self.batches: list[tuple[dict[str, Any], bytes, int]] = []  # (answer, batch, timestamp)
        self.slow = False  # a batch to decode is big or compressed

    @property
    def off_loop(self) -> bool:
        return bool(self.slow or self.queries or self.unread)


def _look_up(query: _Query, hw: int) -> bool:
    """Answer ``query`` at batch granularity; whether a batch was found (OSError: the log)."""
    entry, plog, ts = query
    found = plog.max_timestamp_batch() if ts == MAX_TIMESTAMP else plog.offset_for_timestamp(ts)
    if found is None or found[0] >= hw:
        return False
    # never below the log start (DeleteRecords)
    entry["offset"], entry["timestamp"] = max(found[0], plog.log_start_offset), found[1]
    return True


def _failed(entry: dict[str, Any], plog: Log, error: OSError) -> None:
    log.error("ListOffsets of %s failed: %s", plog.name, error)
    entry.update(error_code=storage_error_code(error), offset=-1, timestamp=-1)


def _one_batch(plog: Log, base_offset: int) -> tuple[BatchHeader, bytes] | None:
    """The stored batch holding ``base_offset`` (None if it cannot be read)."""
    try:
        data = plog.read(base_offset, 1)
        h = parse_header(data)
    except (CorruptBatch, OffsetOutOfRange, OSError) as e:
        log.warning("ListOffsets: cannot read the batch at offset %d: %s", base_offset, e)
        return None
    return h, data[: h.size]


class ListOffsetsApi:
    """The ListOffsets handler (see the module docstring)."""

    def __init__(
        self, topics: TopicStore, view: ClusterView, appender: Appender, decompression_limit: int
    ) -> None:
        self.topics = topics
        self.view = view  # the leader epochs clients' current_leader_epoch is checked against
        self.appender = appender
        self.decompression_limit = decompression_limit

    def list_offsets(self, ctx: RequestContext, req: Any) -> Any:
        if is_big(sum(len(t.partitions) for t in req.topics)):
            return self._big(ctx, req)
        answers = run_now(self._answers(ctx, req))
        if answers.off_loop:
            return self._later(ctx, answers)
        self._locate_records(answers.batches)
        return ctx.respond(throttle_time=0, topics=answers.topics)

    async def _big(self, ctx: RequestContext, req: Any) -> Any:
        """ListOffsets of many partitions: the logs read in slices, the answer built in the
        worker (broker/net/offload.py)."""
        answers = await run_sliced(self._answers(ctx, req))
        await self.appender.in_worker(self._finish, answers)
        return await encoded_off_loop(lambda: ctx.respond(throttle_time=0, topics=answers.topics))

    async def _later(self, ctx: RequestContext, answers: _Answers) -> Any:
        await self.appender.in_worker(self._finish, answers)
        return ctx.respond(throttle_time=0, topics=answers.topics)

    def _answers(self, ctx: RequestContext, req: Any) -> Sliced[_Answers]:
        """Each partition's answer at batch granularity, on the loop as far as the logs answer
        locally (see the module docstring)."""
        answers = _Answers()
        found: list[_Query] = []
        refused = refused_topics(ctx, Operation.DESCRIBE, (t.name for t in req.topics))
        committed = int(getattr(req, "isolation_level", 0)) == READ_COMMITTED  # v2+
        work = 0
        for t in req.topics:
            parts = []
            for p in t.partitions:
                work += 1
                if work % SLICE == 0:
                    yield
                plog = self.topics.partition(t.name, p.partition_index)
                epoch_error, epoch = self.view.epoch_error(
                    t.name, p.partition_index, getattr(p, "current_leader_epoch", -1)
                )
                entry = dict(
                    partition_index=p.partition_index,
                    error_code=0,
                    timestamp=-1,
                    offset=-1,
                    leader_epoch=max(epoch, 0),
                )
                parts.append(entry)
                if t.name in refused:
                    entry["error_code"] = TOPIC_REFUSED
                elif plog is None:
                    entry["error_code"] = ErrorCode.unknown_topic_or_partition
                elif plog.offline is not None:
                    entry["error_code"] = storage_error_code(plog.offline)
                elif epoch_error:
                    entry["error_code"] = epoch_error
                elif p.timestamp == LATEST:
                    hw = high_watermark(plog)
                    entry["offset"] = plog.last_stable_offset(hw) if committed else hw
                elif p.timestamp == EARLIEST:
                    entry["offset"] = plog.log_start_offset
                elif p.timestamp < 0 and p.timestamp != MAX_TIMESTAMP:
                    entry["error_code"] = ErrorCode.invalid_request
                elif not plog.looks_up_locally:
                    answers.queries.append(((entry, plog, p.timestamp), high_watermark(plog)))
                else:
                    try:
                        if _look_up((entry, plog, p.timestamp), high_watermark(plog)):
                            found.append((entry, plog, p.timestamp))
                    except OSError as e:  # an unreadable segment, a log gone offline
                        _failed(entry, plog, e)
            answers.topics.append(dict(name=t.name, partitions=parts))
        for query in found:
            work += 1
            if work % SLICE == 0:
                yield
            entry, plog, ts = query
            if not plog.reads_locally(entry["offset"]):
                answers.unread.append(query)
                continue
            one = _one_batch(plog, entry["offset"])
            if one is not None:
                h, batch = one
                answers.batches.append((entry, batch, ts))
                # decoding it may take long: as for Produce, off the event loop then
                answers.slow = answers.slow or h.compression != Compression.NONE or h.size > INLINE_BYTES
        return answers

    def _finish(self, answers: _Answers) -> None:
        """What was left for a worker thread: the lookups and reads that query a database,
        then the decoding of every batch found."""
        for query, hw in answers.queries:
            try:
                if _look_up(query, hw):
                    answers.unread.append(query)
            except OSError as e:  # the database unreachable, the log gone offline
                _failed(query[0], query[1], e)
        for entry, plog, ts in answers.unread:
            one = _one_batch(plog, entry["offset"])
            if one is not None:
                answers.batches.append((entry, one[1], ts))
        self._locate_records(answers.batches)

    def _locate_records(self, batches: list[tuple[dict[str, Any], bytes, int]]) -> None:
        """Narrow each answer from its batch to the exact record (any thread: pure)."""
        limit = self.decompression_limit
        for entry, batch, ts in batches:
            try:
                if ts == MAX_TIMESTAMP:
                    found = batch_max_timestamp(batch, limit)
                else:
                    found = batch_first_at_or_after(batch, entry["offset"], ts, limit)
            except CorruptBatch as e:
                log.warning(
                    "ListOffsets: batch at offset %d cannot be decoded (%s);"
                    " answering with the batch's offset",
                    entry["offset"],
                    e,
                )
                continue
            if found is not None:
                entry["offset"], entry["timestamp"] = found
