"""ShareFetch (78) v1-v2 and ShareAcknowledge (79) v1-v2: share consumers' requests.

As Kafka answers them:

- The whole request: READ on the group, else GROUP_AUTHORIZATION_FAILED; an empty group or
  member id is INVALID_REQUEST; the share session's errors (``share/sessions.py``).
- Per partition: a topic id not known is UNKNOWN_TOPIC_ID, a topic the client may not READ is
  TOPIC_AUTHORIZATION_FAILED, a partition index out of range UNKNOWN_TOPIC_OR_PARTITION, a
  partition led by another node NOT_LEADER_OR_FOLLOWER (with its leader in ``current_leader``
  and ``node_endpoints``).
- Acknowledgements (ShareFetch carries them too, in ``acknowledge_error_code``) are applied
  before anything is fetched, all or nothing per partition, and answered once durable: a
  partition whose share partition was never loaded here is UNKNOWN_TOPIC_OR_PARTITION; RENEW
  (type 4) only in v2 requests marked ``is_renew_ack``, else INVALID_REQUEST; the share
  partition checks the rest (INVALID_RECORD_STATE, INVALID_REQUEST).
- ShareFetch then acquires from every partition of the session, in an order rotating with the
  session epoch, until about ``max_records`` records are acquired over all partitions (whole
  batches: a batch may take it past), reading about ``max_bytes``. Nothing acquired: it waits up
  to ``max_wait_ms`` for new records or records released (a share partition that fails to
  load or persist ends the wait, answered with its error). A final request (epoch -1), or one
  renewing locks (``is_renew_ack``), fetches nothing; after a final one the session is closed and
  what its member still holds is released. ``min_bytes`` is not waited for: records are answered
  once acquired (their lock runs from then).

Both count their topics in the manager's counters (broker/share/counters.py), as Kafka's
BrokerTopicMetrics marks them: each topic fetched from, or acknowledged in, once per request, and
once more as failed when one of its partitions answered an error.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from kcoord.protocol.errors import ErrorCode
from kcoord.protocol.responses import to_millis
from kcoord.share.model import AckType, SharePartitionKey
from kcoord.share.partition import Acknowledgement
from kcoord.share.sessions import SessionPartition, ShareSessionError
from kcoord.storage.engine import Log
from kcoord.storage.offline import moved_away

from ..data.topics import storage_error_code
from ..net.connection import RequestContext
from ..security.acl.model import Operation, ResourceType
from .partitions import NOTHING, Acquired, SharePartitionManager

if TYPE_CHECKING:
    from ..cluster.view import ClusterView
    from ..data.topics import TopicStore

PARTITION_READ_BYTES = 1 << 20
"""How much of one partition's log one ShareFetch round reads at most (one batch at least)."""


class _Where:
    """A request's partition resolved: its topic name and log, or an error code."""

    __slots__ = ("error", "name", "plog")

    def __init__(self, error: int, name: str = "", plog: Log | None = None) -> None:
        self.error = error
        self.name = name
        self.plog = plog


_NOWHERE = _Where(0)


class ShareApi:
    def __init__(self, manager: SharePartitionManager, topics: TopicStore, view: ClusterView) -> None:
        self.manager = manager
        self.topics = topics
        self.view = view

    # common ---------------------------------------------------------------------------------------
    def _where(self, ctx: RequestContext, topic_id: uuid.UUID | None, index: int) -> _Where:
        topic = self.topics.by_id.get(topic_id) if topic_id is not None else None
        if topic is None:
            return _Where(ErrorCode.unknown_topic_id)
        if not ctx.allowed(Operation.READ, ResourceType.TOPIC, topic.name):
            return _Where(ErrorCode.topic_authorization_failed, topic.name)
        if not 0 <= index < len(topic.partitions):
            return _Where(ErrorCode.unknown_topic_or_partition, topic.name)
        plog = topic.partitions[index]
        offline = plog.offline
        if offline is not None:
            code = ErrorCode.not_leader_or_follower if moved_away(offline) else storage_error_code(offline)
            return _Where(code, topic.name)
        return _Where(0, topic.name, plog)

    def _refusal(self, ctx: RequestContext, group_id: str, member_id: str) -> tuple[int, str] | None:
        """The whole request's error, if any: group READ, ids present."""
        if not ctx.allowed(Operation.READ, ResourceType.GROUP, group_id):
            return ErrorCode.group_authorization_failed, ""
        if not group_id:
            return ErrorCode.invalid_request, "the group id is empty"
        if not member_id:
            return ErrorCode.invalid_request, "the member id is empty"
        return None

    def _hook_close(self, ctx: RequestContext) -> None:
        conn = ctx.connection
        manager = self.manager
        conn.on_close(manager, lambda: manager.connection_closed(conn))

    async def _acknowledge(
        self,
        ctx: RequestContext,
        group_id: str,
        member_id: str,
        topic_id: uuid.UUID | None,
        index: int,
        batches: Iterable[Any],
        renew_allowed: bool,
    ) -> int:
        where = self._where(ctx, topic_id, index)
        if where.error:
            return where.error
        acks = []
        for b in batches:
            types = tuple(int(t) for t in b.acknowledge_types)
            if not renew_allowed and AckType.RENEW in types:
                return ErrorCode.invalid_request
            acks.append(Acknowledgement(b.first_offset, b.last_offset, types))
        assert topic_id is not None
        key = SharePartitionKey(group_id, topic_id, index)
        return await self.manager.acknowledge(key, member_id, acks)

    def _topics_failed(self, results: Iterable[tuple[SessionPartition, int]]) -> dict[str, bool]:
        """The known topics among ``results`` (partition, error code), each with whether one
        of its partitions failed."""
        by_id = self.topics.by_id
        out: dict[str, bool] = {}
        for (tid, _), code in results:
            topic = by_id.get(tid) if tid is not None else None
            if topic is not None:
                out[topic.name] = out.get(topic.name, False) or code != 0
        return out

    def _leader(self, ctx: RequestContext, name: str, index: int, endpoints: dict[int, dict[str, Any]]) -> dict[str, int]:
        """``current_leader`` of a partition led elsewhere; its node joins ``endpoints``."""
        leader = self.view.leader(name, index) if name else None
        if leader is None:
            return dict(leader_id=-1, leader_epoch=-1)
        node = self.view.nodes.get(leader.node_id)
        address = node.address(ctx.connection.listener.name) if node is not None else None
        if node is not None and address is not None:
            endpoints[node.node_id] = dict(
                node_id=node.node_id, host=address[0], port=address[1], rack=node.rack
            )
        return dict(leader_id=leader.node_id, leader_epoch=leader.epoch)

    # ShareFetch -----------------------------------------------------------------------------------
    async def share_fetch(self, ctx: RequestContext, req: Any) -> Any:
        group_id = req.group_id or ""
        member_id = req.member_id or ""
        lock_ms = self.manager.lock_duration_ms(group_id) if group_id else 0
        refusal = self._refusal(ctx, group_id, member_id)
        if refusal is not None:
            return self._fetch_error(ctx, refusal[0], refusal[1], lock_ms)
        manager = self.manager
        manager.forget_deleted_topics()
        named = [(t.topic_id, p.partition_index) for t in req.topics for p in t.partitions]
        forgotten = [(f.topic_id, i) for f in req.forgotten_topics_data for i in f.partitions]
        has_acks = any(p.acknowledgement_batches for t in req.topics for p in t.partitions)
        try:
            use = manager.sessions.for_fetch(
                group_id, member_id, req.share_session_epoch, named, forgotten, has_acks,
                ctx.connection,
            )
        except ShareSessionError as e:
            return self._fetch_error(ctx, e.code, str(e), lock_ms)
        self._hook_close(ctx)
        renew = ctx.version >= 2 and bool(getattr(req, "is_renew_ack", False))
        acked = [
            (t.topic_id, p.partition_index, p.acknowledgement_batches)
            for t in req.topics
            for p in t.partitions
            if p.acknowledgement_batches
        ]
        codes = await asyncio.gather(
            *(self._acknowledge(ctx, group_id, member_id, tid, i, b, renew) for tid, i, b in acked)
        )
        ack_errors: dict[SessionPartition, int] = {
            (tid, i): code for (tid, i, _), code in zip(acked, codes, strict=True)
        }
        if ack_errors:
            manager.counters.count_acknowledge(self._topics_failed(ack_errors.items()))
        fetched: dict[SessionPartition, tuple[_Where, Acquired]] = {}
        if use.final:
            session = manager.sessions.remove(group_id, member_id)
            if session is not None:
                await manager.release_member(group_id, member_id)
        elif not renew:
            partitions = use.fetch_partitions()
            fetched = await self._fetch(ctx, req, group_id, member_id, partitions, use.session.epoch)
            manager.counters.count_fetch(self._topics_failed(
                (tp, where.error or got.error) for tp, (where, got) in fetched.items()
            ))
        return self._fetch_response(ctx, named, fetched, ack_errors, lock_ms)

    async def _fetch(
        self,
        ctx: RequestContext,
        req: Any,
        group_id: str,
        member_id: str,
        partitions: list[SessionPartition],
        epoch: int,
    ) -> dict[SessionPartition, tuple[_Where, Acquired]]:
        """Acquire from ``partitions``, waiting up to ``max_wait`` while nothing comes."""
        if partitions:
            turn = epoch % len(partitions)
            partitions = partitions[turn:] + partitions[:turn]
        deadline = time.monotonic() + max(0, to_millis(req.max_wait)) / 1000.0
        max_records = max(0, req.max_records)
        while True:
            waiters = [self.topics.appended_future(), self.manager.available()]
            out: dict[SessionPartition, tuple[_Where, Acquired]] = {}
            acquired = 0
            budget = req.max_bytes if req.max_bytes > 0 else 1 << 30
            valid = 0
            failed = False
            for tid, index in partitions:
                where = self._where(ctx, tid, index)
                if where.error or where.plog is None:
                    out[(tid, index)] = (where, NOTHING)
                    continue
                valid += 1
                if acquired >= max_records or budget <= 0:
                    continue
                key = SharePartitionKey(group_id, tid, index)
                got = await self.manager.acquire(
                    key, where.name, where.plog, member_id, max_records - acquired,
                    min(budget, PARTITION_READ_BYTES),
                )
                acquired += got.count
                budget -= len(got.records)
                failed = failed or bool(got.error)
                out[(tid, index)] = (where, got)
            remaining = deadline - time.monotonic()
            if acquired or failed or not valid or remaining <= 0 or ctx.connection.closed:
                return out
            await asyncio.wait(waiters, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)

    def _fetch_response(
        self,
        ctx: RequestContext,
        named: list[SessionPartition],
        fetched: dict[SessionPartition, tuple[_Where, Acquired]],
        ack_errors: dict[SessionPartition, int],
        lock_ms: int,
    ) -> Any:
        """Every partition the request named or acknowledged, and every one with records or an
        error, by topic in first-seen order."""
        order: dict[SessionPartition, None] = dict.fromkeys(named)
        order.update(dict.fromkeys(ack_errors))
        for tp, (where, got) in fetched.items():
            if where.error or got.error or got.ranges:
                order[tp] = None
        by_topic: dict[uuid.UUID | None, list[dict[str, Any]]] = {}
        endpoints: dict[int, dict[str, Any]] = {}
        for tp in order:
            tid, index = tp
            where, got = fetched.get(tp, (_NOWHERE, NOTHING))
            error = where.error or got.error
            leader = dict(leader_id=-1, leader_epoch=-1)
            if error == ErrorCode.not_leader_or_follower:
                leader = self._leader(ctx, where.name, index, endpoints)
            by_topic.setdefault(tid, []).append(
                dict(
                    partition_index=index,
                    error_code=error,
                    error_message=None,
                    acknowledge_error_code=ack_errors.get(tp, 0),
                    acknowledge_error_message=None,
                    current_leader=leader,
                    records=got.records,
                    acquired_records=[
                        dict(
                            first_offset=r.first_offset,
                            last_offset=r.last_offset,
                            delivery_count=r.delivery_count,
                        )
                        for r in got.ranges
                    ],
                )
            )
        return ctx.respond(
            throttle_time=0,
            error_code=0,
            error_message=None,
            acquisition_lock_timeout=lock_ms,
            responses=[dict(topic_id=t, partitions=ps) for t, ps in by_topic.items()],
            node_endpoints=list(endpoints.values()),
        )

    def _fetch_error(self, ctx: RequestContext, code: int, message: str, lock_ms: int) -> Any:
        return ctx.respond(
            throttle_time=0,
            error_code=code,
            error_message=message or None,
            acquisition_lock_timeout=lock_ms,
            responses=[],
            node_endpoints=[],
        )

    # ShareAcknowledge -----------------------------------------------------------------------------
    async def share_acknowledge(self, ctx: RequestContext, req: Any) -> Any:
        group_id = req.group_id or ""
        member_id = req.member_id or ""
        lock_ms = self.manager.lock_duration_ms(group_id) if group_id else 0
        refusal = self._refusal(ctx, group_id, member_id)
        if refusal is not None:
            return self._ack_response(ctx, refusal[0], refusal[1], [], {}, lock_ms)
        manager = self.manager
        manager.forget_deleted_topics()
        try:
            use = manager.sessions.for_acknowledge(group_id, member_id, req.share_session_epoch)
        except ShareSessionError as e:
            return self._ack_response(ctx, e.code, str(e), [], {}, lock_ms)
        renew = ctx.version >= 2 and bool(getattr(req, "is_renew_ack", False))
        parts = [(t.topic_id, p.partition_index, p.acknowledgement_batches) for t in req.topics for p in t.partitions]
        codes = await asyncio.gather(
            *(self._acknowledge(ctx, group_id, member_id, tid, i, b, renew) for tid, i, b in parts)
        )
        if use.final and manager.sessions.remove(group_id, member_id) is not None:
            await manager.release_member(group_id, member_id)
        results = {(tid, i): code for (tid, i, _), code in zip(parts, codes, strict=True)}
        if results:
            manager.counters.count_acknowledge(self._topics_failed(results.items()))
        return self._ack_response(ctx, 0, "", [(tid, i) for tid, i, _ in parts], results, lock_ms)

    def _ack_response(
        self,
        ctx: RequestContext,
        code: int,
        message: str,
        order: list[SessionPartition],
        results: dict[SessionPartition, int],
        lock_ms: int,
    ) -> Any:
        by_topic: dict[uuid.UUID | None, list[dict[str, Any]]] = {}
        endpoints: dict[int, dict[str, Any]] = {}
        for tp in dict.fromkeys(order):
            tid, index = tp
            error = results.get(tp, 0)
            leader = dict(leader_id=-1, leader_epoch=-1)
            if error == ErrorCode.not_leader_or_follower:
                topic = self.topics.by_id.get(tid) if tid is not None else None
                leader = self._leader(ctx, topic.name if topic else "", index, endpoints)
            by_topic.setdefault(tid, []).append(
                dict(partition_index=index, error_code=error, error_message=None, current_leader=leader)
            )
        return ctx.respond(
            throttle_time=0,
            error_code=code,
            error_message=message or None,
            acquisition_lock_timeout=lock_ms,
            responses=[dict(topic_id=t, partitions=ps) for t, ps in by_topic.items()],
            node_endpoints=list(endpoints.values()),
        )
