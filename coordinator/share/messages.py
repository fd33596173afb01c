"""Version-independent requests and responses of the share-group APIs: ShareGroupHeartbeat (76)
and ShareGroupDescribe (77). The broker decodes the wire versions into these and encodes the
answers back; partitions travel as ``((topic id, (partition, ...)), ...)``."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from kcoord.coordinator.consumer.records import TopicPartitions


@dataclass(frozen=True, slots=True)
class ShareGroupHeartbeatRequest:
    group_id: str
    member_id: str
    member_epoch: int
    rack_id: str | None = None
    subscribed_topic_names: tuple[str, ...] | None = None
    client_id: str = ""
    client_host: str = ""


@dataclass(frozen=True, slots=True)
class ShareGroupHeartbeatResponse:
    """``assignment`` None: unchanged (sent when the member joins or its assignment moved)."""

    error: int
    error_message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: TopicPartitions | None = None


@dataclass(frozen=True, slots=True)
class ShareGroupDescribeRequest:
    group_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class DescribedSharePartitions:
    topic_id: uuid.UUID
    topic_name: str
    partitions: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class DescribedShareMember:
    member_id: str
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    assignment: tuple[DescribedSharePartitions, ...]


@dataclass(frozen=True, slots=True)
class DescribedShareGroup:
    error: int
    error_message: str | None
    group_id: str
    state: str = ""
    group_epoch: int = 0
    assignment_epoch: int = 0
    assignor_name: str = ""
    members: tuple[DescribedShareMember, ...] = ()


@dataclass(frozen=True, slots=True)
class ShareGroupDescribeResponse:
    groups: tuple[DescribedShareGroup, ...]
