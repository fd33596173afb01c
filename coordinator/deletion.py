"""DeleteGroups, and its undo: what a failed deletion must answer and put back.

:func:`delete_groups` runs a DeleteGroups in a shard (it spans the group managers and the
offsets).

A DeleteGroups changes the shard at once (the groups and their offsets are forgotten, their
tombstones written into the Output). If those tombstones cannot be appended, the runtime hands
the Output back and :func:`undo_delete` answers the deleted groups with the storage error and
puts each group and its offsets back as they were, as Kafka's coordinator reverts its
in-memory state on a failed write -- unless a group of that id (of either type) was created
since: its records are newer, and it stays.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kcoord.coordinator.classic.group import ClassicGroup
from kcoord.coordinator.messages import DeleteGroupResult, DeleteGroupsRequest, DeleteGroupsResponse
from kcoord.coordinator.offsets import OffsetManager, Offsets
from kcoord.coordinator.output import Operation
from kcoord.coordinator.share.group import ShareGroup
from kcoord.coordinator.write_size import tombstones_batch_size
from kcoord.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from kcoord.coordinator.classic.manager import ClassicGroupManager
    from kcoord.coordinator.consumer.manager import ConsumerGroupManager
    from kcoord.coordinator.share.manager import ShareGroupManager

__all__ = ["DeleteWriteFailed", "delete_groups", "deleted_state", "undo_delete"]

log = logging.getLogger("kcoord.coordinator.shard")  # its lines are the shard's


@dataclass(frozen=True, slots=True)
class DeleteWriteFailed:
    """The tombstones of a DeleteGroups failed: report the error for the deleted groups and
    put them back (``restore``: each group object, its state timestamp, its offsets, its
    pending transactional offsets)."""

    handle: Hashable
    results: tuple[DeleteGroupResult, ...]
    deleted: frozenset[str]
    restore: tuple[tuple[Any, int | None, Offsets, Any], ...] = ()

    @property
    def handles(self) -> tuple[Hashable, ...]:
        return (self.handle,)


def deleted_state(
    classic: ClassicGroupManager,
    consumer: ConsumerGroupManager,
    share: ShareGroupManager,
    offsets: OffsetManager,
    group_id: str,
) -> tuple[Any, int | None, Offsets, Any]:
    """What :func:`undo_delete` needs of a group about to be deleted (taken before)."""
    group: Any = (
        consumer.groups.get(group_id) or share.groups.get(group_id) or classic.groups[group_id]
    )
    since = group.state_timestamp_ms if isinstance(group, ClassicGroup) else None
    return group, since, offsets.of(group_id), offsets.pending.group_snapshot(group_id)


def undo_delete(
    action: DeleteWriteFailed,
    error: int,
    classic: ClassicGroupManager,
    consumer: ConsumerGroupManager,
    share: ShareGroupManager,
    offsets: OffsetManager,
) -> DeleteGroupsResponse:
    """Put the deleted groups back; the DeleteGroups answer with ``error`` for them."""
    for group, since, held, pending in action.restore:
        gid = group.group_id
        if gid in classic.groups or gid in consumer.groups or gid in share.groups:
            continue  # created again since: the newer state wins
        if isinstance(group, ClassicGroup):
            classic.restore_deleted(group, since)
        elif isinstance(group, ShareGroup):  # ShareGroupManager.delete's undo
            group.dead = False
            share.groups[gid] = group
        else:  # an Empty consumer group: ConsumerGroupManager.delete's undo
            group.dead = False
            consumer.groups[gid] = group
        offsets.restore_deleted(gid, held)
        offsets.pending.restore_group(gid, pending)
    return DeleteGroupsResponse(
        tuple(
            DeleteGroupResult(gid, error if gid in action.deleted else err)
            for gid, err in action.results
        )
    )


def delete_groups(
    op: Operation,
    gate: Callable[[str], int | None],
    classic: ClassicGroupManager,
    consumer: ConsumerGroupManager,
    share: ShareGroupManager,
    offsets: OffsetManager,
    handle: Hashable,
    req: DeleteGroupsRequest,
    now_ms: int,
) -> None:
    """DeleteGroups in the operation under way: only Empty groups (``gate``: the shard's
    routing checks); writes offset tombstones (pending transactional ones included) then a
    group tombstone, all of one shard's deletions in one atomic write."""
    results: dict[str, int] = {}
    deleted: list[str] = []
    for group_id in dict.fromkeys(req.group_ids):
        error = gate(group_id)
        if error is None:
            if group_id in consumer.groups:
                error = consumer.delete_check(group_id)
            elif group_id in share.groups:
                error = share.delete_check(group_id)
            else:
                error = classic.delete_check(group_id)
            if error == ErrorCode.none:
                deleted.append(group_id)
        results[group_id] = error
    size = tombstones_batch_size(
        (g, {**offsets.of(g), **dict.fromkeys(offsets.pending.pending_partitions(g))}, True)
        for g in deleted
    )
    if size > offsets.config.max_batch_bytes:
        # Kafka writes a shard's deletions atomically and fails them all, before
        # forgetting anything, when they do not fit in one batch: every group this
        # request named here gets UNKNOWN_SERVER_ERROR.
        log.warning(
            "DeleteGroups of %d groups refused: %d bytes of tombstones exceed one batch of"
            " at most %d bytes",
            len(deleted),
            size,
            offsets.config.max_batch_bytes,
        )
        results = dict.fromkeys(results, ErrorCode.unknown_server_error)
        deleted = []
    restore = tuple(deleted_state(classic, consumer, share, offsets, g) for g in deleted)
    for group_id in deleted:
        offsets.delete_all(group_id)
        if group_id in consumer.groups:
            consumer.delete(group_id)
        elif group_id in share.groups:
            share.delete(group_id)
        else:
            classic.delete(group_id, now_ms)
    if deleted:  # one line per request: a request may delete thousands
        names = ", ".join(deleted[:10])
        more = f" and {len(deleted) - 10} more" if len(deleted) > 10 else ""
        log.info("%d groups deleted: %s%s", len(deleted), names, more)
    response = DeleteGroupsResponse(
        tuple(DeleteGroupResult(gid, err) for gid, err in results.items())
    )
    op.reply(handle, response)
    if deleted:
        op.on_failure(DeleteWriteFailed(handle, response.results, frozenset(deleted), restore))
