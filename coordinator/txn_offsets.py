"""TxnOffsetCommit and transaction markers in one shard (KIP-98, KIP-447): Kafka's
OffsetMetadataManager.commitTransactionalOffset and replayEndTransactionMarker.

:class:`TxnOffsets` validates a TxnOffsetCommit (the group as OffsetCommit does, with the
transactional relaxations of KIP-447; the producer's epoch), stores its offsets pending through
:meth:`coordinator.offsets.OffsetManager._store` as one transactional batch of the producer,
and applies a COMMIT or ABORT marker: the producer's pending offsets in this partition become
the groups' committed offsets (unless a newer visible write of the same partition came after
them) or are dropped. The marker is written as a control batch (``Output.marker``). Either
write has an undo for when it cannot be appended. Replay of the transactional records and
markers found at load is fed in by :class:`coordinator.loading.LatestRecords`.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable
from dataclasses import dataclass
from functools import partial

from kcoord.coordinator.messages import TxnMarkerRequest, TxnMarkerResponse, TxnOffsetCommitRequest
from kcoord.coordinator.offset_interface import OffsetGroups, PartitionCheck, committing_group
from kcoord.coordinator.offsets import OffsetManager
from kcoord.coordinator.output import Operation
from kcoord.coordinator.schemas import (
    OffsetCommitKey,
    OffsetCommitValue,
    decode_offset_commit_value,
)
from kcoord.coordinator.txn_pending import PendingOffset, TopicPartition, TxnCommitWriteFailed
from kcoord.coordinator.write_size import offset_commit_floor
from kcoord.protocol.errors import ErrorCode

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class MarkerWriteFailed:
    """A marker could not be written: put the producer's pending offsets, the committed
    offsets they replaced and its epochs back, and answer the marker with the error."""

    handle: Hashable
    producer_id: int
    groups: dict[str, dict[TopicPartition, PendingOffset]]
    visible: dict[tuple[str, TopicPartition], int]
    materialized: tuple[tuple[str, TopicPartition, OffsetCommitValue, OffsetCommitValue | None], ...]
    epochs: tuple[int, int] | None

    @property
    def handles(self) -> tuple[Hashable, ...]:
        return (self.handle,)


class TxnOffsets:
    """See the module docstring."""

    def __init__(self, offsets: OffsetManager, op: Operation, groups: OffsetGroups) -> None:
        self._offsets = offsets
        self._op = op
        self._groups = groups
        self.pending = offsets.pending

    # ---- TxnOffsetCommit ----------------------------------------------------------------------

    def commit(self, handle: Hashable, req: TxnOffsetCommitRequest, now_ms: int) -> int | None:
        """Validate and store a TxnOffsetCommit; returns the error for every partition, or
        None if it replied (the reply rides with the transactional batch).

        Kafka's order: an unknown group is created for an anonymous commit (generation < 0)
        and refused with ILLEGAL_GENERATION otherwise; the group's checks (a member's
        STALE_MEMBER_EPOCH becomes ILLEGAL_GENERATION); then the producer epoch against the
        newest this partition saw of the producer (INVALID_PRODUCER_EPOCH: a zombie); then,
        for a member committing with an older epoch, each partition's assignment epoch
        (KIP-1251; ILLEGAL_GENERATION for a partition refused)."""
        if req.producer_id < 0:
            return ErrorCode.invalid_producer_id_mapping
        groups = self._groups
        found = committing_group(groups, req.group_id, req.generation_id, now_ms)
        if isinstance(found, int):
            return found
        group, created = found
        error = group.validate_offset_commit(
            req.member_id,
            req.group_instance_id,
            req.generation_id,
            req.api_version,
            transactional=True,
        )
        if error == ErrorCode.stale_member_epoch:
            error = ErrorCode.illegal_generation
        if error is None:
            known = self.pending.epochs.get(req.producer_id)
            if known is not None and req.producer_epoch < known[0]:
                log.info(
                    "group %s: TxnOffsetCommit of producer %d at epoch %d fenced (epoch %d seen)",
                    req.group_id,
                    req.producer_id,
                    req.producer_epoch,
                    known[0],
                )
                error = ErrorCode.invalid_producer_epoch
        if error is None:
            config = self._offsets.config
            floor = offset_commit_floor(req.group_id, req.topics, config.offset_metadata_max_bytes)
            if floor > config.max_batch_bytes:
                error = ErrorCode.unknown_server_error
        if error is not None:
            if created:
                groups.forget(req.group_id)
            return error
        out = self._op.out
        assert out is not None
        out.producer_id = req.producer_id
        out.producer_epoch = req.producer_epoch
        group_check = groups.commit_partition_check(
            req.group_id, req.member_id, req.generation_id
        )
        check = None if group_check is None else partial(_txn_check, group_check)
        self._offsets._store(handle, req.group_id, req, now_ms, req.producer_id, check)
        return None

    # ---- markers ------------------------------------------------------------------------------

    def marker(self, handle: Hashable, req: TxnMarkerRequest, now_ms: int) -> None:
        """Write the marker and apply it (Kafka's checks first: an older producer epoch is
        INVALID_PRODUCER_EPOCH, an older coordinator epoch TRANSACTION_COORDINATOR_FENCED).
        A marker of a producer with nothing pending is written all the same."""
        pending = self.pending
        pid = req.producer_id
        known = pending.epochs.get(pid)
        if known is not None and req.producer_epoch < known[0]:
            self._op.reply(handle, TxnMarkerResponse(ErrorCode.invalid_producer_epoch))
            return
        if known is not None and req.coordinator_epoch < known[1]:
            self._op.reply(handle, TxnMarkerResponse(ErrorCode.transaction_coordinator_fenced))
            return
        before = pending.pending_of(pid)
        visible = pending.visible_snapshot(pid)
        materialized = []
        for group_id, tp, value, _position in pending.complete(pid, req.commit):
            if self._groups.offset_group(group_id) is None:
                self._groups.create_standalone(group_id, now_ms)
            previous = self._offsets.of(group_id).get(tp)
            self._offsets.materialize(group_id, tp, value)
            materialized.append((group_id, tp, value, previous))
        pending.epochs[pid] = (req.producer_epoch, req.coordinator_epoch)
        if before:
            log.debug(
                "producer %d: %s of %d pending offsets, %d made visible",
                pid,
                "COMMIT" if req.commit else "ABORT",
                sum(len(tps) for tps in before.values()),
                len(materialized),
            )
        op = self._op
        assert op.out is not None
        op.out.marker = req
        op.out.producer_id = pid
        op.out.producer_epoch = req.producer_epoch
        op.reply(handle, TxnMarkerResponse(ErrorCode.none))
        op.on_failure(
            MarkerWriteFailed(handle, pid, before, visible, tuple(materialized), known)
        )

    # ---- failed writes ------------------------------------------------------------------------

    def write_failed(self, action: TxnCommitWriteFailed | MarkerWriteFailed, error: int) -> None:
        """Undo a transactional write that could not be appended; answer it with ``error``."""
        pending = self.pending
        if isinstance(action, TxnCommitWriteFailed):
            for tp, added, previous in reversed(action.written):
                pending.undo_add(action.producer_id, action.group_id, tp, added, previous)
            log.warning(
                "group %s: storing %d transactional offsets of producer %d failed (%s)",
                action.group_id,
                len(action.written),
                action.producer_id,
                error,
            )
            self._op.reply(
                action.handle,
                type(action.response)(
                    tuple(
                        (topic, tuple((p, error if e == ErrorCode.none else e) for p, e in parts))
                        for topic, parts in action.response.topics
                    )
                ),
            )
        else:
            for group_id, tp, value, replaced in reversed(action.materialized):
                self._offsets.unmaterialize(group_id, tp, value, replaced)
            pending.restore(action.producer_id, action.groups, action.visible)
            log.warning("marker of producer %d failed (%s)", action.producer_id, error)
            self._op.reply(action.handle, TxnMarkerResponse(error))
        if action.epochs is None:
            pending.epochs.pop(action.producer_id, None)
        else:
            pending.epochs[action.producer_id] = action.epochs

    # ---- loading ------------------------------------------------------------------------------

    def replay_pending(
        self, producer_id: int, key: OffsetCommitKey, value: bytes | None, position: int
    ) -> None:
        """A transactional offset record still pending at the end of the log, at its log
        ``position`` (value None: removed by a later tombstone, the transaction still open)."""
        decoded = decode_offset_commit_value(value) if value is not None else None
        self.pending.add(producer_id, key.group, (key.topic, key.partition), decoded, position)
        self.pending.seen_position(position)

    def replay_visible(self, key: OffsetCommitKey, position: int) -> None:
        """The newest visible write of a partition that is pending somewhere."""
        self.pending.note_visible(key.group, (key.topic, key.partition), position)
        self.pending.seen_position(position)

    def replay_producer(self, producer_id: int, epoch: int, coordinator_epoch: int) -> None:
        self.pending.epochs[producer_id] = (epoch, coordinator_epoch)


def _txn_check(check: PartitionCheck, topic: str, partition: int) -> int | None:
    """A partition check for TxnOffsetCommit, which answers ILLEGAL_GENERATION where
    OffsetCommit answers STALE_MEMBER_EPOCH."""
    error = check(topic, partition)
    return ErrorCode.illegal_generation if error == ErrorCode.stale_member_epoch else error
