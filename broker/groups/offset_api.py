"""The offset APIs on the wire: OffsetCommit, OffsetFetch and OffsetDelete.

Requests of any version become the coordinator's version-independent messages; partitions of
topics that do not exist are answered UNKNOWN_TOPIC_OR_PARTITION here, the rest go to the shard
owning the group, whose answer (sent only once the commit records are durable) is merged back in
request order. OffsetFetch v8+ asks about several groups at once: one shard call per group.
OffsetCommit and OffsetFetch v10 name topics by id: found by name first (topic_ids.py), named by
id again in the answer.

Big requests keep the event loop free (broker/net/offload.py): answers of many partitions are
built and encoded in the worker thread, a fetch of many offsets is answered from a copy of the
group's offsets taken on the loop, and the groups of an OffsetFetch v8+ are read in slices.
OffsetFetch v0-v7 has a direct path (answered in the connection's read loop), which gives a
remembered answer again while nothing of the group's shard changed (fetch_answers.py).
"""

from __future__ import annotations

import asyncio
import uuid
from typing import TYPE_CHECKING, Any

from kcoord.coordinator import messages as m
from kcoord.coordinator.offsets import fetched_offsets
from kcoord.coordinator.txn_pending import unstable
from kcoord.protocol.apis import ApiKey
from kcoord.protocol.codec import RawBody, decode_request_frame, encode_body
from kcoord.protocol.errors import ErrorCode
from kcoord.protocol.framing import Frame
from kcoord.protocol.offset_fetch import MAX_VERSION as OFFSET_FETCH_DIRECT_MAX
from kcoord.protocol.offset_fetch import (
    Wanted,
    decode_offset_fetch_request,
    encode_offset_fetch_response,
    request_body,
)
from kcoord.protocol.responses import to_millis

from ..net.connection import RequestContext
from ..net.offload import SLICE, encoded_off_loop, gc_paused, is_big, off_loop, pause
from ..security.acl.model import Operation, ResourceType
from .api import then
from .fetch_answers import FetchAnswers
from .runtime import GroupRuntime
from .topic_ids import (
    BY_ID_VERSION,
    FetchTopics,
    TopicIdOf,
    named_commit_topics,
    resolve_fetch_topics,
    store_topic_id,
    unknown_topics_out,
)

if TYPE_CHECKING:
    from ..config import Config
    from ..data.topics import TopicStore


_BODY_CACHE_SIZE = 4096
_CACHED_PARTITIONS = 256  # larger commit answers are not remembered: 4096 of them would be GBs
_LOST = ErrorCode.unknown_server_error  # a partition the shard did not answer (never expected)
_GROUP_REFUSED = ErrorCode.group_authorization_failed
_TOPIC_REFUSED = ErrorCode.topic_authorization_failed




def _wanted(topics: Any) -> Wanted:
    """The partitions an OffsetFetch asks about, None for all of the group's."""
    if topics is None:
        return None
    return tuple((t.name, tuple(t.partition_indexes)) for t in topics)


def _requested(topics: Any) -> int:
    """Partitions named by a request's topics (kio entities with ``partitions``)."""
    return sum(len(t.partitions) for t in topics)


def _answered(topics: tuple[tuple[str, tuple[Any, ...]], ...]) -> int:
    """Partitions in a shard answer's ``topics``."""
    return sum(len(parts) for _, parts in topics)


def _commit_shape(
    topics: Any, unknown: dict[tuple[str, int], int], r: m.OffsetCommitResponse | None
) -> tuple[tuple[str, tuple[tuple[int, int], ...]], ...]:
    """An OffsetCommit's answer: the shard's errors and the partitions of unknown topics, in
    the order of the request's ``topics``."""
    if r is not None and not unknown and len(r.topics) == len(topics):
        return r.topics  # the shard answered every partition, in request order
    errors: dict[tuple[str, int], int] = dict(unknown)
    if r is not None:
        for name, results in r.topics:
            for partition, error in results:
                errors[(name, partition)] = error
    return tuple(
        (
            t.name,
            tuple(
                (p.partition_index, errors.get((t.name, p.partition_index), _LOST))
                for p in t.partitions
            ),
        )
        for t in topics
    )


def _commit_body(ctx: RequestContext, shape: Any, ids: tuple[uuid.UUID | None, ...] | None) -> RawBody:
    """The encoded answer; ``ids``: the topics' ids, in the order of ``shape``, for v10."""
    topics = [
        dict(name=name, partitions=[dict(partition_index=p, error_code=e) for p, e in parts])
        for name, parts in shape
    ]
    if ids is not None:
        for topic, topic_id in zip(topics, ids, strict=True):
            topic["topic_id"] = topic_id
    return RawBody(encode_body(ctx.respond(throttle_time=0, topics=topics)))


def _big_commit_body(
    ctx: RequestContext,
    topics: Any,
    ids: tuple[uuid.UUID | None, ...] | None,
    unknown: dict[tuple[str, int], int],
    r: Any,
) -> RawBody:
    return _commit_body(ctx, _commit_shape(topics, unknown, r), ids)


def _error_on_every_partition(wanted: Wanted, error: int) -> m.OffsetFetchResponse:
    """OffsetFetch v0/v1 have no top-level error: Kafka reports a group-level error on every
    requested partition, with no offset."""
    return m.OffsetFetchResponse(
        error,
        tuple(
            (name, tuple(m.FetchedOffset(p, -1, -1, "", error) for p in partitions))
            for name, partitions in wanted or ()
        ),
    )


def refuse_every_partition(topics: Any, error: int, errors: dict[tuple[str, int], int]) -> None:
    """A group-level refusal of an (Txn)OffsetCommit: ``error`` for every partition named."""
    for t in topics:
        for p in t.partitions:
            errors[(t.name, p.partition_index)] = error


def commit_partitions(
    ctx: RequestContext,
    topics: Any,
    store: TopicStore,
    has_epoch: bool,
    errors: dict[tuple[str, int], int],
) -> list[tuple[str, tuple[m.OffsetCommitPartition, ...]]]:
    """The partitions of an (Txn)OffsetCommit's ``topics`` that may be committed, by topic;
    the others get their error in ``errors``: TOPIC_AUTHORIZATION_FAILED without READ on the
    topic, UNKNOWN_TOPIC_OR_PARTITION for a partition that does not exist."""
    checked = ctx.connection.authorizer is not None
    out = []
    new, cls = tuple.__new__, m.OffsetCommitPartition  # per partition: skip _make's frame
    for t in topics:
        if checked and not ctx.allowed(Operation.READ, ResourceType.TOPIC, t.name):
            refuse_every_partition((t,), _TOPIC_REFUSED, errors)
            continue
        topic = store.get(t.name)
        count = len(topic.partitions) if topic is not None else 0
        parts = []
        for p in t.partitions:
            index = p.partition_index
            if not 0 <= index < count:
                errors[(t.name, index)] = ErrorCode.unknown_topic_or_partition
                continue
            epoch = p.committed_leader_epoch if has_epoch else -1
            parts.append(new(cls, (index, p.committed_offset, epoch, p.committed_metadata)))
        if parts:
            out.append((t.name, tuple(parts)))
    return out


class OffsetApi:
    def __init__(self, config: Config, runtime: GroupRuntime, topics: TopicStore) -> None:
        self.runtime = runtime
        self.topics = topics
        self._commit_bodies: dict[tuple[int, Any, Any], RawBody] = {}
        self._max_elements: int = config["socket.request.max.elements"]
        self._answers = FetchAnswers()
        """OffsetFetch answers the direct path gives again while nothing changed."""

    # OffsetCommit ---------------------------------------------------------------------------------
    def offset_commit(self, ctx: RequestContext, req: Any) -> Any:
        if is_big(_requested(req.topics)):
            with gc_paused():
                return self._offset_commit(ctx, req)
        return self._offset_commit(ctx, req)

    def _offset_commit(self, ctx: RequestContext, req: Any) -> Any:
        unknown: dict[tuple[str, int], int] = {}
        asked: Any = req.topics
        known: Any = asked
        if ctx.version >= BY_ID_VERSION:  # topics named by id: found by name from here on
            asked = named_commit_topics(asked, self.topics)
            known = tuple(t for t in asked if t.name)
        if not ctx.allowed(Operation.READ, ResourceType.GROUP, req.group_id):
            refuse_every_partition(asked, _GROUP_REFUSED, unknown)
            return self._commit_answer(ctx, asked, unknown, None)
        if len(known) != len(asked):
            refuse_every_partition(
                (t for t in asked if not t.name), ErrorCode.unknown_topic_id, unknown
            )
        topics = commit_partitions(ctx, known, self.topics, ctx.version >= 6, unknown)
        if not topics:
            return self._commit_answer(ctx, asked, unknown, None)
        request = m.OffsetCommitRequest(
            group_id=req.group_id,
            generation_id=req.generation_id_or_member_epoch,
            member_id=req.member_id,
            group_instance_id=getattr(req, "group_instance_id", None),
            topics=tuple(topics),
            api_version=ctx.version,
            topic_ids=tuple((t.name, t.topic_id) for t in known if t.topic_id is not None)
            if ctx.version >= BY_ID_VERSION
            else (),
            # v2-v4 carry a retention time (v0-v1 are decoded by hand without one).
            retention_ms=to_millis(req.retention_time) if 2 <= ctx.version <= 4 else -1,
        )
        runtime = self.runtime
        p = runtime.partition_of(req.group_id)
        result = runtime.submit(p, runtime.shard(p).offset_commit, request)
        return then(result, lambda r: self._commit_answer(ctx, asked, unknown, r))

    def _commit_answer(
        self,
        ctx: RequestContext,
        topics: Any,
        unknown: dict[tuple[str, int], int],
        r: m.OffsetCommitResponse | None,
    ) -> RawBody | asyncio.Future[RawBody]:
        """The response body (a future of it when the worker builds it) for the request's
        ``topics`` (with their names in v10)."""
        ids = tuple(t.topic_id for t in topics) if ctx.version >= BY_ID_VERSION else None
        entries = _requested(topics)
        if is_big(entries):
            return off_loop(_big_commit_body, ctx, topics, ids, unknown, r)
        shape = _commit_shape(topics, unknown, r)
        if entries > _CACHED_PARTITIONS:
            return _commit_body(ctx, shape, ids)
        # Committers send the same partitions over and over, and nearly every answer is "all
        # NONE": reuse the encoded body of an identical answer instead of rebuilding it.
        key = (ctx.version, shape, ids)
        body = self._commit_bodies.get(key)
        if body is None:
            body = _commit_body(ctx, shape, ids)
            if len(self._commit_bodies) >= _BODY_CACHE_SIZE:
                self._commit_bodies.clear()
            self._commit_bodies[key] = body
        return body

    # OffsetFetch ----------------------------------------------------------------------------------
    def _is_big_fetch(self, group_id: str, wanted: Wanted) -> bool:
        """Whether a fetch reads too many offsets to be answered on the loop at once."""
        if wanted is not None:
            count = 0
            for _name, parts in wanted:  # a loop, not sum() over a generator: the hot path
                count += len(parts)
            return is_big(count)
        runtime = self.runtime
        return is_big(runtime.shard(runtime.partition_of(group_id)).offset_count_of(group_id))

    def _submit_fetch(self, group_id: str, wanted: Wanted, require_stable: bool) -> Any:
        """Ask the group's shard: the reply itself, or a future of it (GroupRuntime.submit,
        or :meth:`_big_fetch` for a fetch of many offsets)."""
        if self._is_big_fetch(group_id, wanted):
            return asyncio.ensure_future(self._big_fetch(group_id, wanted, require_stable))
        runtime = self.runtime
        p = runtime.partition_of(group_id)
        request = m.OffsetFetchRequest(
            group_id=group_id, topics=wanted, require_stable=require_stable
        )
        return runtime.submit(p, runtime.shard(p).offset_fetch, request)

    def _fetch_checked(
        self, ctx: RequestContext, group_id: str, wanted: Wanted, require_stable: bool
    ) -> Any:
        """:meth:`_submit_fetch` as the client may see it: GROUP_AUTHORIZATION_FAILED without
        DESCRIBE on the group; TOPIC_AUTHORIZATION_FAILED for the partitions asked about of
        topics it may not describe; asked for all, only those it may (as Kafka)."""
        if ctx.connection.authorizer is None:
            return self._submit_fetch(group_id, wanted, require_stable)
        if not ctx.allowed(Operation.DESCRIBE, ResourceType.GROUP, group_id):
            return m.OffsetFetchResponse(_GROUP_REFUSED, ())

        def visible(name: str) -> bool:
            return ctx.allowed(Operation.DESCRIBE, ResourceType.TOPIC, name, quiet=wanted is None)

        if wanted is None:
            return then(
                self._submit_fetch(group_id, None, require_stable),
                lambda r: m.OffsetFetchResponse(r.error, tuple(t for t in r.topics if visible(t[0]))),
            )
        hidden = {name for name, _ in wanted if not visible(name)}
        if not hidden:
            return self._submit_fetch(group_id, wanted, require_stable)
        allowed = tuple(t for t in wanted if t[0] not in hidden)
        refused = tuple(
            (name, tuple(m.FetchedOffset(p, -1, -1, "", _TOPIC_REFUSED) for p in parts))
            for name, parts in wanted
            if name in hidden
        )
        if not allowed:
            return m.OffsetFetchResponse(ErrorCode.none, refused)
        return then(
            self._submit_fetch(group_id, allowed, require_stable),
            lambda r: r if r.error else m.OffsetFetchResponse(r.error, r.topics + refused),
        )

    async def _big_fetch(
        self, group_id: str, wanted: Wanted, require_stable: bool = False
    ) -> m.OffsetFetchResponse:
        """A fetch of many offsets: what the shard holds now is copied on the loop (a dict
        copy), the answer is built from the copy in the worker, and it is sent, like any
        shard reply, only after the shard's earlier outputs are complete."""
        runtime = self.runtime
        p = runtime.partition_of(group_id)
        before = runtime.pending(p)
        shard = runtime.shard(p)
        error, offsets = shard.offsets_snapshot(group_id)
        unstable_now = shard.pending_partitions(group_id) if require_stable and not error else ()
        topics: Any = ()
        if not error:
            topics = await off_loop(fetched_offsets, offsets, wanted)
            if unstable_now:
                topics = unstable(topics, unstable_now)
        if before is not None:
            await asyncio.shield(before)
        return m.OffsetFetchResponse(error, topics)

    @staticmethod
    def _topics_out(
        r: m.OffsetFetchResponse, topic_id: TopicIdOf | None = None
    ) -> list[dict[str, Any]]:
        """The answer's topics in the response's fields; named by id with ``topic_id`` (v10),
        leaving out the topics that have none."""
        out = []
        for name, parts in r.topics:
            topic: dict[str, Any] = dict(
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
            if topic_id is not None:
                tid = topic_id(name)
                if tid is None:
                    continue
                topic["topic_id"] = tid
            out.append(topic)
        return out

    def _group_topics_out(self, r: m.OffsetFetchResponse, by_id: FetchTopics | None) -> Any:
        """A group's topics in an OffsetFetch v8+ answer; ``by_id``: how v10 asked for them.
        The partitions of unknown topic ids follow the others unless the group has an error."""
        if by_id is None:
            return self._topics_out(r)
        if by_id.wanted is None:
            return self._topics_out(r, store_topic_id(self.topics))
        out = self._topics_out(r, by_id.ids.get)
        if not r.error and by_id.unknown:
            out += unknown_topics_out(by_id)
        return out

    def offset_fetch(self, ctx: RequestContext, req: Any) -> Any:
        require_stable = bool(getattr(req, "require_stable", False))
        if ctx.version >= 8:
            return self._offset_fetch_groups(ctx, req, require_stable)
        wanted = _wanted(req.topics)
        result = self._fetch_checked(ctx, req.group_id, wanted, require_stable)

        def body(r: m.OffsetFetchResponse) -> Any:
            if ctx.version < 2 and r.error:
                r = _error_on_every_partition(wanted, r.error)
            return ctx.respond(throttle_time=0, topics=self._topics_out(r), error_code=r.error)

        def finish(r: m.OffsetFetchResponse) -> Any:
            if is_big(_answered(r.topics)):
                return encoded_off_loop(lambda: body(r))
            return body(r)

        return then(result, finish)

    def offset_fetch_direct(
        self, frame: Frame, version: int, correlation_id: int, client_host: str
    ) -> bytes | None:
        """The hot path of OffsetFetch v0-v7 (monitoring tools poll it for every group): the
        shard's answer written straight to the wire by protocol/offset_fetch.py, or the same
        answer remembered while nothing of the shard changed (fetch_answers.py). None when the
        generic path must answer (v8+, or the shard has commits still becoming durable)."""
        if version > OFFSET_FETCH_DIRECT_MAX:
            return None
        runtime = self.runtime
        body = request_body(frame, version)
        if body is not None:
            data = self._answers.answer(body, version, correlation_id, runtime.shards)
            if data is not None:
                return data
        fields = decode_offset_fetch_request(frame, version)
        if fields is not None:
            group_id, wanted, require_stable = fields
        else:  # not the usual frame: the generic decoder (DecodeError on a malformed one)
            body = None  # and its answer is not kept
            req = decode_request_frame(ApiKey.OFFSET_FETCH, version, frame, self._max_elements)
            group_id, wanted = req.group_id, _wanted(req.topics)
            require_stable = version >= 7 and bool(req.require_stable)
        if self._is_big_fetch(group_id, wanted):
            return None  # the generic path keeps the loop free
        r = runtime.fetch_offsets(group_id, wanted, require_stable)
        if r is None:
            return None
        if version < 2 and r.error:
            r = _error_on_every_partition(wanted, r.error)
        data = encode_offset_fetch_response(version, correlation_id, r.error, r.topics)
        if body is not None:
            p = runtime.partition_of(group_id)
            self._answers.keep(body, version, p, runtime.shards[p].idle_stamp(), data)
        return data

    async def _offset_fetch_groups(self, ctx: RequestContext, req: Any, require_stable: bool) -> Any:
        if is_big(len(req.groups)):
            with gc_paused():
                return await self._fetch_groups(ctx, req, require_stable)
        return await self._fetch_groups(ctx, req, require_stable)

    async def _fetch_groups(self, ctx: RequestContext, req: Any, require_stable: bool) -> Any:
        # Each group's shard is asked in turn, a pause after every SLICE offsets read; the
        # answers (or futures of them) are collected, then awaited.
        results: list[Any] = []
        asked: list[FetchTopics | None] = []  # per group, for v10: its topics by id
        work = 0
        runtime = self.runtime
        by_id = ctx.version >= BY_ID_VERSION
        for g in req.groups:
            if by_id:
                topics = resolve_fetch_topics(g.topics, self.topics)
                wanted = topics.wanted
                asked.append(topics)
            else:
                wanted = _wanted(g.topics)
                asked.append(None)
            if not ctx.allowed(Operation.DESCRIBE, ResourceType.GROUP, g.group_id):
                results.append(m.OffsetFetchResponse(_GROUP_REFUSED, ()))
                continue
            member_error = (
                runtime.shard(runtime.partition_of(g.group_id)).offset_fetch_member_error(
                    g.group_id, g.member_id, g.member_epoch
                )
                if ctx.version >= 9
                else None
            )
            if member_error is not None:
                results.append(m.OffsetFetchResponse(member_error, ()))
                continue
            results.append(self._fetch_checked(ctx, g.group_id, wanted, require_stable))
            work += 1 + (
                sum(len(parts) for _, parts in wanted) if wanted is not None else 0
            )
            if work >= SLICE:
                work = 0
                await pause()
        answers: list[m.OffsetFetchResponse] = [
            await r if isinstance(r, asyncio.Future) else r for r in results
        ]

        def body() -> Any:
            return ctx.respond(
                throttle_time=0,
                groups=[
                    dict(
                        group_id=g.group_id,
                        topics=self._group_topics_out(r, topics),
                        error_code=r.error,
                    )
                    for g, r, topics in zip(req.groups, answers, asked, strict=True)
                ],
            )

        if is_big(len(answers) + sum(_answered(r.topics) for r in answers)):
            return await encoded_off_loop(body)
        return body()

    # OffsetDelete ---------------------------------------------------------------------------------
    async def offset_delete(self, ctx: RequestContext, req: Any) -> Any:
        if is_big(_requested(req.topics)):
            with gc_paused():
                return await self._offset_delete(ctx, req)
        return await self._offset_delete(ctx, req)

    async def _offset_delete(self, ctx: RequestContext, req: Any) -> Any:
        if not ctx.allowed(Operation.DELETE, ResourceType.GROUP, req.group_id):
            return ctx.respond(error_code=_GROUP_REFUSED, throttle_time=0, topics=[])
        readable = {
            t.name for t in req.topics if ctx.allowed(Operation.READ, ResourceType.TOPIC, t.name)
        }
        request = m.OffsetDeleteRequest(
            group_id=req.group_id,
            topics=tuple(
                (t.name, tuple(p.partition_index for p in t.partitions))
                for t in req.topics
                if t.name in readable
            ),
        )
        runtime = self.runtime
        p = runtime.partition_of(req.group_id)
        r: m.OffsetDeleteResponse = await runtime.call(p, runtime.shard(p).offset_delete, request)

        def body() -> Any:
            if r.error:  # a group-level error comes alone, as in Kafka
                return ctx.respond(error_code=r.error, throttle_time=0, topics=[])
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
                                error_code=errors.get((t.name, p.partition_index), 0)
                                if t.name in readable
                                else _TOPIC_REFUSED,
                            )
                            for p in t.partitions
                        ],
                    )
                    for t in req.topics
                ],
            )

        if is_big(_requested(req.topics)):
            return await encoded_off_loop(body)
        return body()
