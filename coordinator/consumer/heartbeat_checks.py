"""Kafka's checks of a ConsumerGroupHeartbeat that change nothing, and the answer that refuses
one.

:func:`heartbeat_request_error` checks the request on its own, in Kafka's order: ids that must
not be empty, what a (re-)joining member must send, the member epoch, the server assignor, the
topic regex; the shard asks it before anything else looks at the group. Once the member a
heartbeat is from is known, :func:`epoch_checked` holds the epoch it heartbeats at against the
member's: a higher one is fenced, a lower one passes only as the previous epoch after a lost
response. The manager (:mod:`coordinator.consumer.manager`) does the rest.
"""

from __future__ import annotations

from kcoord.coordinator.consumer.member import (
    JOIN_EPOCH,
    STATIC_LEAVE_EPOCH,
    ConsumerMember,
    owned_subset,
)
from kcoord.coordinator.consumer.messages import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)
from kcoord.coordinator.consumer.regex import compile_regex
from kcoord.protocol.errors import ErrorCode


def heartbeat_error(code: int, message: str | None = None) -> ConsumerGroupHeartbeatResponse:
    """A refused heartbeat: the error code and message, nothing else."""
    return ConsumerGroupHeartbeatResponse(code, message)


def heartbeat_request_error(
    req: ConsumerGroupHeartbeatRequest, assignors: tuple[str, ...]
) -> ConsumerGroupHeartbeatResponse | None:
    """Kafka's request checks, in its order; None when the request is well formed.
    ``assignors``: the server assignors offered (``GroupConfig.consumer_assignors``)."""
    invalid = ErrorCode.invalid_request
    if req.instance_id == "":
        return heartbeat_error(invalid, "InstanceId can't be empty.")
    if req.rack_id == "":
        return heartbeat_error(invalid, "RackId can't be empty.")
    epoch = req.member_epoch
    if req.member_id == "" and (req.version >= 1 or epoch != JOIN_EPOCH):
        return heartbeat_error(invalid, "MemberId can't be empty.")
    if epoch == JOIN_EPOCH:
        if req.rebalance_timeout_ms == -1:
            return heartbeat_error(invalid, "RebalanceTimeoutMs must be provided in first request.")
        if req.topic_partitions is None or req.topic_partitions:
            return heartbeat_error(invalid, "TopicPartitions must be empty when (re-)joining.")
        if not req.subscribed_topic_names and not req.subscribed_topic_regex:
            return heartbeat_error(
                invalid, "SubscribedTopicNames or SubscribedTopicRegex must be set in first request."
            )
    elif epoch == STATIC_LEAVE_EPOCH:
        if req.instance_id is None:
            return heartbeat_error(invalid, "InstanceId can't be null.")
    elif epoch < STATIC_LEAVE_EPOCH:
        return heartbeat_error(invalid, f"MemberEpoch {epoch} is invalid.")
    if req.server_assignor is not None and req.server_assignor not in assignors:
        return heartbeat_error(
            ErrorCode.unsupported_assignor,
            f"ServerAssignor {req.server_assignor} is not supported. Supported assignors: "
            + ", ".join(assignors)
            + ".",
        )
    if req.subscribed_topic_regex:
        problem = compile_regex(req.subscribed_topic_regex)[1]
        if problem is not None:
            return heartbeat_error(ErrorCode.invalid_regular_expression, problem)
    return None


def epoch_checked(
    member: ConsumerMember, req: ConsumerGroupHeartbeatRequest
) -> tuple[ConsumerMember, bool] | ConsumerGroupHeartbeatResponse:
    """A higher epoch than the member's is fenced; a lower one only passes as the
    previous epoch with owned partitions within the assignment (a lost response)."""
    epoch = req.member_epoch
    if epoch > member.member_epoch or (
        epoch < member.member_epoch
        and (
            epoch != member.previous_member_epoch
            or not owned_subset(req.topic_partitions, member.assigned)
        )
    ):
        return heartbeat_error(
            ErrorCode.fenced_member_epoch,
            f"The consumer group member has a {'greater' if epoch > member.member_epoch else 'smaller'}"
            f" member epoch ({epoch}) than the one known by the group coordinator"
            f" ({member.member_epoch}). The member must abandon all its partitions and rejoin.",
        )
    return member, False
