"""The metadata of one transactional id, and the states of its transaction.

State ids and names are Kafka's (``TransactionState``): the ids are what the
``__transaction_state`` log stores, the names what DescribeTransactions and ListTransactions
show. A metadata object is immutable: every change is a new one, made durable before it replaces
the old (``coordinator.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import IntEnum

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
MAX_EPOCH = 32767
"""Short.MaxValue: the coordinator keeps this last epoch for itself, to fence with."""

TopicPartition = tuple[str, int]


class TxnState(IntEnum):
    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        return _NAMES[self]

    @classmethod
    def from_name(cls, name: str) -> TxnState | None:
        for state, n in _NAMES.items():
            if n == name:
                return state
        return None

    @property
    def expiration_allowed(self) -> bool:
        """An idle id in this state may be removed after transactional.id.expiration.ms."""
        return self in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)

    @property
    def preparing(self) -> bool:
        return self in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)

    @property
    def complete(self) -> bool:
        return self in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)


_NAMES = {
    TxnState.EMPTY: "Empty",
    TxnState.ONGOING: "Ongoing",
    TxnState.PREPARE_COMMIT: "PrepareCommit",
    TxnState.PREPARE_ABORT: "PrepareAbort",
    TxnState.COMPLETE_COMMIT: "CompleteCommit",
    TxnState.COMPLETE_ABORT: "CompleteAbort",
    TxnState.DEAD: "Dead",
    TxnState.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}


def epoch_exhausted(epoch: int) -> bool:
    """No further epoch may be handed to a client (the last one is kept for fencing)."""
    return epoch >= MAX_EPOCH - 1


@dataclass(frozen=True, slots=True)
class TxnMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[TopicPartition] = field(default_factory=frozenset)
    start_ms: int = -1
    """When the current transaction began (its first AddPartitions/AddOffsets); -1 if none."""
    last_update_ms: int = -1
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    """The epoch before the last bump (KIP-360: a retried InitProducerId gets the same answer)."""
    previous_producer_id: int = NO_PRODUCER_ID
    """The producer id before the last rotation (epoch exhaustion)."""

    def but(self, **changes: object) -> TxnMetadata:
        return replace(self, **changes)  # type: ignore[arg-type]

    def timed_out(self, now_ms: int) -> bool:
        return self.state == TxnState.ONGOING and self.start_ms + self.timeout_ms < now_ms
