"""Version-independent requests and responses of the share-group APIs: ShareGroupHeartbeat (76)
and ShareGroupDescribe (77), and the group coordinator's part of the share offsets admin APIs
(90-92, coordinator/share/offsets.py). The broker decodes the wire versions into these and
encodes the answers back; partitions travel as ``((topic id, (partition, ...)), ...)``."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from kcoord.coordinator.consumer.records import TopicPartitions
from kcoord.coordinator.consumer.topics import TopicId


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


# ---- the share offsets admin APIs (coordinator/share/offsets.py) ---------------------------------


@dataclass(frozen=True, slots=True)
class InitializedRead:
    group_id: str


@dataclass(frozen=True, slots=True)
class Initialized:
    """The topic partitions with share state in a group (record 15): topic id -> (name,
    partitions); or the routing error."""

    error: int
    topics: Mapping[TopicId, tuple[str, frozenset[int]]]


@dataclass(frozen=True, slots=True)
class OffsetsAlter:
    """The topics of an AlterShareGroupOffsets the broker lets through: (topic name,
    ((partition, start offset), ...)) each."""

    group_id: str
    topics: tuple[tuple[str, tuple[tuple[int, int], ...]], ...]


@dataclass(frozen=True, slots=True)
class PartitionResult:
    partition: int
    error: int = 0
    message: str | None = None


@dataclass(frozen=True, slots=True)
class TopicResult:
    """One topic of an answer: its partitions' results (alter), or its own error (delete)."""

    name: str
    topic_id: TopicId | None
    partitions: tuple[PartitionResult, ...] = ()
    error: int = 0
    message: str | None = None


@dataclass(frozen=True, slots=True)
class AlterPlan:
    """The coordinator's answer to an alter: a group-level error, or each topic's result and
    the share state to set: (topic id, partition, start offset) each."""

    error: int
    message: str | None = None
    topics: tuple[TopicResult, ...] = ()
    initialize: tuple[tuple[TopicId, int, int], ...] = ()


@dataclass(frozen=True, slots=True)
class OffsetsDeleteCheck:
    group_id: str
    topic_names: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class DeletePlan:
    """The coordinator's answer to a delete: a group-level error, or the topics refused and
    the share state to delete: (topic id, name, partitions) each."""

    error: int
    message: str | None = None
    refused: tuple[TopicResult, ...] = ()
    delete: tuple[tuple[TopicId, str, tuple[int, ...]], ...] = ()


@dataclass(frozen=True, slots=True)
class OffsetsDeleted:
    """The share state of these topics is deleted: take them out of record 15."""

    group_id: str
    topic_ids: tuple[TopicId, ...]


@dataclass(frozen=True, slots=True)
class OffsetsDeletedResponse:
    error: int


ShareOffsetsRequest = InitializedRead | OffsetsAlter | OffsetsDeleteCheck | OffsetsDeleted
ShareOffsetsResponse = Initialized | AlterPlan | DeletePlan | OffsetsDeletedResponse
