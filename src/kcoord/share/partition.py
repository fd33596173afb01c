"""The share partition (KIP-932): the delivery state of one topic partition for one share group.

INTERFACE STUB: the signatures and rules below are fixed; the implementation is being written.

A :class:`SharePartition` is sans-IO: the broker reads the data log and the persisted state,
passes them in with the time, and persists what :meth:`SharePartition.take_write` hands back.
It holds:

- the share-partition start offset (SPSO, :attr:`start_offset`): every record below it is done
  (acknowledged or archived) and forgotten;
- the in-flight records from the SPSO up to :attr:`end_offset` (the next offset never yet
  acquired): per offset (kept as runs), a :class:`~share.model.RecordState`, a delivery count,
  and while ACQUIRED the member holding it and when its lock expires.

Rules (each unit test names the one it checks):

- R1 acquire: records are acquired in offset order from the first AVAILABLE in-flight record,
  then from :attr:`end_offset` on; whole log batches at a time until ``max_records`` is reached
  or passed (Kafka's batch-optimised mode); each acquisition raises the delivery count by one
  and locks the record for ``lock_ms`` to ``member_id``.
- R2 not deliverable: offsets of non-deliverable batches (control, aborted) and offsets between
  the batches passed (compacted away) are ARCHIVED at once, never acquired.
- R3 in-flight limit: nothing new (past :attr:`end_offset`) is acquired while the in-flight
  records number ``max_in_flight`` or more (AVAILABLE ones below it still are).
- R4 acknowledge: every offset named must be in flight, ACQUIRED, by the same member, else the
  whole acknowledgement is refused with INVALID_RECORD_STATE and nothing changes; ACCEPT ->
  ACKNOWLEDGED, REJECT and GAP -> ARCHIVED, RELEASE -> AVAILABLE (ARCHIVED once the delivery
  count has reached ``delivery_count_limit``), RENEW -> lock extended.
- R5 lock expiry: an ACQUIRED record whose lock passed goes back as RELEASE does.
- R6 member gone: :meth:`release_member` releases every record the member holds, as RELEASE.
- R7 start offset: the SPSO moves past every leading ACKNOWLEDGED/ARCHIVED record.
- R8 persistence: every change of state, delivery count (except ACQUIRED being reached) or SPSO
  is handed out by :meth:`take_write`; applying the writes to the state read at start gives
  :meth:`persisted` (what a restart would load: ACQUIRED reads back as AVAILABLE).
- R9 offsets below the log start (DeleteRecords, retention): :meth:`advance_start` archives
  and forgets them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kcoord.share.model import AcquiredRange, LogBatch, PersistedState, StateWrite


@dataclass(frozen=True, slots=True)
class ShareLimits:
    """The settings of one share partition (broker settings, a group's config overriding the
    lock duration)."""

    max_in_flight: int = 2000  # group.share.partition.max.record.locks
    delivery_count_limit: int = 5  # group.share.delivery.count.limit


@dataclass(frozen=True, slots=True)
class Acknowledgement:
    """One AcknowledgementBatch of a ShareFetch or ShareAcknowledge: ``types`` has one entry
    (for the whole range) or one per offset, each an :class:`~share.model.AckType` value."""

    first_offset: int
    last_offset: int
    types: tuple[int, ...]


class SharePartition:
    """One share group's delivery state of one topic partition (module docstring)."""

    def __init__(self, state: PersistedState, limits: ShareLimits) -> None:
        """Start from the state the share coordinator holds; ``state.start_offset`` must be
        known (>= 0): the broker resolves -1 through ``share.auto.offset.reset`` first."""
        raise NotImplementedError

    @property
    def start_offset(self) -> int:
        """The SPSO."""
        raise NotImplementedError

    @property
    def end_offset(self) -> int:
        """The next offset never acquired: records from here on are not in flight."""
        raise NotImplementedError

    @property
    def state_epoch(self) -> int:
        raise NotImplementedError

    def fetch_offset(self) -> int | None:
        """Where the broker should read the log from for the next acquisition: the first
        AVAILABLE in-flight offset, else :attr:`end_offset`; None when nothing can be acquired
        (no AVAILABLE record and the in-flight limit reached)."""
        raise NotImplementedError

    def acquire(
        self,
        member_id: str,
        batches: Sequence[LogBatch],
        max_records: int,
        lock_ms: int,
        now_ms: int,
    ) -> list[AcquiredRange]:
        """R1-R3: acquire for ``member_id`` from the log batches read at :meth:`fetch_offset`
        (sorted, below the high watermark or LSO the broker read up to)."""
        raise NotImplementedError

    def acknowledge(
        self, member_id: str, acks: Sequence[Acknowledgement], lock_ms: int, now_ms: int
    ) -> int:
        """R4: apply one partition's acknowledgements all or nothing; the error code (0 or
        INVALID_RECORD_STATE, or INVALID_REQUEST for malformed batches: first > last,
        overlapping or unsorted batches, ``types`` neither 1 nor last-first+1 long, unknown
        types)."""
        raise NotImplementedError

    def release_member(self, member_id: str, now_ms: int) -> int:
        """R6: release what ``member_id`` holds; how many records were released."""
        raise NotImplementedError

    def expire(self, now_ms: int) -> int:
        """R5: release every record whose lock expired at or before ``now_ms``; how many."""
        raise NotImplementedError

    def next_expiry(self) -> int | None:
        """The earliest lock deadline, None if nothing is acquired."""
        raise NotImplementedError

    def advance_start(self, log_start_offset: int) -> None:
        """R9: the log's start moved to ``log_start_offset``."""
        raise NotImplementedError

    def take_write(self) -> StateWrite | None:
        """R8: the changes since the last call to persist, None if there are none."""
        raise NotImplementedError

    def persisted(self) -> PersistedState:
        """R8: the whole state as the share coordinator should now hold it."""
        raise NotImplementedError

    # Figures for describe, metrics and the console.
    def in_flight(self) -> int:
        """Records in flight (from the SPSO to the end offset, not yet done)."""
        raise NotImplementedError

    def acquired(self) -> int:
        """Records ACQUIRED now."""
        raise NotImplementedError

    def archived_count(self) -> int:
        """Records archived in this share partition since it was loaded."""
        raise NotImplementedError
