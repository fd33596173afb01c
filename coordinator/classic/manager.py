"""The classic groups of one shard as the shard sees them (B-H, K, L, M; the group side of I, J).

:class:`ClassicGroupManager` is the one object of this package the shard talks to. It handles
the classic group requests that passed the shard's routing checks: JoinGroup (through
:class:`coordinator.classic.join.JoinGroupHandler`), SyncGroup with the group record of a new
generation (and its undo, :class:`SyncWriteFailed`), Heartbeat, LeaveGroup, ListGroups and
DescribeGroups, and the group side of DeleteGroups. It is also the shard's
:class:`coordinator.offset_interface.OffsetGroups` (the groups as the offsets manager needs
them), and it rebuilds the groups from their records at start-up (K3).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable, Iterable, Iterator
from dataclasses import dataclass

from kcoord.coordinator.classic.group import ClassicGroup, GroupState, Member
from kcoord.coordinator.classic.groups import (
    ClassicGroups,
    settled_now,
    shared,
    shared_bytes,
    shared_int,
    shared_protocols,
    sync_error,
)
from kcoord.coordinator.classic.join import JoinGroupHandler, StaticReplaceWriteFailed
from kcoord.coordinator.config import GroupConfig
from kcoord.coordinator.messages import (
    DescribedGroup,
    DescribedMember,
    JoinGroupRequest,
    LeaveGroupRequest,
    LeaveGroupResponse,
    LeaveMemberResult,
    ListedGroup,
    ListGroupsRequest,
    SyncGroupRequest,
    SyncGroupResponse,
)
from kcoord.coordinator.output import Operation
from kcoord.coordinator.schemas import (
    GroupMetadataKey,
    GroupMetadataValue,
    SchemaError,
    decode_group_metadata_value,
    encode_group_metadata_value,
    encode_key,
)
from kcoord.coordinator.timers import Timers
from kcoord.coordinator.write_size import group_record_batch_size
from kcoord.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

GROUP_TYPE_CLASSIC = "classic"


@dataclass(frozen=True, slots=True)
class SyncWriteFailed:
    """The group record written on the leader's SyncGroup (I1) failed: answer ``handles``
    (the syncs the Output completed) with the error and, if the group is still Stable at
    ``generation``, clear assignments and rebalance (F3, C5)."""

    group_id: str
    generation: int
    handles: tuple[Hashable, ...]


def listed_groups(
    groups: Iterable[ClassicGroup], req: ListGroupsRequest
) -> tuple[ListedGroup, ...]:
    """ListGroups' answer for ``groups``: those not Dead that pass the request's state and
    type filters (case-insensitive; an empty filter passes everything)."""
    states = {s.lower() for s in req.states_filter}
    types = {t.lower() for t in req.types_filter}
    if types and GROUP_TYPE_CLASSIC not in types:
        return ()
    return tuple(
        ListedGroup(g.group_id, g.protocol_type or "", g.state.value)
        for g in groups
        if g.state is not GroupState.DEAD and (not states or g.state.value.lower() in states)
    )


class ClassicGroupManager:
    """The classic groups of a shard (see the module docstring)."""

    def __init__(
        self,
        config: GroupConfig,
        op: Operation,
        timers: Timers,
        new_member_id: Callable[[str], str],
    ) -> None:
        self.config = config
        self._op = op
        self.state = ClassicGroups(config, op, timers)
        self.groups = self.state.groups
        """Group id -> group (the same dict as ``state.groups``)."""
        self._join = JoinGroupHandler(config, op, self.state, new_member_id)
        self._loaded: dict[str, GroupMetadataValue] = {}

    # ---- JoinGroup, SyncGroup (D, F) -------------------------------------------------------

    def join_group(self, handle: Hashable, req: JoinGroupRequest, now_ms: int) -> None:
        self._join.join_group(handle, req, now_ms)

    def static_replace_write_failed(
        self, action: StaticReplaceWriteFailed, error: int, now_ms: int
    ) -> None:
        self._join.static_replace_write_failed(action, error, now_ms)

    def sync_group(self, handle: Hashable, req: SyncGroupRequest, now_ms: int) -> None:
        """SyncGroup (F2-F6) after the routing checks. Parks in CompletingRebalance until the
        leader's assignment."""
        reply = self._op.reply
        group = self.groups.get(req.group_id)
        if group is None:
            reply(handle, sync_error(ErrorCode.unknown_member_id))
            return
        error: int | None
        if group.state is GroupState.DEAD:
            error = ErrorCode.coordinator_not_available
        else:
            error = group.validate_member(req.member_id, req.group_instance_id)
            if error is None:
                if req.generation_id != group.generation:
                    error = ErrorCode.illegal_generation
                elif (
                    req.protocol_type is not None and req.protocol_type != group.protocol_type
                ) or (req.protocol_name is not None and req.protocol_name != group.protocol_name):
                    error = ErrorCode.inconsistent_group_protocol
        if error is not None:
            reply(handle, sync_error(error))
            return

        state = group.state
        if state is GroupState.EMPTY:
            reply(handle, sync_error(ErrorCode.unknown_member_id))
        elif state is GroupState.PREPARING_REBALANCE:
            reply(handle, sync_error(ErrorCode.rebalance_in_progress))
        elif state is GroupState.COMPLETING_REBALANCE:
            member = group.get(req.member_id)
            if member.awaiting_sync:
                reply(member.sync_handle, sync_error(ErrorCode.rebalance_in_progress))
            member.awaiting_sync = True
            member.sync_handle = handle
            if group.is_leader(req.member_id):
                self._complete_sync(group, req, now_ms)
        else:  # Stable
            member = group.get(req.member_id)
            reply(
                handle,
                SyncGroupResponse(
                    error=ErrorCode.none,
                    protocol_type=group.protocol_type,
                    protocol_name=group.protocol_name,
                    assignment=member.assignment,
                ),
            )
            self.state.schedule_heartbeat(group, member, member.session_timeout_ms, now_ms)

    def _complete_sync(self, group: ClassicGroup, req: SyncGroupRequest, now_ms: int) -> None:
        """F3: the leader's assignment arrived: fill gaps, write the group record (I1),
        answer every parked sync and become Stable. Replies go out once the record is
        durable; :meth:`sync_write_failed` undoes this if it is not."""
        state = self.state
        given = dict(req.assignments)
        assignment = {mid: given.get(mid, b"") for mid in group.members}
        missing = [mid for mid in group.members if mid not in given]
        if missing:
            log.warning(
                "group %s generation %d: empty assignment for members %s",
                group.group_id,
                group.generation,
                missing,
            )
        value = state.group_value(group, assignment)
        try:
            size: int | None = group_record_batch_size(group.group_id, value)
        except SchemaError:
            size = None  # a string too long for its field: cannot be written at all
        if size is None or size > self.config.max_batch_bytes:
            # Kafka's runtime fails this write before changing anything; the failure answers
            # every member awaiting its assignment (the leader too) UNKNOWN_SERVER_ERROR and
            # the group rebalances (F3, C5). Do the same without building the record.
            log.warning(
                "group %s generation %d: the group record (%s bytes) does not fit in one batch"
                " of at most %d bytes; rebalancing",
                group.group_id,
                group.generation,
                "unencodable" if size is None else size,
                self.config.max_batch_bytes,
            )
            state.reset_and_propagate_assignment_error(group, ErrorCode.unknown_server_error, now_ms)
            state.maybe_prepare_rebalance(group, now_ms, "the group record is too large to store")
            return
        self._op.emit(encode_key(GroupMetadataKey(group.group_id)), encode_group_metadata_value(value))
        for mid, member in group.members.items():
            member.assignment = shared_bytes(assignment[mid])
        handles = state.propagate_assignment(group, ErrorCode.none, now_ms)
        group.transition_to(GroupState.STABLE, now_ms)
        # At INFO the rebalance's structured line (logger kcoord.rebalance) says as much.
        log.debug("group %s is Stable at generation %d", group.group_id, group.generation)
        state.rebalance_completed(group, now_ms)
        self._op.on_failure(SyncWriteFailed(group.group_id, group.generation, tuple(handles)))

    def sync_write_failed(self, action: SyncWriteFailed, error: int, now_ms: int) -> None:
        for h in action.handles:
            self._op.reply(h, sync_error(error))
        group = self.groups.get(action.group_id)
        if (
            group is not None
            and group.generation == action.generation
            and group.state is GroupState.STABLE
        ):
            log.warning(
                "group %s: storing the generation %d assignment failed (%s); rebalancing",
                group.group_id,
                group.generation,
                error,
            )
            for member in group.members.values():
                member.assignment = b""
            self.state.maybe_prepare_rebalance(group, now_ms, "failed to store the group assignment")

    # ---- Heartbeat, LeaveGroup (G, H) ------------------------------------------------------

    def heartbeat(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        now_ms: int,
    ) -> int:
        """Heartbeat (G2) after the routing checks: its error code (it emits nothing)."""
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.unknown_member_id
        if group.state is GroupState.DEAD:
            return ErrorCode.coordinator_not_available
        if group_instance_id is not None:
            error = group.validate_member(member_id, group_instance_id)
            if error is not None:
                return error
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.unknown_member_id
        if generation_id != group.generation:
            return ErrorCode.illegal_generation
        state = group.state
        if state is GroupState.EMPTY:
            return ErrorCode.unknown_member_id
        self.state.schedule_heartbeat(group, member, member.session_timeout_ms, now_ms)
        if state is GroupState.PREPARING_REBALANCE:
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    def leave_group(self, req: LeaveGroupRequest, now_ms: int) -> LeaveGroupResponse:
        """LeaveGroup (H3) after the routing checks; v3+ batches members."""
        group = self.groups.get(req.group_id)
        if group is None:
            return LeaveGroupResponse(
                ErrorCode.none,
                tuple(
                    LeaveMemberResult(m.member_id, m.group_instance_id, ErrorCode.unknown_member_id)
                    for m in req.members
                ),
            )
        if group.state is GroupState.DEAD:
            return LeaveGroupResponse(ErrorCode.coordinator_not_available, ())
        results = []
        for leaving in req.members:
            err = self._leave_one(group, leaving.member_id, leaving.group_instance_id, now_ms)
            results.append(LeaveMemberResult(leaving.member_id, leaving.group_instance_id, err))
        return LeaveGroupResponse(ErrorCode.none, tuple(results))

    def _leave_one(
        self, group: ClassicGroup, member_id: str, instance_id: str | None, now_ms: int
    ) -> int:
        if member_id == "":
            # Administrative removal by instance id.
            current = group.static_member_id(instance_id)
            if current is None:
                return ErrorCode.unknown_member_id
            self._leave_member(group, current, now_ms)
            return ErrorCode.none
        if group.is_pending(member_id):
            log.info("pending member %s left group %s", member_id, group.group_id)
            self.state.remove_pending_member_and_update_group(group, member_id, now_ms)
            return ErrorCode.none
        error = group.validate_member(member_id, instance_id)
        if error is not None:
            return error
        self._leave_member(group, member_id, now_ms)
        return ErrorCode.none

    def _leave_member(self, group: ClassicGroup, member_id: str, now_ms: int) -> None:
        log.info("member %s left group %s", member_id, group.group_id)
        self.state.remove_member_and_update_group(group, group.get(member_id), now_ms, "left")

    # ---- ListGroups, DescribeGroups, DeleteGroups -------------------------------------------

    def listed(self, req: ListGroupsRequest) -> tuple[ListedGroup, ...]:
        return listed_groups(self.groups.values(), req)

    def describe(self, group_id: str) -> DescribedGroup:
        """DescribeGroups' entry for a group. An unknown one is Dead with GROUP_ID_NOT_FOUND and
        Kafka's message, which v6 (KIP-1043) shows; the broker shows older versions Dead, no error."""
        group = self.groups.get(group_id)
        if group is None:
            return DescribedGroup(
                ErrorCode.group_id_not_found, group_id, GroupState.DEAD.value, "", "", (),
                f"Group {group_id} not found.",
            )
        stable = group.state is GroupState.STABLE
        protocol = (group.protocol_name or "") if stable else ""
        members = tuple(
            DescribedMember(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                metadata=m.metadata(protocol) if stable else b"",
                assignment=m.assignment if stable else b"",
            )
            for m in group.members.values()
        )
        return DescribedGroup(
            ErrorCode.none,
            group.group_id,
            group.state.value,
            group.protocol_type or "",
            protocol,
            members,
        )

    def delete_check(self, group_id: str) -> int:
        """Whether DeleteGroups may delete the group: only an Empty one (NONE)."""
        group = self.groups.get(group_id)
        if group is None or group.state is GroupState.DEAD:
            return ErrorCode.group_id_not_found
        if group.state is GroupState.EMPTY:
            return ErrorCode.none
        return ErrorCode.non_empty_group

    def delete(self, group_id: str, now_ms: int) -> None:
        """Delete an Empty group: it goes Dead, its record gets a tombstone, it is forgotten."""
        group = self.groups[group_id]
        group.transition_to(GroupState.DEAD, now_ms)
        self._op.emit(encode_key(GroupMetadataKey(group_id)), None)
        self.state.discard(group, ErrorCode.coordinator_not_available)

    def restore_deleted(self, group: ClassicGroup, state_timestamp_ms: int | None) -> bool:
        """Undo :meth:`delete` after its tombstone failed: the group is Empty again, unless a
        group of that id was created since (its records are newer). Pending member ids handed
        out before are dropped (their timers went with the deletion). True if restored."""
        if group.group_id in self.groups:
            return False
        group.state = GroupState.EMPTY
        group.state_timestamp_ms = state_timestamp_ms
        for member_id in list(group.pending_members):
            group.drop_pending(member_id)
        self.groups[group.group_id] = group
        log.warning("group %s: its deletion could not be stored; it is back", group.group_id)
        return True

    # ---- the groups as the offsets see them (coordinator.offset_interface.OffsetGroups) --

    def offset_group(self, group_id: str) -> ClassicGroup | None:
        return self.groups.get(group_id)

    def create_standalone(self, group_id: str, now_ms: int) -> ClassicGroup:
        group = ClassicGroup(group_id, state_timestamp_ms=now_ms)  # C2
        self.groups[group_id] = group
        # DEBUG: one line per request a client can send at will would flood the log.
        log.debug("group %s created by an offset commit (standalone consumer)", group_id)
        return group

    def forget(self, group_id: str) -> None:
        del self.groups[group_id]

    def commit_accepted(self, group_id: str, member_id: str, now_ms: int) -> None:
        """M3: a member's commit during Stable or PreparingRebalance keeps it alive (the
        heartbeat tells it about the rebalance)."""
        group = self.groups[group_id]
        if group.state in (GroupState.STABLE, GroupState.PREPARING_REBALANCE):
            member = group.get(member_id)
            self.state.schedule_heartbeat(group, member, member.session_timeout_ms, now_ms)

    def offset_group_ids(self) -> list[str]:
        return list(self.groups)

    def offsets_gone(self, group_id: str, now_ms: int) -> None:
        """I6: an Empty group left without offsets goes Dead and is forgotten; if it ever
        reached a generation (so a group record may exist) its record gets a tombstone."""
        group = self.groups.get(group_id)
        if group is None or group.state is not GroupState.EMPTY:
            return
        generation = group.generation
        group.transition_to(GroupState.DEAD, now_ms)
        if generation > 0:
            self._op.emit(encode_key(GroupMetadataKey(group_id)), None)
        self.state.discard(group, ErrorCode.coordinator_not_available)
        log.info("group %s is Dead at generation %d (no offsets left)", group_id, generation)

    def adopt(self, group_id: str, value: GroupMetadataValue, now_ms: int, reason: str) -> None:
        """Take over a group converted from another type (a consumer group whose last
        consumer-protocol member left): its record is written, its members' sessions start
        and it rebalances so that they rejoin as a classic group."""
        self._op.emit(encode_key(GroupMetadataKey(group_id)), encode_group_metadata_value(value))
        group = _group_from_record(group_id, value)
        self.groups[group_id] = group
        for member in group.members.values():
            self.state.schedule_heartbeat(group, member, member.session_timeout_ms, now_ms)
        self.state.prepare_rebalance(group, now_ms, reason)

    # ---- loading and unloading (K3) ----------------------------------------------------------

    def replay(self, group_id: str, value: bytes | None) -> None:
        """Apply one group record (the newest value per key wins, I5; None: a tombstone)."""
        if value is None:
            self._loaded.pop(group_id, None)
        else:
            self._loaded[group_id] = decode_group_metadata_value(value)

    def finish_loading(self, with_offsets: Iterable[str], now_ms: int) -> None:
        """K3: materialise the loaded groups (Stable with members, else Empty); groups that
        only have offsets (``with_offsets``) become Empty standalone groups; every member's
        session timer starts now."""
        groups = self.groups
        for group_id, value in self._loaded.items():
            groups[group_id] = _group_from_record(group_id, value)
        self._loaded.clear()
        for group_id in with_offsets:
            if group_id not in groups:
                # Offsets without a group record: a standalone consumer's group (J6).
                groups[group_id] = ClassicGroup(group_id, state_timestamp_ms=now_ms)

    def start_timers(self, now_ms: int) -> None:
        """K3, once loaded: every member's session timer; an over-full group rebalances."""
        state = self.state
        for group in self.groups.values():
            if len(group.members) > self.config.max_size:
                state.prepare_rebalance(group, now_ms, "loaded group is over group.max.size")
            for member in group.members.values():
                state.schedule_heartbeat(group, member, member.session_timeout_ms, now_ms)

    def unload(self, now_ms: int) -> None:
        """K3: every group goes Dead; parked requests get NOT_COORDINATOR."""
        for group in list(self.groups.values()):
            group.transition_to(GroupState.DEAD, now_ms)
            self.state.discard(group, ErrorCode.not_coordinator)
        self.groups.clear()
        self._loaded.clear()

    def __iter__(self) -> Iterator[ClassicGroup]:
        return iter(list(self.groups.values()))


def _group_from_record(group_id: str, value: GroupMetadataValue) -> ClassicGroup:
    group = ClassicGroup(
        group_id,
        state=GroupState.STABLE if value.members else GroupState.EMPTY,
        state_timestamp_ms=(
            value.current_state_timestamp if value.current_state_timestamp >= 0 else None
        ),
        generation=value.generation,
        protocol_name=value.protocol,
        leader_id=value.leader,
    )
    for mm in value.members:
        protocols = (
            shared_protocols(((value.protocol, mm.subscription),))
            if value.protocol is not None
            else ()
        )
        group.add(
            Member(
                member_id=mm.member_id,
                group_instance_id=mm.group_instance_id,
                client_id=shared(mm.client_id),
                client_host=shared(mm.client_host),
                rebalance_timeout_ms=shared_int(
                    mm.rebalance_timeout if mm.rebalance_timeout >= 0 else mm.session_timeout
                ),
                session_timeout_ms=shared_int(mm.session_timeout),
                protocol_type=value.protocol_type,
                protocols=protocols,
                assignment=shared_bytes(mm.assignment),
            )
        )
    group.protocol_type = value.protocol_type or None
    group.compute_subscribed_topics()
    group.settled = settled_now(group)
    return group
