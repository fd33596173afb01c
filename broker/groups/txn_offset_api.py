"""TxnOffsetCommit (API 28, v0-v4) on the wire: offsets committed inside a transaction.

As Kafka's handler: WRITE on the TRANSACTIONAL_ID (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED on
every partition), READ on the GROUP (GROUP_AUTHORIZATION_FAILED), READ on each topic
(TOPIC_AUTHORIZATION_FAILED for its partitions), UNKNOWN_TOPIC_OR_PARTITION for partitions that
do not exist; the rest goes to the group's shard (``coordinator.txn_offsets``), which writes them
as a transactional batch of the producer, pending until its marker. v0/v1 clients get
COORDINATOR_NOT_AVAILABLE instead of COORDINATOR_LOAD_IN_PROGRESS (they predate the retry of it).
"""

from __future__ import annotations

from typing import Any

from kcoord.coordinator import messages as m
from kcoord.protocol.errors import ErrorCode

from ..data.topics import TopicStore
from ..net.connection import RequestContext
from ..security.acl.model import Operation, ResourceType
from .api import then
from .offset_api import commit_partitions, refuse_every_partition
from .runtime import GroupRuntime


class TxnOffsetApi:
    def __init__(self, runtime: GroupRuntime, topics: TopicStore) -> None:
        self.runtime = runtime
        self.topics = topics

    def txn_offset_commit(self, ctx: RequestContext, req: Any) -> Any:
        refused: int | None = None
        if not ctx.allowed(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, req.transactional_id):
            refused = ErrorCode.transactional_id_authorization_failed
        elif not ctx.allowed(Operation.READ, ResourceType.GROUP, req.group_id):
            refused = ErrorCode.group_authorization_failed
        errors: dict[tuple[str, int], int] = {}
        if refused is not None:
            refuse_every_partition(req.topics, refused, errors)
            return self._answer(ctx, req, errors, None)
        topics = commit_partitions(ctx, req.topics, self.topics, ctx.version >= 2, errors)
        if not topics:
            return self._answer(ctx, req, errors, None)
        request = m.TxnOffsetCommitRequest(
            group_id=req.group_id,
            transactional_id=req.transactional_id,
            producer_id=req.producer_id,
            producer_epoch=req.producer_epoch,
            generation_id=getattr(req, "generation_id", -1),
            member_id=getattr(req, "member_id", ""),
            group_instance_id=getattr(req, "group_instance_id", None),
            topics=tuple(topics),
            api_version=ctx.version,
        )
        runtime = self.runtime
        partition = runtime.partition_of(req.group_id)
        result = runtime.submit(partition, runtime.shard(partition).txn_offset_commit, request)
        return then(result, lambda r: self._answer(ctx, req, errors, r))

    @staticmethod
    def _answer(
        ctx: RequestContext,
        req: Any,
        errors: dict[tuple[str, int], int],
        r: m.OffsetCommitResponse | None,
    ) -> Any:
        if r is not None:
            for name, results in r.topics:
                for partition, error in results:
                    errors[(name, partition)] = error
        old = ctx.version < 2

        def code(name: str, partition: int) -> int:
            error = errors.get((name, partition), ErrorCode.unknown_server_error)
            if old and error == ErrorCode.coordinator_load_in_progress:
                return ErrorCode.coordinator_not_available
            return error

        return ctx.respond(
            throttle_time=0,
            topics=[
                dict(
                    name=t.name,
                    partitions=[
                        dict(partition_index=p.partition_index, error_code=code(t.name, p.partition_index))
                        for p in t.partitions
                    ],
                )
                for t in req.topics
            ],
        )
