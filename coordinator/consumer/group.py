"""A consumer group (KIP-848): its epochs, members, target assignment and partition owners.

:class:`ConsumerGroup` is the model the manager changes; it keeps its derived indexes right on
every change (static members by instance id, how many members subscribe to each topic name,
which member epoch holds each partition). It also answers for its offsets
(:class:`coordinator.offset_interface.OffsetGroup`): commits are checked against the member
epoch, or per partition against its assignment epoch (KIP-1251), and offsets of topics the
group still subscribes to never expire.

States (Kafka's): Empty (no members), Assigning (the group epoch is ahead of the target
assignment), Reconciling (some member is not yet at the target epoch), Stable, and Dead once
deleted or unloaded.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from kcoord.coordinator.consumer.member import Assignment, ConsumerMember
from kcoord.coordinator.consumer.topics import TopicId, TopicInfo, TopicsView
from kcoord.coordinator.offset_interface import OffsetExpiry, PartitionCheck
from kcoord.coordinator.rebalances import NOTHING_SETTLED, Owners, RebalanceStart, Settled
from kcoord.protocol.errors import ErrorCode

EMPTY = "Empty"
ASSIGNING = "Assigning"
RECONCILING = "Reconciling"
STABLE = "Stable"
DEAD = "Dead"

INITIAL_EPOCH = 1
"""A new group's epoch and target assignment epoch (KAFKA-20268, Kafka 4.3): its target at
epoch 1 is empty, so members joining it reconcile towards epoch 1 (0 being the joining epoch)
while the first computed target, at epoch 2 or later, is not there yet."""


@dataclass(slots=True)
class MemberTimers:
    """The live timer tokens of one member (0: none armed) and its session deadline."""

    session_token: int = 0
    session_deadline: int = 0
    rebalance_token: int = 0
    rebalance_epoch: int = 0
    """The member epoch the rebalance timer was armed at (it fences only at that epoch)."""


@dataclass(slots=True)
class ResolvedRegex:
    """A subscription regex of the group and the topics it matched when last resolved."""

    topics: tuple[str, ...]
    version: int
    timestamp: int


@dataclass(slots=True)
class ConsumerGroup:
    group_id: str
    group_epoch: int = INITIAL_EPOCH
    assignment_epoch: int = INITIAL_EPOCH
    assignment_timestamp: int = 0
    """When the target at ``assignment_epoch`` was computed (KIP-1263; 0: not known)."""
    metadata_hash: int = 0
    legacy_partition_metadata: bool = False
    """A record 4 (subscription metadata, before KIP-1101) was loaded and not yet deleted."""
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    target: dict[str, Assignment] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)
    """instance id -> member id"""
    subscribed_names: dict[str, int] = field(default_factory=dict)
    """topic name -> how many members subscribe to it by name"""
    partition_epochs: dict[TopicId, dict[int, int]] = field(default_factory=dict)
    """topic id -> partition -> epoch of the member that holds it (assigned or revoking)"""
    subscribed: dict[str, TopicInfo] = field(default_factory=dict)
    """The subscribed topics as last read (by name); their change bumps the group epoch."""
    topics_version: int = -1
    """The topics view's version ``subscribed`` was read at."""
    regexes: dict[str, ResolvedRegex] = field(default_factory=dict)
    timers: dict[str, MemberTimers] = field(default_factory=dict)
    dead: bool = False
    rebalance: RebalanceStart | None = None
    """The rebalance under way: set when the group epoch first moves ahead of a fully
    reconciled group (coordinator.rebalances)."""
    settled: Settled = NOTHING_SETTLED
    """The group as its last rebalance left it (or as loaded)."""
    changes: int = 0
    """Counts the operations that changed the group (a failed write undoes only the last)."""
    regex_resolving: bool = False
    """A resolution of its regexes is out (coordinator.consumer.regex_refresh; not stored)."""
    assigning_epoch: int = 0
    """The group epoch of the target assignment being computed off the coordinator, 0 if none
    (coordinator.consumer.batching; not stored)."""
    assigning_run: int = 0
    """That computation's run number (a group deleted and created again may reach the same
    epoch while an old run is out)."""
    assignment_timer: int = 0
    """The token of the timer that computes the target once the interval has passed, 0 if
    none is armed (coordinator.consumer.batching)."""

    # ---- state ---------------------------------------------------------------------------

    @property
    def state(self) -> str:
        if self.dead:
            return DEAD
        if not self.members:
            return EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ASSIGNING
        epoch = self.assignment_epoch
        for member in self.members.values():
            if not member.is_reconciled_to(epoch):
                return RECONCILING
        return STABLE

    def __iter__(self) -> Iterator[ConsumerMember]:
        return iter(self.members.values())

    def static_member(self, instance_id: str) -> ConsumerMember | None:
        member_id = self.static_members.get(instance_id)
        return None if member_id is None else self.members.get(member_id)

    def owner_epoch(self, topic_id: TopicId, partition: int) -> int:
        """The epoch of the member holding the partition, -1 if it is free."""
        partitions = self.partition_epochs.get(topic_id)
        if partitions is None:
            return -1
        return partitions.get(partition, -1)

    def target_of(self, member_id: str) -> Assignment:
        return self.target.get(member_id, {})

    def regex_topics(self, regex: str | None) -> tuple[str, ...]:
        """The topics ``regex`` matched when last resolved (none if it is not resolved)."""
        resolved = self.regexes.get(regex) if regex is not None else None
        return () if resolved is None else resolved.topics

    def topics_of(self, member: ConsumerMember) -> set[str]:
        """The topic names ``member`` subscribes to, by name and through its regex."""
        names = set(member.subscribed_topic_names)
        names.update(self.regex_topics(member.subscribed_topic_regex))
        return names

    def subscribed_topic_names(self) -> set[str]:
        """Every topic name some member subscribes to (by name or through a regex)."""
        names = set(self.subscribed_names)
        for regex in {m.subscribed_topic_regex for m in self.members.values()}:
            names.update(self.regex_topics(regex))
        return names

    # ---- changes -------------------------------------------------------------------------

    def put_member(self, member: ConsumerMember) -> None:
        """Add or replace a member, keeping the indexes right."""
        old = self.members.get(member.member_id)
        if old is not None:
            self._unindex(old)
        self.members[member.member_id] = member
        if member.instance_id is not None:
            self.static_members[member.instance_id] = member.member_id
        for name in member.subscribed_topic_names:
            self.subscribed_names[name] = self.subscribed_names.get(name, 0) + 1
        self._hold(member)

    def remove_member(self, member_id: str) -> ConsumerMember | None:
        member = self.members.pop(member_id, None)
        if member is not None:
            self._unindex(member)
        self.target.pop(member_id, None)
        self.timers.pop(member_id, None)
        return member

    def _unindex(self, member: ConsumerMember) -> None:
        if member.instance_id is not None and self.static_members.get(member.instance_id) == member.member_id:
            del self.static_members[member.instance_id]
        for name in member.subscribed_topic_names:
            left = self.subscribed_names.get(name, 0) - 1
            if left > 0:
                self.subscribed_names[name] = left
            else:
                self.subscribed_names.pop(name, None)
        self._release(member)

    def _hold(self, member: ConsumerMember) -> None:
        epochs = self.partition_epochs
        for assignment in (member.assigned, member.pending_revocation):
            for topic_id, partitions in assignment.items():
                held = epochs.get(topic_id)
                if held is None:
                    held = epochs[topic_id] = {}
                for p in partitions:
                    held[p] = member.member_epoch

    def _release(self, member: ConsumerMember) -> None:
        epochs = self.partition_epochs
        for assignment in (member.assigned, member.pending_revocation):
            for topic_id, partitions in assignment.items():
                held = epochs.get(topic_id)
                if held is None:
                    continue
                for p in partitions:
                    if held.get(p) == member.member_epoch:
                        del held[p]
                if not held:
                    del epochs[topic_id]

    def copy(self) -> ConsumerGroup:
        """A copy that shares the (immutable) members and assignments: what an operation
        restores if its records cannot be stored."""
        return ConsumerGroup(
            group_id=self.group_id,
            group_epoch=self.group_epoch,
            assignment_epoch=self.assignment_epoch,
            assignment_timestamp=self.assignment_timestamp,
            metadata_hash=self.metadata_hash,
            legacy_partition_metadata=self.legacy_partition_metadata,
            members=dict(self.members),
            target=dict(self.target),
            static_members=dict(self.static_members),
            subscribed_names=dict(self.subscribed_names),
            partition_epochs={t: dict(p) for t, p in self.partition_epochs.items()},
            subscribed=dict(self.subscribed),
            topics_version=self.topics_version,
            regexes=dict(self.regexes),
            timers=self.timers,  # timers check liveness themselves
            dead=self.dead,
            rebalance=self.rebalance,
            settled=self.settled,
            changes=self.changes,
            assigning_epoch=self.assigning_epoch,
            assigning_run=self.assigning_run,
            assignment_timer=self.assignment_timer,
        )

    def owners(self) -> Owners:
        """Which member holds each partition now (topics by id), for rebalance events."""
        out: Owners = {}
        for member in self.members.values():
            member_id = member.member_id
            for topic_id, partitions in member.assigned.items():
                name = str(topic_id)  # once per topic, not per partition
                out.update(dict.fromkeys([(name, p) for p in partitions], member_id))
        return out

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
        """Kafka's ConsumerGroup.validateOffsetCommit: an anonymous commit (epoch < 0) is
        accepted while the group is Empty; otherwise the member must exist, a consumer-protocol
        member with OffsetCommit v9+ (a TxnOffsetCommit, ``transactional``, has no version
        condition). A classic member must carry its current member epoch (its generation). A
        consumer-protocol member's epoch may be older than its member epoch, never newer
        (KIP-1251): an older one is then checked per partition
        (:meth:`commit_partition_check`)."""
        if self.dead:
            return ErrorCode.coordinator_not_available
        if generation < 0 and not self.members:
            return None
        member = self.members.get(member_id)
        if member is None:
            return ErrorCode.unknown_member_id
        classic = member.classic is not None
        if 0 <= api_version < 9 and not classic and not transactional:
            return ErrorCode.unsupported_version
        if classic:
            return None if generation == member.member_epoch else ErrorCode.illegal_generation
        if generation > member.member_epoch:
            return ErrorCode.stale_member_epoch
        return None

    def commit_partition_check(
        self, member_id: str, generation: int, topics: TopicsView
    ) -> PartitionCheck | None:
        """KIP-1251, once :meth:`validate_offset_commit` accepted the commit: None when every
        partition may be committed (the member's current epoch, a classic member, an
        anonymous commit); else the check of one partition: STALE_MEMBER_EPOCH unless the
        member holds it (assigned or pending revocation) and got it at ``generation`` or
        before (assignment epoch <= commit epoch <= member epoch)."""
        member = self.members.get(member_id)
        if member is None or member.classic is not None or generation == member.member_epoch:
            return None

        def check(topic: str, partition: int) -> int | None:
            info = topics.topic(topic)
            epoch = None if info is None else member.assignment_epoch(info.topic_id, partition)
            if epoch is None or epoch > generation:
                return ErrorCode.stale_member_epoch
            return None

        return check

    def validate_offset_fetch(self, member_id: str | None, member_epoch: int) -> int | None:
        """OffsetFetch v9+ from a member: it must exist and carry its current epoch."""
        if member_id is None and member_epoch < 0:
            return None
        member = self.members.get(member_id or "")
        if member is None:
            return ErrorCode.unknown_member_id
        if member_epoch != member.member_epoch:
            return ErrorCode.stale_member_epoch
        return None

    def validate_offset_delete(self) -> int | None:
        return ErrorCode.group_id_not_found if self.dead else None

    def classic_only_without(self, member_id: str) -> bool:
        """Whether every member but ``member_id`` speaks the classic protocol."""
        return all(m.classic is not None for m in self.members.values() if m.member_id != member_id)

    def is_subscribed_to(self, topic: str) -> bool:
        return topic in self.subscribed_topic_names()

    def offset_expiry(self) -> OffsetExpiry | None:
        """Offsets expire a retention period after their commit, except those of topics the
        group subscribes to."""
        return OffsetExpiry(None, frozenset(self.subscribed_topic_names()))
