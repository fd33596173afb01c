"""Offsets of deleted topics: Kafka's onPartitionsDeleted, one slice of a shard's groups at a time.

When a topic is deleted, Kafka's group coordinator writes a tombstone for every offset any group
of the shard committed on one of its partitions, pending transactional ones included (their
transactions stay open), so that a topic created again under the same name starts without
them. The groups themselves stay: one left without offsets goes at the next retention check,
as any group whose offsets expired (Kafka's cleanupGroupMetadata).

:func:`drop_deleted_topics` does that for the groups of one
:class:`~coordinator.messages.TopicsDeletedRequest`: the runtime lists the shard's groups
holding offsets (:meth:`coordinator.shard_views.ShardViews.offset_holders`) and sends them in
slices, each stopping once it has looked at about ``max_offsets`` offsets, so that a shard
holding millions of offsets never holds the event loop for long.

Only offsets committed at or before the deletion go: the runtime may reach a group after the
topic was created again (in a cluster, another node may create it at once), and an offset
committed since is the new topic's. An offset named by a topic id (OffsetCommit v10) that is
not the deleted topic's is the new topic's too. Like the retention check's tombstones, these
are independent records: if they cannot be appended the offsets stay forgotten here, and a
reload of the partition brings them back.
"""

from __future__ import annotations

from collections.abc import Iterable

from kcoord.coordinator.messages import (
    DeletedTopic,
    TopicsDeletedRequest,
    TopicsDeletedResponse,
)
from kcoord.coordinator.offsets import OffsetManager
from kcoord.coordinator.schemas import OffsetCommitValue
from kcoord.protocol.errors import ErrorCode

__all__ = ["drop_deleted_topics"]


def _deleted(topic: DeletedTopic | None, partition: int, value: OffsetCommitValue) -> bool:
    return (
        topic is not None
        and partition < topic.partitions
        and value.commit_timestamp <= topic.deleted_at_ms
        and (value.topic_id is None or value.topic_id == topic.topic_id)
    )


def drop_deleted_topics(offsets: OffsetManager, req: TopicsDeletedRequest) -> TopicsDeletedResponse:
    """Tombstone the deleted topics' offsets of the groups of ``req``'s slice (module
    docstring); the answer says where the next slice starts."""
    deleted = {t.name: t for t in req.topics}
    pending = offsets.pending
    ids = req.group_ids
    i = req.start
    visited = tombstones = 0
    candidates = sum(t.partitions for t in req.topics)
    every_partition: list[tuple[str, int]] = []  # made when a group first needs it
    while i < len(ids) and visited < req.max_offsets:
        group_id = ids[i]
        i += 1
        cache = offsets.of(group_id)
        found: Iterable[tuple[tuple[str, int], OffsetCommitValue]]
        if len(cache) <= candidates:
            visited += len(cache) + 1
            found = cache.items()
        else:  # a group with more offsets than the deleted topics have partitions
            visited += candidates + 1
            if not every_partition:
                every_partition = [(t.name, p) for t in req.topics for p in range(t.partitions)]
            found = ((tp, cache[tp]) for tp in every_partition if tp in cache)
        gone = {tp: None for tp, v in found if _deleted(deleted.get(tp[0]), tp[1], v)}
        if pending.has_open(group_id):
            for held in pending.group_snapshot(group_id).values():
                visited += len(held)
                for tp, entry in held.items():
                    value = entry.value
                    if value is not None and _deleted(deleted.get(tp[0]), tp[1], value):
                        gone[tp] = None
        if gone:
            offsets.drop(group_id, sorted(gone))
            tombstones += len(gone)
    return TopicsDeletedResponse(ErrorCode.none, i, tombstones)
