"""The types the share partition, the share coordinator and the broker exchange (KIP-932).

Offsets are inclusive ranges ``first_offset .. last_offset`` as in Kafka's messages. The numeric
values of :class:`RecordState` and :class:`AckType` are Kafka's wire and record values.
"""

from __future__ import annotations

import base64
import uuid
from dataclasses import dataclass
from enum import IntEnum

from kcoord.protocol.javahash import partition_for


class RecordState(IntEnum):
    """The delivery state of an in-flight record (RecordState in Kafka). ACQUIRED is never
    persisted: a record acquired when the broker stopped is AVAILABLE after a restart."""

    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4


class AckType(IntEnum):
    """What a consumer says of a record (ShareFetch/ShareAcknowledge ``AcknowledgeTypes``)."""

    GAP = 0  # the offset holds no record the consumer could see (compacted, a control record)
    ACCEPT = 1  # processed: ACKNOWLEDGED
    RELEASE = 2  # give it back: AVAILABLE again (or ARCHIVED past the delivery limit)
    REJECT = 3  # unprocessable: ARCHIVED
    RENEW = 4  # keep the lock for another lock duration (ShareFetch v2, KIP-1222)


@dataclass(frozen=True, slots=True)
class StateBatch:
    """A run of offsets with one persisted state and delivery count (ShareSnapshotValue /
    ShareUpdateValue / WriteShareGroupState ``StateBatches``). ``delivery_state`` is a
    :class:`RecordState` value other than ACQUIRED."""

    first_offset: int
    last_offset: int
    delivery_state: int
    delivery_count: int


@dataclass(frozen=True, slots=True)
class PersistedState:
    """What the share coordinator holds of one share partition (ReadShareGroupState's answer):
    ``start_offset`` is the share-partition start offset (SPSO), -1 while not yet known (the
    share partition then starts from ``share.auto.offset.reset``); ``batches`` are the
    in-flight runs at or past it that are not simply AVAILABLE with no delivery, sorted,
    not overlapping."""

    state_epoch: int
    start_offset: int
    batches: tuple[StateBatch, ...] = ()
    leader_epoch: int = 0


UNINITIALIZED = PersistedState(state_epoch=0, start_offset=-1)
"""The state of a share partition the share coordinator has never heard of."""


@dataclass(frozen=True, slots=True)
class StateSummary:
    """What the share coordinator tells of one share partition without its batches
    (ReadShareGroupStateSummary's answer, what DescribeShareGroupOffsets reports):
    ``delivery_complete_count`` is KIP-1226's count of offsets at or past the start offset
    whose delivery is complete (acknowledged or archived)."""

    state_epoch: int
    leader_epoch: int
    start_offset: int
    delivery_complete_count: int


@dataclass(frozen=True, slots=True)
class StateWrite:
    """A change the share partition asks to persist (WriteShareGroupState): the new start
    offset and the runs whose state or delivery count changed (offsets below ``start_offset``
    are dropped by the share coordinator)."""

    start_offset: int
    batches: tuple[StateBatch, ...]


@dataclass(frozen=True, slots=True)
class AcquiredRange:
    """Records acquired by one member in one ShareFetch (``AcquiredRecords``)."""

    first_offset: int
    last_offset: int
    delivery_count: int


@dataclass(frozen=True, slots=True)
class LogBatch:
    """One record batch the broker read from the data log for a ShareFetch, as the share
    partition sees it: its offsets and whether a consumer may be given its records. Control
    batches and, under read_committed, batches of aborted transactions are not deliverable:
    their offsets are archived at once, as are offsets between batches (compacted away)."""

    base_offset: int
    last_offset: int
    deliverable: bool = True


@dataclass(frozen=True, slots=True)
class SharePartitionKey:
    """One share partition: a share group and a topic partition (by topic id, as Kafka keys
    it). Its state lives in ``__share_group_state`` partition :meth:`state_partition`."""

    group_id: str
    topic_id: uuid.UUID
    partition: int

    def coordinator_key(self) -> str:
        """Kafka's ``groupId:topicId:partition`` (topic id in Kafka's base64 form)."""
        return f"{self.group_id}:{kafka_uuid(self.topic_id)}:{self.partition}"

    def state_partition(self, num_partitions: int) -> int:
        """The ``__share_group_state`` partition of this key, as Kafka routes it."""
        return partition_for(self.coordinator_key(), num_partitions)


def kafka_uuid(topic_id: uuid.UUID) -> str:
    """A UUID as Kafka prints it (``Uuid.toString``): URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(topic_id.bytes).decode("ascii").rstrip("=")
