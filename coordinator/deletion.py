"""DeleteGroups' undo: what a failed deletion must answer and put back.

A DeleteGroups changes the shard at once (the groups and their offsets are forgotten, their
tombstones written into the Output). If those tombstones cannot be appended, the runtime hands
the Output back and :func:`undo_delete` answers the deleted groups with the storage error and
puts each group and its offsets back as they were, as Kafka's coordinator reverts its
in-memory state on a failed write -- unless a group of that id (of either type) was created
since: its records are newer, and it stays.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from coordinator.classic.group import ClassicGroup
from coordinator.messages import DeleteGroupResult, DeleteGroupsResponse
from coordinator.offsets import OffsetManager, Offsets

if TYPE_CHECKING:
    from coordinator.classic.manager import ClassicGroupManager
    from coordinator.consumer.manager import ConsumerGroupManager

__all__ = ["DeleteWriteFailed", "deleted_state", "undo_delete"]


@dataclass(frozen=True, slots=True)
class DeleteWriteFailed:
    """The tombstones of a DeleteGroups failed: report the error for the deleted groups and
    put them back (``restore``: each group object, its state timestamp, its offsets)."""

    handle: Hashable
    results: tuple[DeleteGroupResult, ...]
    deleted: frozenset[str]
    restore: tuple[tuple[Any, int | None, Offsets], ...] = ()

    @property
    def handles(self) -> tuple[Hashable, ...]:
        return (self.handle,)


def deleted_state(
    classic: ClassicGroupManager, consumer: ConsumerGroupManager, offsets: OffsetManager, group_id: str
) -> tuple[Any, int | None, Offsets]:
    """What :func:`undo_delete` needs of a group about to be deleted (taken before)."""
    group: Any = consumer.groups.get(group_id) or classic.groups[group_id]
    since = group.state_timestamp_ms if isinstance(group, ClassicGroup) else None
    return group, since, offsets.of(group_id)


def undo_delete(
    action: DeleteWriteFailed,
    error: int,
    classic: ClassicGroupManager,
    consumer: ConsumerGroupManager,
    offsets: OffsetManager,
) -> DeleteGroupsResponse:
    """Put the deleted groups back; the DeleteGroups answer with ``error`` for them."""
    for group, since, held in action.restore:
        gid = group.group_id
        if gid in classic.groups or gid in consumer.groups:
            continue  # created again since: the newer state wins
        if isinstance(group, ClassicGroup):
            classic.restore_deleted(group, since)
        else:  # an Empty consumer group: ConsumerGroupManager.delete's undo
            group.dead = False
            consumer.groups[gid] = group
        offsets.restore_deleted(gid, held)
    return DeleteGroupsResponse(
        tuple(
            DeleteGroupResult(gid, error if gid in action.deleted else err)
            for gid, err in action.results
        )
    )
