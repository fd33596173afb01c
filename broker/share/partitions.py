"""The broker's share partitions (Kafka's SharePartitionManager): one
:class:`~share.partition.SharePartition` per share group and topic partition fetched here, the
share sessions, and the I/O around them.

- **Loading.** A share partition is loaded on first use from the share coordinator (the
  :class:`~broker.share.persister.SharePersister`). One it has never heard of (start offset -1)
  starts where the group's ``share.auto.offset.reset`` says: ``latest`` (the default) at the high
  watermark, ``earliest`` at the log start, ``by_duration:<ISO-8601>`` at the first batch written
  at or after now less the duration (else the high watermark); that start is persisted
  (``initialize``) before the share partition is used.
- **One change at a time.** Every change of a share partition (acquire, acknowledge, release,
  expiry) holds its lock until what it hands out (``take_write``) is durable: an acknowledgement
  is answered only then. A write the share coordinator refuses drops the share partition from
  memory; the next use loads it again from what is durable, so the refused change is undone.
- **Lock expiry.** One loop timer, armed for the earliest ``next_expiry`` of all share
  partitions; expirations are persisted like any change.
- **The log.** Reads (``broker/share/reading.py``) go up to the high watermark, or the last
  stable offset under the group's ``share.isolation.level=read_committed``. The log start moving
  (DeleteRecords, retention) is noticed before each acquisition (``advance_start``); a deleted
  topic's share partitions are dropped (and their state deleted) when the topic registry changes.
- **Waking long polls.** :meth:`available` is a future resolved whenever records become
  available again (released, expired, a member gone), beside the topic registry's
  ``appended_future`` for new records.
- **Counting.** :attr:`SharePartitionManager.counters` (broker/share/counters.py): records
  acknowledged by type, acquisition locks timed out (the manager expires the locks itself before
  each change, so every expiry is counted), and per share partition its acknowledgements;
  :meth:`loaded_partitions` is what ``/metrics`` and the console read.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine, Hashable, Iterable, Sequence
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kcoord.coordinator.config import GroupOverrides, no_overrides
from kcoord.protocol.errors import ErrorCode
from kcoord.share.model import AckType, AcquiredRange, SharePartitionKey
from kcoord.share.partition import Acknowledgement, ShareLimits, SharePartition
from kcoord.share.sessions import ShareSessionCache
from kcoord.storage.engine import Log, OffsetOutOfRange

from ..data.log_read import high_watermark
from ..data.topics import storage_error_code
from ..groups.group_configs import auto_offset_reset
from .counters import PartitionCounters, ShareCounters
from .persister import SharePersister, ShareStateError
from .reading import aborted_in, read_from, readable_end

if TYPE_CHECKING:
    from ..config import Config
    from ..data.topics import TopicStore

log = logging.getLogger("kcoord.share")


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


@dataclass(eq=False)
class _Held:
    """A loaded share partition, its lock and the log it reads."""

    key: SharePartitionKey
    topic: str
    partition: SharePartition
    plog: Log
    leader_epoch: int
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    dropped: bool = False
    counters: PartitionCounters = field(default_factory=PartitionCounters)


@dataclass(frozen=True, slots=True)
class LoadedSharePartition:
    """A share partition held here, as ``/metrics`` and the console read it (read-only by
    convention)."""

    key: SharePartitionKey
    topic: str
    partition: SharePartition
    log: Log
    counters: PartitionCounters


@dataclass(frozen=True, slots=True)
class Acquired:
    """One share partition's part of a ShareFetch: the ranges acquired and the batches holding
    them, or an error code."""

    ranges: list[AcquiredRange]
    records: bytes
    error: int = 0

    @property
    def count(self) -> int:
        return sum(r.last_offset - r.first_offset + 1 for r in self.ranges)


NOTHING = Acquired([], b"")


class SharePartitionManager:
    """Every share partition of this broker and the share sessions (module docstring)."""

    def __init__(
        self,
        config: Config,
        topics: TopicStore,
        persister: SharePersister,
        overrides: GroupOverrides = no_overrides,
        leader_epoch: Callable[[str, int], int] = lambda topic, partition: 0,
        clock: Callable[[], int] = wall_clock_ms,
        observe_load: Callable[[float], None] | None = None,
    ) -> None:
        self.topics = topics
        self.persister = persister
        self.overrides = overrides
        self._leader_epoch = leader_epoch
        self.clock = clock
        self.default_lock_ms: int = config["group.share.record.lock.duration.ms"]
        self.limits = ShareLimits(
            max_in_flight=config["group.share.partition.max.record.locks"],
            delivery_count_limit=config["group.share.delivery.count.limit"],
        )
        self.sessions = ShareSessionCache(config["group.share.max.share.sessions"])
        self._held: dict[SharePartitionKey, _Held] = {}
        self._loading: dict[SharePartitionKey, asyncio.Future[_Held]] = {}
        self._deadlines: list[tuple[int, int, SharePartitionKey]] = []
        self._seq = 0
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: int | None = None
        self._available: asyncio.Future[None] | None = None
        self._topics_version = -1
        self._background: set[asyncio.Task[Any]] = set()
        self.counters = ShareCounters()
        self._observe_load = observe_load
        """Told the seconds each share partition took to load (read, initialized)."""

    # lifecycle -----------------------------------------------------------------------------------
    def start(self) -> None:
        self._topics_version = self.topics.version

    async def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for task in list(self._background):
            task.cancel()
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)

    # the group's settings ------------------------------------------------------------------------
    def lock_duration_ms(self, group_id: str) -> int:
        value = self.overrides(group_id).get("share.record.lock.duration.ms")
        return int(value) if value is not None else self.default_lock_ms

    def read_committed(self, group_id: str) -> bool:
        return self.overrides(group_id).get("share.isolation.level") == "read_committed"

    def _reset_offset(self, group_id: str, plog: Log) -> int:
        """Where a new share partition starts (``share.auto.offset.reset``)."""
        # Stored values are validated (groups/group_configs.py): this reads, never refuses.
        kind, back_ms = auto_offset_reset(self.overrides(group_id).get("share.auto.offset.reset", "latest"))
        if kind == "earliest":
            return plog.log_start_offset
        if back_ms is not None:
            found = plog.offset_for_timestamp(self.clock() - back_ms)
            if found is not None:
                return max(found[0], plog.log_start_offset)
        return high_watermark(plog)

    # loading ---------------------------------------------------------------------------------------
    def loaded(self, key: SharePartitionKey) -> SharePartition | None:
        held = self._held.get(key)
        return held.partition if held is not None else None

    async def _get(self, key: SharePartitionKey, plog: Log, topic: str) -> _Held:
        held = self._held.get(key)
        if held is not None and held.plog is plog:
            return held
        if held is not None:  # the log was replaced (reopened): same state, new log
            held.plog = plog
            return held
        loading = self._loading.get(key)
        if loading is None:
            loading = asyncio.ensure_future(self._load(key, plog, topic))
            self._loading[key] = loading
            loading.add_done_callback(lambda _: self._loading.pop(key, None))
        return await asyncio.shield(loading)

    async def _load(self, key: SharePartitionKey, plog: Log, topic: str) -> _Held:
        started = time.perf_counter()
        state = await self.persister.read(key)
        if state.start_offset < 0:
            start = self._reset_offset(key.group_id, plog)
            await self.persister.initialize(key, state.state_epoch, start)
            state = await self.persister.read(key)
            if state.start_offset < 0:
                raise ShareStateError(ErrorCode.coordinator_not_available, "not initialized")
        partition = SharePartition(state, self.limits)
        held = _Held(key, topic, partition, plog, self._leader_epoch(topic, key.partition))
        self._held[key] = held
        if self._observe_load is not None:
            self._observe_load(time.perf_counter() - started)
        log.info(
            "share partition %s loaded: start offset %d, state epoch %d",
            key.coordinator_key(), partition.start_offset, partition.state_epoch,
        )
        return held

    @asynccontextmanager
    async def _locked(self, key: SharePartitionKey, plog: Log, topic: str) -> AsyncIterator[_Held]:
        """The share partition, loaded if need be, under its lock."""
        while True:
            held = await self._get(key, plog, topic)
            async with held.lock:
                if held.dropped:
                    continue  # dropped while we waited: load it again
                yield held
                return

    def _drop(self, held: _Held) -> None:
        held.dropped = True
        if self._held.get(held.key) is held:
            del self._held[held.key]

    async def _persist(self, held: _Held) -> int:
        """Make the share partition's changes durable (its lock held); 0, or the error the
        share coordinator answered (the share partition is dropped then)."""
        sp = held.partition
        write = sp.take_write()
        if write is not None:
            try:
                await self.persister.write(held.key, sp.state_epoch, held.leader_epoch, write)
            except ShareStateError as e:
                log.warning(
                    "share state write for %s failed (error %d): dropping it from memory",
                    held.key.coordinator_key(), e.code,
                )
                self._drop(held)
                return e.code
        self._schedule(held)
        return 0

    # operations ----------------------------------------------------------------------------------
    async def acquire(
        self,
        key: SharePartitionKey,
        topic: str,
        plog: Log,
        member_id: str,
        max_records: int,
        max_bytes: int,
    ) -> Acquired:
        """Acquire up to about ``max_records`` records (reading about ``max_bytes``) for
        ``member_id``. Carried to its end if the caller is cancelled (its client gone): a
        change half made would leave memory and the persisted state apart."""
        return await asyncio.shield(
            self._acquire(key, topic, plog, member_id, max_records, max_bytes)
        )

    async def _acquire(
        self,
        key: SharePartitionKey,
        topic: str,
        plog: Log,
        member_id: str,
        max_records: int,
        max_bytes: int,
    ) -> Acquired:
        try:
            async with self._locked(key, plog, topic) as held:
                sp = held.partition
                self._expire_locks(sp)
                log_start = plog.log_start_offset
                if log_start > sp.start_offset:
                    sp.advance_start(log_start)
                offset = sp.fetch_offset()
                ranges: list[AcquiredRange] = []
                records = b""
                if offset is not None:
                    committed = self.read_committed(key.group_id)
                    end = readable_end(plog, committed)
                    if plog.reads_locally(offset):
                        read = read_from(plog, offset, end, max_bytes)
                    else:  # below what the engine keeps in memory: a database query
                        read = await asyncio.to_thread(read_from, plog, offset, end, max_bytes)
                    if read.headers:
                        batches = read.log_batches(aborted_in(plog, read) if committed else ())
                        ranges = sp.acquire(
                            member_id, batches, max_records,
                            self.lock_duration_ms(key.group_id), self.clock(),
                        )
                        records = read.covering(ranges)
                error = await self._persist(held)
                if error:
                    return Acquired([], b"", error)
                return Acquired(ranges, records)
        except ShareStateError as e:
            return Acquired([], b"", e.code)
        except OffsetOutOfRange:  # the log start moved under us: the next round sees it
            return NOTHING
        except OSError as e:
            log.error("share fetch read of %s failed: %s", plog.name, e)
            return Acquired([], b"", storage_error_code(e))

    async def acknowledge(
        self, key: SharePartitionKey, member_id: str, acks: Sequence[Acknowledgement]
    ) -> int:
        """Apply one partition's acknowledgements; answered once durable (and carried to its
        end if the caller is cancelled). A share partition not loaded here is
        UNKNOWN_TOPIC_OR_PARTITION, as Kafka answers."""
        return await asyncio.shield(self._acknowledge(key, member_id, acks))

    async def _acknowledge(
        self, key: SharePartitionKey, member_id: str, acks: Sequence[Acknowledgement]
    ) -> int:
        held = self._held.get(key)
        if held is None:
            return ErrorCode.unknown_topic_or_partition
        try:
            async with self._locked(key, held.plog, held.topic) as held:
                sp = held.partition
                self._expire_locks(sp)
                now = self.clock()
                code = sp.acknowledge(member_id, acks, self.lock_duration_ms(key.group_id), now)
                if code:
                    return code
                error = await self._persist(held)
                if not error:
                    self.counters.count_acknowledgements(held.counters, acks, now)
        except ShareStateError as e:
            return e.code
        if any(t == AckType.RELEASE for a in acks for t in a.types):
            self._notify_available()
        return error

    async def release_member(
        self, group_id: str, member_id: str, keys: Sequence[SharePartitionKey] | None = None
    ) -> None:
        """Release what ``member_id`` holds in the group's share partitions (``keys`` only, when
        given)."""
        targets = [
            h for k, h in list(self._held.items())
            if k.group_id == group_id and (keys is None or k in keys)
        ]
        released = 0
        for target in targets:
            try:
                async with self._locked(target.key, target.plog, target.topic) as held:
                    self._expire_locks(held.partition)
                    n = held.partition.release_member(member_id, self.clock())
                    if n:
                        released += n
                        await self._persist(held)
            except ShareStateError as e:
                log.warning("releasing %s's records failed: %s", member_id, e)
        if released:
            log.info("released %d record(s) of member %s of share group %s", released, member_id, group_id)
            self._notify_available()

    async def forget(self, keys: Iterable[SharePartitionKey]) -> None:
        """Drop these share partitions from memory, once any load or change of them under way
        is over: their persisted state was set or deleted by an admin
        (AlterShareGroupOffsets, DeleteShareGroupOffsets), and their next use loads it."""
        dropped = 0
        for key in keys:
            loading = self._loading.get(key)
            if loading is not None:
                with suppress(Exception):
                    await asyncio.shield(loading)
            held = self._held.get(key)
            if held is None:
                continue
            async with held.lock:
                self._drop(held)
                dropped += 1
        if dropped:
            log.info("%d share partition(s) dropped from memory: their state was changed", dropped)

    def member_left(self, group_id: str, member_id: str) -> None:
        """A member left the share group or was fenced (the group coordinator tells): its
        session goes and its records are released."""
        self.sessions.remove(group_id, member_id)
        self._in_background(self.release_member(group_id, member_id))

    def connection_closed(self, owner: Hashable) -> None:
        """A connection closed: its share sessions go, their members' records are released."""
        for session in self.sessions.connection_closed(owner):
            self._in_background(self.release_member(session.group_id, session.member_id))

    # topics deleted ------------------------------------------------------------------------------
    def forget_deleted_topics(self) -> None:
        """Drop the share partitions and session entries of topics deleted since the last look,
        and delete their state."""
        if self.topics.version == self._topics_version:
            return
        self._topics_version = self.topics.version
        live = self.topics.by_id
        gone = [h for k, h in self._held.items() if k.topic_id not in live]
        if not gone:
            return
        for held in gone:
            self._drop(held)
        ids: set[uuid.UUID] = {h.key.topic_id for h in gone}
        self.sessions.forget_topics(ids)
        log.info("dropped %d share partition(s) of deleted topics", len(gone))
        self._in_background(self._delete_state([h.key for h in gone]))

    async def _delete_state(self, keys: list[SharePartitionKey]) -> None:
        try:
            await self.persister.delete(keys)
        except ShareStateError as e:
            log.warning("deleting the share state of deleted topics failed: %s", e)

    # long polls ----------------------------------------------------------------------------------
    def available(self) -> asyncio.Future[None]:
        """A future resolved the next time records become available again."""
        if self._available is None or self._available.done():
            self._available = asyncio.get_running_loop().create_future()
        return self._available

    def _notify_available(self) -> None:
        fut, self._available = self._available, None
        if fut is not None and not fut.done():
            fut.set_result(None)

    # lock expiry ---------------------------------------------------------------------------------
    def _schedule(self, held: _Held) -> None:
        at = held.partition.next_expiry()
        if at is None:
            return
        self._seq += 1
        heapq.heappush(self._deadlines, (at, self._seq, held.key))
        self._arm()

    def _arm(self) -> None:
        if not self._deadlines:
            return
        at = self._deadlines[0][0]
        if self._timer is not None and self._timer_at is not None and self._timer_at <= at:
            return
        if self._timer is not None:
            self._timer.cancel()
        delay = max(0.0, (at - self.clock()) / 1000.0)
        self._timer = asyncio.get_running_loop().call_later(delay, self._expire_due)
        self._timer_at = at

    def _expire_due(self) -> None:
        self._timer = None
        self._timer_at = None
        now = self.clock()
        due: set[SharePartitionKey] = set()
        while self._deadlines and self._deadlines[0][0] <= now:
            due.add(heapq.heappop(self._deadlines)[2])
        for key in due:
            self._in_background(self._expire(key))
        self._arm()

    async def _expire(self, key: SharePartitionKey) -> None:
        held = self._held.get(key)
        if held is None:
            return
        try:
            async with self._locked(key, held.plog, held.topic) as held:
                n = self._expire_locks(held.partition)
                if n:
                    log.info("%d record lock(s) of %s expired", n, key.coordinator_key())
                    await self._persist(held)
                else:
                    self._schedule(held)
        except ShareStateError as e:
            log.warning("expiring locks of %s failed: %s", key.coordinator_key(), e)
            return
        if n:
            self._notify_available()

    def _expire_locks(self, sp: SharePartition) -> int:
        """Expire the locks passed now (before a change, which would expire them uncounted);
        how many records."""
        n = sp.expire(self.clock())
        self.counters.lock_timeouts += n
        return n

    # what is read of them --------------------------------------------------------------------------
    def loaded_partitions(self, group_id: str | None = None) -> list[LoadedSharePartition]:
        """The share partitions held here (of ``group_id`` only, when given), in the order they
        were loaded. A look at every one held: for scrapes and the console, not the request
        path."""
        return [
            LoadedSharePartition(h.key, h.topic, h.partition, h.plog, h.counters)
            for h in list(self._held.values())
            if group_id is None or h.key.group_id == group_id
        ]

    def _in_background(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
