"""The classic group data model: members, groups, states and their bookkeeping (B, C).

This module owns what a classic consumer group *is*: its state machine with checked
transitions (C1-C4), its members in insertion order, the static-member and pending-member
registries, the protocol vote counters and the awaiting-join count (B1-B9), protocol
selection (E7), and the group as the offsets manager sees it (who may commit or delete its
offsets, which offsets may expire: :class:`coordinator.offset_interface.OffsetGroup`). It knows
nothing about requests, replies, records or timers: the classic group manager
(:mod:`coordinator.classic.manager`) drives it. Parked requests are represented by the
runtime's opaque handles stored on the member (``join_handle``/``sync_handle``); the group only
tells its manager which handles it displaced so that every handle gets exactly one reply.
"""

from __future__ import annotations

import enum
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from kcoord.coordinator.classic.one_member import OneMember
from kcoord.coordinator.messages import JoinMember
from kcoord.coordinator.offset_interface import OffsetExpiry
from kcoord.coordinator.rebalances import NOTHING_SETTLED, Settled
from kcoord.coordinator.sharing import SharingTable
from kcoord.coordinator.subscription import CONSUMER_PROTOCOL_TYPE, subscribed_topics
from kcoord.protocol.errors import ErrorCode

__all__ = [
    "ClassicGroup",
    "GroupState",
    "IllegalStateTransition",
    "JoinTimer",
    "Member",
]


class GroupState(enum.Enum):
    """C1. Values are Kafka's state names as reported by ListGroups/DescribeGroups."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


_VALID_PREVIOUS: dict[GroupState, frozenset[GroupState]] = {
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.PREPARING_REBALANCE: frozenset(
        {GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY}
    ),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.DEAD: frozenset(GroupState),
}

_CAN_REBALANCE = frozenset({GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY})


class IllegalStateTransition(Exception):
    """A transition not allowed by C4: always a coordinator bug."""


@dataclass(eq=False, slots=True)
class Member:
    """B2. ``protocols`` keeps the member's order (it votes for its first candidate, E7)."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    assignment: bytes = b""
    awaiting_join: bool = False
    join_handle: Hashable = None
    awaiting_sync: bool = False
    sync_handle: Hashable = None
    is_new: bool = False
    heartbeat_token: int = 0
    """Token of the member's armed session/new-member timer (0: none); other entries are stale."""
    heartbeat_deadline: int = 0
    """When that timer is due: at or after its queued entry's deadline (heartbeats move it)."""

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    def protocol_names(self) -> frozenset[str]:
        return frozenset(name for name, _ in self.protocols)

    def metadata(self, protocol: str | None) -> bytes:
        """The member's metadata for ``protocol`` (first match), b"" if it has none."""
        for name, data in self.protocols:
            if name == protocol:
                return data
        return b""

    def matches(self, protocols: tuple[tuple[str, bytes], ...]) -> bool:
        """Same protocols, same order, byte-for-byte the same metadata (D8)."""
        return tuple(protocols) == tuple(self.protocols)

    def vote(self, candidates: frozenset[str]) -> str:
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise ValueError(f"member {self.member_id} supports none of {sorted(candidates)}")


@dataclass(slots=True)
class JoinTimer:
    """The group's delayed join (E1-E3). ``initial`` marks Kafka's InitialDelayedJoin, which
    never completes early; ``delay_ms``/``remaining_ms`` are its re-arm parameters."""

    token: int
    deadline_ms: int
    initial: bool
    delay_ms: int = 0
    remaining_ms: int = 0


_NONE: Mapping[str, Any] = MappingProxyType({})

_one_vote_each_of: SharingTable[frozenset[str], Mapping[str, int]] = SharingTable(1024)


def _one_vote_each(names: frozenset[str]) -> Mapping[str, int]:
    """The votes of a group whose one member supports ``names``: a read-only mapping shared by
    all such groups (most idle groups have one member, and their members the same protocols)."""
    votes = _one_vote_each_of.get(names)
    if votes is None:
        votes = _one_vote_each_of.put(names, MappingProxyType(dict.fromkeys(names, 1)))
    return votes


@dataclass(eq=False, slots=True)
class ClassicGroup:
    """B1. A classic group; mutated only by its shard."""

    group_id: str
    state: GroupState = GroupState.EMPTY
    state_timestamp_ms: int | None = None
    generation: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: Mapping[str, Member] = field(default_factory=lambda: _NONE)
    """Member id -> member, in insertion order. Read-only here: written through :meth:`add`,
    :meth:`remove` and :meth:`replace_static_member` (a shared empty mapping without members, a
    :class:`OneMember` with one, a dict with more: most idle groups have one member)."""
    pending_members: Mapping[str, int] = field(default_factory=lambda: _NONE)
    """Pending member id -> token of its expiry timer (D3, G6). Read-only here: written through
    :meth:`add_pending` (a shared empty mapping until the first entry, to keep idle groups small)."""
    static_members: Mapping[str, str] = field(default_factory=lambda: _NONE)
    """Group instance id -> member id (L); read-only like ``pending_members``."""
    protocol_votes: Mapping[str, int] = field(default_factory=lambda: _NONE)
    """Protocol name -> number of members supporting it (B4-B6). Read-only here: written
    through :meth:`_inc_votes`/:meth:`_dec_votes`; a group's first member brings a mapping shared
    with every group whose first member has the same protocols (:func:`_one_vote_each`)."""
    num_awaiting_join: int = 0
    new_member_added: bool = False
    settled: Settled = NOTHING_SETTLED
    """The group as its last rebalance left it (or as loaded)."""
    join_timer: JoinTimer | None = None
    subscribed_topics: frozenset[str] | None = None
    """B1: topics the members subscribe to, computed at each new generation (and on load)
    from their metadata for the selected protocol; None = unknown (not a ``consumer`` group,
    no generation yet, or unparseable metadata). See :mod:`coordinator.subscription`."""

    # ---- state machine (C3, C4) ---------------------------------------------------------

    def is_state(self, state: GroupState) -> bool:
        return self.state is state

    def can_rebalance(self) -> bool:
        return self.state in _CAN_REBALANCE

    def transition_to(self, target: GroupState, now_ms: int) -> None:
        if self.state not in _VALID_PREVIOUS[target]:
            raise IllegalStateTransition(
                f"group {self.group_id!r}: cannot go from {self.state.value} to {target.value}"
            )
        self.state = target
        self.state_timestamp_ms = now_ms

    # ---- membership (B4-B7) -------------------------------------------------------------

    def has(self, member_id: str) -> bool:
        return member_id in self.members

    def get(self, member_id: str) -> Member:
        return self.members[member_id]

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def is_pending(self, member_id: str) -> bool:
        return member_id in self.pending_members

    def static_member_id(self, instance_id: str | None) -> str | None:
        return None if instance_id is None else self.static_members.get(instance_id)

    def is_static_member_fenced(self, instance_id: str | None, member_id: str) -> bool:
        current = self.static_member_id(instance_id)
        return current is not None and current != member_id

    def _votes(self) -> dict[str, int]:
        """The vote counts, as this group's own dict (copied from a shared mapping first)."""
        if type(self.protocol_votes) is not dict:
            self.protocol_votes = dict(self.protocol_votes)
        return self.protocol_votes  # type: ignore[return-value]

    def _inc_votes(self, member: Member) -> None:
        if not self.protocol_votes:
            self.protocol_votes = _one_vote_each(member.protocol_names())
            return
        votes = self._votes()
        for name in member.protocol_names():
            votes[name] = votes.get(name, 0) + 1

    def _dec_votes(self, member: Member) -> None:
        votes = self._votes()
        for name in member.protocol_names():
            left = votes.get(name, 0) - 1
            if left > 0:
                votes[name] = left
            else:
                votes.pop(name, None)
        if not votes:
            self.protocol_votes = _NONE  # back to the shared empty mapping

    def add(self, member: Member, join_handle: Hashable = None, awaiting: bool = False) -> None:
        """B4 (and D10's bookkeeping): register static id, set protocol type, maybe leader,
        count votes, count the member as awaiting join if it has a parked JoinGroup."""
        if member.group_instance_id is not None:
            if member.group_instance_id in self.static_members:
                raise IllegalStateTransition(
                    f"group {self.group_id!r}: instance {member.group_instance_id!r} "
                    "is already registered"
                )
            self._statics()[member.group_instance_id] = member.member_id
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.leader_id is None:
            self.leader_id = member.member_id
        self._put(member.member_id, member)
        self._inc_votes(member)
        member.awaiting_join = awaiting
        member.join_handle = join_handle if awaiting else None
        if awaiting:
            self.num_awaiting_join += 1
        self.drop_pending(member.member_id)

    def remove(self, member_id: str) -> Member | None:
        """B5: drop the member (and its static mapping and pending entry). A removed leader
        is replaced by the first remaining member in insertion order."""
        member = self._pop(member_id)
        if member is not None:
            self._dec_votes(member)
            if member.awaiting_join:
                self.num_awaiting_join -= 1
            if (
                member.group_instance_id is not None
                and self.static_members.get(member.group_instance_id) == member_id
            ):
                del self._statics()[member.group_instance_id]
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        self.drop_pending(member_id)
        return member

    def _put(self, member_id: str, member: Member) -> None:
        """Add the member to :attr:`members`, last."""
        members = self.members
        if not members:
            self.members = OneMember(member_id, member)
        elif type(members) is OneMember:
            self.members = {members.key: members.value, member_id: member}
        else:
            members[member_id] = member  # type: ignore[index]

    def _pop(self, member_id: str) -> Member | None:
        """Take the member out of :attr:`members` (None if it is not there)."""
        members = self.members
        if member_id not in members:
            return None
        member = members[member_id]
        if type(members) is OneMember:
            self.members = _NONE
        elif len(members) == 2:  # one left: back to the compact form
            key, rest = next((k, m) for k, m in members.items() if k != member_id)
            self.members = OneMember(key, rest)
        else:
            del members[member_id]  # type: ignore[attr-defined]
        return member

    def add_pending(self, member_id: str, token: int) -> None:
        """D3: a member id handed out, awaiting its member's second JoinGroup."""
        if type(self.pending_members) is not dict:
            self.pending_members = {}
        self.pending_members[member_id] = token  # type: ignore[index]

    def drop_pending(self, member_id: str) -> None:
        pending = self.pending_members
        if member_id in pending:
            if len(pending) == 1:
                self.pending_members = _NONE  # back to the shared empty mapping
            else:
                del pending[member_id]  # type: ignore[attr-defined]

    def _statics(self) -> dict[str, str]:
        if type(self.static_members) is not dict:
            self.static_members = {}
        return self.static_members  # type: ignore[return-value]

    def update_member(
        self,
        member: Member,
        protocols: tuple[tuple[str, bytes], ...],
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        join_handle: Hashable,
        awaiting: bool,
    ) -> tuple[bool, Hashable]:
        """B6: replace protocols (recounting votes) and timeouts, set or clear the parked
        JoinGroup. Returns (displaced, handle): the previous parked JoinGroup, if any, which
        the caller must answer."""
        self._dec_votes(member)
        member.protocols = tuple(protocols)
        self._inc_votes(member)
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        displaced = (member.awaiting_join, member.join_handle)
        if awaiting and not member.awaiting_join:
            self.num_awaiting_join += 1
        elif not awaiting and member.awaiting_join:
            self.num_awaiting_join -= 1
        member.awaiting_join = awaiting
        member.join_handle = join_handle if awaiting else None
        return displaced

    def clear_join(self, member: Member) -> Hashable:
        """The member's parked JoinGroup was answered: it no longer awaits join."""
        handle = member.join_handle
        if member.awaiting_join:
            member.awaiting_join = False
            member.join_handle = None
            self.num_awaiting_join -= 1
        return handle

    def replace_static_member(
        self, instance_id: str, old_member_id: str, new_member_id: str
    ) -> Member:
        """L3: move the instance's member to a new id (the member moves to the end of the
        insertion order). Leadership follows. The caller answers the old id's parked
        requests with FENCED_INSTANCE_ID *before* calling this, and arms the member's session
        timer *after*: the armed one was queued under the old id, so it is forgotten here."""
        member = self.members[old_member_id]
        self._pop(old_member_id)
        member.member_id = new_member_id
        member.heartbeat_token = 0
        self._put(new_member_id, member)
        if self.leader_id == old_member_id:
            self.leader_id = new_member_id
        self._statics()[instance_id] = new_member_id
        return member

    def all_members_joined(self) -> bool:
        """B7."""
        return len(self.members) == self.num_awaiting_join and not self.pending_members

    def rebalance_timeout_ms(self) -> int:
        """B8: the largest rebalance timeout among members (0 with none)."""
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def not_yet_rejoined(self) -> list[Member]:
        return [m for m in self.members.values() if not m.awaiting_join]

    # ---- protocols (D5, E7) -------------------------------------------------------------

    def supports_protocols(self, protocol_type: str, names: Iterable[str]) -> bool:
        """D5. An Empty group accepts any non-empty type with at least one protocol."""
        names = frozenset(names)
        if self.state is GroupState.EMPTY:
            return protocol_type != "" and bool(names)
        size = len(self.members)
        return self.protocol_type == protocol_type and any(
            self.protocol_votes.get(n, 0) == size for n in names
        )

    def candidate_protocols(self) -> frozenset[str]:
        size = len(self.members)
        return frozenset(n for n, c in self.protocol_votes.items() if c == size)

    def select_protocol(self) -> str:
        """E7: each member votes for the first protocol in its own list that every member
        supports; most votes wins. Ties go to the protocol whose first vote came from the
        earliest member in insertion order (deterministic; Kafka's tie-break is hash order).
        """
        if not self.members:
            raise IllegalStateTransition(f"group {self.group_id!r}: no members to vote")
        candidates = self.candidate_protocols()
        tally: dict[str, int] = {}
        for member in self.members.values():
            choice = member.vote(candidates)
            tally[choice] = tally.get(choice, 0) + 1
        best = max(tally.values())
        # dicts keep first-insertion order, i.e. the order of each protocol's first vote
        return next(name for name, votes in tally.items() if votes == best)

    # ---- subscriptions (J2-J4, OffsetDelete) --------------------------------------------

    def compute_subscribed_topics(self) -> None:
        """Refresh :attr:`subscribed_topics` from the members' selected-protocol metadata."""
        self.subscribed_topics = subscribed_topics(
            self.protocol_type,
            self.protocol_name,
            (m.metadata(self.protocol_name) for m in self.members.values()),
        )

    def is_subscribed_to(self, topic: str) -> bool:
        """Kafka's ``isSubscribedToTopic``: unknown subscriptions count as every topic."""
        return self.subscribed_topics is None or topic in self.subscribed_topics

    # ---- leadership and generations (E4-E6) ---------------------------------------------

    def maybe_elect_new_joined_leader(self) -> bool:
        """E6: keep the leader if it rejoined, else pick any rejoined member. False when
        there is no leader or nobody rejoined."""
        if self.leader_id is None:
            return False
        leader = self.members.get(self.leader_id)
        if leader is not None and leader.awaiting_join:
            return True
        for member_id, member in self.members.items():
            if member.awaiting_join:
                self.leader_id = member_id
                return True
        return False

    def init_next_generation(self, now_ms: int) -> None:
        """E5: the generation always increments; with no members the group becomes Empty and
        its protocol is cleared."""
        self.generation += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.transition_to(GroupState.COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol_name = None
            self.transition_to(GroupState.EMPTY, now_ms)
        self.compute_subscribed_topics()

    def current_member_metadata(self) -> tuple[JoinMember, ...]:
        """B9: what the leader receives, in member insertion order."""
        if self.state in (GroupState.DEAD, GroupState.PREPARING_REBALANCE):
            raise IllegalStateTransition(
                f"group {self.group_id!r}: no member metadata in state {self.state.value}"
            )
        return tuple(
            JoinMember(m.member_id, m.group_instance_id, m.metadata(self.protocol_name))
            for m in self.members.values()
        )

    # ---- its members' identity (D7, L7) ---------------------------------------------------

    def validate_member(self, member_id: str, instance_id: str | None) -> int | None:
        """D7/L7: the error for a request naming ``member_id`` (and ``instance_id``), None if
        it is a current member; an instance id must be registered to exactly this member."""
        if instance_id is not None:
            current = self.static_member_id(instance_id)
            if current is None:
                return ErrorCode.unknown_member_id
            if current != member_id:
                return ErrorCode.fenced_instance_id
        if member_id not in self.members:
            return ErrorCode.unknown_member_id
        return None

    # ---- as the offsets see it (J, I6, OffsetDelete) ----------------------------------------

    @property
    def is_empty(self) -> bool:
        return self.state is GroupState.EMPTY

    @property
    def may_have_record(self) -> bool:
        """Whether a group record of it may exist: it reached a generation (a generation-0
        group only ever stored offsets)."""
        return self.generation > 0

    def validate_offset_commit(
        self,
        member_id: str,
        instance_id: str | None,
        generation: int,
        api_version: int = -1,
        transactional: bool = False,
    ) -> int | None:
        """J6, in Kafka's order: Dead -> COORDINATOR_NOT_AVAILABLE; generation < 0 on an Empty
        group is taken from anyone, whatever member or instance id it names (a standalone
        consumer, an admin client, or a consumer-protocol client that only assign()s: it
        sends the member id it made at start-up with epoch -1); otherwise a commit naming a
        member (generation >= 0, a member id or an instance id) must come from a current
        member of the current generation; an anonymous one to a group with members is
        UNKNOWN_MEMBER_ID; CompletingRebalance -> REBALANCE_IN_PROGRESS (the member has no
        assignment yet).

        A TxnOffsetCommit (``transactional``, KIP-447) skips the group-state checks: an
        anonymous one (v0-v2) is taken in any state; a member's is checked as above, in
        CompletingRebalance too."""
        if self.state is GroupState.DEAD:
            return ErrorCode.coordinator_not_available
        if generation < 0 and self.state is GroupState.EMPTY:
            return None
        if generation >= 0 or member_id != "" or instance_id is not None:
            error = self.validate_member(member_id, instance_id)
            if error is not None:
                return error
            if generation != self.generation:
                return ErrorCode.illegal_generation
        elif self.state is not GroupState.EMPTY and not transactional:
            return ErrorCode.unknown_member_id  # while it has members, only members commit
        if self.state is GroupState.COMPLETING_REBALANCE and not transactional:
            return ErrorCode.rebalance_in_progress
        return None

    def validate_offset_delete(self) -> int | None:
        """OffsetDelete's group-level check: Dead -> GROUP_ID_NOT_FOUND; members whose
        protocol type is not ``consumer`` -> NON_EMPTY_GROUP (their subscriptions cannot be
        known)."""
        if self.state is GroupState.DEAD:
            return ErrorCode.group_id_not_found
        if self.state is not GroupState.EMPTY and self.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return ErrorCode.non_empty_group
        return None

    def offset_expiry(self) -> OffsetExpiry | None:
        """J2-J4: which of its offsets may expire, and from when (None: none of them).

        - with a protocol type and Empty: every offset, counted from when it became Empty
          (its state timestamp; unknown for groups loaded from records without one: then
          from each commit);
        - a Stable ``consumer`` group with known subscriptions: offsets of the topics it does
          not subscribe to, counted from their commit;
        - standalone (no protocol type): every offset, counted from its commit;
        - otherwise (rebalancing, other protocol types, unknown subscriptions): none.
        """
        if self.protocol_type is None:
            return OffsetExpiry()
        if self.state is GroupState.EMPTY:
            return OffsetExpiry(since=self.state_timestamp_ms)
        if (
            self.protocol_type == CONSUMER_PROTOCOL_TYPE
            and self.subscribed_topics is not None
            and self.state is GroupState.STABLE
        ):
            return OffsetExpiry(kept_topics=self.subscribed_topics)
        return None
