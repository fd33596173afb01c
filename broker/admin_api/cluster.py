"""Cluster-level APIs: ApiVersions, Metadata, CreateTopics, DeleteTopics, CreatePartitions.

One node owns every partition for now; ``Cluster`` describes the nodes from one place so
Metadata and FindCoordinator agree, and so several nodes can follow later.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections import Counter
from typing import TYPE_CHECKING, Any

from kcoord.protocol.apis import SUPPORTED, ApiKey
from kcoord.protocol.codec import (
    RawBody,
    decode_request_frame,
    encode_body,
    encode_response,
    response_type,
)
from kcoord.protocol.errors import ErrorCode
from kcoord.protocol.framing import Frame
from kcoord.protocol.responses import build, to_millis
from kcoord.storage.offline import moved_away

from ..data.topic_configs import ConfigProblem, check_overrides
from ..data.topics import INTERNAL_TOPICS, Reservation, Topic, TopicError, topic_name_problem
from ..net.connection import RequestContext
from ..net.listeners import Listener
from ..net.offload import SLICE, Sliced, encoded_off_loop, is_big, run_now, run_sliced
from ..security.acl.model import CLUSTER_NAME, UNKNOWN_OPERATIONS, Operation, ResourceType

if TYPE_CHECKING:
    from kcoord.storage.engine import Log

    from ..cluster.view import ClusterView
    from ..config import Config
    from ..data.topics import TopicStore

_TOPIC = ResourceType.TOPIC


def _refused(operation: str) -> TopicError:
    return TopicError(
        ErrorCode.topic_authorization_failed, f"Not authorized: {operation} on the topic is needed."
    )

log = logging.getLogger("kcoord.cluster")

ZERO_UUID = uuid.UUID(int=0)


class ClusterApi:
    def __init__(
        self, config: Config, topics: TopicStore, cluster_id: str, view: ClusterView
    ) -> None:
        self.config = config
        self.view = view
        self.topics = topics
        self.cluster_id = cluster_id
        self._api_versions_bodies: dict[int, RawBody] = {}
        self._max_elements: int = config["socket.request.max.elements"]

    @property
    def node_id(self) -> int:
        return int(self.config["node.id"])

    def brokers(self, listener: Listener) -> list[dict[str, Any]]:
        """The live nodes (this one alone on one node), each at its address on the listener
        the client came in on (a node without that listener is left out, as Kafka does)."""
        if not self.view.clustered:
            me = self.view.nodes[self.node_id]
            return [
                dict(
                    node_id=self.node_id,
                    host=listener.advertised_host,
                    port=listener.advertised_port,
                    rack=me.rack,
                )
            ]
        found = []
        for node in self.view.live_nodes():
            address = node.address(listener.name)
            if address is not None:
                found.append(dict(node_id=node.node_id, host=address[0], port=address[1], rack=node.rack))
        return found

    # ApiVersions ----------------------------------------------------------------------------------
    def api_versions(self, ctx: RequestContext, req: Any) -> Any:
        return self._api_versions_body(ctx.version)

    def api_versions_direct(self, frame: Frame, version: int, correlation_id: int, client_host: str) -> bytes:
        """The hot path: every client opens every connection with ApiVersions, and the answer
        depends on the version alone. The body is still decoded, so garbage closes the
        connection as on the generic path. (ApiVersions answers always use header v0.)"""
        decode_request_frame(ApiKey.API_VERSIONS, version, frame, self._max_elements)
        return encode_response(correlation_id, self._api_versions_body(version), False)

    def _api_versions_body(self, version: int) -> RawBody:
        # The answer never changes while the broker runs: encode it once per version.
        body = self._api_versions_bodies.get(version)
        if body is None:
            body = RawBody(
                encode_body(
                    build(
                        response_type(ApiKey.API_VERSIONS, version),
                        error_code=0,
                        api_keys=[
                            dict(api_key=k, min_version=lo, max_version=hi)
                            for k, (lo, hi) in sorted(SUPPORTED.items())
                        ],
                        throttle_time=0,
                        supported_features=[],
                        finalized_features_epoch=-1,
                        finalized_features=[],
                        zk_migration_ready=False,
                    )
                )
            )
            self._api_versions_bodies[version] = body
        return body

    # Metadata -------------------------------------------------------------------------------------
    def metadata(self, ctx: RequestContext, req: Any) -> Any:
        config = self.config
        auto_create = config["auto.create.topics.enable"] and getattr(
            req, "allow_auto_topic_creation", True
        )
        requested = req.topics
        if ctx.version < 12 and requested and any(
            t.name is None or (getattr(t, "topic_id", None) or ZERO_UUID) != ZERO_UUID
            for t in requested
        ):
            # Topic ids are for v12+ (and names are not nullable in v10/v11 answers): Kafka
            # fails the request with INVALID_REQUEST for every topic, unknown names as "".
            return ctx.respond(
                throttle_time=0,
                brokers=[],
                cluster_id=None,
                controller_id=-1,
                topics=[
                    self._topic_error(
                        t.name or "", getattr(t, "topic_id", None), ErrorCode.invalid_request
                    )
                    for t in requested
                ],
                cluster_authorized_operations=UNKNOWN_OPERATIONS,
            )
        refused: list[dict[str, Any]] = []
        if requested is None or (ctx.version == 0 and not requested):
            wanted: list[tuple[str | None, uuid.UUID | None]] = [
                (name, None) for name in sorted(self.topics.topics)
                if ctx.allowed(Operation.DESCRIBE, _TOPIC, name, quiet=True)
            ]
            work = len(wanted) + self.topics.partition_count
        else:
            wanted = [(t.name, getattr(t, "topic_id", None)) for t in requested]
            work = len(wanted)
            if ctx.connection.authorizer is not None:
                wanted, refused = self._describable(ctx, wanted)
        if is_big(work):
            return self._metadata_big(ctx, req, wanted, auto_create, refused)
        topics_out = run_now(self._topics_out(ctx, wanted, auto_create))
        return self._metadata_answer(ctx, req, topics_out + refused)

    def _describable(
        self, ctx: RequestContext, wanted: list[tuple[str | None, uuid.UUID | None]]
    ) -> tuple[list[tuple[str | None, uuid.UUID | None]], list[dict[str, Any]]]:
        """The topics asked for that the client may describe, and the answers for the rest
        (TOPIC_AUTHORIZATION_FAILED; asked for by id, without the name)."""
        allowed, refused = [], []
        for name, topic_id in wanted:
            known = name
            if name is None and topic_id is not None:
                topic = self.topics.by_id.get(topic_id)
                known = topic.name if topic is not None else None
            if known is None or ctx.allowed(Operation.DESCRIBE, _TOPIC, known):
                allowed.append((name, topic_id))
            else:
                refused.append(
                    self._topic_error(name, topic_id, ErrorCode.topic_authorization_failed)
                )
        return allowed, refused

    async def _metadata_big(
        self,
        ctx: RequestContext,
        req: Any,
        wanted: list[tuple[str | None, uuid.UUID | None]],
        auto_create: bool,
        refused: list[dict[str, Any]],
    ) -> Any:
        """Metadata of many topics: looked up in slices, the answer built in the worker
        (broker/net/offload.py)."""
        topics_out = await run_sliced(self._topics_out(ctx, wanted, auto_create))
        return await encoded_off_loop(
            lambda: self._metadata_answer(ctx, req, topics_out + refused)
        )

    def _metadata_answer(
        self, ctx: RequestContext, req: Any, topics_out: list[dict[str, Any]]
    ) -> Any:
        if getattr(req, "include_topic_authorized_operations", False):
            for t in topics_out:
                if not t["error_code"]:
                    t["topic_authorized_operations"] = ctx.authorized_operations(_TOPIC, t["name"])
        cluster_ops = UNKNOWN_OPERATIONS
        if getattr(req, "include_cluster_authorized_operations", False):
            cluster_ops = ctx.authorized_operations(ResourceType.CLUSTER, CLUSTER_NAME)
        return ctx.respond(
            throttle_time=0,
            brokers=self.brokers(ctx.connection.listener),
            cluster_id=self.cluster_id,
            controller_id=self.view.controller_id,
            topics=topics_out,
            cluster_authorized_operations=cluster_ops,
            error_code=ErrorCode.none,  # v13 (KIP-1102): Kafka's brokers never set one either
        )

    def _topics_out(
        self,
        ctx: RequestContext,
        wanted: list[tuple[str | None, uuid.UUID | None]],
        auto_create: bool,
    ) -> Sliced[list[dict[str, Any]]]:
        """The answer for each topic asked for (by name or id), creating unknown ones if
        ``auto_create`` and the client may (CREATE on the cluster or the topic); yields between
        slices of topics and partitions described."""
        config = self.config
        topics_out = []
        work = 0
        for name, topic_id in wanted:
            work += 1
            if work >= SLICE:
                work = 0
                yield
            topic: Topic | None = None
            if name is None and topic_id is not None and topic_id != ZERO_UUID:
                topic = self.topics.by_id.get(topic_id)
                if topic is None:
                    topics_out.append(self._topic_error(None, topic_id, ErrorCode.unknown_topic_id))
                    continue
            elif name is not None:
                topic = self.topics.get(name)
                if topic is None:
                    problem = topic_name_problem(name)
                    if problem:
                        topics_out.append(
                            self._topic_error(name, None, ErrorCode.invalid_topic_exception)
                        )
                        continue
                    if self.topics.pending(name) is not None:
                        # Being created: Kafka's answer for a topic it is still creating.
                        topics_out.append(
                            self._topic_error(name, None, ErrorCode.leader_not_available)
                        )
                        continue
                    if auto_create and name not in INTERNAL_TOPICS and not self._may_create(ctx, name):
                        topics_out.append(
                            self._topic_error(name, None, ErrorCode.topic_authorization_failed)
                        )
                        continue
                    if auto_create and name not in INTERNAL_TOPICS:
                        try:
                            topic = self.topics.create(name, config["num.partitions"])
                        except TopicError as e:
                            # Kafka (creating synchronously) passes the creation's error on,
                            # except that "exists" means "still being created".
                            code = e.code
                            if code == ErrorCode.topic_already_exists:
                                code = ErrorCode.leader_not_available
                            topics_out.append(self._topic_error(name, None, code))
                            continue
                    else:
                        topics_out.append(
                            self._topic_error(name, None, ErrorCode.unknown_topic_or_partition)
                        )
                        continue
            if topic is None:
                topics_out.append(self._topic_error(name, None, ErrorCode.invalid_request))
                continue
            topics_out.append(self._describe(topic))
            work += len(topic.partitions)
        return topics_out

    @staticmethod
    def _may_create(ctx: RequestContext, name: str) -> bool:
        """CREATE on the cluster, or else on the topic (Kafka's rule for creating topics)."""
        return ctx.allowed(
            Operation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME, quiet=True
        ) or ctx.allowed(Operation.CREATE, _TOPIC, name)

    def _describe(self, topic: Topic) -> dict[str, Any]:
        return dict(
            error_code=0,
            name=topic.name,
            topic_id=topic.topic_id,
            is_internal=topic.internal,
            partitions=[
                self._describe_partition(topic.name, i, plog)
                for i, plog in enumerate(topic.partitions)
            ],
            topic_authorized_operations=UNKNOWN_OPERATIONS,
        )

    def _describe_partition(self, topic: str, index: int, plog: Log) -> dict[str, Any]:
        """The partition's leader and epoch as the view has them. Kafka's view of a partition
        without a leader, or whose only replica's log is offline: LEADER_NOT_AVAILABLE, leader
        -1 (the replica listed as offline)."""
        leader = self.view.leader(topic, index)
        if leader is not None and leader.node_id == self.node_id and moved_away(plog.offline):
            leader = None  # this node dropped it since the view was taken
        if leader is None or (leader.node_id == self.node_id and plog.offline is not None):
            node = self.node_id if leader is None or not self.view.clustered else leader.node_id
            return dict(
                partition_index=index,
                error_code=ErrorCode.leader_not_available,
                leader_id=-1,
                leader_epoch=leader.epoch if leader is not None else -1,
                replica_nodes=[node],
                isr_nodes=[node],
                offline_replicas=[node],
            )
        return dict(
            partition_index=index,
            error_code=0,
            leader_id=leader.node_id,
            leader_epoch=leader.epoch,
            replica_nodes=[leader.node_id],
            isr_nodes=[leader.node_id],
            offline_replicas=[],
        )

    @staticmethod
    def _topic_error(name: str | None, topic_id: uuid.UUID | None, code: int) -> dict[str, Any]:
        return dict(
            error_code=code,
            name=name,
            topic_id=topic_id or ZERO_UUID,
            is_internal=False,
            partitions=[],
            topic_authorized_operations=UNKNOWN_OPERATIONS,
        )

    # CreateTopics ---------------------------------------------------------------------------------
    async def create_topics(self, ctx: RequestContext, req: Any) -> Any:
        """Topics are validated and reserved in request order (limits count what earlier topics
        of the request create), then created together off the event loop; the answer waits
        for them, up to the request's timeout (REQUEST_TIMED_OUT after it: the creation goes
        on). ``validate_only`` reserves nothing and creates nothing."""
        topics = self.topics
        out: list[dict[str, Any]] = []
        reserved: list[tuple[dict[str, Any], Reservation]] = []
        in_request = 0
        for t in req.topics:
            entry: dict[str, Any] = dict(
                name=t.name,
                topic_id=ZERO_UUID,
                error_code=0,
                error_message=None,
                topic_config_error_code=0,
                num_partitions=-1,
                replication_factor=-1,
                configs=[],
            )
            out.append(entry)
            try:
                if not self._may_create(ctx, t.name):
                    raise _refused("CREATE")
                count, rf, overrides = self._creatable(t)
                segment_bytes = overrides.get("segment.bytes")
                res = topics.reserve_topic(
                    t.name,
                    count,
                    segment_bytes=int(segment_bytes) if segment_bytes is not None else None,
                    in_request=in_request,
                    configs=overrides,
                )
            except TopicError as e:
                entry.update(error_code=e.code, error_message=str(e))
                continue
            in_request += count
            entry.update(num_partitions=count, replication_factor=rf, configs=self._configs_of(res))
            reserved.append((entry, res))
        if req.validate_only:
            for _, res in reserved:
                topics.release(res)
            return ctx.respond(throttle_time=0, topics=out)
        for entry, outcome in await self._run_all(reserved, req.timeout):
            if isinstance(outcome, Topic):
                entry["topic_id"] = outcome.topic_id
            else:
                entry.update(
                    error_code=outcome[0],
                    error_message=outcome[1],
                    num_partitions=-1,
                    replication_factor=-1,
                )
        return ctx.respond(throttle_time=0, topics=out)

    def _configs_of(self, res: Reservation) -> list[dict[str, Any]]:
        """The new topic's configs as CreateTopics v5+ reports them."""
        return [
            dict(
                name=v.name,
                value=v.value,
                read_only=False,
                config_source=v.source,
                is_sensitive=False,
            )
            for v in self.topics.configs.describe(res.topic_id, res.name, res.configs)
        ]

    def _creatable(self, t: Any) -> tuple[int, int, dict[str, str]]:
        """(partitions, replication factor, config overrides) of a CreateTopics entry, checked."""
        config = self.config
        count = t.num_partitions
        if t.assignments:
            if count != -1 or t.replication_factor != -1:
                raise TopicError(
                    ErrorCode.invalid_request,
                    "both partition assignments and a partition count were given",
                )
            count = len(t.assignments)
            for a in t.assignments:
                if list(a.broker_ids) != [self.node_id]:
                    raise TopicError(
                        ErrorCode.invalid_replica_assignment,
                        f"replicas {_short_list(a.broker_ids)} are not this single node",
                    )
            if sorted(a.partition_index for a in t.assignments) != list(range(count)):
                raise TopicError(
                    ErrorCode.invalid_replica_assignment,
                    "assigned partitions are not 0..n-1",
                )
        if count == -1:
            count = config["num.partitions"]
        rf = t.replication_factor
        if rf == -1:
            rf = config["default.replication.factor"]
        if rf < 1:
            raise TopicError(
                ErrorCode.invalid_replication_factor, "replication factor must be at least 1"
            )
        if rf > 1:
            raise TopicError(
                ErrorCode.invalid_replication_factor,
                f"replication factor {rf} is larger than the 1 available broker",
            )
        if count < 1:
            raise TopicError(ErrorCode.invalid_partitions, "number of partitions must be at least 1")
        try:
            overrides = check_overrides((c.name, c.value) for c in t.configs)
        except ConfigProblem as e:
            raise TopicError(ErrorCode.invalid_config, str(e)) from None
        return count, rf, overrides  # an internal topic's name: reserve_topic refuses it

    async def _run_all(
        self, reserved: list[tuple[dict[str, Any], Reservation]], timeout: Any
    ) -> list[tuple[dict[str, Any], Topic | tuple[int, str]]]:
        """Start every reserved change and wait for them (at most ``timeout`` if positive);
        each entry's outcome is its topic or (error code, message)."""
        if not reserved:
            return []
        futures = [self.topics.start(res) for _, res in reserved]
        timeout_ms = to_millis(timeout)
        await asyncio.wait(
            [asyncio.shield(f) for f in futures],
            timeout=timeout_ms / 1000.0 if timeout_ms > 0 else None,
        )
        results: list[tuple[dict[str, Any], Topic | tuple[int, str]]] = []
        for (entry, _), fut in zip(reserved, futures, strict=True):
            if not fut.done():
                results.append(
                    (entry, (ErrorCode.request_timed_out, "the change is still in progress"))
                )
                continue
            error = fut.exception()
            if isinstance(error, TopicError):
                results.append((entry, (error.code, str(error))))
            elif error is not None:
                log.error("creating partitions of %s failed", entry["name"], exc_info=error)
                results.append((entry, (ErrorCode.unknown_server_error, "internal error")))
            else:
                results.append((entry, fut.result()))
        return results

    # DeleteTopics ---------------------------------------------------------------------------------
    async def delete_topics(self, ctx: RequestContext, req: Any) -> Any:
        """Judged in request order on the event loop, where each topic leaves the registry at
        once (``TopicStore.retire``); their storage is then deleted together in a worker
        thread (one checkpoint write for all), and the answer comes once that is durable."""
        out = []
        retired: list[tuple[dict[str, Any], Topic]] = []
        if ctx.version >= 6:
            items = [(t.name, t.topic_id) for t in req.topics]
        else:
            items = [(name, None) for name in req.topic_names]
        named = Counter(name for name, _ in items if name is not None)
        for name, topic_id in items:
            entry: dict[str, Any] = dict(
                name=name, topic_id=topic_id or ZERO_UUID, error_code=0, error_message=None
            )
            try:
                if name is not None and named[name] > 1:  # as Kafka: none of them is deleted
                    raise TopicError(ErrorCode.invalid_request, "Duplicate topic name.")
                if name is None and topic_id is not None:
                    topic = self.topics.by_id.get(topic_id)
                    if topic is None:
                        raise TopicError(ErrorCode.unknown_topic_id, f"no topic with id {topic_id}")
                    name = topic.name
                    entry["name"] = name
                if name is None:
                    raise TopicError(ErrorCode.invalid_request, "neither name nor id given")
                if any(t.name == name for _, t in retired):  # named once and by id once
                    raise TopicError(ErrorCode.invalid_request, "Duplicate topic name.")
                if not ctx.allowed(Operation.DELETE, _TOPIC, name):
                    raise _refused("DELETE")
                await self._settled(name)  # a change under way (or a deletion) finishes first
                topic = self.topics.retire(name)
                entry["topic_id"] = topic.topic_id
                retired.append((entry, topic))
            except TopicError as e:
                entry.update(error_code=e.code, error_message=str(e))
            out.append(entry)
        if retired:
            failed = await self.topics.erase([topic for _, topic in retired])
            for entry, topic in retired:
                error = failed.get(topic.name)
                if error is not None:
                    entry.update(error_code=error.code, error_message=str(error))
        await asyncio.to_thread(self.topics.remove_deleted)  # the files, off the event loop
        return ctx.respond(throttle_time=0, responses=out)

    async def _settled(self, name: str) -> None:
        """Wait until ``name`` has no change under way (whatever its outcome)."""
        while True:
            res = self.topics.pending(name)
            if res is None:
                return
            if res.done is None:  # reserved by a synchronous change: cannot be waited on
                raise TopicError(ErrorCode.invalid_request, "the topic is being changed")
            await asyncio.wait([asyncio.shield(res.done)])

    # CreatePartitions -----------------------------------------------------------------------------
    async def create_partitions(self, ctx: RequestContext, req: Any) -> Any:
        """Like CreateTopics: judged in request order, created off the event loop. A topic
        with a change under way is judged once that change is done."""
        out: list[dict[str, Any]] = []
        reserved: list[tuple[dict[str, Any], Reservation]] = []
        in_request = 0
        for t in req.topics:
            entry: dict[str, Any] = dict(name=t.name, error_code=0, error_message=None)
            out.append(entry)
            try:
                if not ctx.allowed(Operation.ALTER, _TOPIC, t.name):
                    raise _refused("ALTER")
                if t.name in INTERNAL_TOPICS:
                    raise TopicError(
                        ErrorCode.invalid_request, f"{t.name} cannot grow at run time"
                    )
                for a in t.assignments or ():
                    if list(a.broker_ids) != [self.node_id]:
                        raise TopicError(
                            ErrorCode.invalid_replica_assignment,
                            f"replicas {_short_list(a.broker_ids)} are not this single node",
                        )
                if self.topics.pending(t.name) is not None:
                    if any(e["name"] == t.name for e, _ in reserved):
                        raise TopicError(
                            ErrorCode.invalid_request, "the topic appears twice in the request"
                        )
                    await self._settled(t.name)
                res = self.topics.reserve_partitions(t.name, t.count, in_request=in_request)
            except TopicError as e:
                entry.update(error_code=e.code, error_message=str(e))
                continue
            in_request += res.count
            reserved.append((entry, res))
        if req.validate_only:
            for _, res in reserved:
                self.topics.release(res)
            return ctx.respond(throttle_time=0, results=out)
        for entry, outcome in await self._run_all(reserved, req.timeout):
            if not isinstance(outcome, Topic):
                entry.update(error_code=outcome[0], error_message=outcome[1])
        return ctx.respond(throttle_time=0, results=out)


def _short_list(ids: Any) -> str:
    """A list of broker ids from a request, for a message: at most a few of them."""
    items = list(ids)
    text = str(items[:5])
    return text if len(items) <= 5 else text[:-1] + f", ... ({len(items)} ids)]"
