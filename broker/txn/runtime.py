"""The transaction coordinator's runtime: drives :class:`coordinator.transactions.TxnCoordinator`
with the ``__transaction_state`` log, the markers and real time.

- Every transition is written to partition ``abs(javaHashCode(transactionalId)) % n`` of
  ``__transaction_state`` (compacted, created on first use like ``__consumer_offsets``) and
  fsynced through the flusher before it is applied and answered.
- After a PrepareCommit/PrepareAbort is durable, the markers are written through the injected
  ``write_markers`` (one call for all the partitions of the transaction; partitions that fail
  are retried with a backoff), then the Complete* record.
- At start-up every partition is replayed (the newest record per id wins); meanwhile requests
  get COORDINATOR_LOAD_IN_PROGRESS. Transactions found preparing get their markers written;
  Ongoing ones past their timeout are aborted by the first timeout check, made right after the
  load and then every ``transaction.abort.timed.out.transaction.cleanup.interval.ms``.
- Ids idle for ``transactional.id.expiration.ms`` are removed (tombstones) every
  ``transaction.remove.expired.transaction.cleanup.interval.ms``; the partitions are compacted
  every ``log.cleaner.backoff.ms`` as the offsets topic is (storage.compaction).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

from kcoord.coordinator.schema_errors import SchemaError
from kcoord.coordinator.transactions.coordinator import Transition, TxnConfig, TxnCoordinator
from kcoord.coordinator.transactions.model import TopicPartition, TxnMetadata, TxnState
from kcoord.coordinator.transactions.records import (
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from kcoord.protocol.batch import HEADER_SIZE, CorruptBatch
from kcoord.protocol.errors import ErrorCode
from kcoord.protocol.javahash import partition_for
from kcoord.protocol.key_values import decode_key_values
from kcoord.protocol.record_encoding import encode_kv_batch
from kcoord.storage.engine import Log

from ..data.internal_topic import InternalTopic
from ..data.retention import compact_if_grown
from ..data.topic_names import TRANSACTION_STATE_TOPIC
from ..data.topics import Topic

if TYPE_CHECKING:
    from ..config import Config
    from ..data.flusher import Flusher
    from ..data.topics import TopicStore

log = logging.getLogger("kcoord.transactions")

WriteMarkers = Callable[
    [int, int, bool, int, Sequence[TopicPartition]], Awaitable[dict[TopicPartition, int]]
]
"""``write_markers(producer_id, producer_epoch, commit, coordinator_epoch, partitions)`` ->
an error code per partition (0: the marker is durable)."""

COORDINATOR_EPOCH = 0
"""One node, one leader epoch of every ``__transaction_state`` partition."""
_MARKER_BACKOFF = (0.05, 2.0)  # first and longest wait between marker retries, seconds
_DROPPED = frozenset({
    # A marker that can never be written: the partition is gone, or its producer was fenced
    # by a newer epoch there already (Kafka drops these partitions from the transaction too).
    ErrorCode.unknown_topic_or_partition,
    ErrorCode.invalid_producer_epoch,
    ErrorCode.producer_fenced,
    ErrorCode.unknown_producer_id,
})
_LOAD_YIELD_EVERY = 256
RELOAD_RETRY_S = 1.0


def now_ms() -> int:
    return int(time.time() * 1000)


class TxnRuntime:
    def __init__(
        self,
        config: Config,
        topics: TopicStore,
        flusher: Flusher,
        write_markers: WriteMarkers,
        allocate_producer_id: Callable[[], int],
        clock: Callable[[], int] = now_ms,
        clustered: bool = False,
    ) -> None:
        self.config = config
        self.clustered = clustered
        self.topics = topics
        self.flusher = flusher
        self.write_markers = write_markers
        self.allocate_producer_id = allocate_producer_id
        self.clock = clock
        self.num_partitions = int(config["transaction.state.log.num.partitions"])
        self.coordinator = TxnCoordinator(
            TxnConfig(
                max_timeout_ms=config["transaction.max.timeout.ms"],
                id_expiration_ms=config["transactional.id.expiration.ms"],
            ),
            allocate_producer_id,
        )
        self.logs: list[Log] | None = None
        self.state_topic = InternalTopic(
            topics, TRANSACTION_STATE_TOPIC, self.num_partitions, config["transaction.state.log.segment.bytes"], self._take_logs
        )
        self.loaded = False
        self._tasks: set[asyncio.Task[None]] = set()
        self._completions: dict[str, asyncio.Task[None]] = {}
        """The task writing each completing transaction's markers and Complete record (the
        task removes itself when it ends)."""
        self._cleaned: dict[int, tuple[int, int]] = {}

    # start-up and the topic ---------------------------------------------------------------------
    async def start(self) -> None:
        """Load ``__transaction_state`` if it is stored. In a cluster nothing is loaded here:
        the partitions this node leads are loaded as it takes them (:meth:`lead`)."""
        stored = self.topics.stored_partitions(TRANSACTION_STATE_TOPIC)
        if self.clustered:
            if stored:
                self.state_topic.open_now()
            self._loaded()
        elif any(p < self.num_partitions for p in stored):
            self.state_topic.open_now()
            self._spawn(self._load())
        else:
            self._loaded()

    async def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    def _spawn(self, coro: Awaitable[None]) -> asyncio.Task[None]:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _take_logs(self, topic: Topic) -> None:
        self.logs = list(topic.partitions)

    def ensure_topic(self) -> bool:
        """Whether ``__transaction_state`` exists; if not, its creation is started (in a
        worker thread: broker/data/internal_topic.py) and COORDINATOR_NOT_AVAILABLE is the answer
        meanwhile."""
        return self.state_topic.ensure()

    def partition_of(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.num_partitions)

    def coordinator_error(self, transactional_id: str) -> int:
        """0 if this node can coordinate ``transactional_id`` now, else the error to answer."""
        if not self.ensure_topic() or self.logs is None:
            return ErrorCode.coordinator_not_available
        if not self.loaded:
            return ErrorCode.coordinator_load_in_progress
        if self.logs[self.partition_of(transactional_id)].offline is not None:
            return ErrorCode.not_coordinator
        return 0

    def verify_partition(
        self, transactional_id: str, producer_id: int, producer_epoch: int, topic: str, partition: int
    ) -> int:
        """May a transactional batch go to ``topic``-``partition``? 0 or Produce's error
        (:meth:`TxnCoordinator.verify_partition`). While this node cannot answer for the id
        (loading, its partition offline), NOT_ENOUGH_REPLICAS: the producer retries, as Kafka
        has it retry a verification that could not reach the coordinator. Without
        ``__transaction_state`` no transaction was ever begun here: the coordinator's answer
        (no such id) stands, and the topic is not created for it."""
        if self.logs is not None and self.coordinator_error(transactional_id):
            return ErrorCode.not_enough_replicas
        return self.coordinator.verify_partition(
            transactional_id, producer_id, producer_epoch, (topic, partition)
        )

    async def _load(self) -> None:
        assert self.logs is not None
        started = time.perf_counter()
        records = 0
        for p, plog in enumerate(self.logs):
            if plog.offline is not None:
                log.error("%s-%d is offline: its ids have no coordinator", TRANSACTION_STATE_TOPIC, p)
                continue
            try:
                records += await self._read(p, plog, self.coordinator.replay)
            except OSError as e:
                log.error("reading %s-%d failed: %s", TRANSACTION_STATE_TOPIC, p, e)
        log.info(
            "loaded %s: %d transactional ids, %d records in %.3f s",
            TRANSACTION_STATE_TOPIC,
            len(self.coordinator),
            records,
            time.perf_counter() - started,
        )
        self._loaded()

    async def _read(
        self, p: int, plog: Log, replay: Callable[[str, TxnMetadata | None], None]
    ) -> int:
        """Feed partition ``p``'s records to ``replay`` in log order, cooperatively; how many.
        OSError if the log cannot be read (``replay`` may have had some records)."""
        records = 0
        for i, (base, header, data) in enumerate(plog.iter_batches()):
            if not header.is_control:
                try:
                    pairs = decode_key_values(header, data[HEADER_SIZE:])
                except CorruptBatch as e:
                    log.error("%s-%d: batch at %d skipped: %s", TRANSACTION_STATE_TOPIC, p, base, e)
                    continue
                for key, value in pairs:
                    records += 1
                    if key is None:
                        continue
                    try:
                        txn_id = decode_key(key)
                        meta = None if value is None else decode_value(txn_id, value)
                    except SchemaError as e:
                        log.error("%s-%d: record skipped: %s", TRANSACTION_STATE_TOPIC, p, e)
                        continue
                    replay(txn_id, meta)
            if i % _LOAD_YIELD_EVERY == _LOAD_YIELD_EVERY - 1:
                await asyncio.sleep(0)
        return records

    async def lead(self, partition: int, plog: Log) -> None:
        """Serve the partition's ids from ``plog``: its log is online again
        (broker/data/reopening.py), or this node took the partition over (cluster mode). The
        ids take the states read from it (in a task of its own), since the log and not memory
        says what is durable (a transition whose write was reported failed may have been
        committed)."""
        if await self.state_topic.wait():
            self._spawn(self._reload(partition, plog))

    async def resign(self, partition: int, placeholder: Log) -> None:
        """Another node leads the partition now (cluster mode): its ids are forgotten here
        (NOT_COORDINATOR) and their completions stopped; the new leader completes them."""
        if self.logs is None:
            return
        self.logs[partition] = placeholder
        for txn_id, task in list(self._completions.items()):
            if self.partition_of(txn_id) == partition:
                task.cancel()
        self.coordinator.reload(lambda t: self.partition_of(t) == partition, {})

    async def _reload(self, partition: int, plog: Log) -> None:
        """Until the new log is installed, at the end, every write of the partition's ids goes
        to the offline one and fails, changing nothing, so nothing applied meanwhile is
        overwritten. Read again every :data:`RELOAD_RETRY_S` while reading fails, for as long as
        ``plog`` is the partition's log (a later reopen takes over). Prepared transactions
        found get their markers."""
        while self.logs is not None and self.topics.partition(TRANSACTION_STATE_TOPIC, partition) is plog:
            found: dict[str, TxnMetadata | None] = {}
            try:
                await self._read(partition, plog, found.__setitem__)
            except OSError as e:
                log.warning("reloading %s-%d failed (again in %.0f s): %s",
                            TRANSACTION_STATE_TOPIC, partition, RELOAD_RETRY_S, e)
                await asyncio.sleep(RELOAD_RETRY_S)
                continue
            if self.topics.partition(TRANSACTION_STATE_TOPIC, partition) is not plog:
                return
            self.coordinator.reload(lambda t: self.partition_of(t) == partition, found)
            self.logs[partition] = plog
            log.info("reloaded %s-%d: %d transactional ids", TRANSACTION_STATE_TOPIC, partition,
                     len(found))
            for txn_id in self.coordinator.to_complete():
                if self.partition_of(txn_id) == partition:
                    self._complete_later(txn_id)
            return

    def _loaded(self) -> None:
        self.loaded = True
        for txn_id in self.coordinator.to_complete():
            self._complete_later(txn_id)
        self._spawn(self._every("transaction.abort.timed.out.transaction.cleanup.interval.ms",
                                self.abort_timed_out, first=True))
        self._spawn(self._every("transaction.remove.expired.transaction.cleanup.interval.ms",
                                self.remove_expired))
        if self.config["log.cleaner.enable"]:
            self._spawn(self._every("log.cleaner.backoff.ms", self.compact))

    async def _every(self, setting: str, job: Callable[[], Awaitable[None]], first: bool = False) -> None:
        interval = self.config[setting] / 1000.0
        if not first:
            await asyncio.sleep(interval)
        while True:
            try:
                await job()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("%s job failed", setting)
            await asyncio.sleep(interval)

    # writing --------------------------------------------------------------------------------------
    def write(self, tr: Transition) -> asyncio.Future[int]:
        """Make ``tr`` durable and apply it: a future of 0, or of the error to answer (then
        nothing changed). The id is busy from this call on, and the record is appended now,
        so records are in the log in the order their transitions were made."""
        c = self.coordinator
        c.begin(tr)
        try:
            if not self.ensure_topic() or self.logs is None:
                raise OSError(f"{TRANSACTION_STATE_TOPIC} is not available")
            plog = self.logs[self.partition_of(tr.transactional_id)]
            value = None if tr.after is None else encode_value(tr.after)
            plog.append(encode_kv_batch([(encode_key(tr.transactional_id), value)], self.clock()))
        except Exception as e:  # an I/O error, an offline partition: Kafka's NOT_COORDINATOR
            return self._failed(tr, e)
        return asyncio.ensure_future(self._synced(tr, plog))

    def _failed(self, tr: Transition, e: BaseException) -> asyncio.Future[int]:
        log.error("writing %s for %r failed: %s", TRANSACTION_STATE_TOPIC, tr.transactional_id, e)
        self.coordinator.abandon(tr)
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        fut.set_result(ErrorCode.not_coordinator)
        return fut

    async def _synced(self, tr: Transition, plog: Log) -> int:
        try:
            await self.flusher.sync([plog])
        except asyncio.CancelledError:
            self.coordinator.abandon(tr)
            raise
        except Exception as e:
            return await self._failed(tr, e)
        self.coordinator.apply(tr)
        if tr.after is not None and tr.after.state.preparing:
            self._complete_later(tr.transactional_id)
        return 0

    # markers --------------------------------------------------------------------------------------
    def _complete_later(self, txn_id: str) -> None:
        if txn_id not in self._completions:
            self._completions[txn_id] = self._spawn(self._complete(txn_id))

    async def _complete(self, txn_id: str) -> None:
        """Write the markers of ``txn_id``'s prepared transaction, then its Complete* record."""
        try:
            meta = self.coordinator.get(txn_id)
            if meta is None or not meta.state.preparing:
                return
            commit = meta.state == TxnState.PREPARE_COMMIT
            remaining = sorted(meta.partitions)
            wait = _MARKER_BACKOFF[0]
            while remaining:
                try:
                    results = await self.write_markers(
                        meta.producer_id, meta.producer_epoch, commit, COORDINATOR_EPOCH, remaining
                    )
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("writing the markers of %r failed", txn_id)
                    results = {}
                left = []
                for tp in remaining:
                    code = results.get(tp, ErrorCode.unknown_server_error)
                    if code in _DROPPED:
                        log.warning("marker of %r for %s-%d dropped: %s", txn_id, tp[0], tp[1],
                                    ErrorCode(code).name)
                    elif code != 0:
                        left.append(tp)
                remaining = left
                if remaining:
                    await asyncio.sleep(wait)
                    wait = min(wait * 2, _MARKER_BACKOFF[1])
            while True:
                tr = self.coordinator.complete(txn_id, self.clock())
                if tr is None:
                    return
                if await self.write(tr) == 0:
                    log.info("transaction of %r (producer %d epoch %d) %s", txn_id,
                             meta.producer_id, meta.producer_epoch,
                             "committed" if commit else "aborted")
                    return
                await asyncio.sleep(_MARKER_BACKOFF[1])
        finally:
            del self._completions[txn_id]

    async def settled(self, txn_id: str, timeout_s: float) -> None:
        """Until ``txn_id``'s markers and Complete record are written, or ``timeout_s``."""
        task = self._completions.get(txn_id)
        if task is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(task), timeout_s)

    # periodic jobs --------------------------------------------------------------------------------
    async def abort_timed_out(self) -> None:
        for txn_id in self.coordinator.timed_out(self.clock()):
            await self.abort(txn_id, reason="timed out")

    async def abort(self, txn_id: str, reason: str) -> int:
        """Abort ``txn_id``'s Ongoing transaction with the epoch bumped; 0 or an error."""
        tr = self.coordinator.fence_abort(txn_id, self.clock())
        if tr is None:
            return ErrorCode.concurrent_transactions
        assert tr.after is not None
        log.info("aborting the transaction of %r (%s): epoch bumped to %d", txn_id, reason,
                 tr.after.producer_epoch)
        return await self.write(tr)

    async def remove_expired(self) -> None:
        for tr in self.coordinator.expired(self.clock()):
            if await self.write(tr) == 0:
                log.info("transactional id %r expired", tr.transactional_id)

    async def compact(self, force: bool = False) -> None:
        if self.logs is None:
            return
        logs = self.logs
        for p, plog in enumerate(logs):
            try:
                await compact_if_grown(
                    plog,
                    self._cleaned,
                    p,
                    delete_retention_ms=self.config["log.cleaner.delete.retention.ms"],
                    current=functools.partial(_still, logs, p, plog),
                    force=force,
                    clock=self.clock,
                )
            except OSError as e:  # a read or the database failed: the next pass tries again
                log.error("compaction of %s-%d failed: %s", TRANSACTION_STATE_TOPIC, p, e)


def _still(logs: list[Log], p: int, plog: Log) -> bool:
    return logs[p] is plog
