"""The share-group (KIP-932) APIs on the wire: ShareGroupHeartbeat (76) and ShareGroupDescribe
(77), version 1 (Kafka 4.2's only one).

Each request is turned into the coordinator's version-independent message
(:mod:`coordinator.share.messages`), routed to the shard owning the group, and the answer encoded
back. Authorization as Kafka's KafkaApis: a heartbeat needs READ on the group
(GROUP_AUTHORIZATION_FAILED) and DESCRIBE on every topic it subscribes to
(TOPIC_AUTHORIZATION_FAILED, no message), checked before the coordinator sees it; a describe
needs DESCRIBE on each group, and a group whose members are assigned a topic the caller may not
describe is answered TOPIC_AUTHORIZATION_FAILED without its members.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kcoord.coordinator.share import messages as sm
from kcoord.protocol.errors import ErrorCode

from ..net.connection import RequestContext
from ..security.acl.model import UNKNOWN_OPERATIONS, Operation, ResourceType
from .api import then
from .modern_api import (
    HIDDEN_TOPICS,
    REFUSED,
    REFUSED_MESSAGE,
    describe_by_shard,
    heartbeat_answer,
    hidden_topics,
)
from .runtime import GroupRuntime


class ShareGroupApi:
    def __init__(self, runtime: GroupRuntime) -> None:
        self.runtime = runtime

    # ShareGroupHeartbeat ------------------------------------------------------------------------
    def heartbeat(self, ctx: RequestContext, req: Any) -> Any:
        if not ctx.allowed(Operation.READ, ResourceType.GROUP, req.group_id):
            return heartbeat_answer(
                ctx, sm.ShareGroupHeartbeatResponse(REFUSED, "Not authorized to read the group.")
            )
        names = req.subscribed_topic_names
        if names and not all(ctx.allowed(Operation.DESCRIBE, ResourceType.TOPIC, n) for n in set(names)):
            return heartbeat_answer(ctx, sm.ShareGroupHeartbeatResponse(ErrorCode.topic_authorization_failed))
        request = sm.ShareGroupHeartbeatRequest(
            group_id=req.group_id,
            member_id=req.member_id,
            member_epoch=req.member_epoch,
            rack_id=req.rack_id,
            subscribed_topic_names=None if names is None else tuple(names),
            client_id=ctx.header.client_id or "",
            client_host="/" + ctx.client_host,
        )
        runtime = self.runtime
        p = runtime.partition_of(req.group_id)
        result = runtime.submit(p, runtime.shard(p).share_group_heartbeat, request)
        return then(result, lambda r: heartbeat_answer(ctx, r))

    # ShareGroupDescribe -------------------------------------------------------------------------
    async def describe(self, ctx: RequestContext, req: Any) -> Any:
        runtime = self.runtime
        found = await describe_by_shard(
            ctx,
            runtime,
            req.group_ids,
            lambda gid: sm.DescribedShareGroup(REFUSED, REFUSED_MESSAGE, gid),
            lambda p, ids: runtime.call(
                p, runtime.shard(p).share_group_describe, sm.ShareGroupDescribeRequest(ids)
            ),
        )
        hidden = hidden_topics(ctx, (t for g in found.values() for t in _topics_of(g)))
        groups = []
        for group_id in req.group_ids:
            g = found[group_id]
            if not g.error and hidden and any(t in hidden for t in _topics_of(g)):
                g = sm.DescribedShareGroup(ErrorCode.topic_authorization_failed, HIDDEN_TOPICS, group_id)
            groups.append(
                dict(
                    error_code=g.error,
                    error_message=g.error_message,
                    group_id=g.group_id,
                    group_state=g.state,
                    group_epoch=g.group_epoch,
                    assignment_epoch=g.assignment_epoch,
                    assignor_name=g.assignor_name,
                    members=[
                        dict(
                            member_id=m.member_id,
                            rack_id=m.rack_id,
                            member_epoch=m.member_epoch,
                            client_id=m.client_id,
                            client_host=m.client_host,
                            subscribed_topic_names=list(m.subscribed_topic_names),
                            assignment=dict(
                                topic_partitions=[
                                    dict(topic_id=d.topic_id, topic_name=d.topic_name, partitions=list(d.partitions))
                                    for d in m.assignment
                                ]
                            ),
                        )
                        for m in g.members
                    ],
                    authorized_operations=(
                        ctx.authorized_operations(ResourceType.GROUP, group_id)
                        if req.include_authorized_operations and not g.error
                        else UNKNOWN_OPERATIONS
                    ),
                )
            )
        return ctx.respond(throttle_time=0, groups=groups)


def _topics_of(group: sm.DescribedShareGroup) -> Iterable[str]:
    for member in group.members:
        for d in member.assignment:
            yield d.topic_name
