"""Version-independent requests and responses of the classic group and offset APIs.

The broker decodes a JoinGroup/SyncGroup/Heartbeat/LeaveGroup/ListGroups/DescribeGroups/
DeleteGroups/OffsetCommit/OffsetFetch/OffsetDelete request of any wire version into one of these frozen dataclasses, hands it to the
owning :class:`coordinator.shard.GroupShard`, and encodes the response dataclass it gets back
into the negotiated version (filling defaults for fields the version lacks). Error codes are
plain ints from Kafka's table (:class:`protocol.errors.ErrorCode` members are ints).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import NamedTuple

from kcoord.coordinator.consumer.messages import (
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatResponse,
)
from kcoord.coordinator.share.messages import (
    ShareGroupDescribeResponse,
    ShareGroupHeartbeatResponse,
    ShareOffsetsResponse,
)

__all__ = [
    "DeleteGroupResult",
    "DeleteGroupsRequest",
    "DeleteGroupsResponse",
    "DescribeGroupsRequest",
    "DescribeGroupsResponse",
    "DescribedGroup",
    "DescribedMember",
    "FetchedOffset",
    "HeartbeatRequest",
    "HeartbeatResponse",
    "JoinGroupRequest",
    "JoinGroupResponse",
    "JoinMember",
    "LeaveGroupRequest",
    "LeaveGroupResponse",
    "LeaveMember",
    "LeaveMemberResult",
    "ListGroupsRequest",
    "ListGroupsResponse",
    "ListedGroup",
    "OffsetCommitPartition",
    "OffsetCommitRequest",
    "OffsetCommitResponse",
    "OffsetDeleteRequest",
    "OffsetDeleteResponse",
    "OffsetFetchRequest",
    "OffsetFetchResponse",
    "Request",
    "Response",
    "SyncGroupRequest",
    "SyncGroupResponse",
]


# --------------------------------------------------------------------------------------------
# Requests


@dataclass(frozen=True, slots=True)
class JoinGroupRequest:
    """JoinGroup. ``member_id`` is "" for a member without an id.

    ``require_known_member_id`` is true for JoinGroup v4+ (D4; the shard applies it only when
    there is no ``group_instance_id``). ``supports_skip_assignment`` is true for v9+: a static
    leader replaced in a Stable group is then told it leads, with ``skip_assignment`` set,
    instead of being given the old leader id (Kafka 3.x behaviour).
    """

    group_id: str
    member_id: str
    group_instance_id: str | None
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    client_id: str
    client_host: str
    require_known_member_id: bool
    reason: str | None = None
    supports_skip_assignment: bool = False


@dataclass(frozen=True, slots=True)
class SyncGroupRequest:
    """SyncGroup. ``protocol_type``/``protocol_name`` are None before v5."""

    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None
    protocol_type: str | None
    protocol_name: str | None
    assignments: tuple[tuple[str, bytes], ...]


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None


@dataclass(frozen=True, slots=True)
class LeaveMember:
    """One leaving member; ``member_id`` "" with an instance id removes by instance id."""

    member_id: str
    group_instance_id: str | None = None
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class LeaveGroupRequest:
    """LeaveGroup; v0-v2 carry exactly one member."""

    group_id: str
    members: tuple[LeaveMember, ...]


@dataclass(frozen=True, slots=True)
class ListGroupsRequest:
    """ListGroups; an empty filter matches everything. Both filters are case-insensitive."""

    states_filter: frozenset[str] = frozenset()
    types_filter: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class DescribeGroupsRequest:
    group_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class DeleteGroupsRequest:
    group_ids: tuple[str, ...]


class OffsetCommitPartition(NamedTuple):
    """One partition of an OffsetCommit. ``leader_epoch`` is -1 when unknown (v0-v5);
    ``metadata`` None is stored as ""."""

    partition: int
    offset: int
    leader_epoch: int
    metadata: str | None


@dataclass(frozen=True, slots=True)
class OffsetCommitRequest:
    """OffsetCommit. Standalone (simple) consumers and v0-style commits use
    ``generation_id`` -1 and ``member_id`` "". ``topics`` keeps the request's order:
    ((topic, (partition, ...)), ...). The v1 commit timestamp is not carried (the commit time
    is the coordinator's clock, as in Kafka 4, which no longer serves v0-v1)."""

    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None
    topics: tuple[tuple[str, tuple[OffsetCommitPartition, ...]], ...]
    api_version: int = -1
    """The wire version (-1: unknown); a consumer-protocol member must commit with v9+."""
    topic_ids: tuple[tuple[str, uuid.UUID], ...] = ()
    """(name, id) of the topics a v10 commit named by id: their records carry the id."""
    retention_ms: int = -1
    """The v2-v4 RetentionTimeMs: -1 (the default, and every other version) gives the
    offsets no expire timestamp of their own; otherwise they expire this long after the
    commit (Kafka's OffsetMetadataManager.expireTimestampMs)."""


@dataclass(frozen=True, slots=True)
class OffsetFetchRequest:
    """OffsetFetch for one group (v8+ batches groups: the broker sends one per group).
    ``topics`` None means every committed offset of the group (v2+). ``require_stable``
    (v7+): a partition with pending transactional offsets is answered UNSTABLE_OFFSET_COMMIT."""

    group_id: str
    topics: tuple[tuple[str, tuple[int, ...]], ...] | None
    require_stable: bool = False


@dataclass(frozen=True, slots=True)
class OffsetDeleteRequest:
    group_id: str
    topics: tuple[tuple[str, tuple[int, ...]], ...]


@dataclass(frozen=True, slots=True)
class TxnOffsetCommitRequest:
    """TxnOffsetCommit (KIP-98/447): offsets committed inside ``producer_id``'s transaction,
    pending until its COMMIT marker. v0-v2 carry no member: ``generation_id`` -1,
    ``member_id`` "". ``topics`` as in :class:`OffsetCommitRequest`."""

    group_id: str
    transactional_id: str
    producer_id: int
    producer_epoch: int
    generation_id: int
    member_id: str
    group_instance_id: str | None
    topics: tuple[tuple[str, tuple[OffsetCommitPartition, ...]], ...]
    api_version: int = -1


@dataclass(frozen=True, slots=True)
class TxnMarkerRequest:
    """A COMMIT or ABORT marker of ``producer_id``'s transaction for one shard's partition
    (what the transaction coordinator's marker writer asks of the group coordinator)."""

    producer_id: int
    producer_epoch: int
    commit: bool
    coordinator_epoch: int


@dataclass(frozen=True, slots=True)
class TxnMarkerResponse:
    error: int


Request = (
    JoinGroupRequest
    | SyncGroupRequest
    | HeartbeatRequest
    | LeaveGroupRequest
    | ListGroupsRequest
    | DescribeGroupsRequest
    | DeleteGroupsRequest
    | OffsetCommitRequest
    | OffsetFetchRequest
    | OffsetDeleteRequest
    | TxnOffsetCommitRequest
    | TxnMarkerRequest
)


# --------------------------------------------------------------------------------------------
# Responses


@dataclass(frozen=True, slots=True)
class JoinMember:
    """A member as the leader sees it: metadata is for the group's selected protocol (B9)."""

    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinGroupResponse:
    """JoinGroup result. Errors follow D13: generation -1, no protocol, leader "", no members."""

    error: int
    generation_id: int
    protocol_type: str | None
    protocol_name: str | None
    leader: str
    member_id: str
    members: tuple[JoinMember, ...] = ()
    skip_assignment: bool = False


@dataclass(frozen=True, slots=True)
class SyncGroupResponse:
    error: int
    protocol_type: str | None
    protocol_name: str | None
    assignment: bytes


@dataclass(frozen=True, slots=True)
class HeartbeatResponse:
    error: int


class LeaveMemberResult(NamedTuple):
    member_id: str
    group_instance_id: str | None
    error: int


@dataclass(frozen=True, slots=True)
class LeaveGroupResponse:
    """Top-level ``error`` plus one result per requested member (v3+). For v0-v2 the broker
    reports the single member's error at the top level, as Kafka does."""

    error: int
    members: tuple[LeaveMemberResult, ...]


class ListedGroup(NamedTuple):
    """(group_id, protocol_type, state, group_type): ListGroups v5's type is "classic" or
    "consumer" (KIP-848)."""

    group_id: str
    protocol_type: str
    state: str
    group_type: str = "classic"


@dataclass(frozen=True, slots=True)
class ListGroupsResponse:
    error: int
    groups: tuple[ListedGroup, ...]


@dataclass(frozen=True, slots=True)
class DescribedMember:
    """Metadata and assignment are empty unless the group is Stable (Kafka's summary)."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class DescribedGroup:
    error: int
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: tuple[DescribedMember, ...]
    error_message: str | None = None
    """DescribeGroups v6+: why ``error`` (e.g. a consumer group is not a classic group)."""


@dataclass(frozen=True, slots=True)
class DescribeGroupsResponse:
    groups: tuple[DescribedGroup, ...]


class DeleteGroupResult(NamedTuple):
    group_id: str
    error: int


@dataclass(frozen=True, slots=True)
class DeleteGroupsResponse:
    results: tuple[DeleteGroupResult, ...]


@dataclass(frozen=True, slots=True)
class OffsetCommitResponse:
    """Per requested topic, ((partition, error), ...), in the request's order. OffsetCommit
    has no top-level error: group-level failures are repeated for every partition."""

    topics: tuple[tuple[str, tuple[tuple[int, int], ...]], ...]


class FetchedOffset(NamedTuple):
    """One partition of an OffsetFetch answer. A partition without a committed offset
    comes back as offset -1, leader epoch -1, metadata "" and error NONE (as in Kafka)."""

    partition: int
    offset: int
    leader_epoch: int
    metadata: str | None
    error: int


@dataclass(frozen=True, slots=True)
class OffsetFetchResponse:
    """``error`` is the group-level error (v2+; v8+ per group). When it is not NONE,
    ``topics`` is empty; for v0/v1, which have no top-level error, the broker repeats it
    on every requested partition (with offset -1), as Kafka does."""

    error: int
    topics: tuple[tuple[str, tuple[FetchedOffset, ...]], ...]


@dataclass(frozen=True, slots=True)
class OffsetDeleteResponse:
    """Group-level ``error`` (then ``topics`` is empty) or per requested topic
    ((partition, error), ...) in the request's order."""

    error: int
    topics: tuple[tuple[str, tuple[tuple[int, int], ...]], ...]


@dataclass(frozen=True, slots=True)
class DeletedTopic:
    """A deleted topic: its name, id, partition count (partitions 0 to count - 1) and when
    it was deleted."""

    name: str
    topic_id: uuid.UUID
    partitions: int
    deleted_at_ms: int


@dataclass(frozen=True, slots=True)
class TopicsDeletedRequest:
    """Topics deleted (Kafka's onPartitionsDeleted), for one slice of the shard's groups:
    those of ``group_ids`` from index ``start`` on, as many as one operation's budget of
    ``max_offsets`` offsets visited allows."""

    topics: tuple[DeletedTopic, ...]
    group_ids: tuple[str, ...]
    start: int = 0
    max_offsets: int = 2_000


@dataclass(frozen=True, slots=True)
class TopicsDeletedResponse:
    """``error`` NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS when the shard does not serve
    (nothing done); else ``next`` the index in ``group_ids`` where the next slice starts
    (their length: done) and ``tombstones`` how many this slice wrote."""

    error: int
    next: int
    tombstones: int


Response = (
    JoinGroupResponse
    | SyncGroupResponse
    | HeartbeatResponse
    | LeaveGroupResponse
    | ListGroupsResponse
    | DescribeGroupsResponse
    | DeleteGroupsResponse
    | OffsetCommitResponse
    | OffsetFetchResponse
    | OffsetDeleteResponse
    | ConsumerGroupHeartbeatResponse
    | ConsumerGroupDescribeResponse
    | ShareGroupHeartbeatResponse
    | ShareGroupDescribeResponse
    | ShareOffsetsResponse
    | TxnMarkerResponse
    | TopicsDeletedResponse
)
