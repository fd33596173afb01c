"""JoinGroup for classic groups (D1-D13, L3, L4), and the undo of a static member's replacement.

:class:`JoinGroupHandler` takes a JoinGroup that passed the shard's routing checks: it checks
the session timeout and whether the member's metadata could ever be written, creates the group
(C2), hands out member ids (D3/D4, KIP-394), adds or updates members and starts or joins a
rebalance through :class:`coordinator.classic.groups.ClassicGroups`. A request may park until
the rebalance completes; its reply then comes in a later Output. A known static member that
rejoins with an empty member id gets a new id without a rebalance when the group is Stable
(L3): the group record is written and :class:`StaticReplaceWriteFailed` undoes the swap if it
cannot be.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable
from dataclasses import dataclass

from kcoord.coordinator.classic.group import ClassicGroup, GroupState, Member
from kcoord.coordinator.classic.groups import (
    UNKNOWN_GENERATION,
    ClassicGroups,
    join_error,
    shared,
    shared_int,
    shared_protocols,
)
from kcoord.coordinator.config import GroupConfig
from kcoord.coordinator.messages import JoinGroupRequest, JoinGroupResponse
from kcoord.coordinator.output import Operation
from kcoord.coordinator.write_size import join_record_fits
from kcoord.protocol.errors import ErrorCode

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class StaticReplaceWriteFailed:
    """The group record written on a static member's replacement in Stable (L3) failed:
    revert the replacement (if nothing happened since) and answer the JoinGroup with the
    error, as Kafka does."""

    group_id: str
    generation: int
    instance_id: str
    old_member_id: str
    new_member_id: str
    old_protocols: tuple[tuple[str, bytes], ...]
    old_rebalance_timeout_ms: int
    old_session_timeout_ms: int
    old_leader_id: str | None
    handle: Hashable

    @property
    def handles(self) -> tuple[Hashable, ...]:
        return (self.handle,)


class JoinGroupHandler:
    def __init__(
        self,
        config: GroupConfig,
        op: Operation,
        groups: ClassicGroups,
        new_member_id: Callable[[str], str],
    ) -> None:
        self.config = config
        self._op = op
        self._groups = groups
        self._new_member_id = new_member_id

    def join_group(self, handle: Hashable, req: JoinGroupRequest, now_ms: int) -> None:
        """JoinGroup (D1-D13, L3, L4) after the routing checks. May park."""
        config = self.config
        if not config.min_session_timeout_ms <= req.session_timeout_ms <= config.max_session_timeout_ms:
            self._op.reply(handle, join_error(req.member_id, ErrorCode.invalid_session_timeout))
        elif not join_record_fits(req, config.max_batch_bytes):
            # No group record holding this member could ever be written: Kafka would fail the
            # group's SyncGroup with UNKNOWN_SERVER_ERROR at every generation. Say so now,
            # without taking the metadata into the group.
            log.warning(
                "group %s: JoinGroup of %s refused: its protocol metadata cannot fit in a"
                " group record of at most %d bytes",
                req.group_id,
                req.member_id or req.client_id,
                config.max_batch_bytes,
            )
            self._op.reply(handle, join_error(req.member_id, ErrorCode.unknown_server_error))
        else:
            self._join(handle, req, now_ms)

    def _accept_joining_member(self, group: ClassicGroup, member_id: str) -> bool:
        """D2."""
        state = group.state
        if state in (GroupState.EMPTY, GroupState.DEAD):
            return True
        if state is GroupState.PREPARING_REBALANCE:
            return (
                group.has(member_id) and group.get(member_id).awaiting_join
            ) or group.num_awaiting_join < self.config.max_size
        return group.has(member_id) or len(group.members) < self.config.max_size

    def _join(self, handle: Hashable, req: JoinGroupRequest, now_ms: int) -> None:
        is_unknown = req.member_id == ""
        groups = self._groups
        group = groups.groups.get(req.group_id)
        if group is None:
            if not is_unknown:
                self._op.reply(handle, join_error(req.member_id, ErrorCode.unknown_member_id))
                return
            group = ClassicGroup(req.group_id, state_timestamp_ms=now_ms)  # C2
            groups.groups[req.group_id] = group

        if not self._accept_joining_member(group, req.member_id):
            if group.has(req.member_id):
                groups.remove_member(group, req.member_id)
            else:
                group.remove(req.member_id)  # drops a pending id
            self._op.reply(handle, join_error("", ErrorCode.group_max_size_reached))
        elif is_unknown:
            self._new_member_join(handle, group, req, now_ms)
        else:
            self._current_member_join(handle, group, req, now_ms)

        if group.state is GroupState.PREPARING_REBALANCE:
            groups.try_complete_join(group, now_ms)

    def _new_member_join(
        self, handle: Hashable, group: ClassicGroup, req: JoinGroupRequest, now_ms: int
    ) -> None:
        """D3."""
        reply = self._op.reply
        if group.state is GroupState.DEAD:
            reply(handle, join_error("", ErrorCode.coordinator_not_available))
            return
        names = [name for name, _ in req.protocols]
        if not group.supports_protocols(req.protocol_type, names):
            reply(handle, join_error("", ErrorCode.inconsistent_group_protocol))
            return
        instance_id = req.group_instance_id
        new_id = self._new_member_id(instance_id if instance_id is not None else req.client_id)
        if instance_id is not None:
            old_id = group.static_member_id(instance_id)
            if old_id is not None:
                self._update_static_member_and_rebalance(
                    handle, group, req, instance_id, old_id, new_id, now_ms
                )
            else:
                self._add_member_and_rebalance(handle, group, req, new_id, now_ms)
        elif req.require_known_member_id:
            # D3/D4: hand out an id and wait for the member to come back with it.
            self._groups.add_pending(group, new_id, now_ms + req.session_timeout_ms)
            reply(handle, join_error(new_id, ErrorCode.member_id_required))
        else:
            self._add_member_and_rebalance(handle, group, req, new_id, now_ms)

    def _current_member_join(
        self, handle: Hashable, group: ClassicGroup, req: JoinGroupRequest, now_ms: int
    ) -> None:
        """D6-D8."""
        reply = self._op.reply
        member_id = req.member_id
        if group.state is GroupState.DEAD:
            reply(handle, join_error(member_id, ErrorCode.coordinator_not_available))
            return
        names = [name for name, _ in req.protocols]
        if not group.supports_protocols(req.protocol_type, names):
            reply(handle, join_error(member_id, ErrorCode.inconsistent_group_protocol))
            return
        if group.is_pending(member_id) and req.group_instance_id is None:
            self._add_member_and_rebalance(handle, group, req, member_id, now_ms)
            return
        error = group.validate_member(member_id, req.group_instance_id)
        if error is not None:
            reply(handle, join_error(member_id, error))
            return
        member = group.get(member_id)
        state = group.state
        if state is GroupState.PREPARING_REBALANCE:
            self._update_member_and_rebalance(handle, group, member, req, now_ms)
        elif state is GroupState.COMPLETING_REBALANCE:
            if member.matches(req.protocols):
                # The member probably lost its JoinGroup response: same generation again.
                reply(handle, self._groups.join_success(group, member_id))
            else:
                self._update_member_and_rebalance(handle, group, member, req, now_ms)
        elif state is GroupState.STABLE:
            if group.is_leader(member_id) or not member.matches(req.protocols):
                self._update_member_and_rebalance(handle, group, member, req, now_ms)
            else:
                reply(handle, self._groups.join_success(group, member_id, with_members=False))
        else:
            reply(handle, join_error(member_id, ErrorCode.unknown_member_id))

    def _add_member_and_rebalance(
        self,
        handle: Hashable,
        group: ClassicGroup,
        req: JoinGroupRequest,
        member_id: str,
        now_ms: int,
    ) -> None:
        """D10."""
        member = Member(
            member_id=member_id,
            group_instance_id=req.group_instance_id,
            client_id=shared(req.client_id),
            client_host=shared(req.client_host),
            rebalance_timeout_ms=shared_int(req.rebalance_timeout_ms),
            session_timeout_ms=shared_int(req.session_timeout_ms),
            protocol_type=shared(req.protocol_type),
            protocols=shared_protocols(req.protocols),
            is_new=True,
        )
        if group.state is GroupState.PREPARING_REBALANCE and group.generation == 0:
            group.new_member_added = True
        group.add(member, handle, awaiting=True)
        # New members cannot heartbeat yet: only the new-member join timeout applies.
        self._groups.schedule_heartbeat(group, member, self.config.new_member_join_timeout_ms, now_ms)
        log.debug(
            "member %s (instance %s) joins group %s in state %s",
            member_id,
            req.group_instance_id,
            group.group_id,
            group.state.value,
        )
        self._groups.maybe_prepare_rebalance(
            group, now_ms, f"new member {member_id} joined", member_id
        )

    def _update_member_and_rebalance(
        self,
        handle: Hashable,
        group: ClassicGroup,
        member: Member,
        req: JoinGroupRequest,
        now_ms: int,
    ) -> None:
        displaced, old_handle = group.update_member(
            member,
            shared_protocols(req.protocols),
            shared_int(req.rebalance_timeout_ms),
            shared_int(req.session_timeout_ms),
            handle,
            awaiting=True,
        )
        if displaced:
            # A second JoinGroup from the same member replaces the parked one.
            self._op.reply(old_handle, join_error(member.member_id, ErrorCode.rebalance_in_progress))
        self._groups.maybe_prepare_rebalance(
            group, now_ms, f"member {member.member_id} rejoined in {group.state.value}", member.member_id
        )

    def _update_static_member_and_rebalance(
        self,
        handle: Hashable,
        group: ClassicGroup,
        req: JoinGroupRequest,
        instance_id: str,
        old_id: str,
        new_id: str,
        now_ms: int,
    ) -> None:
        """L3: a known instance rejoins with member id "": give it a new id."""
        groups = self._groups
        old_leader = group.leader_id
        member = group.get(old_id)
        old_protocols = member.protocols
        old_rebalance_timeout = member.rebalance_timeout_ms
        old_session_timeout = member.session_timeout_ms
        groups.fence_parked(group, member, ErrorCode.fenced_instance_id)
        group.replace_static_member(instance_id, old_id, new_id)
        group.update_member(
            member,
            shared_protocols(req.protocols),
            shared_int(req.rebalance_timeout_ms),
            shared_int(req.session_timeout_ms),
            handle,
            awaiting=True,
        )
        groups.schedule_heartbeat(group, member, member.session_timeout_ms, now_ms)
        log.info(
            "static member %s of group %s replaced by %s in state %s",
            old_id,
            group.group_id,
            new_id,
            group.state.value,
        )
        state = group.state
        if state is GroupState.STABLE:
            if group.select_protocol() != group.protocol_name:
                groups.maybe_prepare_rebalance(
                    group, now_ms, f"static member {new_id} changed the selected protocol", new_id
                )
                return
            # No rebalance: persist the new member id and answer at once (after the write).
            groups.emit_group_record(
                group, {m.member_id: m.assignment for m in group.members.values()}
            )
            group.clear_join(member)
            is_leader = group.is_leader(new_id)
            if req.supports_skip_assignment:
                response = JoinGroupResponse(
                    error=ErrorCode.none,
                    generation_id=group.generation,
                    protocol_type=group.protocol_type,
                    protocol_name=group.protocol_name,
                    leader=group.leader_id or "",
                    member_id=new_id,
                    members=group.current_member_metadata() if is_leader else (),
                    skip_assignment=is_leader,
                )
            else:
                # The old leader id keeps the rejoiner from acting as leader in a Stable group.
                response = JoinGroupResponse(
                    error=ErrorCode.none,
                    generation_id=group.generation,
                    protocol_type=group.protocol_type,
                    protocol_name=group.protocol_name,
                    leader=old_leader or "",
                    member_id=new_id,
                    members=(),
                )
            self._op.reply(handle, response)
            self._op.on_failure(
                StaticReplaceWriteFailed(
                    group_id=group.group_id,
                    generation=group.generation,
                    instance_id=instance_id,
                    old_member_id=old_id,
                    new_member_id=new_id,
                    old_protocols=old_protocols,
                    old_rebalance_timeout_ms=old_rebalance_timeout,
                    old_session_timeout_ms=old_session_timeout,
                    old_leader_id=old_leader,
                    handle=handle,
                )
            )
        elif state is GroupState.COMPLETING_REBALANCE:
            # The leader may already hold the old id in its assignment: start over.
            groups.prepare_rebalance(
                group, now_ms, f"static member {new_id} replaced {old_id}", new_id
            )
        # PreparingRebalance: stays parked until the join completes.

    def static_replace_write_failed(
        self, action: StaticReplaceWriteFailed, error: int, now_ms: int
    ) -> None:
        group = self._groups.groups.get(action.group_id)
        if (
            group is not None
            and group.state is GroupState.STABLE
            and group.generation == action.generation
            and group.static_member_id(action.instance_id) == action.new_member_id
        ):
            member = group.get(action.new_member_id)
            if not member.awaiting_join and not member.awaiting_sync:
                group.update_member(
                    member,
                    action.old_protocols,
                    action.old_rebalance_timeout_ms,
                    action.old_session_timeout_ms,
                    None,
                    awaiting=False,
                )
                group.replace_static_member(
                    action.instance_id, action.new_member_id, action.old_member_id
                )
                self._groups.schedule_heartbeat(group, member, member.session_timeout_ms, now_ms)
        self._op.reply(
            action.handle,
            JoinGroupResponse(
                error=error,
                generation_id=group.generation if group is not None else UNKNOWN_GENERATION,
                protocol_type=group.protocol_type if group is not None else None,
                protocol_name=group.protocol_name if group is not None else None,
                leader=action.old_leader_id or "",
                member_id="",
                members=(),
            ),
        )
