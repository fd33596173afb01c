"""The start of the data logs: DeleteRecords, retention, rolls by time and compaction of
compacted user topics.

DeleteRecords (API 21, v0-v2) moves partitions' log start offsets forward, as Kafka's
``ReplicaManager.deleteRecords``: offset -1 means the high watermark; an offset below 0 or past
the high watermark is OFFSET_OUT_OF_RANGE; internal topics are refused with
INVALID_TOPIC_EXCEPTION and topics whose ``cleanup.policy`` has no ``delete`` with
POLICY_VIOLATION; each partition answers its new low watermark (its log start offset). From then
on Fetch below it is OFFSET_OUT_OF_RANGE (consumers reset per ``auto.offset.reset``), ListOffsets
EARLIEST answers it, and lag counts from it.

Every ``log.retention.check.interval.ms`` each partition's active segment is rolled once its
first record is ``segment.ms`` old (``__consumer_offsets`` too, so that a small offsets log gets
sealed segments to compact), and old segments are deleted: those wholly below the log start
offset, and for a ``delete`` cleanup policy those past ``retention.ms`` or ``retention.bytes``
(``storage.retention``). Every ``log.cleaner.backoff.ms`` the user topics whose policy has
``compact`` are compacted like ``__consumer_offsets`` (``storage.compaction``: newest record per
key, tombstones kept ``delete.retention.ms``), when ``log.cleaner.enable``.

Whenever a log start offset moves, the log-start-offset checkpoint is written (fsynced) before
the answer and before any segment below it is deleted: an acknowledged DeleteRecords survives a
crash, and start-up never takes deleted segments for lost data.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from kcoord.protocol.errors import ErrorCode
from kcoord.storage.compaction_rules import CompactionStats, PreparedCompaction
from kcoord.storage.engine import Log, LogClosed
from kcoord.storage.retention import DeletionPlan

from ..net.offload import SLICE
from ..security.acl.model import Operation, ResourceType
from .topic_names import INTERNAL_TOPICS, quoted
from .topics import storage_error_code

if TYPE_CHECKING:
    from ..config import Config
    from ..net.connection import RequestContext
    from .topics import TopicStore

log = logging.getLogger("kcoord.topics")

HIGH_WATERMARK = -1


def now_ms() -> int:
    return int(time.time() * 1000)


class LogRetention:
    def __init__(self, config: Config, topics: TopicStore) -> None:
        self.config = config
        self.topics = topics
        self._tasks: list[asyncio.Task[None]] = []
        self._cleaned: dict[tuple[str, int], tuple[int, int]] = {}

    def start(self) -> None:
        self._tasks.append(asyncio.ensure_future(self._retention_loop()))
        if self.config["log.cleaner.enable"]:
            self._tasks.append(asyncio.ensure_future(self._cleaner_loop()))

    def stop(self) -> None:
        for task in self._tasks:
            task.cancel()

    # DeleteRecords --------------------------------------------------------------------------------
    async def delete_records(self, ctx: RequestContext, req: Any) -> Any:
        topics_out = []
        moved: list[tuple[dict[str, Any], Log]] = []
        for t in req.topics:
            parts = []
            for p in t.partitions:
                entry: dict[str, Any] = dict(
                    partition_index=p.partition_index, low_watermark=-1, error_code=0
                )
                parts.append(entry)
                if not ctx.allowed(Operation.DELETE, ResourceType.TOPIC, t.name):
                    entry["error_code"] = ErrorCode.topic_authorization_failed
                    continue
                error, plog = self._delete_one(t.name, p.partition_index, p.offset)
                if error:
                    entry["error_code"] = error
                elif plog is not None:
                    moved.append((entry, plog))
            topics_out.append(dict(name=t.name, partitions=parts))
        if moved:
            if not await self._checkpoint():
                for entry, _ in moved:
                    entry["error_code"] = ErrorCode.kafka_storage_error
            else:
                self._delete_below_start(plog for _, plog in moved)
            for entry, plog in moved:
                if entry["error_code"] == 0:
                    entry["low_watermark"] = plog.log_start_offset
        return ctx.respond(throttle_time=0, topics=topics_out)

    def _delete_one(self, name: str, partition: int, offset: int) -> tuple[int, Log | None]:
        """(error, the log whose start moved or stayed); checks in Kafka's order."""
        if name in INTERNAL_TOPICS:
            return ErrorCode.invalid_topic_exception, None
        topic = self.topics.get(name)
        plog = self.topics.partition(name, partition)
        if topic is None or plog is None:
            return ErrorCode.unknown_topic_or_partition, None
        if plog.offline is not None:
            return storage_error_code(plog.offline), None
        if not self.topics.settings_of(topic).delete:
            return ErrorCode.policy_violation, None
        hw = plog.flushed_offset
        if offset == HIGH_WATERMARK:
            offset = hw
        if offset < 0 or offset > hw:
            return ErrorCode.offset_out_of_range, None
        if plog.advance_log_start(offset):
            log.info("partition %s-%d: records below offset %d deleted", quoted(name), partition, offset)
        return 0, plog

    async def _checkpoint(self) -> bool:
        """Write the checkpoints with every log's current start (off the event loop)."""
        return await asyncio.to_thread(
            self.topics.write_checkpoints, self.topics.checkpoint_snapshot()
        )

    def _delete_below_start(self, logs: Iterable[Log]) -> None:
        for plog in logs:
            try:
                plan = plog.plan_deletion(now_ms())
                if plan is not None:
                    plog.delete_planned(plan)
            except (OSError, LogClosed) as e:  # an I/O error; a topic deleted meanwhile
                log.error("deleting old segments of %s failed: %s", plog.name, e)

    # retention -------------------------------------------------------------------------------------
    async def _retention_loop(self) -> None:
        interval = self.config["log.retention.check.interval.ms"] / 1000.0
        while True:
            await asyncio.sleep(interval)
            try:
                await self.run_retention()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("a retention pass failed")

    async def run_retention(self) -> None:
        """One pass over every partition: roll by time, then delete old segments."""
        now = now_ms()
        plans: list[tuple[Log, DeletionPlan]] = []
        work = 0
        for topic in list(self.topics.topics.values()):
            settings = self.topics.settings_of(topic)
            for plog in list(topic.partitions):
                work += 1
                if work % SLICE == 0:
                    await asyncio.sleep(0)  # let requests in between slices of partitions
                if plog.offline is not None:
                    continue
                try:
                    if plog.roll_if_due(now, settings.segment_ms):
                        log.info("partition %s: rolled (segment.ms %d)", plog.name, settings.segment_ms)
                    delete = settings.delete and topic.name not in INTERNAL_TOPICS
                    plan = plog.plan_deletion(
                        now,
                        retention_ms=settings.retention_ms if delete else -1,
                        retention_bytes=settings.retention_bytes if delete else -1,
                    )
                except (OSError, LogClosed) as e:  # an I/O error; a topic deleted meanwhile
                    log.error("retention of %s failed: %s", plog.name, e)
                    continue
                if plan is not None:
                    plog.advance_log_start(plan.new_log_start)
                    plans.append((plog, plan))
        if not plans:
            return
        if not await self._checkpoint():
            return  # the segments stay until a checkpoint holds their deletion
        for plog, plan in plans:
            try:
                plog.delete_planned(plan)
            except (OSError, LogClosed) as e:  # an I/O error; a topic deleted meanwhile
                log.error("deleting old segments of %s failed: %s", plog.name, e)

    # compaction of user topics ---------------------------------------------------------------------
    async def _cleaner_loop(self) -> None:
        backoff = self.config["log.cleaner.backoff.ms"] / 1000.0
        while True:
            await asyncio.sleep(backoff)
            try:
                await self.compact_topics()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("a compaction pass failed")

    async def compact_topics(self) -> None:
        """Compact every partition of the user topics whose cleanup.policy has compact."""
        for topic in list(self.topics.topics.values()):
            if topic.name in INTERNAL_TOPICS:
                continue  # compacted by the group runtime
            settings = self.topics.settings_of(topic)
            if not settings.compact:
                continue
            for p, plog in enumerate(topic.partitions):
                try:
                    await compact_if_grown(
                        plog,
                        self._cleaned,
                        (topic.name, p),
                        delete_retention_ms=settings.delete_retention_ms,
                        current=functools.partial(self._is_current, topic.name, p, plog),
                    )
                except (OSError, LogClosed) as e:  # an I/O error; a topic deleted meanwhile
                    log.error("compaction of %s failed: %s", plog.name, e)

    def _is_current(self, name: str, p: int, plog: Log) -> bool:
        return self.topics.partition(name, p) is plog


async def compact_if_grown(
    plog: Log,
    cleaned: dict[Any, tuple[int, int]],
    key: Any,
    *,
    delete_retention_ms: int,
    current: Callable[[], bool],
    force: bool = False,
    clock: Callable[[], int] = now_ms,
) -> None:
    """Compact ``plog`` if it is online, has something to clean and grew or sealed a segment
    since its last compaction (``cleaned[key]``; ``force``: even if not): the first phase in a
    worker thread, the second (:func:`commit_compaction`) only if ``current()`` still says
    ``plog`` is the partition's log. OSError if a read or the database failed (the next pass
    tries again)."""
    if plog.offline is not None or not plog.compactable:
        return
    size, sealed = cleaned.get(key, (0, 0))
    if not force and plog.size_bytes <= size and len(plog.segment_base_offsets) == sealed:
        return  # nothing new since the last compaction (a roll seals more to clean)
    plan = await asyncio.to_thread(
        plog.prepare_compaction, now_ms=clock(), delete_retention_ms=delete_retention_ms
    )
    if not current():
        plog.abort_compaction(plan)
        return
    stats = await commit_compaction(plog, plan)
    cleaned[key] = (plog.size_bytes, len(plog.segment_base_offsets))
    if not stats.stale and stats.bytes_before != stats.bytes_after:
        log.info(
            "compacted %s: %d -> %d bytes, %d -> %d records in %.3f s",
            plog.name,
            stats.bytes_before,
            stats.bytes_after,
            stats.records_before,
            stats.records_after,
            stats.seconds,
        )


async def commit_compaction(plog: Log, plan: PreparedCompaction) -> CompactionStats:
    """A compaction's second phase: on the event loop where the engine swaps files under the
    appends, in a worker thread where it is a database transaction
    (``Log.compaction_commits_anywhere``)."""
    if plog.compaction_commits_anywhere:
        return await asyncio.to_thread(plog.commit_compaction, plan)
    return plog.commit_compaction(plan)
