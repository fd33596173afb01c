"""The coordinator runtime: drives the sans-IO group shards with real I/O and real time.

One :class:`coordinator.shard.GroupShard` per partition of ``__consumer_offsets``. For every
request the runtime calls the owning shard with an opaque handle and the current time, appends
the records of the shard's output to that partition's log, waits for the group-commit fsync,
and only then completes the replies (which may answer other, earlier parked requests). Outputs
of one shard are completed in the order they were produced, so a reply never overtakes the
durability of a record emitted before it. Timers are one ``call_at`` per shard, set to the
shard's next deadline and delivered back with ``advance``. What the shards ask to run off the
loop, regex resolutions and large target assignments (broker/groups/assignment_offload.py), comes
back as operations. The per-shard plumbing, the batches an output is appended as and the chain
that completes outputs in order are in broker/groups/write_path.py.

At start-up each existing partition is replayed into its shard in slices on the event loop (the
Kafka port serves meanwhile); until then that shard answers COORDINATOR_LOAD_IN_PROGRESS (K3).
The offsets topic itself is created on first use (A5). A partition that cannot be opened or read
is logged and its shard unloaded (NOT_COORDINATOR for its groups; FindCoordinator answers
COORDINATOR_NOT_AVAILABLE for them, as Kafka does for an offsets partition without a leader)
while the others load and serve.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
import time
from collections.abc import Callable, Hashable, Iterable
from typing import TYPE_CHECKING, Any

from kcoord.coordinator.config import GroupOverrides, no_overrides
from kcoord.coordinator.loading import LatestRecords
from kcoord.coordinator.messages import OffsetFetchResponse, TxnMarkerRequest, TxnMarkerResponse
from kcoord.coordinator.output import RebalanceCompleted
from kcoord.coordinator.rebalance_replay import HistoryReplay
from kcoord.coordinator.rebalances import RebalanceHistory, log_fields
from kcoord.coordinator.shard import GroupShard, Output
from kcoord.protocol.errors import ErrorCode
from kcoord.protocol.javahash import partition_for
from kcoord.storage.engine import Log
from kcoord.storage.offline import moved_away

from ..data.internal_topic import InternalTopic
from ..data.topics import OFFSETS_TOPIC, Topic
from ..net.offload import SliceTimer, TurnBudget, gc_paused, is_big, pause
from .assignment_offload import OffLoop
from .cleaner import clean_offsets
from .coordinator_config import coordinator_config
from .offsets_load import read_partition
from .topics_view import StoreTopics
from .write_path import OutputCompletion, ShardRuntime, output_batches

if TYPE_CHECKING:
    from ..config import Config
    from ..data.flusher import Flusher
    from ..data.topics import TopicStore
    from ..services import MetricsHooks

log = logging.getLogger("kcoord.coordinator")
rebalance_log = logging.getLogger("kcoord.rebalance")
"""One structured line (logfmt) per completed rebalance."""

_NO_REPLY = object()
TIMERS_PER_TURN = 16
"""Timers a shard fires in one turn of the event loop."""
RELOAD_RETRY_S = 1.0
_REPLAY_STEP = 100  # records replayed between two looks at the clock (SliceTimer)


def now_ms() -> int:
    return int(time.time() * 1000)


class GroupRuntime:
    def __init__(
        self,
        config: Config,
        topics: TopicStore,
        flusher: Flusher,
        metrics: MetricsHooks,
        clustered: bool = False,
        *,
        overrides: GroupOverrides = no_overrides,
    ) -> None:
        self.config = config
        self.share_member_left: Callable[[str, str], None] | None = None
        """Called with (group id, member id) once a share-group member left or was fenced: the
        broker's share layer releases the records that member held."""
        self.clustered = clustered
        self.overrides = overrides  # the configs set on each group (groups/group_configs.py)
        self.topics = topics
        self.flusher = flusher
        self._observe_append = metrics.log_append
        self._observe_partition_load = metrics.partition_load
        self.num_partitions = int(config["offsets.topic.num.partitions"])
        self.group_config = coordinator_config(config)
        # KIP-1101 hashes partition racks: this node's, alone; none in a cluster (topics_view.py)
        self.topics_view = StoreTopics(topics, None if clustered else config["broker.rack"] or None)
        self._partition_cache: dict[str, int] = {}
        start = now_ms()
        self.shards = [ShardRuntime(p, self._new_shard(p, start)) for p in range(self.num_partitions)]
        self.rebalances = RebalanceHistory()
        """Each group's last rebalances (the web console's timeline)."""
        self._observe_rebalance = metrics.rebalance
        self._handles = itertools.count(1)
        self._timer_turns = TurnBudget()  # shared by the shards' timers
        self._waiting: dict[Hashable, asyncio.Future[Any]] = {}
        self.offsets_topic = InternalTopic(
            topics, OFFSETS_TOPIC, self.num_partitions, config["offsets.topic.segment.bytes"],
            self._take_logs,
        )
        self._load_task: asyncio.Task[None] | None = None
        self._cleaner_task: asyncio.Task[None] | None = None
        self._reloads: set[asyncio.Task[None]] = set()  # shards being loaded by lead()
        self._reloads_started, self._reload_records = 0.0, 0  # since the first of them
        self.load_seconds: float | None = None
        self._off_loop = OffLoop(topics, self._process, now_ms)

    def _new_shard(self, partition: int, t: int) -> GroupShard:
        """A shard loading partition ``partition`` (COORDINATOR_LOAD_IN_PROGRESS until
        :meth:`_finish`)."""
        shard = GroupShard(
            partition, self.group_config, now_ms=t, partition_for=self.partition_of,
            topics=self.topics_view, overrides=self.overrides,
        )
        shard.rebalance_observer = self._rebalanced
        return shard

    def _rebalanced(self, done: RebalanceCompleted) -> None:
        self.rebalances.record(done)
        rebalance_log.info("rebalance %s", log_fields(done))
        if self._observe_rebalance is not None:
            self._observe_rebalance(done)

    # start-up and the offsets topic -----------------------------------------------------------
    async def start(self) -> None:
        """Load the offsets topic if it is on disk (in the background). In a cluster, every
        shard starts unloaded: the partitions this node leads are loaded as it takes them
        (:meth:`lead`)."""
        if self.config["log.cleaner.enable"]:
            self._cleaner_task = asyncio.ensure_future(
                clean_offsets(self.shards, self.config, lambda: self.loaded)
            )
        if self.clustered:
            t = now_ms()
            for sr in self.shards:
                self._process(sr, sr.shard.unload(t))
                sr.loaded = True
            # Made before the node joins (nothing is served yet): the join's round takes this
            # node's share of it, and the node serves once that is loaded (broker/app.py).
            await self.offsets_topic.wait()
        elif any(p < self.num_partitions for p in self.topics.stored_partitions(OFFSETS_TOPIC)):
            self.offsets_topic.open_now()
            self._load_task = asyncio.ensure_future(self._load_all())
        else:
            # Nothing to load: every shard starts empty and ready.
            t = now_ms()
            for sr in self.shards:
                self._finish(sr, t)

    def ensure_topic(self) -> bool:
        """Whether the offsets topic exists, else its creation is started (A5, off the loop):
        FindCoordinator answers COORDINATOR_NOT_AVAILABLE meanwhile, writes wait (:meth:`_defer`)."""
        return self.offsets_topic.ensure()

    def coordinator_available(self, group_id: str) -> bool:
        """Whether the offsets partition of ``group_id`` is online here, or led elsewhere
        (FindCoordinator)."""
        plog = self.shards[self.partition_of(group_id)].log
        return plog is None or plog.offline is None or moved_away(plog.offline)

    def _take_logs(self, topic: Topic) -> None:
        for sr in self.shards:
            sr.log = topic.partitions[sr.partition]

    async def _load_all(self) -> None:
        started, records = time.perf_counter(), 0
        with gc_paused():  # (what it builds lives on: collections would only walk it, often)
            for sr in self.shards:
                records += await self._load_shard(sr)
        self.load_seconds = time.perf_counter() - started
        self._log_loaded(f"{self.num_partitions} partitions", records, self.load_seconds)

    def _log_loaded(self, what: str, records: int, seconds: float) -> None:
        shards = [sr.shard for sr in self.shards]
        log.info(
            "loaded %s: %s, %d groups, %d offsets, %d records in %.3f s", OFFSETS_TOPIC, what,
            sum(s.group_count() for s in shards), sum(s.offset_count() for s in shards), records,
            seconds,
        )

    async def _load_shard(self, sr: ShardRuntime) -> int:
        """Replay the shard's partition into it (the records read), or unload it if the
        partition cannot be read."""
        assert sr.log is not None
        started = time.perf_counter()
        if sr.log.offline is not None:
            self._unavailable(sr, "its log is offline")
            return 0
        try:
            latest, history = await self._read(sr, sr.log)
        except OSError as e:
            self._unavailable(sr, f"reading its log failed: {e}")
            return 0
        await self._replay(sr, latest, history, started)
        return latest.records

    async def _read(self, sr: ShardRuntime, plog: Log) -> tuple[LatestRecords, HistoryReplay]:
        """The shard's state is a function of the newest record per key: collect those (and
        the rebalance history) from ``plog``, to replay them (coordinator/loading.py).
        OSError if it cannot be read."""
        latest = LatestRecords()
        history = HistoryReplay(self.rebalances.per_group)
        await read_partition(plog, sr.partition, latest, history)
        return latest, history

    async def _replay(
        self, sr: ShardRuntime, latest: LatestRecords, history: HistoryReplay, started: float
    ) -> None:
        """Replay what was read into the shard in slices, and serve it; unless :meth:`lead`
        replaced the shard meanwhile."""
        shard, turns = sr.shard, SliceTimer()
        for _ in latest.replay_sliced(shard, now_ms(), _REPLAY_STEP):
            if turns.due():
                await pause()
                if sr.shard is not shard:
                    return
        self.rebalances.restore(history.events())
        self._finish(sr, now_ms())
        self._loaded_progress(sr, latest.records, time.perf_counter() - started)

    async def lead(self, partition: int, plog: Log) -> None:
        """Serve the partition from ``plog``, loaded afresh as at start-up: its log is online
        again (broker/data/reopening.py), since the log and not the shard's memory says what is
        durable (a write whose failure the shard undid may have been committed), or this node
        took the partition over (cluster mode).

        Requests meanwhile get NOT_COORDINATOR (parked ones, from the unload) or
        COORDINATOR_LOAD_IN_PROGRESS until the reload, in a task of its own, has read the log."""
        if partition >= self.num_partitions or not await self.offsets_topic.wait():
            return
        sr = self.shards[partition]
        await self._unload(sr)
        sr.shard = self._new_shard(partition, now_ms())
        sr.log = plog
        sr.loaded = False
        log.info("loading %s-%d from its log", OFFSETS_TOPIC, partition)
        if not self._reloads:
            self._reloads_started, self._reload_records = time.perf_counter(), 0
        task = asyncio.ensure_future(self._reload(sr, plog))
        self._reloads.add(task)
        task.add_done_callback(self._reload_done)

    def _reload_done(self, task: asyncio.Task[None]) -> None:
        self._reloads.discard(task)
        if not self._reloads and self.loaded:
            led = sum(1 for sr in self.shards if sr.log is not None and sr.log.offline is None)
            seconds = time.perf_counter() - self._reloads_started
            self._log_loaded(f"{led} partitions led here", self._reload_records, seconds)

    async def loads_done(self) -> None:
        """Until the partitions being loaded (at start-up, by :meth:`lead`) are."""
        while loading := [t for t in (self._load_task, *self._reloads) if t and not t.done()]:
            await asyncio.gather(*loading, return_exceptions=True)

    async def resign(self, partition: int, placeholder: Log) -> None:
        """Another node leads the partition now (cluster mode): unload its groups here."""
        sr = self.shards[partition]
        await self._unload(sr)
        sr.log, sr.loaded = placeholder, True

    async def _unload(self, sr: ShardRuntime) -> None:
        """Unload the shard (NOT_COORDINATOR) once the outputs in flight have completed or
        failed (the shard they undo must be the one that made them); nothing awaits between
        the chain found empty and the caller's next step, so no output slips in."""
        while sr.chain is not None:
            await asyncio.shield(sr.chain)
        if sr.timer is not None:
            sr.timer.cancel()
        sr.timer = sr.timer_at = None
        self._deliver(sr.shard.unload(now_ms()))

    async def _reload(self, sr: ShardRuntime, plog: Log) -> None:
        """Read ``plog`` into the shard, again every :data:`RELOAD_RETRY_S` while reading
        fails, for as long as ``plog`` is the shard's log (a later reopen takes over)."""
        while sr.log is plog:
            started = time.perf_counter()
            try:
                latest, history = await self._read(sr, plog)
            except OSError as e:
                log.warning(
                    "reloading %s-%d failed (again in %.0f s): %s",
                    OFFSETS_TOPIC, sr.partition, RELOAD_RETRY_S, e,
                )
                await asyncio.sleep(RELOAD_RETRY_S)
                continue
            if sr.log is plog:
                await self._replay(sr, latest, history, started)
                self._reload_records += latest.records
            return

    def _loaded_progress(self, sr: ShardRuntime, records: int, seconds: float) -> None:
        """Start-up progress: one line per loaded offsets partition."""
        done = sum(1 for x in self.shards if x.loaded)
        log.info(
            "loading %s: partition %d loaded (%d/%d): %d groups, %d offsets, %d records in %.3f s",
            OFFSETS_TOPIC, sr.partition, done, self.num_partitions,
            sr.shard.group_count(), sr.shard.offset_count(), records, seconds,
        )
        self._observe_partition_load(seconds)

    def _unavailable(self, sr: ShardRuntime, why: str) -> None:
        """The shard's partition cannot be loaded: unload the shard (NOT_COORDINATOR)."""
        log.error(
            "%s-%d not loaded: %s; its groups have no coordinator until it is online again",
            OFFSETS_TOPIC, sr.partition, why,
        )
        sr.loaded = True
        self._process(sr, sr.shard.unload(now_ms()))

    def _finish(self, sr: ShardRuntime, t: int) -> None:
        sr.loaded = True
        self._process(sr, sr.shard.finish_loading(t))

    @property
    def loaded(self) -> bool:
        return all(sr.loaded for sr in self.shards)

    async def stop(self) -> None:
        for task in (self._load_task, self._cleaner_task, *self._reloads):
            if task is not None and not task.done():
                task.cancel()
        self._off_loop.stop()
        for sr in self.shards:
            if sr.timer is not None:
                sr.timer.cancel()
        # Parked requests are answered by the connection closing.

    # routing ------------------------------------------------------------------------------------
    def partition_of(self, group_id: str) -> int:
        # Java's String.hashCode is a Python loop over the id: remember it per group.
        p = self._partition_cache.get(group_id)
        if p is None:
            if len(self._partition_cache) >= 65536:
                self._partition_cache.clear()
            p = self._partition_cache[group_id] = partition_for(group_id, self.num_partitions)
        return p

    def heartbeat(
        self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None
    ) -> int | None:
        """A Heartbeat's error code, answered on the spot; None when the owning shard still has
        outputs waiting to become durable (then use :meth:`submit`, which keeps replies in order)."""
        sr = self._idle_shard(group_id)
        if sr is None:
            return None
        error = sr.shard.heartbeat_now(group_id, generation_id, member_id, group_instance_id, now_ms())
        if sr.shard.next_wakeup() != sr.timer_at:
            self._reschedule(sr)
        return error

    def consumer_heartbeat(
        self, group_id: str, member_id: str, member_epoch: int, client_id: str, client_host: str
    ) -> int | None:
        """A steady ConsumerGroupHeartbeat answered on the spot (the heartbeat interval to
        answer); None when it is not one, or when the owning shard has outputs waiting."""
        sr = self._idle_shard(group_id)
        if sr is None:
            return None
        shard = sr.shard
        interval = shard.consumer_heartbeat_now(group_id, member_id, member_epoch, client_id, client_host, now_ms())
        if shard.next_wakeup() != sr.timer_at:
            self._reschedule(sr)
        return interval

    def fetch_offsets(
        self,
        group_id: str,
        wanted: Iterable[tuple[str, Iterable[int]]] | None,
        require_stable: bool = False,
    ) -> OffsetFetchResponse | None:
        """An OffsetFetch answered on the spot; None when the owning shard has outputs still
        waiting to become durable (a fetch must not overtake them: then use :meth:`submit`)."""
        sr = self._idle_shard(group_id)
        if sr is None:
            return None
        return sr.shard.fetch_offsets(group_id, wanted, require_stable)

    async def write_txn_marker(
        self,
        partition: int,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        coordinator_epoch: int,
    ) -> int:
        """Append a COMMIT or ABORT marker of ``producer_id`` to ``__consumer_offsets``
        partition ``partition`` through the shard's write path (durable when answered) and
        make that producer's pending offsets there visible or drop them, for every group of
        the partition. Returns the error code (0: written; NOT_COORDINATOR,
        COORDINATOR_LOAD_IN_PROGRESS, INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED,
        or a storage error as the coordinator maps it)."""
        if not 0 <= partition < self.num_partitions:
            return ErrorCode.unknown_topic_or_partition
        request = TxnMarkerRequest(producer_id, producer_epoch, commit, coordinator_epoch)
        shard = self.shards[partition].shard
        response: TxnMarkerResponse = await self.call(partition, shard.txn_marker, request)
        return int(response.error)

    def _idle_shard(self, group_id: str) -> ShardRuntime | None:
        """The shard of ``group_id`` if no output of it is still waiting to become durable, so
        that a reply given on the spot overtakes none; None otherwise."""
        sr = self.shards[self.partition_of(group_id)]
        return sr if sr.chain is None else None

    def submit(self, partition: int, op: Callable[..., Output], request: Any) -> Any:
        """Run ``op(handle, request, now)`` on shard ``partition``.

        Returns the reply itself when the shard answered at once and nothing needs to become
        durable first (heartbeats, fetches, most errors): no future, no task. Otherwise returns
        an asyncio.Future that the reply will complete.
        """
        sr = self.shards[partition]
        handle = next(self._handles)
        out = op(handle, request, now_ms())
        if not out.records and out.marker is None and sr.chain is None:
            mine: Any = _NO_REPLY
            waiting = self._waiting
            for h, response in out.replies:
                if h == handle:
                    mine = response
                else:
                    fut = waiting.pop(h, None)
                    if fut is not None and not fut.done():
                        fut.set_result(response)
            self._reschedule(sr)
            if mine is not _NO_REPLY:
                return mine
            return self._future_for(handle)  # parked: a later output answers it
        fut = self._future_for(handle)
        self._process(sr, out)
        return fut

    def _future_for(self, handle: Hashable) -> asyncio.Future[Any]:
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiting[handle] = fut
        return fut

    async def call(self, partition: int, op: Callable[..., Output], request: Any) -> Any:
        """Run ``op(handle, request, now)`` on shard ``partition``; await its reply."""
        result = self.submit(partition, op, request)
        if isinstance(result, asyncio.Future):
            return await result
        return result

    def shard(self, partition: int) -> GroupShard:
        return self.shards[partition].shard

    def pending(self, partition: int) -> asyncio.Future[None] | None:
        """Done once every output queued on shard ``partition`` so far is complete; None if
        none is. A reply read from the shard's state now must not be sent before it (what
        :meth:`submit` does for the replies of shard operations)."""
        return self.shards[partition].chain

    # outputs --------------------------------------------------------------------------------------
    def _process(self, sr: ShardRuntime, out: Output) -> None:
        """Append the output's records and complete its replies once durable, in order."""
        if sr.deferred is not None:  # after the outputs waiting for the topic's creation
            sr.deferred.append(out)
            return
        if out.records or out.marker is not None:
            self._append(sr, out)
        elif out.replies and sr.chain is None:
            self._deliver(out)
        elif out.replies:
            self._complete_in_order(sr, None, out, None)
        self._reschedule(sr)

    def _append(self, sr: ShardRuntime, out: Output) -> None:
        t = now_ms()
        plog = sr.log
        if plog is None:  # the offsets topic is not there yet: created, the output waits
            self.ensure_topic()
            self._defer(sr, out)
            return
        limit = self.group_config.max_batch_bytes
        if out.marker is None and is_big(len(out.records)):  # encoded in the worker
            sr.encode_held(out, t, limit, lambda one: self._process(sr, one),
                           functools.partial(self._write, sr), sr.storage_failed)
            return
        self._write(sr, out, output_batches(out, t, limit, sr.partition), t)

    def _write(self, sr: ShardRuntime, out: Output, batches: list[bytes] | None, t: int) -> None:
        plog = sr.log  # not None: _append's caller made sure, or ShardRuntime.hold did
        if plog is None or batches is None:  # nothing appended: the shard undoes and answers
            self._process(sr, sr.shard.append_failed(out, ErrorCode.message_too_large, t))
            return
        error: BaseException | None = None
        try:
            started = time.perf_counter()
            for batch in batches:
                plog.append(batch)
            self._observe_append(time.perf_counter() - started)
        except OSError as io_error:  # disk full, I/O error: the shard decides what it means
            log.error("append to %s-%d failed: %s", OFFSETS_TOPIC, sr.partition, io_error)
            error = io_error
        except Exception as other:  # a name of its own (compiled: see connection._on_frame)
            log.exception("append to %s-%d failed", OFFSETS_TOPIC, sr.partition)
            error = other
        self._complete_in_order(sr, plog if error is None else None, out, error)

    def _defer(self, sr: ShardRuntime, out: Output) -> None:
        """``out`` and the shard's outputs after it wait for the offsets topic's creation
        (:meth:`ShardRuntime.hold`); if it fails (a full disk), the shard undoes the writes."""
        assert self.offsets_topic.creating is not None
        sr.hold(out, self.offsets_topic.creating, lambda one: self._process(sr, one), sr.storage_failed)

    def _complete_in_order(
        self,
        sr: ShardRuntime,
        plog: Log | None,
        out: Output,
        error: BaseException | None,
    ) -> None:
        """Deliver ``out``'s replies once ``plog`` is flushed and the shard's previous output
        is complete (or hand a failed append back to the shard). Callbacks, not a task: this
        runs for every offset commit."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        OutputCompletion(self._finish_output, sr, sr.chain, out, done, error).start(
            self.flusher.synced([plog]) if plog is not None else None
        )
        sr.chain = done

    def _finish_output(
        self, sr: ShardRuntime, out: Output, done: asyncio.Future[None], error: BaseException | None
    ) -> None:
        try:
            if error is not None:
                code = (
                    ErrorCode.kafka_storage_error
                    if isinstance(error, OSError)
                    else ErrorCode.unknown_server_error
                )
                self._process(sr, sr.shard.append_failed(out, code, now_ms()))
            else:
                self._deliver(out)
        finally:
            done.set_result(None)
            if sr.chain is done:
                sr.chain = None

    def _deliver(self, out: Output) -> None:
        waiting = self._waiting
        for handle, response in out.replies:
            fut = waiting.pop(handle, None)  # every handle gets exactly one reply
            if fut is not None and not fut.done():
                fut.set_result(response)

    # timers -------------------------------------------------------------------------------------
    def _reschedule(self, sr: ShardRuntime) -> None:
        # After every shard operation: what it asked to run off the loop, the share members that
        # left, then the timer.
        self._off_loop.take(sr)
        left = sr.shard.take_share_members_left()
        if left and self.share_member_left is not None:
            for group_id, member_id in left:
                try:
                    self.share_member_left(group_id, member_id)
                except Exception:  # the share layer's failure must not stop the coordinator
                    log.exception("share group %s: releasing member %s failed", group_id, member_id)
        # The heap's first entry, even a stale one: waking early costs one advance() that finds
        # nothing due (or re-queues a session timer that heartbeats moved on).
        deadline = sr.shard.next_wakeup()
        if deadline == sr.timer_at:
            return
        if sr.timer is not None:
            sr.timer.cancel()
            sr.timer = None
        sr.timer_at = deadline
        if deadline is None:
            return
        loop = asyncio.get_running_loop()
        delay = max(0.0, (deadline - now_ms()) / 1000.0)
        sr.timer = loop.call_later(delay, self._fire, sr)

    def _fire(self, sr: ShardRuntime) -> None:
        sr.timer = None
        sr.timer_at = None
        # A bounded number per shard and a time budget shared by all shards per turn of the
        # event loop (a thousand sessions ending together); the rest fire in a later turn.
        if self._timer_turns.used_up():
            sr.timer_at = sr.shard.next_wakeup()
            sr.timer = asyncio.get_running_loop().call_soon(self._fire, sr)
            return
        started = time.perf_counter()
        out = sr.shard.advance(now_ms(), TIMERS_PER_TURN)
        self._process(sr, out)
        self._timer_turns.charge(time.perf_counter() - started)

