"""An internal topic (``__consumer_offsets``, ``__transaction_state``, ``__share_group_state``)
as the runtime that owns it holds it: opened at start-up when it is stored, created on first use
otherwise.

The creation's storage work (50 partitions' files, or rows, made durable: 100-300 ms) runs in a
worker thread, so the event loop serves everyone meanwhile; until the topic is there its owner
answers COORDINATOR_NOT_AVAILABLE (Kafka's answer while its internal topic is being created),
or, for the group coordinator's writes, holds them until it is. A failed creation (a full disk)
leaves nothing behind, is logged at most once a minute and is tried again on the next use.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable

from .topics import Topic, TopicError, TopicStore

log = logging.getLogger("kcoord.topics")

FAILURE_LOG_INTERVAL_S = 60.0
"""Clients retry FindCoordinator every second or so: a failed creation is said once a minute."""


class InternalTopic:
    """One internal topic of its owner (see the module docstring). ``opened`` is called (on the
    loop) with the topic once it is open: the owner takes its partitions' logs then."""

    def __init__(
        self,
        topics: TopicStore,
        name: str,
        partitions: int,
        segment_bytes: int,
        opened: Callable[[Topic], None],
    ) -> None:
        self.topics = topics
        self.name = name
        self.partitions = partitions
        self.segment_bytes = segment_bytes
        self._opened = opened
        self.topic: Topic | None = None
        self.creating: asyncio.Task[None] | None = None
        """The creation under way, if one is."""
        self._failure_logged = -math.inf

    def open_now(self) -> None:
        """Open it (creating it if need be) on the calling thread: at start-up, for a topic
        that is stored, before anything is served. Raises TopicError."""
        topic = self.topics.get(self.name)
        if topic is None:
            topic = self.topics.open_internal(self.name, self.partitions, self.segment_bytes)
        self._open(topic)

    def ensure(self) -> bool:
        """True once the topic is open; otherwise its creation is started (if it is not under
        way) and False: answer COORDINATOR_NOT_AVAILABLE, or wait for :attr:`creating`."""
        if self.topic is not None:
            return True
        if self.creating is None:
            self.creating = asyncio.ensure_future(self._create())
        return False

    async def wait(self) -> bool:
        """Until the topic is open (created if need be); False if the creation failed."""
        if self.ensure():
            return True
        assert self.creating is not None
        await asyncio.shield(self.creating)
        return self.topic is not None

    async def _create(self) -> None:
        try:
            topic = self.topics.get(self.name)
            if topic is None:
                topic = await self.topics.open_internal_off_loop(
                    self.name, self.partitions, self.segment_bytes
                )
        except TopicError as e:
            now = time.monotonic()
            if now - self._failure_logged >= FAILURE_LOG_INTERVAL_S:
                self._failure_logged = now
                log.error("could not create %s (retried on use): %s", self.name, e)
            return
        finally:
            self.creating = None
        self._open(topic)
        log.info("created %s with %d partitions", self.name, self.partitions)

    def _open(self, topic: Topic) -> None:
        self.topic = topic
        self._opened(topic)
