"""What the committed offsets of a shard ask of its groups: the interface every group type
implements for :class:`coordinator.offsets.OffsetManager` (and TxnOffsetCommit), Kafka's Group
interface, the offsets part.

:class:`OffsetGroup` is one group as its offsets see it: may this member commit, may its offsets
be deleted, is it subscribed to a topic, which of its offsets may expire and from when
(:class:`OffsetExpiry`). :class:`OffsetGroups` is the shard's groups of every type: find one,
create a standalone consumer's group for a commit (or forget it again), check a commit's
partitions (:data:`PartitionCheck`, KIP-1251), hear that a commit kept a
member alive or that a group has no offsets left. :func:`committing_group` is the one rule both
commit paths (OffsetCommit, TxnOffsetCommit) apply through it: which group a commit goes to.
The shard's implementation over its two group types is
:class:`coordinator.offset_groups.ShardOffsetGroups`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from kcoord.protocol.errors import ErrorCode

PartitionCheck = Callable[[str, int], int | None]
"""Whether one partition (topic name, partition) of an accepted commit may be stored: None, or
its error (KIP-1251: a consumer-group member committing with an older epoch)."""


@dataclass(frozen=True, slots=True)
class OffsetExpiry:
    """Which offsets of a group may expire (J2-J4): all but those of ``kept_topics``,
    ``offsets.retention`` after ``since`` (the group's own moment, e.g. since it is Empty), or
    after each offset's commit when ``since`` is None. An offset with an explicit expire
    timestamp (an old v1 value) expires then instead."""

    since: int | None = None
    kept_topics: frozenset[str] = frozenset()


class OffsetGroup(Protocol):
    """A group as its offsets see it (Kafka's Group interface, the offsets part)."""

    @property
    def group_id(self) -> str: ...

    @property
    def is_empty(self) -> bool: ...

    @property
    def may_have_record(self) -> bool:
        """Whether a group record may exist (it gets a tombstone when the group goes)."""
        ...

    def validate_offset_commit(
        self,
        member_id: str,
        instance_id: str | None,
        generation: int,
        api_version: int,
        transactional: bool = False,
    ) -> int | None:
        """``generation`` is the generation or member epoch the commit carries;
        ``api_version`` its OffsetCommit version (-1 if unknown); ``transactional`` for a
        TxnOffsetCommit (KIP-447: no group-state checks, no consumer-protocol version check)."""
        ...

    def validate_offset_delete(self) -> int | None: ...

    def is_subscribed_to(self, topic: str) -> bool: ...

    def offset_expiry(self) -> OffsetExpiry | None: ...


class OffsetGroups(Protocol):
    """The groups of the shard, as its offsets need them."""

    def offset_group(self, group_id: str) -> OffsetGroup | None: ...

    def create_standalone(self, group_id: str, now_ms: int) -> OffsetGroup:
        """An Empty group without protocol type, for a standalone consumer's commit (C2)."""
        ...

    def forget(self, group_id: str) -> None:
        """Undo :meth:`create_standalone` (the commit it was for was refused)."""
        ...

    def commit_partition_check(
        self, group_id: str, member_id: str, generation: int
    ) -> PartitionCheck | None:
        """For a commit the group accepted: the check each of its partitions must pass, or
        None when all pass (KIP-1251's per-partition assignment epochs)."""
        ...

    def commit_accepted(self, group_id: str, member_id: str, now_ms: int) -> None:
        """A commit of ``member_id`` is being stored (M3: it keeps the member alive)."""
        ...

    def offset_group_ids(self) -> list[str]: ...

    def offsets_gone(self, group_id: str, now_ms: int) -> None:
        """The group has no offsets left: an Empty one goes Dead (I6)."""
        ...


def committing_group(
    groups: OffsetGroups, group_id: str, generation_id: int, now_ms: int
) -> tuple[OffsetGroup, bool] | int:
    """The group an (Txn)OffsetCommit goes to, and whether it was created for it; or the
    error. As in Kafka, an unknown group is created for a commit without a generation (an
    Empty standalone group, C2), and a commit with one gets ILLEGAL_GENERATION (a member of a
    group this coordinator does not know: an old generation)."""
    group = groups.offset_group(group_id)
    if group is not None:
        return group, False
    if generation_id >= 0:
        return ErrorCode.illegal_generation
    return groups.create_standalone(group_id, now_ms), True
