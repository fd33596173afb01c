"""The offset APIs on the wire: OffsetCommit, OffsetFetch and OffsetDelete.

Requests of any version become the coordinator's version-independent messages; partitions of
topics that do not exist are answered UNKNOWN_TOPIC_OR_PARTITION here, the rest go to the shard
owning the group, whose answer (sent only once the commit records are durable) is merged back in
request order. OffsetFetch v8+ asks about several groups at once: one shard call per group.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from coordinator import messages as m
from protocol.errors import ErrorCode

from .connection import RequestContext
from .group_runtime import GroupRuntime

if TYPE_CHECKING:
    from .app import Broker


class OffsetApi:
    def __init__(self, broker: Broker, runtime: GroupRuntime) -> None:
        self.broker = broker
        self.runtime = runtime

    def _exists(self, topic: str, partition: int) -> bool:
        return self.broker.topics.partition(topic, partition) is not None

    # OffsetCommit ---------------------------------------------------------------------------------
    async def offset_commit(self, ctx: RequestContext, req: Any) -> Any:
        unknown: dict[tuple[str, int], int] = {}
        topics = []
        for t in req.topics:
            parts = []
            for p in t.partitions:
                if not self._exists(t.name, p.partition_index):
                    unknown[(t.name, p.partition_index)] = ErrorCode.unknown_topic_or_partition
                    continue
                parts.append(
                    m.OffsetCommitPartition(
                        partition=p.partition_index,
                        offset=p.committed_offset,
                        leader_epoch=getattr(p, "committed_leader_epoch", -1),
                        metadata=p.committed_metadata,
                    )
                )
            if parts:
                topics.append((t.name, tuple(parts)))
        errors: dict[tuple[str, int], int] = dict(unknown)
        if topics:
            request = m.OffsetCommitRequest(
                group_id=req.group_id,
                generation_id=req.generation_id_or_member_epoch,
                member_id=req.member_id,
                group_instance_id=getattr(req, "group_instance_id", None),
                topics=tuple(topics),
            )
            runtime = self.runtime
            p = runtime.partition_of(req.group_id)
            r: m.OffsetCommitResponse = await runtime.call(p, runtime.shard(p).offset_commit, request)
            for name, results in r.topics:
                for partition, error in results:
                    errors[(name, partition)] = error
        return ctx.respond(
            throttle_time=0,
            topics=[
                dict(
                    name=t.name,
                    partitions=[
                        dict(
                            partition_index=p.partition_index,
                            error_code=errors.get((t.name, p.partition_index), ErrorCode.unknown_server_error),
                        )
                        for p in t.partitions
                    ],
                )
                for t in req.topics
            ],
        )

    # OffsetFetch ----------------------------------------------------------------------------------
    async def _fetch_group(
        self, group_id: str, topics: Any, require_stable: bool
    ) -> m.OffsetFetchResponse:
        wanted = None if topics is None else tuple((t.name, tuple(t.partition_indexes)) for t in topics)
        runtime = self.runtime
        p = runtime.partition_of(group_id)
        request = m.OffsetFetchRequest(group_id=group_id, topics=wanted, require_stable=require_stable)
        result: m.OffsetFetchResponse = await runtime.call(p, runtime.shard(p).offset_fetch, request)
        return result

    @staticmethod
    def _topics_out(r: m.OffsetFetchResponse) -> list[dict[str, Any]]:
        return [
            dict(
                name=name,
                partitions=[
                    dict(
                        partition_index=f.partition,
                        committed_offset=f.offset,
                        committed_leader_epoch=f.leader_epoch,
                        metadata=f.metadata if f.metadata is not None else "",
                        error_code=f.error,
                    )
                    for f in parts
                ],
            )
            for name, parts in r.topics
        ]

    async def offset_fetch(self, ctx: RequestContext, req: Any) -> Any:
        require_stable = bool(getattr(req, "require_stable", False))
        if ctx.version >= 8:
            answers = await asyncio.gather(
                *(self._fetch_group(g.group_id, g.topics, require_stable) for g in req.groups)
            )
            return ctx.respond(
                throttle_time=0,
                groups=[
                    dict(group_id=g.group_id, topics=self._topics_out(r), error_code=r.error)
                    for g, r in zip(req.groups, answers, strict=True)
                ],
            )
        r = await self._fetch_group(req.group_id, req.topics, require_stable)
        topics_out = self._topics_out(r)
        if ctx.version < 2 and r.error:
            # v0/v1 have no top-level error: Kafka reports it on every partition.
            for t in topics_out:
                for part in t["partitions"]:
                    part["error_code"] = r.error
        return ctx.respond(throttle_time=0, topics=topics_out, error_code=r.error)

    # OffsetDelete ---------------------------------------------------------------------------------
    async def offset_delete(self, ctx: RequestContext, req: Any) -> Any:
        request = m.OffsetDeleteRequest(
            group_id=req.group_id,
            topics=tuple((t.name, tuple(p.partition_index for p in t.partitions)) for t in req.topics),
        )
        runtime = self.runtime
        p = runtime.partition_of(req.group_id)
        r: m.OffsetDeleteResponse = await runtime.call(p, runtime.shard(p).offset_delete, request)
        errors = {(name, part): err for name, results in r.topics for part, err in results}
        return ctx.respond(
            error_code=r.error,
            throttle_time=0,
            topics=[
                dict(
                    name=t.name,
                    partitions=[
                        dict(
                            partition_index=p.partition_index,
                            error_code=errors.get((t.name, p.partition_index), 0),
                        )
                        for p in t.partitions
                    ],
                )
                for t in req.topics
            ],
        )
