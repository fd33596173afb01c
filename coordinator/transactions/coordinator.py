"""The transaction coordinator's state machine: one :class:`TxnMetadata` per transactional id.

Sans-IO. Each request method answers either at once (an error code; 0 for a success with
nothing to write) or with a :class:`Transition`: the metadata the id should move to. The runtime
then calls :meth:`TxnCoordinator.begin` (the id is busy: other requests for it get
CONCURRENT_TRANSACTIONS, as in Kafka while a state change is pending), writes the new value to
``__transaction_state``, and calls :meth:`TxnCoordinator.apply` once it is durable, or
:meth:`TxnCoordinator.abandon` if the write failed. The clock is the ``now_ms`` each call is
given.

Transactions follow Kafka's protocol version 1 (EndTxn up to v4): the epoch changes only on
InitProducerId and on fencing, never on EndTxn.

- InitProducerId: a new id gets a fresh producer id and epoch 0; a known one in Empty or
  Complete* gets its epoch bumped (a new producer id once the epoch is exhausted); KIP-360: the
  producer id/epoch in the request must be the current one (or the retry of the last bump), else
  PRODUCER_FENCED. An id with an Ongoing transaction is fenced first: the transaction goes to
  PrepareAbort with the epoch bumped (Kafka's PrepareEpochFence, written as the PrepareAbort it
  leads to) and the client gets CONCURRENT_TRANSACTIONS until the abort is complete.
- AddPartitionsToTxn / AddOffsetsToTxn: Ongoing with the partitions added (the transaction starts
  with its first partition).
- :meth:`verify_partition` (no write): a transactional Produce is appended only inside the
  ongoing transaction that added its partition (KIP-890's verification).
- EndTxn: Ongoing -> PrepareCommit / PrepareAbort; the runtime writes the markers, then
  :meth:`complete` moves to CompleteCommit / CompleteAbort. A retried EndTxn of a completed
  transaction succeeds; of one still being completed gets CONCURRENT_TRANSACTIONS.
- :meth:`timed_out` names the Ongoing transactions past their timeout, :meth:`fence_abort`
  aborts one with an epoch bump; :meth:`expired` removes ids idle for
  ``transactional.id.expiration.ms`` (a tombstone).

Kafka's two transient states are not kept as states here: PrepareEpochFence is folded into the
PrepareAbort it leads to (nothing is written in between), and Dead is the tombstone's removal
(a Dead record read at load removes the id too).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass

from kcoord.protocol.errors import ErrorCode

from .model import (
    MAX_EPOCH,
    NO_PRODUCER_EPOCH,
    TopicPartition,
    TxnMetadata,
    TxnState,
    epoch_exhausted,
)


class ProducerIdsUnavailable(Exception):
    """The producer id allocator cannot hand out an id now (its block could not be stored)."""


@dataclass(frozen=True, slots=True)
class TxnConfig:
    max_timeout_ms: int = 900_000
    """transaction.max.timeout.ms: the longest transaction timeout a client may ask for."""
    id_expiration_ms: int = 604_800_000
    """transactional.id.expiration.ms: an id idle this long (and not in a transaction) goes."""


@dataclass(frozen=True, slots=True)
class Transition:
    transactional_id: str
    before: TxnMetadata | None
    """None for an id not known yet."""
    after: TxnMetadata | None
    """None removes the id (a tombstone)."""
    fence: bool = False
    """An InitProducerId that aborts the ongoing transaction of the epoch it fences: its client
    is answered CONCURRENT_TRANSACTIONS once this is written."""


Answer = int | Transition
"""An error code (0: done, nothing to write) or a transition to make durable."""

_E = ErrorCode


class TxnCoordinator:
    def __init__(self, config: TxnConfig, allocate_producer_id: Callable[[], int]) -> None:
        self.config = config
        self._allocate = allocate_producer_id
        self.txns: dict[str, TxnMetadata] = {}
        self.pending: dict[str, Transition] = {}

    # reading ------------------------------------------------------------------------------------
    def get(self, transactional_id: str) -> TxnMetadata | None:
        return self.txns.get(transactional_id)

    def __len__(self) -> int:
        return len(self.txns)

    def replay(self, transactional_id: str, meta: TxnMetadata | None) -> None:
        """A record of ``__transaction_state`` read at load (the newest one per id wins)."""
        if meta is None or meta.state == TxnState.DEAD:
            self.txns.pop(transactional_id, None)
        else:
            self.txns[transactional_id] = meta

    def reload(
        self, in_partition: Callable[[str], bool], records: Mapping[str, TxnMetadata | None]
    ) -> None:
        """A partition read again: the ids ``in_partition`` holds for take the newest record
        of each in ``records`` (none: gone)."""
        for transactional_id in [t for t in self.txns if in_partition(t)]:
            del self.txns[transactional_id]
        for transactional_id, meta in records.items():
            self.replay(transactional_id, meta)

    def to_complete(self) -> list[str]:
        """Ids in PrepareCommit/PrepareAbort with nothing pending: their markers are due."""
        return [t for t, m in self.txns.items() if m.state.preparing and t not in self.pending]

    # applying writes ------------------------------------------------------------------------------
    def begin(self, tr: Transition) -> None:
        if tr.transactional_id in self.pending:
            raise RuntimeError(f"transactional id {tr.transactional_id!r} is already busy")
        self.pending[tr.transactional_id] = tr

    def apply(self, tr: Transition) -> None:
        """``tr`` is durable: it is the id's state now."""
        self.pending.pop(tr.transactional_id, None)
        if tr.after is None:
            self.txns.pop(tr.transactional_id, None)
        else:
            self.txns[tr.transactional_id] = tr.after

    def abandon(self, tr: Transition) -> None:
        """Writing ``tr`` failed: nothing changes."""
        if self.pending.get(tr.transactional_id) is tr:
            del self.pending[tr.transactional_id]

    # InitProducerId -------------------------------------------------------------------------------
    def init_producer_id(
        self,
        transactional_id: str,
        timeout_ms: int,
        expected: tuple[int, int] | None,
        now_ms: int,
    ) -> Answer:
        """``expected``: the (producer id, epoch) a recovering producer (KIP-360) sends."""
        if not transactional_id:
            return _E.invalid_request
        if not 0 < timeout_ms <= self.config.max_timeout_ms:
            return _E.invalid_transaction_timeout
        if transactional_id in self.pending:
            return _E.concurrent_transactions
        before = self.txns.get(transactional_id)
        meta = before
        if meta is None:
            try:
                pid = self._allocate()
            except ProducerIdsUnavailable:
                return _E.coordinator_load_in_progress
            meta = TxnMetadata(
                transactional_id, pid, NO_PRODUCER_EPOCH, timeout_ms, TxnState.EMPTY,
                last_update_ms=now_ms,
            )
        if expected is not None and not self._recovering_producer_ok(meta, expected):
            return _E.producer_fenced
        state = meta.state
        if state.preparing:
            return _E.concurrent_transactions
        if state == TxnState.ONGOING:
            return self._fence(meta, now_ms, fence=True)
        if state not in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
            raise RuntimeError(f"{transactional_id!r} found in state {state.kafka_name}")
        if epoch_exhausted(meta.producer_epoch) and (
            expected is None or expected[1] == meta.producer_epoch
        ):
            try:
                new_pid = self._allocate()
            except ProducerIdsUnavailable:
                return _E.coordinator_load_in_progress
            after = meta.but(
                producer_id=new_pid,
                producer_epoch=0,
                last_producer_epoch=meta.producer_epoch if expected is not None else NO_PRODUCER_EPOCH,
                previous_producer_id=meta.producer_id,
            )
        else:
            bumped = self._bump(meta, expected)
            if isinstance(bumped, int):
                return bumped
            after = bumped
        after = after.but(
            timeout_ms=timeout_ms,
            state=TxnState.EMPTY,
            partitions=frozenset(),
            start_ms=-1,
            last_update_ms=now_ms,
        )
        return Transition(transactional_id, before, after)

    @staticmethod
    def _recovering_producer_ok(meta: TxnMetadata, expected: tuple[int, int]) -> bool:
        pid, epoch = expected
        return (
            meta.producer_epoch == NO_PRODUCER_EPOCH
            or pid == meta.producer_id
            or (pid == meta.previous_producer_id and epoch_exhausted(epoch))
        )

    @staticmethod
    def _bump(meta: TxnMetadata, expected: tuple[int, int] | None) -> TxnMetadata | int:
        epoch, last = meta.producer_epoch, meta.last_producer_epoch
        if expected is None:
            return meta.but(producer_epoch=epoch + 1, last_producer_epoch=NO_PRODUCER_EPOCH)
        if epoch == NO_PRODUCER_EPOCH or expected[1] == epoch:
            return meta.but(producer_epoch=epoch + 1, last_producer_epoch=epoch)
        if expected[1] == last:
            return meta  # a retry of the bump that answered it: the same epoch again
        return _E.producer_fenced

    # AddPartitionsToTxn / AddOffsetsToTxn ---------------------------------------------------------
    def add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
        now_ms: int,
    ) -> Answer:
        if not transactional_id:
            return _E.invalid_request
        meta = self.txns.get(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            return _E.invalid_producer_id_mapping
        if meta.producer_epoch != producer_epoch:
            return _E.producer_fenced
        if transactional_id in self.pending or meta.state.preparing:
            return _E.concurrent_transactions
        added = frozenset(partitions)
        if meta.state == TxnState.ONGOING and added <= meta.partitions:
            return 0
        starting = meta.state in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)
        after = meta.but(
            state=TxnState.ONGOING,
            partitions=(frozenset() if starting else meta.partitions) | added,
            start_ms=now_ms if starting else meta.start_ms,
            last_update_ms=now_ms,
        )
        return Transition(transactional_id, meta, after)

    # verifying a transactional Produce (KIP-890) ---------------------------------------------------
    def verify_partition(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partition: TopicPartition
    ) -> int:
        """Whether a transactional batch of ``producer_id``/``producer_epoch`` may be appended to
        ``partition``: only inside the id's ongoing transaction that added the partition, as a
        Kafka partition leader asks its transaction coordinator before such an append. 0 or the
        error Kafka's Produce answers then (its verification errors as it maps them for Produce
        versions before TRANSACTION_ABORTABLE: a fenced epoch is INVALID_PRODUCER_EPOCH, a
        partition outside the transaction INVALID_TXN_STATE).

        Without this, a batch from a made-up producer id opened a transaction in the partition
        that no coordinator knew of, and so would never end: it held the last stable offset, and
        every read_committed consumer of the partition, forever."""
        meta = self.txns.get(transactional_id) if transactional_id else None
        if meta is None or meta.producer_id != producer_id:
            return _E.invalid_producer_id_mapping
        if meta.producer_epoch != producer_epoch:
            return _E.invalid_producer_epoch
        if meta.state.preparing:
            return _E.concurrent_transactions
        if meta.state != TxnState.ONGOING or partition not in meta.partitions:
            return _E.invalid_txn_state
        return 0

    # EndTxn -------------------------------------------------------------------------------------
    def end_txn(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        now_ms: int,
    ) -> Answer:
        if not transactional_id:
            return _E.invalid_request
        meta = self.txns.get(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            return _E.invalid_producer_id_mapping
        if producer_epoch != meta.producer_epoch:
            return _E.producer_fenced
        if transactional_id in self.pending:
            return _E.concurrent_transactions
        state = meta.state
        if state == TxnState.ONGOING:
            target = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
            return Transition(transactional_id, meta, meta.but(state=target, last_update_ms=now_ms))
        if state == (TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT):
            return 0  # a retry of the EndTxn that completed it
        if state == (TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT):
            return _E.concurrent_transactions  # a retry: its markers are still being written
        return _E.invalid_txn_state

    def complete(self, transactional_id: str, now_ms: int) -> Transition | None:
        """PrepareCommit/PrepareAbort -> CompleteCommit/CompleteAbort, once every marker is
        written. None if the id is not (or no longer) preparing, or busy."""
        meta = self.txns.get(transactional_id)
        if meta is None or not meta.state.preparing or transactional_id in self.pending:
            return None
        done = (
            TxnState.COMPLETE_COMMIT
            if meta.state == TxnState.PREPARE_COMMIT
            else TxnState.COMPLETE_ABORT
        )
        after = meta.but(
            state=done,
            partitions=frozenset(),
            last_producer_epoch=meta.producer_epoch,
            last_update_ms=now_ms,
        )
        return Transition(transactional_id, meta, after)

    # timeouts and expiry ---------------------------------------------------------------------------
    def timed_out(self, now_ms: int) -> list[str]:
        """Ongoing transactions past their timeout, with nothing pending."""
        return [
            t for t, m in self.txns.items() if m.timed_out(now_ms) and t not in self.pending
        ]

    def fence_abort(self, transactional_id: str, now_ms: int) -> Transition | None:
        """Abort the Ongoing transaction of ``transactional_id`` with the epoch bumped (a
        timeout, or an administrator's abort); None if there is none or the id is busy."""
        meta = self.txns.get(transactional_id)
        if meta is None or meta.state != TxnState.ONGOING or transactional_id in self.pending:
            return None
        return self._fence(meta, now_ms, fence=False)

    @staticmethod
    def _fence(meta: TxnMetadata, now_ms: int, *, fence: bool) -> Transition:
        if meta.producer_epoch >= MAX_EPOCH:
            raise RuntimeError(f"cannot fence {meta.transactional_id!r}: epoch at its maximum")
        after = meta.but(
            state=TxnState.PREPARE_ABORT,
            producer_epoch=meta.producer_epoch + 1,
            last_producer_epoch=NO_PRODUCER_EPOCH,
            last_update_ms=now_ms,
        )
        return Transition(meta.transactional_id, meta, after, fence=fence)

    def expired(self, now_ms: int) -> list[Transition]:
        """Removals of the ids idle for transactional.id.expiration.ms outside a transaction."""
        cutoff = now_ms - self.config.id_expiration_ms
        return [
            Transition(t, m, None)
            for t, m in self.txns.items()
            if m.state.expiration_allowed and m.last_update_ms <= cutoff and t not in self.pending
        ]

    # tools (KIP-664) ------------------------------------------------------------------------------
    def listed(
        self, states: Iterable[TxnState], producer_ids: Iterable[int], min_duration_ms: int,
        now_ms: int,
    ) -> Iterator[TxnMetadata]:
        """ListTransactions: ids matching every filter given (empty filters match all;
        ``min_duration_ms`` -1: no duration filter)."""
        wanted_states = frozenset(states)
        wanted_pids = frozenset(producer_ids)
        for meta in self.txns.values():
            if wanted_pids and meta.producer_id not in wanted_pids:
                continue
            if wanted_states and meta.state not in wanted_states:
                continue
            if min_duration_ms >= 0 and now_ms - meta.start_ms <= min_duration_ms:
                continue
            yield meta
