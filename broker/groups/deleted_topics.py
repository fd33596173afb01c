"""Offsets of deleted topics: tells every shard served here to tombstone them (Kafka's
GroupCoordinatorService.onPartitionsDeleted, which Kafka's brokers call for the topics a
metadata update deletes).

The topic store calls :meth:`DeletedTopicOffsets.topic_deleted` whenever a topic leaves it:
deleted by DeleteTopics here, or, in cluster mode, by another node (the member loop's
``TopicStore.forget``). Each node thus cleans the ``__consumer_offsets`` partitions it leads,
which is what Kafka's coordinator does (its write operation runs on the shards led by the
broker); a partition that moves later carries its tombstones in its log.

The work runs in a task of its own, off the deleting request: the topics deleted meanwhile are
taken together, then every active shard goes through its groups holding offsets in slices of
about :data:`~broker.net.offload.SLICE` offsets (``coordinator.topic_deletion``), each a shard
operation whose tombstones are appended and made durable before the next, with a pause for
the event loop between two, so that deleting a topic that thousands of groups committed to
never holds the loop. A shard still loading is waited for (its groups are in its log); one
that is not served here is skipped (its leader cleans it).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from kcoord.coordinator.messages import DeletedTopic, TopicsDeletedRequest, TopicsDeletedResponse
from kcoord.coordinator.shard_views import ShardMode
from kcoord.protocol.errors import ErrorCode

from ..net.offload import SLICE, pause
from .runtime import now_ms

if TYPE_CHECKING:
    from ..data.topic_model import Topic
    from .runtime import GroupRuntime
    from .write_path import ShardRuntime

log = logging.getLogger("kcoord.coordinator")


class DeletedTopicOffsets:
    """See the module docstring."""

    def __init__(self, runtime: GroupRuntime) -> None:
        self._runtime = runtime
        self._queued: list[DeletedTopic] = []
        self._task: asyncio.Task[None] | None = None
        self.tombstones = 0
        """Offsets removed because their topic was deleted, since start."""

    def topic_deleted(self, topic: Topic) -> None:
        """``topic`` left the topic store (any thread that holds the event loop)."""
        self._queued.append(
            DeletedTopic(topic.name, topic.topic_id, len(topic.partitions), now_ms())
        )
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())

    def idle(self) -> bool:
        """Whether every deletion seen so far has been handled."""
        return not self._queued and (self._task is None or self._task.done())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        while self._queued:
            topics, self._queued = tuple(self._queued), []
            await self._runtime.loads_done()
            for sr in self._runtime.shards:
                try:
                    await self._clean(sr, topics)
                except asyncio.CancelledError:
                    raise
                except Exception:  # one shard's failure must not keep the others uncleaned
                    log.exception(
                        "partition %d: removing the offsets of deleted topics failed", sr.partition
                    )

    async def _clean(self, sr: ShardRuntime, topics: tuple[DeletedTopic, ...]) -> None:
        shard = sr.shard
        if shard.mode is not ShardMode.ACTIVE:
            return
        runtime = self._runtime
        ids = tuple(shard.offset_holders())
        start = removed = 0
        while start < len(ids):
            answer = await runtime.call(
                sr.partition, shard.topics_deleted, TopicsDeletedRequest(topics, ids, start, SLICE)
            )
            assert isinstance(answer, TopicsDeletedResponse)
            if answer.error != ErrorCode.none:
                return  # moved away (or reloading) meanwhile: its new leader's to clean
            start = answer.next
            removed += answer.tombstones
            await pause()
        if removed:
            self.tombstones += removed
            log.info(
                "partition %d: %d offsets of deleted topics %s removed",
                sr.partition,
                removed,
                ", ".join(sorted({t.name for t in topics})),
            )
