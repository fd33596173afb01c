"""The data plane APIs: Produce, Fetch and ListOffsets over the partition logs.

Produce checks each partition's batch as Kafka's log validator does (``protocol.validate``),
appends it as it is (offsets patched into the batch header) in arrival order per partition
(``broker.data.appender``: big or compressed batches are checked in worker threads) and acknowledges
only once the group-commit fsync has it on disk. A refused batch gets its error code and a short
``error_message``, and nothing is appended for that partition; an append or fsync that fails
with an I/O error is answered KAFKA_STORAGE_ERROR. Idempotent and transactional producers'
batches are checked against the partition's producer state (``storage.producer_state``: epoch,
sequence, open transaction; kept with the log, so it survives a restart): a retry of one of
the last batches is answered with its original offset; idle producers are forgotten every
``producer.id.expiration.check.interval.ms``.

Fetch serves whole batches up to the high watermark (what is durable), or, ``read_committed``,
up to the last stable offset with the aborted transactions of the range (``broker.txn.data``),
and long-polls on ``max_wait_ms`` / ``min_bytes``; reads that would wait on a database are done
in a worker (``broker.data.fetch_reads``). ListOffsets is ``broker.data.list_offsets``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

from kcoord.protocol.batch import BatchHeader, CorruptBatch, parse_header
from kcoord.protocol.codec import RawBody
from kcoord.protocol.compression import decompression_limit
from kcoord.protocol.errors import ErrorCode
from kcoord.protocol.legacy import encode_legacy_produce_response
from kcoord.protocol.validate import Refused, check_batch
from kcoord.storage.engine import Log, LogClosed
from kcoord.storage.offline import moved_away

from ..net.connection import NO_RESPONSE, RequestContext
from ..net.offload import SLICE, Sliced, encoded_off_loop, is_big, run_now, run_sliced
from ..security.acl.model import Operation, ResourceType
from ..txn.data import AllProducers, TxnVerifier, transactional_refusal
from .appender import Appender, Outcome, refused
from .fetch_reads import FetchReads
from .list_offsets import READ_COMMITTED, ListOffsetsApi
from .log_read import TOPIC_REFUSED, high_watermark, refused_topics
from .topics import storage_error_code

if TYPE_CHECKING:
    from ..cluster.view import ClusterView
    from ..config import Config
    from ..services import MetricsHooks
    from .flusher import Flusher
    from .topics import TopicStore

log = logging.getLogger("kcoord.data")


_Settled = tuple[int, Log | None, Outcome]


def _fsync_failed(error: BaseException) -> Outcome:
    """The records are in the log but not known to be durable."""
    return Outcome(storage_error_code(error), message=f"fsync failed: {error}")


class _Produce:
    """One Produce request on its way: its topics (name, number of partitions) and each
    partition's (index, log, outcome now or later), in request order."""

    __slots__ = ("parts", "topics")

    def __init__(self) -> None:
        self.topics: list[tuple[str, int]] = []
        self.parts: list[tuple[int, Log | None, Outcome | asyncio.Future[Outcome]]] = []

    def must_wait(self) -> bool:
        """Whether an outcome is still to come or an fsync must precede the answer."""
        return any(not isinstance(o, Outcome) or o.must_sync for _, _, o in self.parts)

    def settled(self) -> list[_Settled]:
        return [(i, plog, o) for i, plog, o in self.parts if isinstance(o, Outcome)]




class DataApi:
    def __init__(
        self,
        config: Config,
        topics: TopicStore,
        flusher: Flusher,
        metrics: MetricsHooks,
        verify_txn: TxnVerifier,
        view: ClusterView,
    ) -> None:
        self.config = config
        self.view = view  # the leader epochs clients' current_leader_epoch is checked against
        self.topics = topics
        self.flusher = flusher
        self.verify_txn = verify_txn
        self._observe_append = metrics.log_append
        self.decompression_limit = decompression_limit(config["message.max.bytes"])
        self.producers = AllProducers(topics)
        self.appender = Appender(self._append_checked, limit=self.decompression_limit)
        self.list_offsets = ListOffsetsApi(
            topics, view, self.appender, self.decompression_limit
        ).list_offsets
        self._expiry: asyncio.TimerHandle | None = None
        self._background: set[asyncio.Future[Any]] = set()

    def start(self) -> None:
        """Start the sweep of idle producers (every producer.id.expiration.check.interval.ms)."""
        self._schedule_expiry()

    def stop(self) -> None:
        if self._expiry is not None:
            self._expiry.cancel()
            self._expiry = None
        self.appender.close()

    def _schedule_expiry(self) -> None:
        interval = self.config["producer.id.expiration.check.interval.ms"] / 1000.0
        self._expiry = asyncio.get_running_loop().call_later(interval, self._expire_producers)

    def _expire_producers(self) -> None:
        try:
            gone = self.producers.expire()  # every partition's
            if gone:
                log.info(
                    "forgot %d idle producer state(s); %d left", gone, len(self.producers)
                )
        finally:
            self._schedule_expiry()

    # Produce --------------------------------------------------------------------------------------
    def produce(self, ctx: RequestContext, req: Any) -> Any:
        if ctx.version <= 2:
            return self._legacy_produce(ctx, req)
        request = _Produce()
        checked = ctx.connection.authorizer is not None
        txn_refused = transactional_refusal(ctx, req)
        for topic in req.topic_data:
            request.topics.append((topic.name, len(topic.partition_data)))
            refusal = txn_refused
            if not refusal and checked and not ctx.allowed(
                Operation.WRITE, ResourceType.TOPIC, topic.name
            ):
                refusal = TOPIC_REFUSED
            if refusal:
                for p in topic.partition_data:
                    request.parts.append((p.index, None, Outcome(refusal)))
                continue
            for p in topic.partition_data:
                plog, outcome = self._produce_one(
                    topic.name, p.index, p.records, ctx.version, req.transactional_id
                )
                request.parts.append((p.index, plog, outcome))
        if req.acks == 0:
            if request.must_wait():
                self._in_background(self._settle_quietly(request))
            return NO_RESPONSE
        if not request.must_wait():
            return self._response(ctx, request.topics, request.settled())
        return self._respond_when_durable(ctx, request)

    async def _respond_when_durable(self, ctx: RequestContext, request: _Produce) -> Any:
        return self._response(ctx, request.topics, await self._settle(request))

    async def _settle(self, request: _Produce) -> list[_Settled]:
        """Wait for every partition's outcome, then for the fsync of what was appended; a
        partition whose log fails to fsync is answered KAFKA_STORAGE_ERROR."""
        done = [
            (index, plog, o if isinstance(o, Outcome) else await o)
            for index, plog, o in request.parts
        ]
        synced = list({plog: None for _, plog, o in done if o.must_sync and plog is not None})
        if not synced:
            return done
        # One waiter per log (all in the same fsync round), so a failure names its partition.
        waits = [(plog, self.flusher.synced([plog])) for plog in synced]
        pending = [(plog, w) for plog, w in waits if w is not None]
        results = await asyncio.gather(*(w for _, w in pending), return_exceptions=True)
        failed = {
            plog: r
            for (plog, _), r in zip(pending, results, strict=True)
            if isinstance(r, BaseException)
        }
        if not failed:
            return done
        for plog, error in failed.items():
            log.error("fsync of %s for a produce failed: %r", plog.name, error)
        return [
            (index, plog, _fsync_failed(failed[plog]) if plog in failed and o.must_sync else o)
            for index, plog, o in done
        ]

    async def _settle_quietly(self, request: _Produce) -> None:
        """acks=0: nobody hears the outcome; failures are logged."""
        settled = iter(await self._settle(request))
        for topic, count in request.topics:
            for index, _plog, outcome in (next(settled) for _ in range(count)):
                if outcome.error_code:
                    log.warning(
                        "acks=0 produce to %s-%d failed: %s (%s)",
                        topic,
                        index,
                        ErrorCode(outcome.error_code).name,
                        outcome.message,
                    )

    def _in_background(self, work: Awaitable[None]) -> None:
        task = asyncio.ensure_future(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _response(
        self, ctx: RequestContext, topics: list[tuple[str, int]], settled: list[_Settled]
    ) -> Any:
        parts = iter(settled)
        responses = []
        for name, count in topics:
            partition_responses = []
            for index, plog, o in (next(parts) for _ in range(count)):
                partition_responses.append(
                    dict(
                        index=index,
                        error_code=o.error_code,
                        base_offset=o.base_offset,
                        log_append_time=o.log_append_time,
                        log_start_offset=plog.log_start_offset if plog is not None else -1,
                        record_errors=[
                            dict(batch_index=i, batch_index_error_message=m)
                            for i, m in o.record_errors
                        ],
                        error_message=o.message,
                    )
                )
            responses.append(dict(name=name, partition_responses=partition_responses))
        return ctx.respond(responses=responses, throttle_time=0)

    def _produce_one(
        self, name: str, index: int, records: bytes | None, version: int, txn_id: str | None
    ) -> tuple[Log | None, Outcome | asyncio.Future[Outcome]]:
        """Look up the partition, check its batch's header and hand it to the appender.

        A Produce never creates a topic, as in Kafka: clients ask Metadata first, which creates
        one where ``auto.create.topics.enable`` and the CREATE ACL allow it (a Produce creating
        topics went around both, and made the internal topics with one partition). Clients never
        write to the internal topics."""
        topics = self.topics
        topic = topics.get(name)
        if topic is None:
            return None, Outcome(ErrorCode.unknown_topic_or_partition)
        if topic.internal:
            return None, Outcome(
                ErrorCode.invalid_topic_exception, message=f"{name} is an internal topic"
            )
        plog = topics.partition(name, index)
        if plog is None:
            return None, Outcome(ErrorCode.unknown_topic_or_partition)
        records = records or b""
        settings = topics.settings_of(topic)
        limit = settings.max_message_bytes  # the topic's, else the broker's
        if len(records) > limit:
            return plog, Outcome(
                ErrorCode.message_too_large,
                message=f"{len(records)} bytes of records; the topic's max.message.bytes is {limit}",
            )
        try:
            header = check_batch(records, version)
        except Refused as r:
            log.info("refused produce to %s-%d: %s", name, index, r.message)
            return plog, refused(r)
        gate = None
        if header.is_transactional:  # a transactional id is there: transactional_refusal
            error = self.verify_txn(
                txn_id or "", header.producer_id, header.producer_epoch, name, index
            )
            if not isinstance(error, int):
                gate = error  # another node's coordinator answers (cluster mode)
            elif error:
                log.info(
                    "refused transactional produce to %s-%d (producer %d, epoch %d, id %r): %s",
                    name, index, header.producer_id, header.producer_epoch, txn_id,
                    ErrorCode(error).name,
                )
                return plog, Outcome(error)
        # the topic's rules: keys when compacted, timestamps, compression (protocol.append_rules);
        # min.insync.replicas never refuses: Kafka caps it at the replicas, and there is one
        rules = settings.rules
        return plog, self.appender.submit(plog, (name, index), header, records, rules, gate)

    def _append_checked(
        self, plog: Log, where: tuple[str, int], h: BatchHeader, records: bytes
    ) -> Outcome:
        """Append a checked batch (the appender calls this in arrival order), unless it is a
        retry of one of its producer's last batches."""
        topic, partition = where
        if h.producer_id >= 0:
            verdict = plog.producer_state.check(h)
            if verdict.duplicate_of >= 0:
                return Outcome(ErrorCode.none, verdict.duplicate_of, must_sync=True)
            if verdict.error_code:
                log.info("produce to %s-%d refused: %s", topic, partition, verdict.message)
                return Outcome(verdict.error_code, message=verdict.message)
        try:
            started = time.perf_counter()
            base, _last = plog.append(records)
            self._observe_append(time.perf_counter() - started)
        except CorruptBatch as e:  # checked already; kept as a last line of defence
            log.warning("append to %s-%d refused: %s", topic, partition, e)
            return Outcome(ErrorCode.corrupt_message, message=str(e))
        except LogClosed:
            now = self.topics.partition(topic, partition)
            if now is not plog:  # deleted meanwhile, or led elsewhere now
                if now is not None and moved_away(now.offline):
                    return Outcome(ErrorCode.not_leader_or_follower)
                return Outcome(ErrorCode.unknown_topic_or_partition)
            log.error("append to %s-%d failed: the log is closed", topic, partition)
            return Outcome(ErrorCode.kafka_storage_error, message="the partition log is offline")
        except OSError as e:  # disk full, I/O error, an offline log directory
            code = storage_error_code(e)
            if code == ErrorCode.kafka_storage_error:
                log.error("append to %s-%d failed: %r", topic, partition, e)
            return Outcome(code, message=f"append failed: {e}")
        stamped = parse_header(records)  # the batch as appended: LogAppendTime stamped in it?
        lat = stamped.max_timestamp if stamped.log_append_time else -1
        return Outcome(ErrorCode.none, base, must_sync=True, log_append_time=lat)

    def _legacy_produce(self, ctx: RequestContext, req: Any) -> Any:
        acks, topics = req
        if acks == 0:
            return NO_RESPONSE
        return RawBody(encode_legacy_produce_response(ctx.version, topics))

    # Fetch ----------------------------------------------------------------------------------------
    async def fetch(self, ctx: RequestContext, req: Any) -> Any:
        from kcoord.protocol.responses import to_millis

        max_wait_ms = max(0, to_millis(req.max_wait))
        min_bytes = max(0, req.min_bytes)
        deadline = time.monotonic() + max_wait_ms / 1000.0
        big = is_big(sum(len(t.partitions) for t in req.topics))
        refused = refused_topics(ctx, Operation.READ, (t.topic for t in req.topics))
        committed = int(req.isolation_level) == READ_COMMITTED
        while True:
            waiter = self.topics.appended_future()
            reads = FetchReads(req.max_bytes, committed)
            if big:
                responses = await run_sliced(self._fetch_once(req, refused, reads))
            else:
                responses = run_now(self._fetch_once(req, refused, reads))
            if reads.noted:  # below what the engine keeps in memory: a query each
                await self.appender.in_worker(reads.read_noted)
            remaining = deadline - time.monotonic()
            if reads.total >= min_bytes or reads.errors or remaining <= 0 or ctx.connection.closed:
                break
            try:
                await asyncio.wait_for(asyncio.shield(waiter), remaining)
            except TimeoutError:
                continue  # one last look, then answer (remaining <= 0 now)
        fields = dict(throttle_time=0, error_code=0, session_id=0, responses=responses)
        if big:
            return await encoded_off_loop(lambda: ctx.respond(**fields))
        return ctx.respond(**fields)

    def _fetch_once(
        self, req: Any, refused: frozenset[str], reads: FetchReads
    ) -> Sliced[list[dict[str, Any]]]:
        """One look at every partition asked for: the responses, their records read or noted
        by ``reads`` (which counts the bytes and says whether any partition failed); those of
        ``refused`` topics answer TOPIC_AUTHORIZATION_FAILED."""
        responses = []
        work = 0
        for t in req.topics:
            parts = []
            for p in t.partitions:
                work += 1
                if work % SLICE == 0:
                    yield
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
                parts.append(entry)
                if t.topic in refused:
                    entry["error_code"] = TOPIC_REFUSED
                    reads.errors = True
                    continue
                if plog is None:
                    entry["error_code"] = ErrorCode.unknown_topic_or_partition
                    reads.errors = True
                    continue
                epoch_error = self.view.epoch_error(
                    t.topic, p.partition, getattr(p, "current_leader_epoch", -1)
                )[0]
                if plog.offline is not None or epoch_error:
                    offline = plog.offline
                    entry["error_code"] = storage_error_code(offline) if offline else epoch_error
                    reads.errors = True
                    continue
                hw = high_watermark(plog)
                lso = plog.last_stable_offset(hw)
                start = plog.log_start_offset
                entry.update(high_watermark=hw, last_stable_offset=lso, log_start_offset=start)
                offset = p.fetch_offset
                upto = lso if reads.committed else hw
                if offset < start or offset > hw:
                    entry["error_code"] = ErrorCode.offset_out_of_range
                    reads.errors = True
                elif offset < upto:
                    reads.read(entry, plog, offset, p.partition_max_bytes, upto)
            responses.append(dict(topic=t.topic, partitions=parts))
        return responses
