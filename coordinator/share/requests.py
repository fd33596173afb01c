"""ShareGroupHeartbeat and ShareGroupDescribe as a shard routes them: the shard's checks (group
id, partition, loading), Kafka's request checks and the group-type check (one group-id space: a
classic or consumer group of that id is GROUP_ID_NOT_FOUND, and there is no conversion between
share groups and the others), then the share group manager. The replies go into the shard's
operation under way (``share.op``); the describe's is returned."""

from __future__ import annotations

from collections.abc import Callable, Hashable

from kcoord.coordinator.share.checks import heartbeat_request_error
from kcoord.coordinator.share.describe import describe_share_group, not_a_share_group
from kcoord.coordinator.share.manager import ShareGroupManager
from kcoord.coordinator.share.messages import (
    ShareGroupDescribeRequest,
    ShareGroupDescribeResponse,
    ShareGroupHeartbeatRequest,
    ShareGroupHeartbeatResponse,
)
from kcoord.protocol.errors import ErrorCode

Gate = Callable[..., int | None]
"""The shard's routing check: ``gate(group_id, empty_id_ok=False)`` -> error code or None."""


def share_group_heartbeat(
    share: ShareGroupManager,
    gate: Gate,
    other_type: Callable[[str], bool],
    handle: Hashable,
    req: ShareGroupHeartbeatRequest,
    now_ms: int,
) -> None:
    op = share.op
    gid = req.group_id
    if gid == "":
        op.reply(handle, ShareGroupHeartbeatResponse(ErrorCode.invalid_request, "GroupId can't be empty."))
        return
    error = gate(gid, empty_id_ok=False)
    response = ShareGroupHeartbeatResponse(error) if error is not None else heartbeat_request_error(req)
    if response is None and other_type(gid):
        response = ShareGroupHeartbeatResponse(ErrorCode.group_id_not_found, f"Group {gid} is not a share group.")
    if response is not None:
        op.reply(handle, response)
    else:
        share.heartbeat(handle, req, now_ms)


def share_group_describe(
    share: ShareGroupManager,
    gate: Gate,
    other_type: Callable[[str], bool],
    req: ShareGroupDescribeRequest,
) -> ShareGroupDescribeResponse:
    """An unknown group, or one of another type, is GROUP_ID_NOT_FOUND."""
    described = []
    for group_id in req.group_ids:
        error = gate(group_id, empty_id_ok=False)
        group = share.get(group_id) if error is None else None
        if group is not None:
            described.append(describe_share_group(group, share.topics))
        else:
            described.append(not_a_share_group(group_id, error, other_type(group_id)))
    return ShareGroupDescribeResponse(tuple(described))
