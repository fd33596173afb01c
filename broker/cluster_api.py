"""Cluster-level APIs: ApiVersions, Metadata, CreateTopics, DeleteTopics, CreatePartitions.

One node owns every partition for now; ``Cluster`` describes the nodes from one place so
Metadata and FindCoordinator agree, and so several nodes can follow later.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from protocol.apis import SUPPORTED, ApiKey
from protocol.codec import (
    RawBody,
    decode_request_frame,
    encode_body,
    encode_response,
    response_type,
)
from protocol.errors import ErrorCode
from protocol.responses import build

from .connection import RequestContext
from .topics import OFFSETS_TOPIC, Topic, TopicError, topic_name_problem

if TYPE_CHECKING:
    from .app import Broker

ZERO_UUID = uuid.UUID(int=0)


class ClusterApi:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.topics = broker.topics
        self._api_versions_bodies: dict[int, RawBody] = {}
        self._max_elements: int = broker.config["socket.request.max.elements"]

    @property
    def node_id(self) -> int:
        return int(self.broker.config["node.id"])

    def brokers(self) -> list[dict[str, Any]]:
        host, port = self.broker.config.advertised
        return [dict(node_id=self.node_id, host=host, port=port, rack=None)]

    # ApiVersions ----------------------------------------------------------------------------------
    def api_versions(self, ctx: RequestContext, req: Any) -> Any:
        return self._api_versions_body(ctx.version)

    def api_versions_direct(self, frame: bytes, version: int, correlation_id: int) -> bytes:
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
        config = self.broker.config
        auto_create = config["auto.create.topics.enable"] and getattr(
            req, "allow_auto_topic_creation", True
        )
        requested = req.topics
        if requested is None or (ctx.version == 0 and not requested):
            wanted: list[tuple[str | None, uuid.UUID | None]] = [
                (name, None) for name in sorted(self.topics.topics)
            ]
        else:
            wanted = [(t.name, getattr(t, "topic_id", None)) for t in requested]
        topics_out = []
        for name, topic_id in wanted:
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
                    if auto_create and name != OFFSETS_TOPIC:
                        try:
                            topic = self.topics.create(name, config["num.partitions"])
                        except TopicError as e:
                            topics_out.append(self._topic_error(name, None, e.code))
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
        return ctx.respond(
            throttle_time=0,
            brokers=self.brokers(),
            cluster_id=self.broker.cluster_id,
            controller_id=self.node_id,
            topics=topics_out,
            cluster_authorized_operations=-2147483648,
        )

    def _describe(self, topic: Topic) -> dict[str, Any]:
        node = self.node_id
        return dict(
            error_code=0,
            name=topic.name,
            topic_id=topic.topic_id,
            is_internal=topic.internal,
            partitions=[
                dict(
                    error_code=0,
                    partition_index=i,
                    leader_id=node,
                    leader_epoch=0,
                    replica_nodes=[node],
                    isr_nodes=[node],
                    offline_replicas=[],
                )
                for i in range(len(topic.partitions))
            ],
            topic_authorized_operations=-2147483648,
        )

    @staticmethod
    def _topic_error(name: str | None, topic_id: uuid.UUID | None, code: int) -> dict[str, Any]:
        return dict(
            error_code=code,
            name=name,
            topic_id=topic_id or ZERO_UUID,
            is_internal=False,
            partitions=[],
            topic_authorized_operations=-2147483648,
        )

    # CreateTopics ---------------------------------------------------------------------------------
    def create_topics(self, ctx: RequestContext, req: Any) -> Any:
        config = self.broker.config
        out = []
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
            try:
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
                                f"replicas {list(a.broker_ids)} are not this single node",
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
                    raise TopicError(
                        ErrorCode.invalid_partitions, "number of partitions must be at least 1"
                    )
                segment_bytes = None
                for c in t.configs:
                    if c.name == "segment.bytes" and c.value is not None:
                        try:
                            segment_bytes = int(c.value)
                        except ValueError:
                            raise TopicError(
                                ErrorCode.invalid_config, f"segment.bytes {c.value!r} is not a number"
                            ) from None
                if t.name == OFFSETS_TOPIC:
                    raise TopicError(
                        ErrorCode.invalid_request, f"{OFFSETS_TOPIC} is created by the coordinator"
                    )
                topic = self.topics.create(
                    t.name, count, segment_bytes=segment_bytes, validate_only=req.validate_only
                )
                entry.update(num_partitions=count, replication_factor=rf)
                if topic is not None:
                    entry["topic_id"] = topic.topic_id
            except TopicError as e:
                entry.update(error_code=e.code, error_message=str(e))
            out.append(entry)
        return ctx.respond(throttle_time=0, topics=out)

    # DeleteTopics ---------------------------------------------------------------------------------
    def delete_topics(self, ctx: RequestContext, req: Any) -> Any:
        out = []
        if ctx.version >= 6:
            items = [(t.name, t.topic_id) for t in req.topics]
        else:
            items = [(name, None) for name in req.topic_names]
        for name, topic_id in items:
            entry: dict[str, Any] = dict(
                name=name, topic_id=topic_id or ZERO_UUID, error_code=0, error_message=None
            )
            try:
                if name is None and topic_id is not None:
                    topic = self.topics.by_id.get(topic_id)
                    if topic is None:
                        raise TopicError(ErrorCode.unknown_topic_id, f"no topic with id {topic_id}")
                    name = topic.name
                    entry["name"] = name
                if name is None:
                    raise TopicError(ErrorCode.invalid_request, "neither name nor id given")
                deleted = self.topics.delete(name)
                entry["topic_id"] = deleted.topic_id
            except TopicError as e:
                entry.update(error_code=e.code, error_message=str(e))
            out.append(entry)
        return ctx.respond(throttle_time=0, responses=out)

    # CreatePartitions -----------------------------------------------------------------------------
    def create_partitions(self, ctx: RequestContext, req: Any) -> Any:
        out = []
        for t in req.topics:
            entry: dict[str, Any] = dict(name=t.name, error_code=0, error_message=None)
            try:
                if t.name == OFFSETS_TOPIC:
                    raise TopicError(
                        ErrorCode.invalid_request, f"{OFFSETS_TOPIC} cannot grow at run time"
                    )
                for a in t.assignments or ():
                    if list(a.broker_ids) != [self.node_id]:
                        raise TopicError(
                            ErrorCode.invalid_replica_assignment,
                            f"replicas {list(a.broker_ids)} are not this single node",
                        )
                self.topics.add_partitions(t.name, t.count, validate_only=req.validate_only)
            except TopicError as e:
                entry.update(error_code=e.code, error_message=str(e))
            out.append(entry)
        return ctx.respond(throttle_time=0, results=out)
