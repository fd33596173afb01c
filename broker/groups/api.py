"""The consumer-group APIs on the wire: FindCoordinator, JoinGroup, SyncGroup, Heartbeat,
LeaveGroup, ListGroups, DescribeGroups and DeleteGroups.

Each handler turns the request of whatever version arrived into the coordinator's
version-independent message, routes it to the shard owning the group (A2), and turns the shard's
answer back into the negotiated version (D13 for error responses). Admin requests that name
several groups, or none, fan out to the shards involved and merge their answers: shard by shard
and in slices of at most ``offload.SLICE`` groups, pausing for the event loop in between, with
a big answer built and encoded in the worker thread (broker/net/offload.py).
"""

from __future__ import annotations

import asyncio
import heapq
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any, Protocol

from kcoord.coordinator import messages as m
from kcoord.coordinator.classic.manager import listed_groups
from kcoord.coordinator.consumer.describe import listed_consumer_groups
from kcoord.coordinator.share.describe import listed_share_groups
from kcoord.protocol.apis import ApiKey
from kcoord.protocol.codec import RawBody, encode_body, encode_response, response_type
from kcoord.protocol.errors import ErrorCode
from kcoord.protocol.framing import Frame
from kcoord.protocol.group_codec import JoinGroupFields, SyncGroupFields
from kcoord.protocol.heartbeat import decode_heartbeat
from kcoord.protocol.responses import build, to_millis

from ..data.topic_names import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC
from ..net.connection import RequestContext
from ..net.offload import SLICE, encoded_off_loop, gc_paused, is_big, pause
from ..security.acl.model import CLUSTER_NAME, UNKNOWN_OPERATIONS, Operation, ResourceType
from .join_sync import join_answer, join_request, sync_answer, sync_request
from .runtime import GroupRuntime

if TYPE_CHECKING:
    from ..cluster.view import ClusterView
    from ..config import Config

GROUP_KEY = 0
TRANSACTION_KEY = 1
_GROUP = ResourceType.GROUP
_REFUSED = ErrorCode.group_authorization_failed
INTERNAL_TOPIC_WAIT_S = 10.0
"""How long FindCoordinator waits for the creation of the internal topic it needs (its 50
partitions take 0.1-0.3 s; a client's request timeout is 30 s or more)."""


class TransactionRouting(Protocol):
    """What FindCoordinator asks of the transaction coordinator (broker/txn/api.py)."""

    def find_error(self, ctx: RequestContext, transactional_id: str) -> int:
        """0 if this node may coordinate the id for this client, else the error."""

    def partition_of(self, transactional_id: str) -> int:
        """The id's partition of ``__transaction_state``."""

    def topic_creation(self) -> asyncio.Future[None] | None:
        """The creation of ``__transaction_state`` under way, if it is."""


def _no_coordinator(
    key: str,
    code: int = ErrorCode.coordinator_not_available,
    message: str = "The coordinator is not available.",
) -> dict[str, Any]:
    return dict(key=key, node_id=-1, host="", port=-1, error_code=code, error_message=message)


def then(result: Any, finish: Callable[[Any], Any]) -> Any:
    """``finish(reply)`` now if the shard answered at once, else a future of it (chained by a
    callback: no task per request). ``finish`` may itself return a future (a response built
    off the loop): the answer is then its result."""
    if not isinstance(result, asyncio.Future):
        return finish(result)
    chained = _Then(result.get_loop().create_future(), finish)
    result.add_done_callback(chained.settle)
    return chained.answer


class _Then:
    """:func:`then`'s callbacks. An object rather than closures: compiled, closures that name
    each other keep their environment in a reference cycle, so every request they saw (its
    context, its decoded body) would wait for the cyclic garbage collector to be freed."""

    __slots__ = ("answer", "finish")

    def __init__(self, answer: asyncio.Future[Any], finish: Callable[[Any], Any]) -> None:
        self.answer = answer
        self.finish = finish

    def failed(self, fut: asyncio.Future[Any]) -> bool:
        """Pass on a cancellation or an exception of ``fut``; True if there was one."""
        answer = self.answer
        if answer.done():
            return True
        if fut.cancelled():
            answer.cancel()
            return True
        error = fut.exception()
        if error is not None:
            answer.set_exception(error)
            return True
        return False

    def built(self, body: asyncio.Future[Any]) -> None:
        if not self.failed(body):
            self.answer.set_result(body.result())

    def settle(self, reply: asyncio.Future[Any]) -> None:
        if self.failed(reply):
            return
        try:
            value = self.finish(reply.result())
        except Exception as e:
            self.answer.set_exception(e)
            return
        if isinstance(value, asyncio.Future):
            value.add_done_callback(self.built)
        else:
            self.answer.set_result(value)


class GroupApi:
    def __init__(
        self,
        config: Config,
        runtime: GroupRuntime,
        view: ClusterView,
        transactions: TransactionRouting | None = None,
    ) -> None:
        self.config = config
        self.runtime = runtime
        self.view = view
        """Who leads what: FindCoordinator names the leader of the key's partition."""
        self.transactions = transactions
        """FindCoordinator of a TRANSACTION key (the transaction coordinator's API)."""
        self.share_state_deleted: Callable[[str], Awaitable[int]] | None = None
        """DeleteGroups: deletes an Empty share group's share state before the group; the error
        to answer for the group instead, 0 to go on (broker/share/admin_api.py)."""
        self._heartbeat_bodies: dict[tuple[int, int], RawBody] = {}
        self._max_elements: int = config["socket.request.max.elements"]

    def _client_host(self, ctx: RequestContext) -> str:
        return "/" + ctx.client_host  # Kafka reports InetAddress.toString(): "/127.0.0.1"

    # FindCoordinator ------------------------------------------------------------------------------
    def find_coordinator(self, ctx: RequestContext, req: Any) -> Any:
        """The coordinators of the request's keys. The first use of ``__consumer_offsets`` or
        ``__transaction_state`` starts its creation (in a worker thread: the event loop serves
        others meanwhile); the answer then waits for it, up to
        :data:`INTERNAL_TOPIC_WAIT_S`, so that clients see the coordinator at once rather than
        COORDINATOR_NOT_AVAILABLE (some, kafkajs without retries, or librdkafka's admin calls,
        give up on that); only a creation that fails or takes longer is answered with it."""
        answer = self._find_coordinator(ctx, req)
        key_type = getattr(req, "key_type", GROUP_KEY)
        creating: asyncio.Future[None] | None
        if key_type == GROUP_KEY:
            creating = self.runtime.offsets_topic.creating
        elif key_type == TRANSACTION_KEY and self.transactions is not None:
            creating = self.transactions.topic_creation()
        else:
            creating = None
        if creating is None:
            return answer
        return asyncio.ensure_future(self._find_once_created(ctx, req, creating))

    async def _find_once_created(
        self, ctx: RequestContext, req: Any, creating: asyncio.Future[None]
    ) -> Any:
        await asyncio.wait([asyncio.shield(creating)], timeout=INTERNAL_TOPIC_WAIT_S)
        return self._find_coordinator(ctx, req)

    def _find_coordinator(self, ctx: RequestContext, req: Any) -> Any:
        key_type = getattr(req, "key_type", GROUP_KEY)
        keys = list(req.coordinator_keys) if ctx.version >= 4 else [req.key]
        results = []
        for key in keys:
            if key_type == GROUP_KEY and not ctx.allowed(Operation.DESCRIBE, _GROUP, key):
                results.append(_no_coordinator(key, _REFUSED, "Not authorized to describe the group."))
            elif key_type == GROUP_KEY:
                if not self.runtime.ensure_topic() or not self.runtime.coordinator_available(key):
                    # the offsets partition is offline or the topic could not be created
                    results.append(_no_coordinator(key))
                else:
                    partition = self.runtime.partition_of(key)
                    results.append(self._coordinator(ctx, key, OFFSETS_TOPIC, partition))
            elif key_type == TRANSACTION_KEY and self.transactions is not None:
                code = self.transactions.find_error(ctx, key)
                if code == ErrorCode.not_coordinator and self.view.clustered:
                    code = 0  # the partition is led elsewhere: routed by the view
                if code:
                    results.append(_no_coordinator(key, code, ErrorCode(code).name))
                else:
                    partition = self.transactions.partition_of(key)
                    results.append(
                        self._coordinator(ctx, key, TRANSACTION_STATE_TOPIC, partition)
                    )
            else:
                code = (
                    ErrorCode.transactional_id_authorization_failed
                    if key_type == TRANSACTION_KEY
                    else ErrorCode.invalid_request
                )
                message = (
                    "transactions are not supported"
                    if key_type == TRANSACTION_KEY
                    else f"unknown key type {key_type}"
                )
                results.append(_no_coordinator(key, code, message))
        if ctx.version >= 4:
            return ctx.respond(throttle_time=0, coordinators=results)
        first = results[0]
        return ctx.respond(
            throttle_time=0,
            error_code=first["error_code"],
            error_message=first["error_message"],
            node_id=first["node_id"],
            host=first["host"],
            port=first["port"],
        )

    def _coordinator(self, ctx: RequestContext, key: str, topic: str, partition: int) -> dict[str, Any]:
        """The coordinator of ``key``: the leader of its partition of ``topic``, at its address
        on the listener the client came in on (this node, on one node)."""
        listener = ctx.connection.listener
        if not self.view.clustered:
            return dict(key=key, node_id=self.view.node_id, host=listener.advertised_host,
                        port=listener.advertised_port, error_code=0, error_message=None)
        leader = self.view.leader(topic, partition)
        node = self.view.nodes.get(leader.node_id) if leader is not None else None
        address = node.address(listener.name) if node is not None else None
        if node is None or address is None:
            return _no_coordinator(key)
        return dict(key=key, node_id=node.node_id, host=address[0], port=address[1], error_code=0,
                    error_message=None)

    # JoinGroup, SyncGroup (broker/groups/join_sync.py; without an authorizer their direct path) --
    def join_group(self, ctx: RequestContext, req: Any) -> Any:
        version = ctx.version
        if not ctx.allowed(Operation.READ, _GROUP, req.group_id):
            return join_answer(version, m.JoinGroupResponse(_REFUSED, -1, None, None, "", ""))
        session_ms = to_millis(req.session_timeout)
        fields: JoinGroupFields = (
            ctx.header.client_id or "",
            req.group_id,
            session_ms,
            to_millis(req.rebalance_timeout) if version >= 1 else session_ms,
            req.member_id,
            getattr(req, "group_instance_id", None),
            req.protocol_type,
            tuple((p.name, p.metadata) for p in req.protocols),
            getattr(req, "reason", None),
        )
        runtime = self.runtime
        p = runtime.partition_of(req.group_id)
        request = join_request(fields, self._client_host(ctx), version)
        result = runtime.submit(p, runtime.shard(p).join_group, request)
        return then(result, lambda r: join_answer(version, r))

    def sync_group(self, ctx: RequestContext, req: Any) -> Any:
        version = ctx.version
        if not ctx.allowed(Operation.READ, _GROUP, req.group_id):
            return sync_answer(version, m.SyncGroupResponse(_REFUSED, None, None, b""))
        fields: SyncGroupFields = (
            req.group_id,
            req.generation_id,
            req.member_id,
            getattr(req, "group_instance_id", None),
            getattr(req, "protocol_type", None),
            getattr(req, "protocol_name", None),
            tuple((a.member_id, a.assignment) for a in req.assignments),
        )
        runtime = self.runtime
        p = runtime.partition_of(req.group_id)
        result = runtime.submit(p, runtime.shard(p).sync_group, sync_request(fields))
        return then(result, lambda r: sync_answer(version, r))

    # Heartbeat ------------------------------------------------------------------------------------
    def heartbeat(self, ctx: RequestContext, req: Any) -> Any:
        if not ctx.allowed(Operation.READ, _GROUP, req.group_id):
            return self._heartbeat_body(ctx.version, _REFUSED)
        request = m.HeartbeatRequest(
            group_id=req.group_id,
            generation_id=req.generation_id,
            member_id=req.member_id,
            group_instance_id=getattr(req, "group_instance_id", None),
        )
        runtime = self.runtime
        p = runtime.partition_of(req.group_id)
        result = runtime.submit(p, runtime.shard(p).heartbeat, request)
        return then(result, lambda r: self._heartbeat_body(ctx.version, r.error))

    def heartbeat_direct(self, frame: Frame, version: int, correlation_id: int, client_host: str) -> bytes | None:
        """The hot path: a Heartbeat decoded straight from the frame and answered with a whole
        response frame, no header object, no Output. None when the generic path must answer."""
        group_id, generation_id, member_id, instance_id = decode_heartbeat(
            frame, version, self._max_elements
        )
        error = self.runtime.heartbeat(group_id, generation_id, member_id, instance_id)
        if error is None:
            return None
        return encode_response(correlation_id, self._heartbeat_body(version, error), version >= 4)

    def _heartbeat_body(self, version: int, error: int) -> RawBody:
        """Heartbeat answers differ only by version and error code: encode each once."""
        key = (version, error)
        body = self._heartbeat_bodies.get(key)
        if body is None:
            response = build(
                response_type(ApiKey.HEARTBEAT, version), throttle_time=0, error_code=error
            )
            body = self._heartbeat_bodies[key] = RawBody(encode_body(response))
        return body

    # LeaveGroup -----------------------------------------------------------------------------------
    async def leave_group(self, ctx: RequestContext, req: Any) -> Any:
        if ctx.version >= 3:
            members = tuple(
                m.LeaveMember(x.member_id, x.group_instance_id, getattr(x, "reason", None))
                for x in req.members
            )
        else:
            members = (m.LeaveMember(req.member_id),)
        runtime = self.runtime
        if ctx.allowed(Operation.READ, _GROUP, req.group_id):
            p = runtime.partition_of(req.group_id)
            r: m.LeaveGroupResponse = await runtime.call(
                p, runtime.shard(p).leave_group, m.LeaveGroupRequest(req.group_id, members)
            )
        else:
            r = m.LeaveGroupResponse(_REFUSED, ())
        if ctx.version >= 3:
            return ctx.respond(
                throttle_time=0,
                error_code=r.error,
                members=[
                    dict(member_id=x.member_id, group_instance_id=x.group_instance_id, error_code=x.error)
                    for x in r.members
                ],
            )
        error = r.error or (r.members[0].error if r.members else 0)
        return ctx.respond(throttle_time=0, error_code=error)

    # ListGroups -----------------------------------------------------------------------------------
    async def list_groups(self, ctx: RequestContext, req: Any) -> Any:
        with gc_paused():  # every group is read: see broker/net/offload.py
            return await self._list_groups(ctx, req)

    async def _list_groups(self, ctx: RequestContext, req: Any) -> Any:
        request = m.ListGroupsRequest(
            states_filter=frozenset(getattr(req, "states_filter", ()) or ()),
            types_filter=frozenset(getattr(req, "types_filter", ()) or ()),
        )
        runtime = self.runtime
        error = 0
        work = 0  # groups read since the last pause
        runs: list[list[m.ListedGroup]] = []  # each sorted
        before: list[asyncio.Future[None]] = []
        for p in range(runtime.num_partitions):
            shard = runtime.shard(p)
            if shard.loading:
                error = error or ErrorCode.coordinator_load_in_progress
                continue
            pending = runtime.pending(p)
            if pending is not None:
                before.append(pending)
            runs.append(sorted(listed_consumer_groups(shard.consumer_groups(), request)))
            runs.append(sorted(listed_share_groups(shard.share_groups(), request)))
            groups = list(shard.groups())
            for i in range(0, len(groups), SLICE):
                runs.append(sorted(listed_groups(groups[i : i + SLICE], request)))
                work += min(SLICE, len(groups) - i)
                if work >= SLICE:
                    work = 0
                    await pause()
        for pending in before:  # like a shard reply: not before the shard's earlier outputs
            await asyncio.shield(pending)

        listed: Iterable[m.ListedGroup] = heapq.merge(*runs)
        if not ctx.allowed(Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME, quiet=True):
            # Only the groups the client may describe, silently (as Kafka).
            listed = [
                g for g in listed
                if ctx.allowed(Operation.DESCRIBE, _GROUP, g.group_id, quiet=True)
            ]

        def body() -> Any:
            return ctx.respond(
                throttle_time=0,
                error_code=error,
                groups=[
                    dict(
                        group_id=g.group_id,
                        protocol_type=g.protocol_type,
                        group_state=g.state,
                        group_type=g.group_type,
                    )
                    for g in listed
                ],
            )

        if is_big(sum(map(len, runs))):
            return await encoded_off_loop(body)
        return body()

    # DescribeGroups -------------------------------------------------------------------------------
    async def _per_shard(
        self,
        group_ids: Iterable[str],
        op_name: str,
        make: Callable[[tuple[str, ...]], Any],
        atomic: bool = False,
    ) -> list[Any]:
        """Ask each shard owning some of ``group_ids`` about its own groups, at most SLICE
        groups per call (all of a shard's in one call if ``atomic``: one write per shard, as
        Kafka's DeleteGroups), pausing for the loop between calls; then await the answers."""
        ids = list(group_ids)
        if is_big(len(ids)):
            with gc_paused():
                return await self._ask_shards(ids, op_name, make, atomic)
        return await self._ask_shards(ids, op_name, make, atomic)

    async def _ask_shards(
        self,
        group_ids: list[str],
        op_name: str,
        make: Callable[[tuple[str, ...]], Any],
        atomic: bool,
    ) -> list[Any]:
        runtime = self.runtime
        by_shard: dict[int, list[str]] = defaultdict(list)
        for i, group_id in enumerate(group_ids, 1):
            by_shard[runtime.partition_of(group_id)].append(group_id)  # a Java hash each
            if i % SLICE == 0:
                await pause()
        results: list[Any] = []
        work = 0  # groups asked about since the last pause
        for p, ids in by_shard.items():
            step = len(ids) if atomic else SLICE
            for i in range(0, len(ids), step):
                op = getattr(runtime.shard(p), op_name)
                results.append(runtime.submit(p, op, make(tuple(ids[i : i + step]))))
                work += min(step, len(ids) - i)
                if work >= SLICE:
                    work = 0
                    await pause()
        return [await r if isinstance(r, asyncio.Future) else r for r in results]

    async def describe_groups(self, ctx: RequestContext, req: Any) -> Any:
        allowed = [g for g in req.groups if ctx.allowed(Operation.DESCRIBE, _GROUP, g)]
        answers: list[m.DescribeGroupsResponse] = await self._per_shard(
            allowed, "describe_groups", m.DescribeGroupsRequest
        )
        found = {g.group_id: g for a in answers for g in a.groups}
        for group_id in req.groups:
            if group_id not in found:
                found[group_id] = m.DescribedGroup(_REFUSED, group_id, "", "", "", ())
        include_ops = getattr(req, "include_authorized_operations", False)

        def body() -> Any:
            groups = []
            for group_id in req.groups:
                g = found[group_id]
                if g.error_message is not None and ctx.version < 6:
                    # Unknown, or of another type: before v6 Kafka shows it Dead, no error.
                    g = m.DescribedGroup(ErrorCode.none, group_id, "Dead", "", "", ())
                groups.append(
                    dict(
                        error_code=g.error,
                        error_message=g.error_message,
                        group_id=g.group_id,
                        group_state=g.state,
                        protocol_type=g.protocol_type,
                        protocol_data=g.protocol,
                        members=[
                            dict(
                                member_id=x.member_id,
                                group_instance_id=x.group_instance_id,
                                client_id=x.client_id,
                                client_host=x.client_host,
                                member_metadata=x.metadata,
                                member_assignment=x.assignment,
                            )
                            for x in g.members
                        ],
                        authorized_operations=(
                            ctx.authorized_operations(_GROUP, group_id)
                            if include_ops and not g.error
                            else UNKNOWN_OPERATIONS
                        ),
                    )
                )
            return ctx.respond(throttle_time=0, groups=groups)

        if is_big(len(req.groups) + sum(len(g.members) for g in found.values())):
            return await encoded_off_loop(body)
        return body()

    # DeleteGroups ---------------------------------------------------------------------------------
    async def delete_groups(self, ctx: RequestContext, req: Any) -> Any:
        allowed = [g for g in req.groups_names if ctx.allowed(Operation.DELETE, _GROUP, g)]
        found: dict[str, int] = {}
        if self.share_state_deleted is not None:  # a share group's state goes first (Kafka)
            for group_id in allowed:
                error = await self.share_state_deleted(group_id)
                if error:
                    found[group_id] = error
            allowed = [g for g in allowed if g not in found]
        answers: list[m.DeleteGroupsResponse] = await self._per_shard(
            allowed, "delete_groups", m.DeleteGroupsRequest, atomic=True
        )
        found.update((r.group_id, r.error) for a in answers for r in a.results)
        for group_id in req.groups_names:
            found.setdefault(group_id, _REFUSED)

        def body() -> Any:
            return ctx.respond(
                throttle_time=0,
                results=[dict(group_id=g, error_code=found[g]) for g in req.groups_names],
            )

        if is_big(len(req.groups_names)):
            return await encoded_off_loop(body)
        return body()
