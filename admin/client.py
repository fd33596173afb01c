"""The admin calls the commands make: confluent-kafka's AdminClient, plus OffsetDelete.

:class:`Admin` wraps the few AdminClient calls the commands need and turns their answers into
plain values (:class:`Group`, :class:`Member`, offsets by ``(topic, partition)``); a failure is
an :class:`AdminError`. OffsetDelete, which the AdminClient does not expose, is one request on
a fresh connection to the group's coordinator, encoded and decoded with ``protocol/``'s codecs.
confluent-kafka is imported in the calls, not when this module is.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from .security import connect

# librdkafka's ConsumerGroupState names -> Kafka's state names (as ListGroups reports them).
_STATE_NAMES = {
    "UNKNOWN": "Unknown",
    "PREPARING_REBALANCING": "PreparingRebalance",
    "COMPLETING_REBALANCING": "CompletingRebalance",
    "STABLE": "Stable",
    "DEAD": "Dead",
    "EMPTY": "Empty",
    "ASSIGNING": "Assigning",
    "RECONCILING": "Reconciling",
}
KAFKA_STATES = (
    "Empty",
    "PreparingRebalance",
    "CompletingRebalance",
    "Assigning",
    "Reconciling",
    "Stable",
    "Dead",
)


class AdminError(Exception):
    """A refusal or failure to report as ``Error: ...`` with exit status 1."""


@dataclass(frozen=True, slots=True)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    host: str
    assignment: tuple[tuple[str, int], ...]
    epoch: int | None = None
    """A consumer-protocol (KIP-848) member's epoch; None for classic members."""
    target: tuple[tuple[str, int], ...] | None = None
    """A consumer-protocol member's target assignment; None for classic members."""


@dataclass(frozen=True, slots=True)
class Group:
    group_id: str
    state: str
    assignor: str
    coordinator: tuple[int, str, int]  # id, host, port
    members: tuple[Member, ...]
    type: str = "classic"
    """"classic" or "consumer" (KIP-848)."""
    group_epoch: int | None = None
    assignment_epoch: int | None = None
    """A consumer group's group epoch and target assignment epoch; None for classic."""


class Admin:
    """The few admin calls the commands need, over confluent-kafka's AdminClient."""

    def __init__(self, bootstrap: str, timeout: float, security: dict[str, str] | None = None) -> None:
        from confluent_kafka.admin import AdminClient

        self.timeout = timeout
        self.bootstrap = bootstrap
        self.security = dict(security or {})
        """Client security settings (``--command-config``), for the AdminClient and our own
        connections alike."""
        self.client = AdminClient(
            {
                **self.security,
                "bootstrap.servers": bootstrap,
                "socket.timeout.ms": int(timeout * 1000),
                "log_level": 2,  # librdkafka's own connection chatter stays out of the output
            }
        )

    def wait(self, future: Any, what: str) -> Any:
        """The result of an AdminClient future, or an AdminError saying what failed."""
        try:
            return future.result(timeout=self.timeout)
        except Exception as e:
            raise AdminError(f"{what}: {_reason(e)}") from None

    def list_groups(self) -> list[tuple[str, str, str]]:
        """(group id, state, type) of every group, by group id."""
        result = self.wait(
            self.client.list_consumer_groups(request_timeout=self.timeout), "listing groups"
        )
        if result.errors:
            raise AdminError(f"listing groups: {_reason(result.errors[0])}")
        return sorted(
            (g.group_id, _state_name(g.state), _type_name(getattr(g, "type", None)))
            for g in result.valid
        )

    def describe(self, group_id: str) -> Group:
        futures = self.client.describe_consumer_groups([group_id], request_timeout=self.timeout)
        d = self.wait(futures[group_id], f"describing group {group_id!r}")
        members = tuple(
            Member(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                host=m.host,
                assignment=tuple(
                    sorted((tp.topic, tp.partition) for tp in m.assignment.topic_partitions)
                )
                if m.assignment is not None
                else (),
            )
            for m in d.members
        )
        c = d.coordinator
        group = Group(
            group_id,
            _state_name(d.state),
            d.partition_assignor or "",
            (c.id, c.host, c.port) if c is not None else (-1, "", -1),
            members,
            _type_name(getattr(d, "type", None)),
        )
        if group.type == "consumer" and c is not None:
            group = self._with_epochs(group)
        return group

    def _with_epochs(self, group: Group) -> Group:
        """A consumer group's epochs and targets, which the AdminClient does not show: one
        ConsumerGroupDescribe to its coordinator."""
        from kcoord.protocol.apis import ApiKey

        _cid, host, port = group.coordinator
        r = _wire_request(
            host,
            port,
            self.timeout,
            ApiKey.CONSUMER_GROUP_DESCRIBE,
            0,
            security=self.security,
            group_ids=[group.group_id],
            include_authorized_operations=False,
        )
        d = r.groups[0]
        if d.error_code:
            return group
        details = {
            m.member_id: (
                m.member_epoch,
                tuple(
                    sorted(
                        (t.topic_name, p)
                        for t in m.target_assignment.topic_partitions
                        for p in t.partitions
                    )
                ),
            )
            for m in d.members
        }
        members = tuple(
            replace(m, epoch=details[m.member_id][0], target=details[m.member_id][1])
            if m.member_id in details
            else m
            for m in group.members
        )
        return replace(
            group, members=members, group_epoch=d.group_epoch, assignment_epoch=d.assignment_epoch
        )

    def committed(self, group_id: str) -> dict[tuple[str, int], int]:
        from confluent_kafka import ConsumerGroupTopicPartitions

        futures = self.client.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group_id)], request_timeout=self.timeout
        )
        result = self.wait(futures[group_id], f"fetching offsets of group {group_id!r}")
        return {
            (tp.topic, tp.partition): tp.offset
            for tp in result.topic_partitions or []
            if tp.offset >= 0 and tp.error is None
        }

    def list_offsets(self, partitions: Iterable[tuple[str, int]], spec: Any) -> dict[tuple[str, int], int]:
        """Offsets by ListOffsets: ``spec`` is an OffsetSpec (earliest, latest, a timestamp)."""
        from confluent_kafka import TopicPartition

        request = {TopicPartition(t, p): spec for t, p in partitions}
        if not request:
            return {}
        futures = self.client.list_offsets(request, request_timeout=self.timeout)
        return {
            (tp.topic, tp.partition): self.wait(f, f"listing offsets of {tp.topic}-{tp.partition}").offset
            for tp, f in futures.items()
        }

    def log_end_offsets(self, partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], int]:
        from confluent_kafka.admin import OffsetSpec

        return self.list_offsets(partitions, OffsetSpec.latest())

    def log_start_offsets(self, partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], int]:
        from confluent_kafka.admin import OffsetSpec

        return self.list_offsets(partitions, OffsetSpec.earliest())

    def topic_configs(self, topic: str) -> list[tuple[str, str, str]]:
        """(name, value, source name) of each config of ``topic`` (DescribeConfigs)."""
        return self._configs("TOPIC", topic, f"topic {topic!r}")

    def group_configs(self, group_id: str) -> list[tuple[str, str, str]]:
        """(name, value, source name) of each config of group ``group_id`` (DescribeConfigs of
        Kafka's GROUP config resource)."""
        return self._configs("GROUP", group_id, f"group {group_id!r}")

    def _configs(self, kind: str, name: str, what: str) -> list[tuple[str, str, str]]:
        from confluent_kafka.admin import ConfigResource, ConfigSource, ResourceType

        resource = ConfigResource(ResourceType[kind], name)
        futures = self.client.describe_configs([resource], request_timeout=self.timeout)
        entries = self.wait(futures[resource], f"describing the configs of {what}")
        return sorted((e.name, e.value, ConfigSource(e.source).name) for e in entries.values())

    def alter_topic_configs(self, topic: str, changes: list[tuple[str, str, str | None]]) -> None:
        """IncrementalAlterConfigs of ``topic``: (operation, name, value) each, operation one
        of set, delete, append, subtract."""
        self._alter_configs("TOPIC", topic, changes, f"topic {topic!r}")

    def alter_group_configs(self, group_id: str, changes: list[tuple[str, str, str | None]]) -> None:
        """IncrementalAlterConfigs of group ``group_id``: (operation, name, value) each,
        operation set or delete."""
        self._alter_configs("GROUP", group_id, changes, f"group {group_id!r}")

    def _alter_configs(
        self, kind: str, name: str, changes: list[tuple[str, str, str | None]], what: str
    ) -> None:
        from confluent_kafka.admin import (
            AlterConfigOpType,
            ConfigEntry,
            ConfigResource,
            ResourceType,
        )

        entries = [
            ConfigEntry(key, value, incremental_operation=AlterConfigOpType[op.upper()])
            for op, key, value in changes
        ]
        resource = ConfigResource(ResourceType[kind], name, incremental_configs=entries)
        futures = self.client.incremental_alter_configs([resource], request_timeout=self.timeout)
        self.wait(futures[resource], f"changing the configs of {what}")

    def topic_partitions(self, topic: str) -> list[int]:
        from confluent_kafka import TopicCollection

        futures = self.client.describe_topics(TopicCollection([topic]), request_timeout=self.timeout)
        d = self.wait(futures[topic], f"describing topic {topic!r}")
        return sorted(p.id for p in d.partitions)

    def alter(self, group_id: str, offsets: dict[tuple[str, int], int]) -> None:
        from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

        request = ConsumerGroupTopicPartitions(
            group_id, [TopicPartition(t, p, o) for (t, p), o in sorted(offsets.items())]
        )
        futures = self.client.alter_consumer_group_offsets(
            [request], request_timeout=self.timeout
        )
        result = self.wait(futures[group_id], f"committing offsets of group {group_id!r}")
        failed = [tp for tp in result.topic_partitions or [] if tp.error is not None]
        if failed:
            tp = failed[0]
            raise AdminError(f"committing {tp.topic}-{tp.partition}: {_reason(tp.error)}")

    def delete_groups(self, group_ids: list[str]) -> dict[str, str | None]:
        """Group id -> None if deleted, else the reason."""
        futures = self.client.delete_consumer_groups(group_ids, request_timeout=self.timeout)
        out: dict[str, str | None] = {}
        for gid, f in futures.items():
            try:
                f.result(timeout=self.timeout)
                out[gid] = None
            except Exception as e:
                out[gid] = _reason(e)
        return out

    def delete_offsets(
        self, group: Group, partitions: Sequence[tuple[str, int]]
    ) -> tuple[int, dict[tuple[str, int], int]]:
        """OffsetDelete v0 to the group's coordinator: (group error, per-partition errors)."""
        from kcoord.protocol.apis import ApiKey

        _cid, host, port = group.coordinator
        if port < 0:
            raise AdminError(f"no coordinator known for group {group.group_id!r}")
        by_topic: dict[str, list[int]] = {}
        for t, p in partitions:
            by_topic.setdefault(t, []).append(p)
        r = _wire_request(
            host,
            port,
            self.timeout,
            ApiKey.OFFSET_DELETE,
            0,
            security=self.security,
            group_id=group.group_id,
            topics=[
                dict(name=t, partitions=[dict(partition_index=p) for p in ps])
                for t, ps in by_topic.items()
            ],
        )
        errors = {(t.name, p.partition_index): int(p.error_code) for t in r.topics for p in t.partitions}
        return int(r.error_code), errors


def _wire_request(
    host: str,
    port: int,
    timeout: float,
    api_key: int,
    version: int,
    security: dict[str, str] | None = None,
    **fields: Any,
) -> Any:
    """One request/response on a fresh connection, secured as ``security`` says."""
    try:
        with connect(host, port, timeout, security or {}, exchange) as sock:
            return exchange(sock, api_key, version, fields)
    except (OSError, ConnectionError) as e:
        raise AdminError(f"coordinator {host}:{port}: {e}") from None


def exchange(sock: socket.socket, api_key: int, version: int, fields: dict[str, Any]) -> Any:
    """Send one request on ``sock`` and decode its answer."""
    from kio.serial import entity_reader

    from kcoord.protocol.apis import is_flexible
    from kcoord.protocol.codec import response_type

    frame = exchange_raw(sock, api_key, version, fields)
    reader: Any = entity_reader(response_type(api_key, version))
    # The body starts after the correlation id (and the header's tagged fields, flexible;
    # ApiVersions answers keep header v0).
    flexible = is_flexible(api_key, version)
    return reader(frame, 5 if flexible and api_key != 18 else 4)[0]


def exchange_raw(sock: socket.socket, api_key: int, version: int, fields: dict[str, Any]) -> bytes:
    """Send one request on ``sock``; its answer's frame, undecoded (for the answers kio cannot
    read, e.g. a timestamp of -1)."""
    from kcoord.protocol.apis import is_flexible
    from kcoord.protocol.codec import encode_body, request_type
    from kcoord.protocol.responses import build

    body = encode_body(build(request_type(api_key, version), **fields))
    client_id = b"kcoord-admin"
    flexible = is_flexible(api_key, version)
    header = struct.pack(">hhih", api_key, version, 1, len(client_id)) + client_id
    if flexible:
        header += b"\x00"  # request header v2: no tagged fields
    sock.sendall(struct.pack(">i", len(header) + len(body)) + header + body)
    size = struct.unpack(">i", _recv_exact(sock, 4))[0]
    return _recv_exact(sock, size)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError("connection closed by the broker")
        out += chunk
    return bytes(out)


def _reason(e: Any) -> str:
    """A KafkaError (or an exception carrying one) as NAME: message."""
    err = e.args[0] if isinstance(e, Exception) and e.args else e
    if hasattr(err, "name") and hasattr(err, "str"):
        return f"{err.name()}: {err.str()}"
    return str(e)


def _type_name(group_type: Any) -> str:
    """librdkafka's ConsumerGroupType -> "classic" / "consumer" (as ListGroups v5 says)."""
    name = getattr(group_type, "name", None)
    return "consumer" if name == "CONSUMER" else "classic"


def _state_name(state: Any) -> str:
    name = getattr(state, "name", str(state))
    return _STATE_NAMES.get(name, name)
