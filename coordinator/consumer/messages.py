"""Version-independent requests and responses of the consumer-group (KIP-848) APIs:
ConsumerGroupHeartbeat (68) and ConsumerGroupDescribe (69).

As in :mod:`coordinator.messages`, the broker decodes any wire version into these and encodes
the answers back; partitions travel as ``((topic id, (partition, ...)), ...)``.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass

from kcoord.coordinator.consumer.records import TopicPartitions

__all__ = [
    "ConsumerGroupDescribeRequest",
    "ConsumerGroupDescribeResponse",
    "ConsumerGroupHeartbeatRequest",
    "ConsumerGroupHeartbeatResponse",
    "DescribedConsumerGroup",
    "DescribedConsumerMember",
    "DescribedPartitions",
    "TopicPartitions",
]


@dataclass(frozen=True, slots=True)
class ConsumerGroupHeartbeatRequest:
    """Null (None) fields and -1 mean "unchanged since the last heartbeat"."""

    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    topic_partitions: TopicPartitions | None = None
    client_id: str = ""
    client_host: str = ""
    version: int = 1
    describable: Callable[[str], bool] | None = None
    """Whether the request's principal may DESCRIBE a topic: the group's regexes resolve only to
    topics it allows. None: no authorizer, every topic."""


@dataclass(frozen=True, slots=True)
class ConsumerGroupHeartbeatResponse:
    """``assignment`` None: unchanged (sent only on a full request or when it changed)."""

    error: int
    error_message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: TopicPartitions | None = None


@dataclass(frozen=True, slots=True)
class ConsumerGroupDescribeRequest:
    group_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class DescribedPartitions:
    topic_id: uuid.UUID
    topic_name: str
    partitions: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class DescribedConsumerMember:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    assignment: tuple[DescribedPartitions, ...]
    target_assignment: tuple[DescribedPartitions, ...]
    member_type: int = 1
    """v1: 1 consumer protocol, 0 classic protocol, -1 unknown."""


@dataclass(frozen=True, slots=True)
class DescribedConsumerGroup:
    error: int
    error_message: str | None
    group_id: str
    state: str = "Dead"
    group_epoch: int = 0
    assignment_epoch: int = 0
    assignor_name: str = ""
    members: tuple[DescribedConsumerMember, ...] = ()


@dataclass(frozen=True, slots=True)
class ConsumerGroupDescribeResponse:
    groups: tuple[DescribedConsumerGroup, ...]
