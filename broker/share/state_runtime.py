"""The share coordinator's runtime: :class:`ShareStateRuntime` drives one
:class:`share.state_shard.ShareStateShard` per partition of ``__share_group_state`` with the log,
the flusher and real time, and answers the share partitions' state calls
(:class:`broker.share.persister.SharePersister`).

- A share partition's key routes to partition ``abs(javaHashCode("group:topicId:partition"))
  % share.coordinator.state.topic.num.partitions``, as Kafka routes it.
- Every call that changes state is applied by the shard at once, appended (one batch) and
  fsynced through the flusher before it returns: a write is durable when its caller hears of
  it. If the append or the fsync fails, the partition's shard is dropped and replayed from
  the log (the log says what is durable: the failed record may be there), with
  COORDINATOR_LOAD_IN_PROGRESS meanwhile, and the call fails with NOT_COORDINATOR. A read
  waits until what was appended to its partition is durable.
- The topic is created on first use (internal, cleanup.policy delete: its updates are deltas,
  so compaction would lose state). At start-up every stored partition is replayed; a partition
  answers COORDINATOR_LOAD_IN_PROGRESS until it is loaded, NOT_COORDINATOR while its log is
  offline or led by another node (cluster mode: :meth:`ShareStateRuntime.lead` and
  :meth:`~ShareStateRuntime.resign`, as the transaction coordinator's).
- Every ``share.coordinator.state.topic.prune.interval.ms`` each partition's log start moves
  up to the oldest record still needed (``ShareStateShard.redundant_below``), once everything
  appended to it is durable; the log start is checkpointed, then whole segments below it are
  deleted (as DeleteRecords does).

Each write that became durable tells ``observe_write`` its seconds, from the call to the fsync
(Kafka's share-coordinator ``write-total`` and ``write-latency``; ``/metrics`` when served).

Errors reach callers as :class:`~broker.share.persister.ShareStateError` with Kafka's code.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING

from kcoord.coordinator.schema_errors import SchemaError
from kcoord.protocol.batch import HEADER_SIZE, CorruptBatch
from kcoord.protocol.errors import ErrorCode
from kcoord.protocol.key_values import decode_key_values
from kcoord.protocol.record_encoding import encode_kv_batch
from kcoord.share.model import PersistedState, SharePartitionKey, StateSummary, StateWrite
from kcoord.share.state_shard import Record, ShareStateShard, StateRefused, summary_of
from kcoord.storage.engine import Log, LogClosed

from ..data.internal_topic import InternalTopic
from ..data.topic_names import SHARE_GROUP_STATE_TOPIC
from ..data.topics import Topic
from .persister import ShareStateError

if TYPE_CHECKING:
    from ..config import Config
    from ..data.flusher import Flusher
    from ..data.topics import TopicStore

log = logging.getLogger("kcoord.share")

_LOAD_YIELD_EVERY = 256  # batches replayed between yields to the event loop
RELOAD_RETRY_S = 1.0
_PRUNE_TRIES = 5  # waits for a partition's appends to be durable, per pruning pass


def now_ms() -> int:
    return int(time.time() * 1000)


class ShareStateRuntime:
    def __init__(
        self,
        config: Config,
        topics: TopicStore,
        flusher: Flusher,
        clock: Callable[[], int] = now_ms,
        clustered: bool = False,
        observe_write: Callable[[float], None] | None = None,
    ) -> None:
        self.config = config
        self._observe_write = observe_write
        self.topics = topics
        self.flusher = flusher
        self.clock = clock
        self.clustered = clustered
        self.num_partitions = int(config["share.coordinator.state.topic.num.partitions"])
        self.snapshot_every = int(config["share.coordinator.snapshot.update.records.per.snapshot"])
        self.logs: list[Log] | None = None
        self.state_topic = InternalTopic(
            topics,
            SHARE_GROUP_STATE_TOPIC,
            self.num_partitions,
            config["share.coordinator.state.topic.segment.bytes"],
            self._take_logs,
        )
        self.shards: list[ShareStateShard | None] = [None] * self.num_partitions
        """Each partition's shard; None while it loads (or is led by another node)."""
        self._tasks: set[asyncio.Task[None]] = set()

    # start-up and the topic -----------------------------------------------------------------------
    async def start(self) -> None:
        """Load ``__share_group_state`` if it is stored (in the background). In a cluster
        nothing is loaded here: the partitions this node leads are loaded as it takes them
        (:meth:`lead`)."""
        stored = self.topics.stored_partitions(SHARE_GROUP_STATE_TOPIC)
        if self.clustered:
            if stored:
                self.state_topic.open_now()
        elif any(p < self.num_partitions for p in stored):
            self.state_topic.open_now()
            self._spawn(self._load_all())
        else:
            self.shards = [self._new_shard() for _ in range(self.num_partitions)]
        interval_ms = self.config["share.coordinator.state.topic.prune.interval.ms"]
        self._spawn(self._prune_every(interval_ms / 1000.0))

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

    def _new_shard(self) -> ShareStateShard:
        return ShareStateShard(self.snapshot_every)

    def _take_logs(self, topic: Topic) -> None:
        self.logs = list(topic.partitions)

    def ensure_topic(self) -> bool:
        """Whether ``__share_group_state`` exists; if not, its creation is started (in a
        worker thread: broker/data/internal_topic.py) and COORDINATOR_NOT_AVAILABLE is the answer
        meanwhile."""
        return self.state_topic.ensure()

    def partition_of(self, key: SharePartitionKey) -> int:
        return key.state_partition(self.num_partitions)

    @property
    def loaded(self) -> bool:
        """Every partition led here is loaded."""
        return self.logs is None or all(
            shard is not None or plog.offline is not None
            for shard, plog in zip(self.shards, self.logs, strict=True)
        )

    async def _load_all(self) -> None:
        assert self.logs is not None
        started = time.perf_counter()
        records = 0
        for p, plog in enumerate(self.logs):
            if plog.offline is not None:
                log.error("%s-%d is offline: its share partitions have no coordinator",
                          SHARE_GROUP_STATE_TOPIC, p)
                continue
            shard = self._new_shard()
            try:
                records += await self._read(p, plog, shard)
            except OSError as e:
                log.error("reading %s-%d failed (again in %.0f s): %s",
                          SHARE_GROUP_STATE_TOPIC, p, RELOAD_RETRY_S, e)
                self._spawn(self._reload_later(p, plog))
                continue
            self.shards[p] = shard
        log.info(
            "loaded %s: %d share partitions, %d records in %.3f s",
            SHARE_GROUP_STATE_TOPIC,
            sum(len(s) for s in self.shards if s is not None),
            records,
            time.perf_counter() - started,
        )

    async def _read(self, p: int, plog: Log, shard: ShareStateShard) -> int:
        """Replay partition ``p``'s log into ``shard``, cooperatively; how many records.
        OSError if the log cannot be read."""
        records = 0
        for i, (base, header, data) in enumerate(plog.iter_batches()):
            if not header.is_control:
                try:
                    pairs = decode_key_values(header, data[HEADER_SIZE:])
                except CorruptBatch as e:
                    log.error("%s-%d: batch at %d skipped: %s", SHARE_GROUP_STATE_TOPIC, p, base, e)
                    continue
                for key, value in pairs:
                    records += 1
                    if key is None:
                        continue
                    try:
                        shard.replay(key, value, base)
                    except SchemaError as e:
                        log.error("%s-%d: record skipped: %s", SHARE_GROUP_STATE_TOPIC, p, e)
            if i % _LOAD_YIELD_EVERY == _LOAD_YIELD_EVERY - 1:
                await asyncio.sleep(0)
        return records

    async def lead(self, partition: int, plog: Log) -> None:
        """Serve the partition from ``plog``: its log is online again
        (broker/data/reopening.py), or this node took the partition over (cluster mode). It is
        replayed in a task of its own (COORDINATOR_LOAD_IN_PROGRESS meanwhile)."""
        if partition < self.num_partitions and await self.state_topic.wait():
            assert self.logs is not None
            self.logs[partition] = plog
            self.shards[partition] = None
            self._spawn(self._reload(partition, plog))

    async def resign(self, partition: int, placeholder: Log) -> None:
        """Another node leads the partition now (cluster mode): its state is dropped here
        (NOT_COORDINATOR)."""
        if self.logs is None or partition >= self.num_partitions:
            return
        self.logs[partition] = placeholder
        self.shards[partition] = None

    async def _reload(self, partition: int, plog: Log) -> None:
        """Replay ``plog`` into a new shard of the partition, again every
        :data:`RELOAD_RETRY_S` while reading fails, for as long as ``plog`` is the partition's
        log (a later reopen or a failed append takes over)."""
        while self._current(partition, plog) and plog.offline is None:
            shard = self._new_shard()
            try:
                records = await self._read(partition, plog, shard)
            except OSError as e:
                log.warning("reloading %s-%d failed (again in %.0f s): %s",
                            SHARE_GROUP_STATE_TOPIC, partition, RELOAD_RETRY_S, e)
                await asyncio.sleep(RELOAD_RETRY_S)
                continue
            if self._current(partition, plog) and self.shards[partition] is None:
                self.shards[partition] = shard
                # Said when there is something to say: a cluster node takes 50 at its start.
                (log.info if records else log.debug)(
                    "loaded %s-%d: %d share partitions, %d records",
                    SHARE_GROUP_STATE_TOPIC, partition, len(shard), records,
                )
            return

    async def _reload_later(self, partition: int, plog: Log) -> None:
        await asyncio.sleep(RELOAD_RETRY_S)
        await self._reload(partition, plog)

    def _current(self, partition: int, plog: Log) -> bool:
        return self.logs is not None and self.logs[partition] is plog

    # the state calls (SharePersister) --------------------------------------------------------------
    def _serving(self, key: SharePartitionKey) -> tuple[int, Log, ShareStateShard]:
        """The partition of ``key``, its log and its shard, or ShareStateError."""
        if not self.ensure_topic() or self.logs is None:
            raise ShareStateError(ErrorCode.coordinator_not_available,
                                  f"{SHARE_GROUP_STATE_TOPIC} is not available")
        p = self.partition_of(key)
        plog, shard = self.logs[p], self.shards[p]
        if plog.offline is not None:
            raise ShareStateError(ErrorCode.not_coordinator,
                                  f"{SHARE_GROUP_STATE_TOPIC}-{p} is not served here")
        if shard is None:
            raise ShareStateError(ErrorCode.coordinator_load_in_progress,
                                  f"{SHARE_GROUP_STATE_TOPIC}-{p} is loading")
        return p, plog, shard

    async def read(self, key: SharePartitionKey) -> PersistedState:
        p, plog, shard = self._serving(key)
        state = shard.read(key)
        if plog.flushed_offset < plog.log_end_offset:  # what it says must be durable
            try:
                await self.flusher.sync([plog])
            except Exception as e:
                raise self._failed(p, plog, e) from e
        return state

    async def read_summary(self, key: SharePartitionKey) -> StateSummary:
        return summary_of(await self.read(key))

    async def write(
        self, key: SharePartitionKey, state_epoch: int, leader_epoch: int, change: StateWrite
    ) -> None:
        started = time.perf_counter()
        p, plog, shard = self._serving(key)
        await self._durable(p, plog, shard, lambda: shard.write(
            key, state_epoch, leader_epoch, change, self.clock()
        ))
        if self._observe_write is not None:
            self._observe_write(time.perf_counter() - started)

    async def initialize(self, key: SharePartitionKey, state_epoch: int, start_offset: int) -> None:
        p, plog, shard = self._serving(key)
        await self._durable(p, plog, shard, lambda: shard.initialize(
            key, state_epoch, start_offset, self.clock()
        ))

    async def delete(self, keys: Iterable[SharePartitionKey]) -> None:
        """Forget ``keys``, partition by partition; the first error (after trying them all)."""
        by_partition: dict[int, list[SharePartitionKey]] = {}
        for key in keys:
            by_partition.setdefault(self.partition_of(key), []).append(key)
        calls = [self._delete_in(keys_of) for keys_of in by_partition.values()]
        results = await asyncio.gather(*calls, return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result

    async def _delete_in(self, keys: list[SharePartitionKey]) -> None:
        p, plog, shard = self._serving(keys[0])
        await self._durable(p, plog, shard, lambda: [r for k in keys for r in shard.delete(k)])

    async def _durable(
        self, p: int, plog: Log, shard: ShareStateShard, call: Callable[[], list[Record]]
    ) -> None:
        """Run ``call`` on the shard, append its records and return once they are durable."""
        try:
            records = call()
        except StateRefused as e:
            raise ShareStateError(e.code, str(e)) from None
        if not records:
            return
        try:
            first, _ = plog.append(encode_kv_batch(records, self.clock()))
            shard.appended(records, first)
            await self.flusher.sync([plog])
        except asyncio.CancelledError:
            raise
        except Exception as e:  # an I/O error, a log closed or offline under us
            raise self._failed(p, plog, e) from e

    def _failed(self, p: int, plog: Log, e: BaseException) -> ShareStateError:
        """The partition's shard may hold what the log does not: replay the log into a new
        one (if the log is still the partition's; an offline log waits for a reopen)."""
        log.error("writing %s-%d failed: %s", SHARE_GROUP_STATE_TOPIC, p, e)
        if self._current(p, plog) and self.shards[p] is not None:
            self.shards[p] = None
            self._spawn(self._reload(p, plog))
        return ShareStateError(ErrorCode.not_coordinator, f"writing share state failed: {e}")

    # pruning ------------------------------------------------------------------------------------------
    async def _prune_every(self, interval_s: float) -> None:
        while True:
            await asyncio.sleep(interval_s)
            try:
                await self.prune()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("pruning %s failed", SHARE_GROUP_STATE_TOPIC)

    async def prune(self) -> int:
        """Move each loaded partition's log start up to its oldest record still needed, then
        delete the segments below; how many partitions moved."""
        if self.logs is None:
            return 0
        moved: list[Log] = []
        for p in range(self.num_partitions):
            plog = self.logs[p]
            for _ in range(_PRUNE_TRIES):
                shard = self.shards[p]
                if shard is None or plog.offline is not None or not self._current(p, plog):
                    break
                if plog.flushed_offset == plog.log_end_offset:
                    # Nothing in flight: every offset the shard noted is durable.
                    target = shard.redundant_below(plog.log_end_offset)
                    if target > plog.log_start_offset and plog.advance_log_start(target):
                        moved.append(plog)
                    break
                try:
                    await self.flusher.sync([plog])
                except Exception:
                    break  # the write that failed reloads the partition
        if not moved:
            return 0
        written = await asyncio.to_thread(
            self.topics.write_checkpoints, self.topics.checkpoint_snapshot()
        )
        if not written:
            return len(moved)  # the segments stay until a checkpoint holds the new starts
        for plog in moved:
            try:
                plan = plog.plan_deletion(self.clock())
                if plan is not None:
                    plog.delete_planned(plan)
            except (OSError, LogClosed) as e:
                log.error("deleting old segments of %s failed: %s", plog.name, e)
        return len(moved)
