"""A share group (KIP-932) and its members, as the coordinator holds them.

:class:`ShareMember` is immutable (a heartbeat compares the member before and after to know
which records to write); :class:`ShareGroup` holds the group epoch, the target assignment and
its epoch, the members, the topics it subscribes to as last read, and which topic partitions
have their share state initialized (record 15). Share members own no partitions exclusively and
revoke nothing: a member takes its target assignment, whole, at its next heartbeat (Kafka's
ShareGroupAssignmentBuilder), so a member is either at the target epoch or one heartbeat away.

States (Kafka's ShareGroup): Empty (no members), Stable, Dead (deleted or unloaded).

For the committed offsets a share group is a group that takes none: OffsetCommit and
OffsetDelete naming it answer GROUP_ID_NOT_FOUND, as Kafka's ShareGroup does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from kcoord.coordinator.consumer.topics import TopicId, TopicInfo
from kcoord.coordinator.offset_interface import OffsetExpiry
from kcoord.protocol.errors import ErrorCode

Assignment = Mapping[TopicId, frozenset[int]]
"""Partitions by topic id; never mutated once built; topics without partitions left out."""

NO_PARTITIONS: Assignment = MappingProxyType({})

EMPTY = "Empty"
STABLE = "Stable"
DEAD = "Dead"

JOIN_EPOCH = 0
LEAVE_EPOCH = -1
STATE_STABLE = 0
"""Kafka's MemberState byte of record 14: share members are always STABLE."""


@dataclass(frozen=True, slots=True)
class ShareMember:
    member_id: str
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: int = STATE_STABLE
    assigned: Assignment = field(default_factory=lambda: NO_PARTITIONS)

    def with_request(
        self,
        rack_id: str | None,
        subscribed_topic_names: Iterable[str] | None,
        client_id: str,
        client_host: str,
    ) -> ShareMember:
        """This member updated by a heartbeat's fields (None: unchanged); itself when nothing
        changed."""
        names = None if subscribed_topic_names is None else tuple(sorted(set(subscribed_topic_names)))
        if (
            (rack_id is None or rack_id == self.rack_id)
            and (names is None or names == self.subscribed_topic_names)
            and client_id == self.client_id
            and client_host == self.client_host
        ):
            return self
        return replace(
            self,
            rack_id=self.rack_id if rack_id is None else rack_id,
            subscribed_topic_names=self.subscribed_topic_names if names is None else names,
            client_id=client_id,
            client_host=client_host,
        )

    def reconciled(self, epoch: int, target: Assignment) -> ShareMember:
        """The member at the target epoch with the target's partitions (no revocation step);
        itself when it is there already."""
        if self.member_epoch == epoch and self.state == STATE_STABLE:
            return self
        return replace(
            self,
            member_epoch=epoch,
            previous_member_epoch=self.member_epoch,
            state=STATE_STABLE,
            assigned=target,
        )


@dataclass(slots=True)
class SessionTimer:
    """A member's live session timer token (0: none armed) and deadline."""

    token: int = 0
    deadline: int = 0


@dataclass(slots=True)
class ShareGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    metadata_hash: int = 0
    members: dict[str, ShareMember] = field(default_factory=dict)
    target: dict[str, Assignment] = field(default_factory=dict)
    subscribed: dict[str, TopicInfo] = field(default_factory=dict)
    """The subscribed topics as last read (by name)."""
    topics_version: int = -1
    initialized: dict[TopicId, tuple[str, frozenset[int], int]] = field(default_factory=dict)
    """Topic partitions whose share state is initialized (record 15): topic id -> (name,
    partitions, when first added in ms)."""
    legacy_partition_metadata: bool = False
    """A record 9 (Kafka before 4.1) was loaded: the next epoch bump deletes it."""
    sessions: dict[str, SessionTimer] = field(default_factory=dict)
    dead: bool = False
    changes: int = 0
    """Counts the operations that changed the group (a failed write undoes only the last)."""

    @property
    def state(self) -> str:
        if self.dead:
            return DEAD
        return STABLE if self.members else EMPTY

    def subscribed_topic_names(self) -> set[str]:
        names: set[str] = set()
        for member in self.members.values():
            names.update(member.subscribed_topic_names)
        return names

    def target_of(self, member_id: str) -> Assignment:
        return self.target.get(member_id, NO_PARTITIONS)

    def remove_member(self, member_id: str) -> ShareMember | None:
        self.target.pop(member_id, None)
        self.sessions.pop(member_id, None)
        return self.members.pop(member_id, None)

    def copy(self) -> ShareGroup:
        """A copy sharing the immutable members and assignments: what an operation restores
        if its records cannot be stored."""
        return ShareGroup(
            group_id=self.group_id,
            group_epoch=self.group_epoch,
            assignment_epoch=self.assignment_epoch,
            metadata_hash=self.metadata_hash,
            members=dict(self.members),
            target=dict(self.target),
            subscribed=dict(self.subscribed),
            topics_version=self.topics_version,
            initialized=dict(self.initialized),
            legacy_partition_metadata=self.legacy_partition_metadata,
            sessions=self.sessions,  # timers check liveness themselves
            dead=self.dead,
            changes=self.changes,
        )

    # ---- the offsets' view (coordinator.offset_interface.OffsetGroup) ----------------

    @property
    def is_empty(self) -> bool:
        return not self.members

    @property
    def may_have_record(self) -> bool:
        return True

    def validate_offset_commit(
        self,
        member_id: str,
        instance_id: str | None,
        generation: int,
        api_version: int = -1,
        transactional: bool = False,
    ) -> int | None:
        return ErrorCode.group_id_not_found

    def validate_offset_delete(self) -> int | None:
        return ErrorCode.group_id_not_found

    def is_subscribed_to(self, topic: str) -> bool:
        return topic in self.subscribed_topic_names()

    def offset_expiry(self) -> OffsetExpiry | None:
        return None
