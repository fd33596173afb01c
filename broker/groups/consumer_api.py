"""The consumer-group (KIP-848) APIs on the wire: ConsumerGroupHeartbeat (68) and
ConsumerGroupDescribe (69).

Each request of whatever version is turned into the coordinator's version-independent message
(:mod:`coordinator.consumer.messages`), routed to the shard owning the group, and the answer
encoded back in the negotiated version.

With an authorizer, topics a principal may not DESCRIBE stay hidden from it, as in Kafka 4.0
(KAFKA-18813): a heartbeat naming one is answered TOPIC_AUTHORIZATION_FAILED (no message, as
Kafka) before the coordinator sees it; a regex resolves only to topics the principal of the
heartbeat resolving it may describe (the coordinator is handed that predicate); and a group whose
members' assignments or target assignments name a topic the caller may not describe is
described as TOPIC_AUTHORIZATION_FAILED, without its members.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from kcoord.coordinator.consumer import messages as cm
from kcoord.protocol.consumer_heartbeat import decode_steady_heartbeat, steady_answer
from kcoord.protocol.errors import ErrorCode
from kcoord.protocol.framing import Frame
from kcoord.protocol.responses import to_millis

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


class ConsumerGroupApi:
    def __init__(self, runtime: GroupRuntime) -> None:
        self.runtime = runtime

    # ConsumerGroupHeartbeat ---------------------------------------------------------------------
    def heartbeat(self, ctx: RequestContext, req: Any) -> Any:
        if not ctx.allowed(Operation.READ, ResourceType.GROUP, req.group_id):
            return heartbeat_answer(
                ctx, cm.ConsumerGroupHeartbeatResponse(REFUSED, "Not authorized to read the group.")
            )
        names = req.subscribed_topic_names
        if names and not all(ctx.allowed(Operation.DESCRIBE, ResourceType.TOPIC, n) for n in set(names)):
            return heartbeat_answer(
                ctx, cm.ConsumerGroupHeartbeatResponse(ErrorCode.topic_authorization_failed)
            )
        owned = req.topic_partitions
        request = cm.ConsumerGroupHeartbeatRequest(
            group_id=req.group_id,
            member_id=req.member_id,
            member_epoch=req.member_epoch,
            instance_id=req.instance_id,
            rack_id=req.rack_id,
            rebalance_timeout_ms=to_millis(req.rebalance_timeout),
            subscribed_topic_names=(
                None if req.subscribed_topic_names is None else tuple(req.subscribed_topic_names)
            ),
            subscribed_topic_regex=getattr(req, "subscribed_topic_regex", None),
            server_assignor=req.server_assignor,
            topic_partitions=(
                None
                if owned is None
                else tuple((t.topic_id, tuple(t.partitions)) for t in owned if t.topic_id is not None)
            ),
            client_id=ctx.header.client_id or "",
            client_host="/" + ctx.client_host,
            version=ctx.version,
            describable=_describable(ctx),
        )
        runtime = self.runtime
        p = runtime.partition_of(req.group_id)
        result = runtime.submit(p, runtime.shard(p).consumer_group_heartbeat, request)
        return then(result, lambda r: heartbeat_answer(ctx, r))

    def heartbeat_direct(self, frame: Frame, version: int, correlation_id: int, client_host: str) -> bytes | None:
        """The hot path: a steady heartbeat (protocol/consumer_heartbeat.py) answered with a
        whole response frame; None when the generic path must answer."""
        fields = decode_steady_heartbeat(frame, version)
        if fields is None:
            return None
        client_id, group_id, member_id, epoch = fields
        interval = self.runtime.consumer_heartbeat(group_id, member_id, epoch, client_id, "/" + client_host)
        return None if interval is None else steady_answer(correlation_id, member_id, epoch, interval)

    # ConsumerGroupDescribe ----------------------------------------------------------------------
    async def describe(self, ctx: RequestContext, req: Any) -> Any:
        runtime = self.runtime
        found = await describe_by_shard(
            ctx,
            runtime,
            req.group_ids,
            lambda gid: cm.DescribedConsumerGroup(REFUSED, REFUSED_MESSAGE, gid, state=""),
            lambda p, ids: runtime.call(
                p, runtime.shard(p).consumer_group_describe, cm.ConsumerGroupDescribeRequest(ids)
            ),
        )
        include_ops = req.include_authorized_operations

        def partitions(ps: tuple[cm.DescribedPartitions, ...]) -> dict[str, Any]:
            return dict(
                topic_partitions=[
                    dict(topic_id=d.topic_id, topic_name=d.topic_name, partitions=list(d.partitions))
                    for d in ps
                ]
            )

        hidden = hidden_topics(ctx, (t for g in found.values() for t in _topics_of(g)))
        groups = []
        for group_id in req.group_ids:
            g = found[group_id]
            if not g.error and hidden and any(t in hidden for t in _topics_of(g)):
                g = cm.DescribedConsumerGroup(
                    ErrorCode.topic_authorization_failed, HIDDEN_TOPICS, group_id, state=""
                )
            members = []
            for x in g.members:
                member = dict(
                    member_id=x.member_id,
                    instance_id=x.instance_id,
                    rack_id=x.rack_id,
                    member_epoch=x.member_epoch,
                    client_id=x.client_id,
                    client_host=x.client_host,
                    subscribed_topic_names=list(x.subscribed_topic_names),
                    subscribed_topic_regex=x.subscribed_topic_regex,
                    assignment=partitions(x.assignment),
                    target_assignment=partitions(x.target_assignment),
                )
                if ctx.version >= 1:
                    member["member_type"] = x.member_type
                members.append(member)
            groups.append(
                dict(
                    error_code=g.error,
                    error_message=g.error_message,
                    group_id=g.group_id,
                    group_state=g.state,
                    group_epoch=g.group_epoch,
                    assignment_epoch=g.assignment_epoch,
                    assignor_name=g.assignor_name,
                    members=members,
                    authorized_operations=(
                        ctx.authorized_operations(ResourceType.GROUP, group_id)
                        if include_ops and not g.error
                        else UNKNOWN_OPERATIONS
                    ),
                )
            )
        return ctx.respond(throttle_time=0, groups=groups)


def _describable(ctx: RequestContext) -> Callable[[str], bool] | None:
    """Whether the client may DESCRIBE a topic (quietly: it only filters what a regex
    resolves to); None without an authorizer."""
    authorizer = ctx.connection.authorizer
    if authorizer is None:
        return None
    principal, host = ctx.connection.principal, ctx.client_host

    def describable(topic: str) -> bool:
        return authorizer.authorize(principal, host, Operation.DESCRIBE, ResourceType.TOPIC, topic, True)

    return describable


def _topics_of(group: cm.DescribedConsumerGroup) -> Iterator[str]:
    """The topics a described group's members are assigned or targeted."""
    for member in group.members:
        for assigned in (member.assignment, member.target_assignment):
            for d in assigned:
                yield d.topic_name
