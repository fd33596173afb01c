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
from protocol.apis import ApiKey
from protocol.codec import RawBody, decode_request_frame, encode_body
from protocol.errors import ErrorCode
from protocol.offset_fetch import MAX_VERSION as OFFSET_FETCH_DIRECT_MAX
from protocol.offset_fetch import encode_offset_fetch_response

from .connection import RequestContext
from .group_api import then
from .group_runtime import GroupRuntime

if TYPE_CHECKING:
    from .app import Broker


_BODY_CACHE_SIZE = 4096
_LOST = ErrorCode.unknown_server_error  # a partition the shard did not answer (never expected)


def _wanted(topics: Any) -> tuple[tuple[str, tuple[int, ...]], ...] | None:
    """The partitions an OffsetFetch asks about, None for all of the group's."""
    if topics is None:
        return None
    return tuple((t.name, tuple(t.partition_indexes)) for t in topics)


def _error_on_every_partition(req: Any, error: int) -> m.OffsetFetchResponse:
    """OffsetFetch v0/v1 have no top-level error: Kafka reports a group-level error on every
    requested partition, with no offset."""
    return m.OffsetFetchResponse(
        error,
        tuple(
            (t.name, tuple(m.FetchedOffset(p, -1, -1, "", error) for p in t.partition_indexes))
            for t in req.topics or ()
        ),
    )


class OffsetApi:
    def __init__(self, broker: Broker, runtime: GroupRuntime) -> None:
        self.broker = broker
        self.runtime = runtime
        self._commit_bodies: dict[tuple[int, Any], RawBody] = {}
        self._max_elements: int = broker.config["socket.request.max.elements"]

    # OffsetCommit ---------------------------------------------------------------------------------
    def offset_commit(self, ctx: RequestContext, req: Any) -> Any:
        unknown: dict[tuple[str, int], int] = {}
        topics = []
        new, cls = tuple.__new__, m.OffsetCommitPartition  # per partition: skip _make's frame
        has_epoch = ctx.version >= 6
        for t in req.topics:
            topic = self.broker.topics.get(t.name)
            count = len(topic.partitions) if topic is not None else 0
            parts = []
            for p in t.partitions:
                index = p.partition_index
                if not 0 <= index < count:
                    unknown[(t.name, index)] = ErrorCode.unknown_topic_or_partition
                    continue
                epoch = p.committed_leader_epoch if has_epoch else -1
                parts.append(new(cls, (index, p.committed_offset, epoch, p.committed_metadata)))
            if parts:
                topics.append((t.name, tuple(parts)))
        if not topics:
            return self._commit_answer(ctx, req, unknown, None)
        request = m.OffsetCommitRequest(
            group_id=req.group_id,
            generation_id=req.generation_id_or_member_epoch,
            member_id=req.member_id,
            group_instance_id=getattr(req, "group_instance_id", None),
            topics=tuple(topics),
        )
        runtime = self.runtime
        p = runtime.partition_of(req.group_id)
        result = runtime.submit(p, runtime.shard(p).offset_commit, request)
        return then(result, lambda r: self._commit_answer(ctx, req, unknown, r))

    def _commit_answer(
        self,
        ctx: RequestContext,
        req: Any,
        unknown: dict[tuple[str, int], int],
        r: m.OffsetCommitResponse | None,
    ) -> RawBody:
        """The response body: the shard's errors and the partitions of unknown topics, in
        request order."""
        shape: Any
        if r is not None and not unknown and len(r.topics) == len(req.topics):
            shape = r.topics  # the shard answered every partition, in request order
        else:
            errors: dict[tuple[str, int], int] = dict(unknown)
            if r is not None:
                for name, results in r.topics:
                    for partition, error in results:
                        errors[(name, partition)] = error
            shape = tuple(
                (
                    t.name,
                    tuple(
                        (p.partition_index, errors.get((t.name, p.partition_index), _LOST))
                        for p in t.partitions
                    ),
                )
                for t in req.topics
            )
        # Committers send the same partitions over and over, and nearly every answer is "all
        # NONE": reuse the encoded body of an identical answer instead of rebuilding it.
        key = (ctx.version, shape)
        body = self._commit_bodies.get(key)
        if body is None:
            response = ctx.respond(
                throttle_time=0,
                topics=[
                    dict(
                        name=name,
                        partitions=[dict(partition_index=p, error_code=e) for p, e in parts],
                    )
                    for name, parts in shape
                ],
            )
            body = RawBody(encode_body(response))
            if len(self._commit_bodies) >= _BODY_CACHE_SIZE:
                self._commit_bodies.clear()
            self._commit_bodies[key] = body
        return body

    # OffsetFetch ----------------------------------------------------------------------------------
    def _submit_fetch(self, group_id: str, topics: Any, require_stable: bool) -> Any:
        """Ask the group's shard; the reply itself, or a future of it (GroupRuntime.submit)."""
        runtime = self.runtime
        p = runtime.partition_of(group_id)
        request = m.OffsetFetchRequest(
            group_id=group_id, topics=_wanted(topics), require_stable=require_stable
        )
        return runtime.submit(p, runtime.shard(p).offset_fetch, request)

    async def _fetch_group(
        self, group_id: str, topics: Any, require_stable: bool
    ) -> m.OffsetFetchResponse:
        result = self._submit_fetch(group_id, topics, require_stable)
        if isinstance(result, asyncio.Future):
            result = await result
        answer: m.OffsetFetchResponse = result
        return answer

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

    def offset_fetch(self, ctx: RequestContext, req: Any) -> Any:
        require_stable = bool(getattr(req, "require_stable", False))
        if ctx.version >= 8:
            return self._offset_fetch_groups(ctx, req, require_stable)
        result = self._submit_fetch(req.group_id, req.topics, require_stable)

        def finish(r: m.OffsetFetchResponse) -> Any:
            if ctx.version < 2 and r.error:
                r = _error_on_every_partition(req, r.error)
            return ctx.respond(throttle_time=0, topics=self._topics_out(r), error_code=r.error)

        return then(result, finish)

    def offset_fetch_direct(self, frame: bytes, version: int, correlation_id: int) -> bytes | None:
        """The hot path of OffsetFetch v0-v7 (monitoring tools poll it for every group): the
        shard's answer written straight to the wire by protocol/offset_fetch.py. None when the
        generic path must answer (v8+, or the shard has commits still becoming durable)."""
        if version > OFFSET_FETCH_DIRECT_MAX:
            return None
        req = decode_request_frame(ApiKey.OFFSET_FETCH, version, frame, self._max_elements)
        r = self.runtime.fetch_offsets(req.group_id, _wanted(req.topics))
        if r is None:
            return None
        if version < 2 and r.error:
            r = _error_on_every_partition(req, r.error)
        return encode_offset_fetch_response(version, correlation_id, r.error, r.topics)

    async def _offset_fetch_groups(self, ctx: RequestContext, req: Any, require_stable: bool) -> Any:
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
