"""The topic registry's value types (broker/data/topics.py re-exports them): a topic and its
partition logs, the partition limits, a reservation (a creation, growth or deletion under way),
and the error a topic change fails with."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field

from kcoord.storage.engine import Log

from .topic_names import INTERNAL_TOPICS


class TopicError(ValueError):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class Topic:
    name: str
    topic_id: uuid.UUID
    partitions: list[Log] = field(default_factory=list)

    @property
    def internal(self) -> bool:
        return self.name in INTERNAL_TOPICS


@dataclass(frozen=True, slots=True)
class PartitionLimits:
    """``max.broker.partitions`` and ``max.partitions.per.request``."""

    max_broker_partitions: int = 10000
    max_partitions_per_request: int = 4000


@dataclass(eq=False)
class Reservation:
    """A change reserved on the event loop and not yet done: partitions ``first..first+count-1``
    of ``name`` (a new topic when ``first`` is 0)."""

    name: str
    topic_id: uuid.UUID
    first: int
    count: int
    segment_bytes: int | None = None
    done: asyncio.Future[Topic] | None = None  # set by TopicStore.start
    configs: dict[str, str] = field(default_factory=dict)
    """A new topic's config overrides (broker/data/topic_configs.py), stored before its partitions."""
    deleting: bool = False
    """A deletion (``TopicStore.retire``): the topic is gone, its name taken until it is erased."""

    @property
    def new_topic(self) -> bool:
        return self.first == 0
