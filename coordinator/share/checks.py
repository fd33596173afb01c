"""Kafka's checks of a ShareGroupHeartbeat that change nothing: the request on its own (before
the group is looked at) and the member epoch it heartbeats at."""

from __future__ import annotations

from kcoord.coordinator.share.group import JOIN_EPOCH, LEAVE_EPOCH, ShareMember
from kcoord.coordinator.share.messages import (
    ShareGroupHeartbeatRequest,
    ShareGroupHeartbeatResponse,
)
from kcoord.protocol.errors import ErrorCode


def heartbeat_error(code: int, message: str | None = None) -> ShareGroupHeartbeatResponse:
    """A refused heartbeat: the error code and message, nothing else."""
    return ShareGroupHeartbeatResponse(code, message)


def heartbeat_request_error(req: ShareGroupHeartbeatRequest) -> ShareGroupHeartbeatResponse | None:
    """Kafka's request checks, in its order (the empty group id is the shard's); None when the
    request is well formed. v1 members choose their own id, so it may never be empty."""
    invalid = ErrorCode.invalid_request
    if req.member_id == "":
        return heartbeat_error(invalid, "MemberId can't be empty.")
    if req.rack_id == "":
        return heartbeat_error(invalid, "RackId can't be empty.")
    if req.member_epoch == JOIN_EPOCH:
        if not req.subscribed_topic_names:
            return heartbeat_error(invalid, "SubscribedTopicNames must be set in first request.")
    elif req.member_epoch < LEAVE_EPOCH:
        return heartbeat_error(invalid, "MemberEpoch is invalid.")
    return None


def epoch_error(member: ShareMember, epoch: int) -> ShareGroupHeartbeatResponse | None:
    """A higher epoch than the member's is fenced, a lower one too unless it is the previous
    epoch (the answer that moved the member on was lost)."""
    if epoch > member.member_epoch:
        which = "greater"
    elif epoch < member.member_epoch and epoch != member.previous_member_epoch:
        which = "smaller"
    else:
        return None
    return heartbeat_error(
        ErrorCode.fenced_member_epoch,
        f"The share group member has a {which} member epoch ({epoch}) than the one known by the"
        f" group coordinator ({member.member_epoch}). The member must abandon all its partitions"
        " and rejoin.",
    )
