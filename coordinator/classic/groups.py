"""The classic groups of one shard and their rebalance machinery (D10-D11, E, G, I1-I2).

:class:`ClassicGroups` holds the shard's classic groups and does what every classic request
and timer builds on: the join, session, new-member and pending-member timers (their kinds in
the shard's timer heap), preparing and completing rebalances (the delayed join, leader
election, the next generation), handing out assignments to parked SyncGroups, removing
members and answering whatever they had parked, forgetting Dead groups, and the group record
(GroupMetadataValue) a generation writes. The requests themselves are handled by
:mod:`coordinator.classic.join` (JoinGroup) and :mod:`coordinator.classic.manager` (the rest).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Hashable

from kcoord.coordinator.classic.group import ClassicGroup, GroupState, JoinTimer, Member
from kcoord.coordinator.config import GroupConfig
from kcoord.coordinator.messages import JoinGroupResponse, SyncGroupResponse
from kcoord.coordinator.output import Operation, RebalanceCompleted
from kcoord.coordinator.rebalances import (
    Owners,
    RebalanceStart,
    Settled,
    begin,
    classic_owners,
    finish,
)
from kcoord.coordinator.schemas import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    encode_group_metadata_value,
    encode_key,
)
from kcoord.coordinator.sharing import SharingTable, shared_copy
from kcoord.coordinator.timers import TimerEntry, TimerKind, Timers
from kcoord.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

UNKNOWN_GENERATION = -1

# Timer kinds of the classic groups in the shard's heap (key: group id, subkey: member id).
JOIN_TIMER = 0
HEARTBEAT_TIMER = 1
PENDING_TIMER = 2


def shared(text: str) -> str:
    """One copy of strings that thousands of members repeat (client ids and hosts, protocol
    types and names), however many requests brought them."""
    return sys.intern(text)


_SHARED_BYTES_MAX_LEN = 256
"""Longer metadata and assignments are kept as they came: they are rarely repeated."""
_protocols: SharingTable[tuple[tuple[str, bytes], ...], tuple[tuple[str, bytes], ...]] = SharingTable()
_bytes: SharingTable[bytes, bytes] = SharingTable()
_ints: SharingTable[int, int] = SharingTable()


def shared_protocols(protocols: tuple[tuple[str, bytes], ...]) -> tuple[tuple[str, bytes], ...]:
    """One copy of a protocol list that many members send alike (the same subscription):
    the tuples and their metadata bytes; names interned."""
    found = _protocols.get(protocols)
    if found is not None:
        return found
    copy = tuple((sys.intern(name), shared_bytes(metadata)) for name, metadata in protocols)
    if sum(len(metadata) for _, metadata in copy) <= _SHARED_BYTES_MAX_LEN:
        _protocols.put(copy, copy)
    return copy


def shared_bytes(data: bytes) -> bytes:
    """One copy of short metadata and assignments that many members repeat (an empty
    subscription, an empty assignment)."""
    return data if len(data) > _SHARED_BYTES_MAX_LEN else shared_copy(_bytes, data)


def shared_int(value: int) -> int:
    """One object for a number that many members repeat (their session and rebalance
    timeouts: each request decodes its own, 32 bytes each)."""
    return shared_copy(_ints, value)


_MEMBER_ID_PREFIX_MAX = 0x7FFF - 37  # "-" + a UUID after it, in a string field of a record


_UUID_POOL_BYTES = 16 * 256
_UUID_VERSION_CLEAR = ~((0xF000 << 64) | (0xC000 << 48))
_UUID_VERSION_SET = (0x4000 << 64) | (0x8000 << 48)  # version 4, RFC 4122 variant


class _RandomUuids:
    """Random (version 4) UUIDs as text, as ``str(uuid.uuid4())`` writes them, from the same
    source (``os.urandom``) read 4 KiB at a time rather than 16 bytes per id."""

    __slots__ = ("_at", "_pool")
    _pool: bytes
    """Random bytes drawn ahead; ``_at`` is where the next id's 16 start."""
    _at: int

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Forget the bytes drawn so far (a forked child must not hand out its parent's ids)."""
        self._pool = b""
        self._at = 0

    def next(self) -> str:
        at = self._at
        if at >= len(self._pool):
            self._pool = os.urandom(_UUID_POOL_BYTES)
            at = 0
        self._at = at + 16
        n = int.from_bytes(self._pool[at : at + 16], "big")
        h = "%032x" % ((n & _UUID_VERSION_CLEAR) | _UUID_VERSION_SET)
        return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


_uuids = _RandomUuids()
os.register_at_fork(after_in_child=_uuids.reset)


def default_member_id(prefix: str) -> str:
    """B3: ``prefix-UUID``; a prefix so long that the id would not fit in a record's string
    field (or a response's) is cut short."""
    if len(prefix) * 4 > _MEMBER_ID_PREFIX_MAX:
        raw = prefix.encode("utf-8")[:_MEMBER_ID_PREFIX_MAX]
        prefix = raw.decode("utf-8", errors="ignore")
    return f"{prefix}-{_uuids.next()}"


def join_error(member_id: str, error: int) -> JoinGroupResponse:
    """D13: error responses carry the member id, generation -1, no protocol, no leader."""
    return JoinGroupResponse(
        error=error,
        generation_id=UNKNOWN_GENERATION,
        protocol_type=None,
        protocol_name=None,
        leader="",
        member_id=member_id,
        members=(),
    )


def sync_error(error: int) -> SyncGroupResponse:
    return SyncGroupResponse(error=error, protocol_type=None, protocol_name=None, assignment=b"")


class ClassicGroups:
    """The classic groups of a shard (see the module docstring)."""

    def __init__(self, config: GroupConfig, op: Operation, timers: Timers) -> None:
        self.config = config
        self._op = op
        self._timers = timers
        self.groups: dict[str, ClassicGroup] = {}
        self._rebalance_started: dict[str, RebalanceStart] = {}
        self.rebalance_observer: Callable[[RebalanceCompleted], None] | None = None
        """Called with each completed rebalance (the runtime's metrics hook)."""
        timers.register(JOIN_TIMER, TimerKind(live=self._join_live, fire=self._on_join_timer))
        timers.register(
            HEARTBEAT_TIMER,
            TimerKind(
                live=self._heartbeat_live,
                fire=self._on_heartbeat_timer,
                moved=self._heartbeat_moved,
            ),
        )
        timers.register(
            PENDING_TIMER, TimerKind(live=self._pending_live, fire=self._on_pending_timer)
        )

    # ---- timers (D3, D10, E1-E3, G3-G6) ------------------------------------------------------

    def _join_live(self, entry: TimerEntry) -> bool:
        group = self.groups.get(entry[3])
        return group is not None and group.join_timer is not None and group.join_timer.token == entry[1]

    def _heartbeat_live(self, entry: TimerEntry) -> bool:
        group = self.groups.get(entry[3])
        if group is None:
            return False
        member = group.members.get(entry[4])
        return member is not None and member.heartbeat_token == entry[1]

    def _heartbeat_moved(self, entry: TimerEntry) -> int | None:
        """Heartbeats only move the member's deadline: the later one, if it moved."""
        deadline = self.groups[entry[3]].members[entry[4]].heartbeat_deadline
        return deadline if deadline > entry[0] else None

    def _pending_live(self, entry: TimerEntry) -> bool:
        group = self.groups.get(entry[3])
        return group is not None and group.pending_members.get(entry[4]) == entry[1]

    def arm_join(
        self,
        group: ClassicGroup,
        deadline_ms: int,
        *,
        initial: bool,
        delay_ms: int = 0,
        remaining_ms: int = 0,
    ) -> None:
        token = self._timers.push(deadline_ms, JOIN_TIMER, group.group_id)
        group.join_timer = JoinTimer(token, deadline_ms, initial, delay_ms, remaining_ms)

    def add_pending(self, group: ClassicGroup, member_id: str, deadline_ms: int) -> None:
        """D3/D4: a member id handed out, expiring at ``deadline_ms`` unless it comes back."""
        group.add_pending(member_id, self._timers.push(deadline_ms, PENDING_TIMER, group.group_id, member_id))

    def schedule_heartbeat(
        self, group: ClassicGroup, member: Member, timeout_ms: int, now_ms: int
    ) -> None:
        """G3: (re-)arm the member's liveness timer.

        A later deadline than the armed one (every heartbeat's case) only moves
        ``member.heartbeat_deadline``: the queued entry, due earlier, re-queues itself there when
        it comes up. An earlier deadline, or no armed timer, queues a new entry; older entries
        become stale by their token."""
        deadline = now_ms + timeout_ms
        if member.heartbeat_token and deadline >= member.heartbeat_deadline:
            member.heartbeat_deadline = deadline
            return
        member.heartbeat_token = self._timers.push(
            deadline, HEARTBEAT_TIMER, group.group_id, member.member_id
        )
        member.heartbeat_deadline = deadline

    def _on_heartbeat_timer(self, entry: TimerEntry, now_ms: int) -> None:
        """G4: expire unless awaiting join or sync (new members: only their 5-minute timer
        counts, and it counts even while awaiting join)."""
        group = self.groups[entry[3]]
        member = group.members[entry[4]]
        member.heartbeat_token = 0  # this timer is spent; the next arm queues a new one
        if group.state is GroupState.DEAD:
            return
        if not member.is_new and (member.awaiting_join or member.awaiting_sync):
            return  # re-armed when the join/sync completes
        log.info(
            "member %s of group %s (generation %d) failed its %s; removing it",
            member.member_id,
            group.group_id,
            group.generation,
            "new-member join timeout" if member.is_new else "session timeout",
        )
        self.remove_member_and_update_group(group, member, now_ms, "expired (session timeout)")

    def _on_join_timer(self, entry: TimerEntry, now_ms: int) -> None:
        """E2/E3: the delayed join expired."""
        group = self.groups[entry[3]]
        timer = group.join_timer
        assert timer is not None
        if timer.initial and group.new_member_added and timer.remaining_ms != 0:
            group.new_member_added = False
            delay = min(self.config.initial_rebalance_delay_ms, timer.remaining_ms)
            remaining = max(timer.remaining_ms - timer.delay_ms, 0)
            self.arm_join(group, now_ms + delay, initial=True, delay_ms=delay, remaining_ms=remaining)
            return
        self.complete_join(group, now_ms)

    def _on_pending_timer(self, entry: TimerEntry, now_ms: int) -> None:
        group_id, member_id = entry[3], entry[4]
        log.info(
            "pending member %s of group %s expired after its session timeout", member_id, group_id
        )
        self.remove_pending_member_and_update_group(self.groups[group_id], member_id, now_ms)

    # ---- rebalance (D11, E) ------------------------------------------------------------------

    def maybe_prepare_rebalance(
        self, group: ClassicGroup, now_ms: int, reason: str, member: str = ""
    ) -> None:
        if group.can_rebalance():
            self.prepare_rebalance(group, now_ms, reason, member)

    def prepare_rebalance(
        self, group: ClassicGroup, now_ms: int, reason: str, member: str = ""
    ) -> None:
        """D11. ``member``: the member id ``reason`` names, if any (see
        :func:`coordinator.rebalances.begin`)."""
        if group.state is GroupState.COMPLETING_REBALANCE:
            self.reset_and_propagate_assignment_error(group, ErrorCode.rebalance_in_progress, now_ms)
        initial = group.state is GroupState.EMPTY
        if group.state is not GroupState.COMPLETING_REBALANCE:
            self._rebalance_started[group.group_id] = begin(now_ms, reason, group.settled, member)
        group.transition_to(GroupState.PREPARING_REBALANCE, now_ms)
        if initial:
            delay = self.config.initial_rebalance_delay_ms
            self.arm_join(
                group,
                now_ms + delay,
                initial=True,
                delay_ms=delay,
                remaining_ms=max(group.rebalance_timeout_ms() - delay, 0),
            )
        else:
            self.arm_join(group, now_ms + group.rebalance_timeout_ms(), initial=False)
        # A new group's first rebalance (as many as groups are created) is said at INFO by its
        # completion line alone; a later one's start is worth a line of its own.
        log.log(
            logging.INFO if group.generation else logging.DEBUG,
            "group %s preparing to rebalance (generation %d): %s",
            group.group_id,
            group.generation,
            reason,
        )
        if not initial:
            self.try_complete_join(group, now_ms)

    def try_complete_join(self, group: ClassicGroup, now_ms: int) -> None:
        """E1/E9: complete early once every member rejoined and no id is pending; the
        initial delayed join (E3) never completes early."""
        timer = group.join_timer
        if (
            group.state is GroupState.PREPARING_REBALANCE
            and timer is not None
            and not timer.initial
            and group.all_members_joined()
        ):
            self.complete_join(group, now_ms)

    def complete_join(self, group: ClassicGroup, now_ms: int) -> None:
        """E4-E7."""
        group.join_timer = None
        for member in group.not_yet_rejoined():
            if not member.is_static:
                log.info(
                    "member %s of group %s did not rejoin; removing it",
                    member.member_id,
                    group.group_id,
                )
                self.remove_member(group, member.member_id)
        if group.state is GroupState.DEAD:
            return
        if group.members and not group.maybe_elect_new_joined_leader():
            log.warning(
                "group %s could not complete its rebalance: no member rejoined", group.group_id
            )
            self.arm_join(group, now_ms + group.rebalance_timeout_ms(), initial=False)
            return
        group.init_next_generation(now_ms)
        if group.state is GroupState.EMPTY:
            log.info("group %s is Empty at generation %d", group.group_id, group.generation)
            self.emit_group_record(group, {})
            self.rebalance_completed(group, now_ms)
            return
        log.debug(
            "group %s generation %d: protocol %s, leader %s, %d members",
            group.group_id,
            group.generation,
            group.protocol_name,
            group.leader_id,
            len(group.members),
        )
        leader_view = group.current_member_metadata()
        reply = self._op.reply
        for member in list(group.members.values()):
            if member.awaiting_join:
                h = group.clear_join(member)
                reply(
                    h,
                    JoinGroupResponse(
                        error=ErrorCode.none,
                        generation_id=group.generation,
                        protocol_type=group.protocol_type,
                        protocol_name=group.protocol_name,
                        leader=group.leader_id or "",
                        member_id=member.member_id,
                        members=leader_view if group.is_leader(member.member_id) else (),
                    ),
                )
            self.schedule_heartbeat(group, member, member.session_timeout_ms, now_ms)
            member.is_new = False

    def reset_and_propagate_assignment_error(
        self, group: ClassicGroup, error: int, now_ms: int
    ) -> None:
        for member in group.members.values():
            member.assignment = b""
        self.propagate_assignment(group, error, now_ms)

    def propagate_assignment(self, group: ClassicGroup, error: int, now_ms: int) -> list[Hashable]:
        """Answer every parked SyncGroup; returns their handles."""
        ok = error == ErrorCode.none
        answered: list[Hashable] = []
        for member in group.members.values():
            if not member.awaiting_sync:
                continue
            h = member.sync_handle
            member.awaiting_sync = False
            member.sync_handle = None
            self._op.reply(
                h,
                SyncGroupResponse(
                    error=error,
                    protocol_type=group.protocol_type if ok else None,
                    protocol_name=group.protocol_name if ok else None,
                    assignment=member.assignment,
                ),
            )
            answered.append(h)
            self.schedule_heartbeat(group, member, member.session_timeout_ms, now_ms)
        return answered

    def rebalance_under_way(self, group_id: str) -> RebalanceStart | None:
        return self._rebalance_started.get(group_id)

    def rebalance_completed(self, group: ClassicGroup, now_ms: int) -> None:
        done, group.settled = finish(
            self._rebalance_started.pop(group.group_id, None),
            group_id=group.group_id,
            group_type="classic",
            generation=group.generation,
            members=len(group.members),
            owners=_owners(group),
            now_ms=now_ms,
        )
        # The broker logs each completed rebalance once, as a structured line (logger
        # kcoord.rebalance), from the event the observer is handed.
        if self.rebalance_observer is not None:
            self.rebalance_observer(done)

    # ---- removal (G6, G7, H3) ----------------------------------------------------------------

    def fence_parked(self, group: ClassicGroup, member: Member, error: int) -> None:
        """Answer the member's parked JoinGroup/SyncGroup with ``error``."""
        if member.awaiting_join:
            h = group.clear_join(member)
            self._op.reply(h, join_error(member.member_id, error))
        if member.awaiting_sync:
            h = member.sync_handle
            member.awaiting_sync = False
            member.sync_handle = None
            self._op.reply(h, sync_error(error))

    def remove_member(self, group: ClassicGroup, member_id: str) -> None:
        """Drop a member; a parked JoinGroup gets UNKNOWN_MEMBER_ID with member id "" (as
        Kafka does, so a still-live client rejoins), a parked SyncGroup UNKNOWN_MEMBER_ID."""
        member = group.members.get(member_id)
        if member is None:
            group.remove(member_id)
            return
        if member.awaiting_join:
            h = group.clear_join(member)
            self._op.reply(h, join_error("", ErrorCode.unknown_member_id))
        if member.awaiting_sync:
            h = member.sync_handle
            member.awaiting_sync = False
            member.sync_handle = None
            self._op.reply(h, sync_error(ErrorCode.unknown_member_id))
        group.remove(member_id)
        member.heartbeat_token = 0

    def remove_member_and_update_group(
        self, group: ClassicGroup, member: Member, now_ms: int, why: str = "removed"
    ) -> None:
        """G7."""
        self.remove_member(group, member.member_id)
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self.maybe_prepare_rebalance(
                group, now_ms, f"member {member.member_id} {why}", member.member_id
            )
        elif group.state is GroupState.PREPARING_REBALANCE:
            self.try_complete_join(group, now_ms)

    def remove_pending_member_and_update_group(
        self, group: ClassicGroup, member_id: str, now_ms: int
    ) -> None:
        """G6."""
        group.remove(member_id)
        if group.state is GroupState.PREPARING_REBALANCE:
            self.try_complete_join(group, now_ms)

    def discard(self, group: ClassicGroup, error: int) -> None:
        """Forget a Dead group; parked requests (none for Empty groups) get ``error``."""
        for member in list(group.members.values()):
            self.fence_parked(group, member, error)
        group.join_timer = None
        self._rebalance_started.pop(group.group_id, None)
        del self.groups[group.group_id]

    # ---- the group record (I1, I2, I6) -------------------------------------------------------

    def emit_group_record(self, group: ClassicGroup, assignment: dict[str, bytes]) -> None:
        value = self.group_value(group, assignment)
        self._op.emit(encode_key(GroupMetadataKey(group.group_id)), encode_group_metadata_value(value))

    @staticmethod
    def group_value(group: ClassicGroup, assignment: dict[str, bytes]) -> GroupMetadataValue:
        """The group record's value (I2): members' subscriptions and ``assignment`` are
        referenced, not copied."""
        return GroupMetadataValue(
            protocol_type=group.protocol_type or "",
            generation=group.generation,
            protocol=group.protocol_name,
            leader=group.leader_id,
            current_state_timestamp=(
                group.state_timestamp_ms if group.state_timestamp_ms is not None else -1
            ),
            members=tuple(
                MemberMetadata(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    rebalance_timeout=m.rebalance_timeout_ms,
                    session_timeout=m.session_timeout_ms,
                    subscription=m.metadata(group.protocol_name),
                    assignment=assignment.get(m.member_id, b""),
                )
                for m in group.members.values()
            ),
        )

    def join_success(
        self, group: ClassicGroup, member_id: str, *, with_members: bool = True
    ) -> JoinGroupResponse:
        """A member's JoinGroup answered with the current generation."""
        is_leader = group.is_leader(member_id)
        return JoinGroupResponse(
            error=ErrorCode.none,
            generation_id=group.generation,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            leader=group.leader_id or "",
            member_id=member_id,
            members=group.current_member_metadata() if is_leader and with_members else (),
        )


def settled_now(group: ClassicGroup) -> Settled:
    """A loaded group's :class:`Settled`."""
    return Settled(len(group.members), _owners(group))


def _owners(group: ClassicGroup) -> Owners:
    return classic_owners((m.member_id, m.assignment) for m in group.members.values())
