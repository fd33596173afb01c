"""The broker's topics as consumer groups see them (:class:`coordinator.consumer.topics.
TopicsView`): ids, partition counts and names, read straight from the topic store."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

from kcoord.coordinator.consumer.topics import TopicInfo

from ..data.topics import TopicStore


class StoreTopics:
    def __init__(self, store: TopicStore) -> None:
        self._store = store

    @property
    def version(self) -> int:
        return self._store.version

    def topic(self, name: str) -> TopicInfo | None:
        topic = self._store.topics.get(name)
        if topic is None:
            return None
        return TopicInfo(topic.topic_id, topic.name, len(topic.partitions))

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        topic = self._store.by_id.get(topic_id)
        if topic is None:
            return None
        return TopicInfo(topic.topic_id, topic.name, len(topic.partitions))

    def names(self) -> Iterator[str]:
        return iter(list(self._store.topics))
