"""The broker's topics as consumer groups see them (:class:`coordinator.consumer.topics.
TopicsView`): ids, partition counts, partition racks and names, read straight from the topic
store.

A partition's racks are its replicas' (KIP-1101's topic hash reads them). A node alone holds
every partition, so each partition has this node's ``broker.rack`` (or none). In cluster mode a
partition's one replica is whichever node leads it now, which moves with node liveness rather
than with the topic, so the racks are left out there (a failover would otherwise rebalance every
group subscribed to the moved partitions)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

from kcoord.coordinator.consumer.topics import TopicInfo

from ..data.topic_model import Topic
from ..data.topics import TopicStore


class StoreTopics:
    def __init__(self, store: TopicStore, rack: str | None = None) -> None:
        self._store = store
        self._racks: tuple[str, ...] = (rack,) if rack else ()

    @property
    def version(self) -> int:
        return self._store.version

    def topic(self, name: str) -> TopicInfo | None:
        return self._info(self._store.topics.get(name))

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        return self._info(self._store.by_id.get(topic_id))

    def _info(self, topic: Topic | None) -> TopicInfo | None:
        if topic is None:
            return None
        count = len(topic.partitions)
        racks = (self._racks,) * count if self._racks else ()
        return TopicInfo(topic.topic_id, topic.name, count, racks)

    def names(self) -> Iterator[str]:
        return iter(list(self._store.topics))
