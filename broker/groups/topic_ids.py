"""Topics named by id in the offset APIs: OffsetCommit v10 and OffsetFetch v10 (KIP-848).

The ids are turned into names here, at the broker layer, through the topic store: its ids are
the ones Metadata reports (in a cluster, the ones every node adopts from the shared database).
The coordinator, and the OffsetCommitKey/Value records it writes, keep naming topics, as
Kafka's do. A topic is found by id before anything is authorised (ACLs name topics): an id no
topic has is answered UNKNOWN_TOPIC_ID on each of its partitions, whatever the ACLs, as Kafka
answers it. Answers name topics by id again; an OffsetFetch for all of a group's topics leaves
out those that no longer exist (they have no id to be named by), as Kafka does.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from kcoord.protocol.errors import ErrorCode
from kcoord.protocol.offset_fetch import Wanted

if TYPE_CHECKING:
    from ..data.topics import TopicStore

BY_ID_VERSION = 10
"""The first version of OffsetCommit and of OffsetFetch naming topics by id."""

TopicIdOf = Callable[[str], "uuid.UUID | None"]


class NamedTopic(NamedTuple):
    """A topic of an OffsetCommit v10 with its name: "" when no topic has its id (no topic is
    named "", so the other checks never see it)."""

    name: str
    topic_id: uuid.UUID | None
    partitions: tuple[Any, ...]


class FetchTopics(NamedTuple):
    """The topics of one group of an OffsetFetch v10."""

    wanted: Wanted
    """The partitions asked about by topic name, None for all of the group's."""
    ids: dict[str, uuid.UUID]
    """The id each topic of ``wanted`` was asked by."""
    unknown: tuple[tuple[uuid.UUID | None, tuple[int, ...]], ...]
    """The (id, partitions) asked about of ids no topic has."""


def _name_of(store: TopicStore, topic_id: uuid.UUID | None) -> str:
    topic = store.by_id.get(topic_id) if topic_id is not None else None
    return topic.name if topic is not None else ""


def named_commit_topics(topics: Any, store: TopicStore) -> tuple[NamedTopic, ...]:
    """The topics of an OffsetCommit v10 request with their names."""
    return tuple(NamedTopic(_name_of(store, t.topic_id), t.topic_id, t.partitions) for t in topics)


def resolve_fetch_topics(topics: Any, store: TopicStore) -> FetchTopics:
    """The topics of an OffsetFetch v10 group (kio entities with ``topic_id`` and
    ``partition_indexes``, or None for all) by name."""
    if topics is None:
        return FetchTopics(None, {}, ())
    wanted: list[tuple[str, tuple[int, ...]]] = []
    ids: dict[str, uuid.UUID] = {}
    unknown: list[tuple[uuid.UUID | None, tuple[int, ...]]] = []
    for t in topics:
        name = _name_of(store, t.topic_id)
        partitions = tuple(t.partition_indexes)
        if name:
            wanted.append((name, partitions))
            ids[name] = t.topic_id
        else:
            unknown.append((t.topic_id, partitions))
    return FetchTopics(tuple(wanted), ids, tuple(unknown))


def store_topic_id(store: TopicStore) -> TopicIdOf:
    """The id of a topic named so, None when there is none (a topic since deleted)."""

    def topic_id(name: str) -> uuid.UUID | None:
        topic = store.get(name)
        return topic.topic_id if topic is not None else None

    return topic_id


def unknown_topics_out(unknown: FetchTopics) -> list[dict[str, Any]]:
    """The answer, in OffsetFetch v10's fields, for the partitions of unknown topic ids."""
    return [
        dict(
            topic_id=topic_id,
            partitions=[
                dict(
                    partition_index=p,
                    committed_offset=-1,
                    committed_leader_epoch=-1,
                    metadata="",
                    error_code=ErrorCode.unknown_topic_id,
                )
                for p in partitions
            ],
        )
        for topic_id, partitions in unknown.unknown
    ]
