"""Offline partitions served again without a restart, where the storage engine allows it.

A PostgreSQL log goes offline when a write to the database fails (storage/postgres/log.py).
:class:`LogReopener` looks for offline partitions every second; when there are some and the
engine says they are worth trying (``StorageEngine.may_reopen``: the database answers), it opens
each one anew off the event loop (the engine replays its producer state from what was
committed) and puts the new log in the topic's place on the loop. The files engine never says
so: a log that failed on disk stays offline until a restart, as a failed log directory does in
Kafka.

The coordinators of the internal topics are told next (``handlers``, by topic name): what they
hold in memory may differ from what the database holds (a commit whose answer was lost is there
although its caller was told it failed), so the group coordinator reloads the partition's shard
from the log and the transaction coordinator the partition's transactional ids, as at start-up.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping

from kcoord.storage.engine import Log

from .topics import TopicStore

log = logging.getLogger("kcoord.storage")

Reopened = Callable[[int, Log], Awaitable[None]]
"""``(partition, log)``: an internal topic's partition is online again with ``log``."""

INTERVAL_S = 1.0


class LogReopener:
    def __init__(
        self, topics: TopicStore, handlers: Mapping[str, Reopened], interval_s: float = INTERVAL_S
    ) -> None:
        self.topics = topics
        self.handlers = handlers
        self.interval_s = interval_s

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                await self.reopen()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("opening offline partitions again failed")

    async def reopen(self) -> int:
        """Open the offline partitions again if the engine says so; how many came back."""
        topics = self.topics
        offline = topics.offline_partitions()
        if not offline or not await asyncio.to_thread(topics.engine.may_reopen):
            return 0
        back = 0
        for topic, index, old in offline:
            new = await asyncio.to_thread(
                topics.engine.open_log, topic.name, index, topic.topic_id, topics.spec_of(topic)
            )
            if new.offline is not None:
                log.debug("%s-%d stays offline: %s", topic.name, index, new.offline)
                continue
            if not topics.replace_log(topic, index, old, new):
                new.close()
                continue
            back += 1
            log.info(
                "partition %s-%d is online again: offsets %d to %d",
                topic.name,
                index,
                new.log_start_offset,
                new.log_end_offset - 1,
            )
            handler = self.handlers.get(topic.name)
            if handler is not None:
                await handler(index, new)
        return back
