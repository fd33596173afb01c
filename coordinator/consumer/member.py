"""A member of a consumer group (KIP-848) and how its assignment moves towards the target.

:class:`ConsumerMember` is immutable: every change makes a new one, so a heartbeat can compare
the member before and after to know which records to write, and an operation whose records
cannot be stored can put the old object back. Assignments are ``{topic id: frozenset of
partitions}`` dicts that are never mutated once built.

:func:`reconcile` is the member side of a rebalance (Kafka's CurrentAssignmentBuilder): from
the member's current assignment, the group's target assignment for it and the partitions other
members still hold, it computes the member's next epoch, state, assigned partitions and
partitions pending revocation; and (KIP-1251) each partition's assignment epoch, the member
epoch at which the member got it, which it keeps while it holds the partition (pending
revocation included).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import IntEnum
from types import MappingProxyType

from kcoord.coordinator.consumer.records import ClassicMemberMetadata
from kcoord.coordinator.consumer.topics import TopicId

Assignment = Mapping[TopicId, frozenset[int]]
"""Partitions by topic id; never mutated once built; topics without partitions are left out."""

NO_PARTITIONS: Assignment = MappingProxyType({})

AssignmentEpochs = Mapping[TopicId, Mapping[int, int]]
"""Partition -> assignment epoch by topic id (KIP-1251), for every partition a member holds
(assigned or pending revocation); never mutated once built."""

NO_EPOCHS: AssignmentEpochs = MappingProxyType({})

JOIN_EPOCH = 0
LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2


class MemberState(IntEnum):
    """The reconciliation state of a member (the record's ``State`` byte)."""

    STABLE = 0
    UNREVOKED_PARTITIONS = 1
    UNRELEASED_PARTITIONS = 2
    UNKNOWN = 127

    @property
    def label(self) -> str:
        return self.name.lower()


@dataclass(frozen=True, slots=True)
class ConsumerMember:
    """One member: what it sent (subscription, timeouts, identity) and where it stands."""

    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: MemberState = MemberState.STABLE
    assigned: Assignment = field(default_factory=lambda: NO_PARTITIONS)
    pending_revocation: Assignment = field(default_factory=lambda: NO_PARTITIONS)
    assignment_epochs: AssignmentEpochs = field(default_factory=lambda: NO_EPOCHS)
    """KIP-1251: the epoch at which each held partition was assigned; a partition missing here
    counts as assigned at the member epoch (members built without epochs)."""
    classic: ClassicMemberMetadata | None = None
    """A member that speaks the classic protocol (JoinGroup/SyncGroup/Heartbeat) inside a
    consumer group: its session timeout and the protocols it offered; None otherwise."""

    def assignment_epoch(self, topic_id: TopicId, partition: int) -> int | None:
        """The epoch at which this member got ``partition`` (KIP-1251); None when it does not
        hold it (neither assigned nor pending revocation). Without a recorded epoch: the
        member epoch, at least 0 (Kafka's default for records written before KIP-1251)."""
        if partition not in self.assigned.get(topic_id, ()) and partition not in (
            self.pending_revocation.get(topic_id, ())
        ):
            return None
        epoch = self.assignment_epochs.get(topic_id, {}).get(partition)
        return max(self.member_epoch, 0) if epoch is None else epoch

    def epochs_of(self, held: Iterable[Assignment], new_epoch: int) -> AssignmentEpochs:
        """Assignment epochs for the partitions of ``held``: the one this member has for a
        partition assigned to it now, ``new_epoch`` for any other (given to it now)."""
        out: dict[TopicId, dict[int, int]] = {}
        for assignment in held:
            for topic_id, partitions in assignment.items():
                mine = self.assigned.get(topic_id, ())
                into = out.setdefault(topic_id, {})
                for p in partitions:
                    known = self.assignment_epoch(topic_id, p) if p in mine else None
                    into[p] = new_epoch if known is None else known
        return out

    def is_reconciled_to(self, epoch: int) -> bool:
        return self.state is MemberState.STABLE and self.member_epoch == epoch

    def with_request(
        self,
        *,
        instance_id: str | None,
        rack_id: str | None,
        rebalance_timeout_ms: int,
        server_assignor: str | None,
        subscribed_topic_names: Iterable[str] | None,
        subscribed_topic_regex: str | None,
        client_id: str,
        client_host: str,
    ) -> ConsumerMember:
        """This member updated by a heartbeat's fields (None or -1: unchanged); itself when
        nothing changed (the usual heartbeat)."""
        names = None if subscribed_topic_names is None else tuple(sorted(set(subscribed_topic_names)))
        if (
            (instance_id is None or instance_id == self.instance_id)
            and (rack_id is None or rack_id == self.rack_id)
            and (rebalance_timeout_ms == -1 or rebalance_timeout_ms == self.rebalance_timeout_ms)
            and (server_assignor is None or server_assignor == self.server_assignor)
            and (names is None or names == self.subscribed_topic_names)
            and (subscribed_topic_regex is None or subscribed_topic_regex == self.subscribed_topic_regex)
            and client_id == self.client_id
            and client_host == self.client_host
        ):
            return self
        return replace(
            self,
            instance_id=self.instance_id if instance_id is None else instance_id,
            rack_id=self.rack_id if rack_id is None else rack_id,
            rebalance_timeout_ms=(
                self.rebalance_timeout_ms if rebalance_timeout_ms == -1 else rebalance_timeout_ms
            ),
            server_assignor=self.server_assignor if server_assignor is None else server_assignor,
            subscribed_topic_names=self.subscribed_topic_names if names is None else names,
            subscribed_topic_regex=(
                self.subscribed_topic_regex
                if subscribed_topic_regex is None
                else subscribed_topic_regex or None  # "" clears the regex
            ),
            client_id=client_id,
            client_host=client_host,
        )

    def subscription_differs(self, other: ConsumerMember) -> bool:
        return (
            self.subscribed_topic_names != other.subscribed_topic_names
            or self.subscribed_topic_regex != other.subscribed_topic_regex
        )

    def same_subscription_record(self, other: ConsumerMember) -> bool:
        """Whether the member-metadata record of both would be equal."""
        return (
            self.instance_id == other.instance_id
            and self.rack_id == other.rack_id
            and self.client_id == other.client_id
            and self.client_host == other.client_host
            and self.subscribed_topic_names == other.subscribed_topic_names
            and self.subscribed_topic_regex == other.subscribed_topic_regex
            and self.rebalance_timeout_ms == other.rebalance_timeout_ms
            and self.server_assignor == other.server_assignor
            and self.classic == other.classic
        )

    def same_assignment_record(self, other: ConsumerMember) -> bool:
        """Whether the current-assignment record of both would be equal."""
        return (
            self.member_epoch == other.member_epoch
            and self.previous_member_epoch == other.previous_member_epoch
            and self.state is other.state
            and self.assigned == other.assigned
            and self.pending_revocation == other.pending_revocation
            and self.assignment_epochs == other.assignment_epochs
        )


def owned_overlaps(owned: Iterable[tuple[TopicId, Iterable[int]]] | None, of: Assignment) -> bool:
    """Whether the member still owns any partition of ``of`` (unknown ownership: yes)."""
    if owned is None:
        return True
    for topic_id, partitions in owned:
        pending = of.get(topic_id)
        if pending and any(p in pending for p in partitions):
            return True
    return False


def owned_subset(owned: Iterable[tuple[TopicId, Iterable[int]]] | None, of: Assignment) -> bool:
    """Whether every partition the member reports owning is in ``of`` (unknown: no)."""
    if owned is None:
        return False
    for topic_id, partitions in owned:
        mine = of.get(topic_id)
        if mine is None:
            if any(True for _ in partitions):
                return False
            continue
        if any(p not in mine for p in partitions):
            return False
    return True


def reconcile(
    member: ConsumerMember,
    target_epoch: int,
    target: Assignment,
    partition_owner_epoch: Callable[[TopicId, int], int],
    owned: Iterable[tuple[TopicId, Iterable[int]]] | None,
    subscribed: Callable[[TopicId], bool],
    subscription_changed: bool = False,
) -> ConsumerMember:
    """The member's next state towards ``target`` at ``target_epoch`` (see module docstring).

    - Stable at another epoch, or waiting for partitions still held elsewhere: recompute.
    - Waiting for its own revocation: once ``owned`` no longer holds any partition pending
      revocation, move on from the next epoch (not past the target's: a revocation its
      subscription change started may end before the target is recomputed).
    - The next assignment keeps owned ∩ target; owned − target must be revoked first (the
      member stays at its epoch, UNREVOKED_PARTITIONS); new partitions are given only when no
      other member holds them (``partition_owner_epoch`` is -1), else UNRELEASED_PARTITIONS.
    - Topics the member no longer subscribes to (``subscribed`` says no) count as having no
      target partitions; and when its subscription changed in this request (Kafka 4.2), their
      partitions are revoked at once, even if the target is not recomputed yet (KIP-1263
      batches that).
    """
    state = member.state

    def towards(epoch: int) -> ConsumerMember:
        return _next(member, epoch, target_epoch, target, partition_owner_epoch, owned, subscribed)

    if state is MemberState.STABLE:
        if member.member_epoch != target_epoch:
            return towards(member.member_epoch)
        return _unsubscribed_dropped(member, subscribed, owned) if subscription_changed else member
    if state is MemberState.UNREVOKED_PARTITIONS:
        if owned_overlaps(owned, member.pending_revocation):
            return _unsubscribed_dropped(member, subscribed, owned) if subscription_changed else member
        return towards(min(member.member_epoch + 1, target_epoch))
    if state is MemberState.UNRELEASED_PARTITIONS:
        return towards(member.member_epoch)
    # UNKNOWN: only after a downgrade; start over from nothing (the caller fences it).
    return towards(target_epoch)


def _next(
    member: ConsumerMember,
    epoch: int,
    target_epoch: int,
    target: Assignment,
    owner_epoch: Callable[[TopicId, int], int],
    owned: Iterable[tuple[TopicId, Iterable[int]]] | None,
    subscribed: Callable[[TopicId], bool],
) -> ConsumerMember:
    assigned: dict[TopicId, frozenset[int]] = {}
    revoking: dict[TopicId, frozenset[int]] = {}
    adding: dict[TopicId, frozenset[int]] = {}
    unreleased = False
    current = member.assigned
    for topic_id in set(target) | set(current):
        want = target.get(topic_id, frozenset()) if subscribed(topic_id) else frozenset()
        have = current.get(topic_id, frozenset())
        keep = have & want
        if keep:
            assigned[topic_id] = keep
        gone = have - keep
        if gone:
            revoking[topic_id] = gone
        new = want - keep
        if new:
            free = frozenset(p for p in new if owner_epoch(topic_id, p) == -1)
            if len(free) != len(new):
                unreleased = True
            if free:
                adding[topic_id] = free
    if revoking and owned_overlaps(owned, revoking):
        epochs = member.epochs_of((assigned, revoking), epoch)
        return _moved(member, epoch, MemberState.UNREVOKED_PARTITIONS, assigned, revoking, epochs)
    for topic_id, partitions in adding.items():
        assigned[topic_id] = assigned.get(topic_id, frozenset()) | partitions
    state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
    # KIP-1251: a partition given now is assigned at the epoch the member moves to.
    epochs = member.epochs_of((assigned,), target_epoch)
    return _moved(member, target_epoch, state, assigned, NO_PARTITIONS, epochs)


def _unsubscribed_dropped(
    member: ConsumerMember,
    subscribed: Callable[[TopicId], bool],
    owned: Iterable[tuple[TopicId, Iterable[int]]] | None,
) -> ConsumerMember:
    """The member without the assigned partitions of topics it no longer subscribes to, at
    its epoch: pending revocation (UNREVOKED_PARTITIONS) while it may still own any of them;
    gone at once if it reports owning none. Itself when it holds none."""
    dropped = {t: ps for t, ps in member.assigned.items() if not subscribed(t)}
    if not dropped:
        return member
    assigned = {t: ps for t, ps in member.assigned.items() if t not in dropped}
    revoking = dict(member.pending_revocation)
    for topic_id, partitions in dropped.items():
        revoking[topic_id] = revoking.get(topic_id, frozenset()) | partitions
    pending: Assignment = revoking
    state = MemberState.UNREVOKED_PARTITIONS
    if not owned_overlaps(owned, revoking):  # revoked already: they just go
        state, pending = member.state, member.pending_revocation
    held = [(t, p) for a in (assigned, pending) for t, ps in a.items() for p in ps]
    epochs: dict[TopicId, dict[int, int]] = {}
    for topic_id, p in held:
        epochs.setdefault(topic_id, {})[p] = member.assignment_epoch(topic_id, p) or 0
    # Not _moved: the member epoch, and so the previous one, stay as they are.
    return replace(
        member, state=state, assigned=assigned, pending_revocation=pending, assignment_epochs=epochs
    )


def _moved(
    member: ConsumerMember,
    epoch: int,
    state: MemberState,
    assigned: Assignment,
    revoking: Assignment,
    epochs: AssignmentEpochs,
) -> ConsumerMember:
    # As Kafka does, the previous epoch is the one the member had before this step, even
    # when the epoch does not change.
    return replace(
        member,
        member_epoch=epoch,
        previous_member_epoch=member.member_epoch,
        state=state,
        assigned=assigned,
        pending_revocation=revoking,
        assignment_epochs=epochs,
    )
