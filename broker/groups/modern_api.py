"""What the consumer-group (KIP-848) and share-group (KIP-932) APIs share on the wire: the
heartbeat's answer (both carry the same fields), a describe routed shard by shard with the
groups the caller may not DESCRIBE refused, and the topics of described groups hidden from a
caller who may not DESCRIBE them (KAFKA-18813)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any, Protocol, TypeVar

from kcoord.protocol.errors import ErrorCode

from ..net.connection import RequestContext
from ..security.acl.model import Operation, ResourceType
from .runtime import GroupRuntime

REFUSED = ErrorCode.group_authorization_failed
REFUSED_MESSAGE = "Not authorized to describe the group."
HIDDEN_TOPICS = "The group has described topic(s) that the client is not authorized to describe."


class HeartbeatAnswer(Protocol):
    @property
    def error(self) -> int: ...
    @property
    def error_message(self) -> str | None: ...
    @property
    def member_id(self) -> str | None: ...
    @property
    def member_epoch(self) -> int: ...
    @property
    def heartbeat_interval_ms(self) -> int: ...
    @property
    def assignment(self) -> Any: ...


def heartbeat_answer(ctx: RequestContext, r: HeartbeatAnswer) -> Any:
    """A ConsumerGroupHeartbeat or ShareGroupHeartbeat response from the coordinator's answer."""
    assignment = (
        None
        if r.assignment is None
        else dict(
            topic_partitions=[
                dict(topic_id=topic_id, partitions=list(partitions)) for topic_id, partitions in r.assignment
            ]
        )
    )
    return ctx.respond(
        throttle_time=0,
        error_code=r.error,
        error_message=r.error_message,
        member_id=r.member_id,
        member_epoch=r.member_epoch,
        heartbeat_interval=r.heartbeat_interval_ms,
        assignment=assignment,
    )


class Described(Protocol):
    @property
    def group_id(self) -> str: ...


D = TypeVar("D", bound=Described)


async def describe_by_shard(
    ctx: RequestContext,
    runtime: GroupRuntime,
    group_ids: Iterable[str],
    refused: Callable[[str], D],
    describe: Callable[[int, tuple[str, ...]], Any],
) -> dict[str, D]:
    """Each group's description: ``refused(group_id)`` for those the caller may not DESCRIBE,
    the others asked of their shards, one call per shard (``describe(partition, ids)`` returns
    the awaitable of the shard's answer, whose ``groups`` are ``D``)."""
    by_shard: dict[int, list[str]] = defaultdict(list)
    found: dict[str, D] = {}
    for group_id in group_ids:
        if ctx.allowed(Operation.DESCRIBE, ResourceType.GROUP, group_id):
            by_shard[runtime.partition_of(group_id)].append(group_id)
        else:
            found[group_id] = refused(group_id)
    for p, ids in by_shard.items():
        answer = await describe(p, tuple(ids))
        for g in answer.groups:
            found[g.group_id] = g
    return found


def hidden_topics(ctx: RequestContext, topics: Iterable[str]) -> set[str]:
    """Of ``topics``, those the client may not DESCRIBE (none without an authorizer)."""
    if ctx.connection.authorizer is None:
        return set()
    return {t for t in set(topics) if not ctx.allowed(Operation.DESCRIBE, ResourceType.TOPIC, t)}
