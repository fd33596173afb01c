"""Classic-protocol members inside a consumer group (Kafka's online migration, KIP-848).

A group upgraded from classic keeps its classic members, and more may join, through JoinGroup,
SyncGroup, Heartbeat and LeaveGroup. The server computes their assignment like any member's:
JoinGroup stores the member (its subscription read from the embedded consumer protocol, its
session timeout and protocols as the record's ClassicMemberMetadata), bumps the group epoch if
need be, and reconciles it against the partitions the subscription says it owns; it is answered
at once, as a follower, with its member epoch as the generation. SyncGroup hands out the
member's current assignment. Heartbeat answers REBALANCE_IN_PROGRESS when the member must
rejoin: a target newer than its epoch is there (KAFKA-20272: not merely a newer group epoch,
which batching or offload may leave ahead of the target for a while), it has partitions to
revoke, or partitions it waits for were released; SyncGroup answers it on the same newer target. A classic member that does not rejoin, or does not sync after joining, within its
rebalance timeout is fenced (Kafka's join and sync timeouts).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable
from dataclasses import replace

from kcoord.coordinator.classic.groups import join_error, sync_error
from kcoord.coordinator.consumer.change import Change
from kcoord.coordinator.consumer.embedded import (
    SubscriptionError,
    decode_subscription,
    encode_assignment,
    version_of,
)
from kcoord.coordinator.consumer.group import ConsumerGroup
from kcoord.coordinator.consumer.manager import ConsumerGroupManager
from kcoord.coordinator.consumer.member import ConsumerMember, MemberState
from kcoord.coordinator.consumer.records import ClassicMemberMetadata, ClassicProtocol
from kcoord.coordinator.consumer.topics import by_id, by_name
from kcoord.coordinator.messages import (
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    LeaveMemberResult,
    SyncGroupRequest,
    SyncGroupResponse,
)
from kcoord.coordinator.subscription import CONSUMER_PROTOCOL_TYPE
from kcoord.protocol.errors import ErrorCode

log = logging.getLogger(__name__)


class ClassicMembers:
    """The classic requests of members of consumer groups (see the module docstring)."""

    def __init__(self, manager: ConsumerGroupManager, new_member_id: Callable[[str], str]) -> None:
        self._manager = manager
        self._new_member_id = new_member_id

    # ---- JoinGroup ------------------------------------------------------------------------

    def join(self, handle: Hashable, group: ConsumerGroup, req: JoinGroupRequest, now_ms: int) -> None:
        manager = self._manager
        op = manager.op
        member_id = req.member_id
        unknown = member_id == ""
        if unknown:
            member_id = self._new_member_id(req.client_id)
        if len(group.members) >= manager.config.consumer_max_size and member_id not in group.members:
            op.reply(handle, join_error(member_id, ErrorCode.group_max_size_reached))
            return
        subscription = None
        if req.protocol_type == CONSUMER_PROTOCOL_TYPE and req.protocols:
            try:
                subscription = decode_subscription(req.protocols[0][1])
            except SubscriptionError:
                subscription = None
        if subscription is None:
            op.reply(handle, join_error(req.member_id, ErrorCode.inconsistent_group_protocol))
            return
        if unknown and req.group_instance_id is None and req.require_known_member_id:
            op.reply(handle, join_error(member_id, ErrorCode.member_id_required))
            return
        change = Change(group, created=False)
        found = self._member(change, member_id, unknown, req.group_instance_id)
        if isinstance(found, int):
            op.reply(handle, join_error(req.member_id, found))
            return
        member, is_new = found
        updated = replace(
            member,
            instance_id=req.group_instance_id,
            rack_id=subscription.rack_id if subscription.rack_id is not None else member.rack_id,
            rebalance_timeout_ms=req.rebalance_timeout_ms,
            subscribed_topic_names=tuple(sorted(set(subscription.topics))),
            client_id=req.client_id,
            client_host=req.client_host,
            classic=ClassicMemberMetadata(
                req.session_timeout_ms,
                tuple(ClassicProtocol(name, bytes(meta)) for name, meta in req.protocols),
            ),
        )
        if not is_new and updated.same_subscription_record(member):
            updated = member
        owned = by_id(subscription.owned, manager.topics).items()
        current = manager.apply_member(change, member, updated, is_new, owned, now_ms)
        manager.maybe_completed(group, now_ms)
        # The sync timeout: a member that does not come for its assignment is fenced.
        manager.arm_rebalance(group, current, manager.timers_of(group, member_id), now_ms)
        op.reply(
            handle,
            JoinGroupResponse(
                error=ErrorCode.none,
                generation_id=current.member_epoch,
                protocol_type=CONSUMER_PROTOCOL_TYPE,
                protocol_name=req.protocols[0][0],
                leader="",
                member_id=member_id,
            ),
        )
        manager.finish(change, handle)

    def _member(
        self, change: Change, member_id: str, unknown: bool, instance_id: str | None
    ) -> tuple[ConsumerMember, bool] | int:
        group = change.group
        if instance_id is None:
            member = group.members.get(member_id)
            if member is None:
                if not unknown:
                    return ErrorCode.unknown_member_id
                return ConsumerMember(member_id), True
            return member, False
        existing = group.static_member(instance_id)
        if existing is None:
            if not unknown and member_id not in group.members:
                return ErrorCode.unknown_member_id
            member = group.members.get(member_id)
            return (member, False) if member is not None else (ConsumerMember(member_id), True)
        if unknown:  # the instance restarted: it takes over the old member
            return self._manager.replace_static(change, existing, member_id), False
        if existing.member_id != member_id:
            return ErrorCode.fenced_instance_id
        return existing, False

    # ---- SyncGroup, Heartbeat, LeaveGroup -------------------------------------------------

    def _validated(
        self, group: ConsumerGroup, member_id: str, instance_id: str | None, generation: int
    ) -> ConsumerMember | int:
        if instance_id is None:
            member = group.members.get(member_id)
            if member is None:
                return ErrorCode.unknown_member_id
        else:
            member = group.static_member(instance_id)
            if member is None:
                return ErrorCode.unknown_member_id
            if member.member_id != member_id:
                return ErrorCode.fenced_instance_id
        if member.classic is None:
            return ErrorCode.unknown_member_id  # a consumer-protocol member: not this API's
        if generation != member.member_epoch:
            return ErrorCode.illegal_generation
        return member

    def sync(self, handle: Hashable, group: ConsumerGroup, req: SyncGroupRequest, now_ms: int) -> None:
        manager = self._manager
        found = self._validated(group, req.member_id, req.group_instance_id, req.generation_id)
        if isinstance(found, int):
            manager.op.reply(handle, sync_error(found))
            return
        member = found
        classic = member.classic
        assert classic is not None
        chosen = classic.supported_protocols[0]
        if (req.protocol_type is not None and req.protocol_type != CONSUMER_PROTOCOL_TYPE) or (
            req.protocol_name is not None and req.protocol_name != chosen.name
        ):
            manager.op.reply(handle, sync_error(ErrorCode.inconsistent_group_protocol))
            return
        if member.member_epoch < group.assignment_epoch and member.state is not MemberState.UNREVOKED_PARTITIONS:
            # A newer target: rejoin first (one that is revoking has rejoined already).
            manager.op.reply(handle, sync_error(ErrorCode.rebalance_in_progress))
            return
        manager.arm_session(group, member, now_ms)
        manager.timers_of(group, member.member_id).rebalance_token = 0  # synced in time
        names = by_name(member.assigned, manager.topics)
        manager.op.reply(
            handle,
            SyncGroupResponse(
                ErrorCode.none,
                CONSUMER_PROTOCOL_TYPE,
                chosen.name,
                encode_assignment(names, version_of(chosen.metadata)),
            ),
        )

    def heartbeat(
        self,
        group: ConsumerGroup,
        member_id: str,
        instance_id: str | None,
        generation: int,
        now_ms: int,
    ) -> int:
        manager = self._manager
        found = self._validated(group, member_id, instance_id, generation)
        if isinstance(found, int):
            return found
        member = found
        manager.arm_session(group, member, now_ms)
        if (
            member.member_epoch < group.assignment_epoch
            or member.state is MemberState.UNREVOKED_PARTITIONS
            or (member.state is MemberState.UNRELEASED_PARTITIONS and not _waiting(group, member))
        ):
            timers = manager.timers_of(group, member.member_id)
            if timers.rebalance_token == 0:  # the join timeout: it must rejoin in time
                manager.arm_rebalance(group, member, timers, now_ms)
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    def leave(self, group: ConsumerGroup, req: LeaveGroupRequest, now_ms: int) -> LeaveGroupResponse:
        manager = self._manager
        change = Change(group, created=False)
        results = []
        for who in req.members:
            if who.group_instance_id is None:
                member = group.members.get(who.member_id)
            else:
                member = group.static_member(who.group_instance_id)
                if member is not None and who.member_id and member.member_id != who.member_id:
                    results.append(
                        LeaveMemberResult(who.member_id, who.group_instance_id, ErrorCode.fenced_instance_id)
                    )
                    continue
            if member is None or member.classic is None:
                results.append(
                    LeaveMemberResult(who.member_id, who.group_instance_id, ErrorCode.unknown_member_id)
                )
                continue
            manager.fence(change, member, "left the group (LeaveGroup)", now_ms)
            results.append(LeaveMemberResult(member.member_id, who.group_instance_id, ErrorCode.none))
        manager.finish(change, None)
        return LeaveGroupResponse(ErrorCode.none, tuple(results))


def _waiting(group: ConsumerGroup, member: ConsumerMember) -> bool:
    """Whether a partition of the member's target it does not have yet is still held."""
    for topic_id, partitions in group.target_of(member.member_id).items():
        mine = member.assigned.get(topic_id, frozenset())
        for p in partitions:
            if p not in mine and group.owner_epoch(topic_id, p) != -1:
                return True
    return False
