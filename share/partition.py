"""The share partition (KIP-932): the delivery state of one topic partition for one share group.

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

Choices where the rules leave room (Kafka 4.2's SharePartition unless said otherwise):

- Persistence (R8). As in Kafka, acquiring writes nothing: only acknowledgement, release, lock
  expiry, archiving and the SPSO moving do. So what is persisted of an ACQUIRED record is what
  was written before it was acquired: AVAILABLE with its delivery count less the acquisition
  (absent when that is 0). A restart therefore hands such a record out again with the same
  delivery count as the lost delivery had. A released, expired, acknowledged or archived
  record is written with the delivery count it has (the acquisitions it went through).
- Loading: AVAILABLE runs keep their delivery count (the next acquisition raises it);
  ACKNOWLEDGED and ARCHIVED runs stay done; offsets between the loaded runs are AVAILABLE with
  no delivery; the end offset is just past the last loaded run. A record loaded AVAILABLE with a
  delivery count already at the limit (the limit lowered) is archived when next read instead of
  delivered (our choice).
- In-flight limit (R3): counted as Kafka does, from the SPSO to the end offset, done records
  included (a record stuck at the SPSO holds the window); checked before each log batch past the
  end offset, so one acquisition may pass the limit by less than a batch.
- Time: :meth:`acquire` and :meth:`acknowledge` first expire the locks passed at ``now_ms``, so
  an acknowledgement arriving after its lock is refused even if the broker's timer has not run.
- Acknowledgements name in-flight offsets only: one below the SPSO or at or past the end offset
  is INVALID_RECORD_STATE, like one not ACQUIRED by this member (Kafka skips offsets below the
  SPSO and answers INVALID_REQUEST past its cache).
- Gaps (R2): the offsets between two batches passed to :meth:`acquire`, and those before the
  first batch from the offset the broker read at (``read_offset``; the end offset if not
  given), are archived: the log holds no record there (compacted away). AVAILABLE offsets left
  between loaded runs by a lost write would otherwise be read again and again.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from kcoord.protocol.errors import ErrorCode
from kcoord.share.inflight import InFlightRun, Run, RunList
from kcoord.share.model import (
    AckType,
    AcquiredRange,
    LogBatch,
    PersistedState,
    RecordState,
    StateBatch,
    StateWrite,
)


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


_ACK_TYPES = frozenset(int(t) for t in AckType)


@dataclass(frozen=True, slots=True)
class _Lock:
    """A lock deadline in the expiry heap: ``member``'s records among ``first .. last`` whose
    deadline is still ``deadline``. Renewal or release leaves the entry stale, which is noticed
    when it reaches the top."""

    deadline: int
    seq: int
    member: str
    first: int
    last: int

    def __lt__(self, other: _Lock) -> bool:
        return (self.deadline, self.seq) < (other.deadline, other.seq)


class SharePartition:
    """One share group's delivery state of one topic partition (module docstring)."""

    def __init__(self, state: PersistedState, limits: ShareLimits) -> None:
        """Start from the state the share coordinator holds; ``state.start_offset`` must be
        known (>= 0): the broker resolves -1 through ``share.auto.offset.reset`` first."""
        if state.start_offset < 0:
            raise ValueError("the share-partition start offset must be resolved before loading")
        self._limits = limits
        self._state_epoch = state.state_epoch
        self._leader_epoch = state.leader_epoch
        self._runs = RunList(state.start_offset, list(_loaded_runs(state)))
        self._locks: list[_Lock] = []
        self._lock_seq = itertools.count()
        self._dirty: list[tuple[int, int]] = []
        self._start_moved = False
        self._archived = 0
        self._advance()

    @property
    def start_offset(self) -> int:
        """The SPSO."""
        return self._runs.start

    @property
    def end_offset(self) -> int:
        """The next offset never acquired: records from here on are not in flight."""
        return self._runs.end

    @property
    def state_epoch(self) -> int:
        return self._state_epoch

    @property
    def limits(self) -> ShareLimits:
        return self._limits

    def fetch_offset(self) -> int | None:
        """Where the broker should read the log from for the next acquisition: the first
        AVAILABLE in-flight offset, else :attr:`end_offset`; None when nothing can be acquired
        (no AVAILABLE record and the in-flight limit reached)."""
        available = self._runs.first_available()
        if available is not None:
            return available
        return None if self._window_full() else self._runs.end

    def acquire(
        self,
        member_id: str,
        batches: Sequence[LogBatch],
        max_records: int,
        lock_ms: int,
        now_ms: int,
        *,
        read_offset: int | None = None,
    ) -> list[AcquiredRange]:
        """R1-R3: acquire for ``member_id`` from the log batches read at :meth:`fetch_offset`
        (sorted, below the high watermark or LSO the broker read up to). ``read_offset``, the
        offset the broker read from, lets the offsets from it to the first batch (absent from
        the log: compacted) be archived too; without it only those past the end offset are."""
        self.expire(now_ms)
        runs = self._runs
        deadline = now_ms + lock_ms
        taken: list[AcquiredRange] = []
        acquired = 0
        previous: int | None = None  # the last offset of the batch before
        for batch in batches:
            if acquired >= max_records:
                break
            first = max(batch.base_offset, runs.start)
            if previous is not None:
                first = max(first, previous + 1)
            if batch.last_offset < first:
                continue
            if previous is not None:
                gap_first = previous + 1
            elif read_offset is None:
                gap_first = runs.end
            else:  # in flight: nothing past the end offset was read before
                gap_first = max(min(read_offset, runs.end), runs.start)
            previous = batch.last_offset
            if gap_first < first and not self._archive_gap(gap_first, first - 1):
                break
            if first < runs.end:  # the part already in flight: its AVAILABLE records
                last = min(batch.last_offset, runs.end - 1)
                holder = (member_id, deadline) if batch.deliverable else None
                acquired += self._take_available(first, last, holder, taken)
            first = max(first, runs.end)  # the part never read before
            if first > batch.last_offset:
                continue
            if self._window_full():
                break
            if batch.deliverable:
                runs.append(
                    Run(first, batch.last_offset, RecordState.ACQUIRED, 1, member_id, deadline)
                )
                taken.append(AcquiredRange(first, batch.last_offset, 1))
                acquired += batch.last_offset - first + 1
            else:
                self._append_archived(first, batch.last_offset)
        self._advance()
        ranges = _joined_ranges(taken)
        for r in ranges:
            self._lock(deadline, member_id, r.first_offset, r.last_offset)
        return ranges

    def acknowledge(
        self, member_id: str, acks: Sequence[Acknowledgement], lock_ms: int, now_ms: int
    ) -> int:
        """R4: apply one partition's acknowledgements all or nothing; the error code (0 or
        INVALID_RECORD_STATE, or INVALID_REQUEST for malformed batches: first > last,
        overlapping or unsorted batches, ``types`` neither 1 nor last-first+1 long, unknown
        types)."""
        self.expire(now_ms)
        refused = _malformed(acks) or self._not_held(member_id, acks)
        if refused:
            return refused
        runs = self._runs
        deadline = now_ms + lock_ms
        for ack in acks:
            for first, last, kind in _segments(ack):
                i, j = runs.carve(first, last)
                for run in runs.runs[i:j]:
                    self._settle(run, kind, deadline)
                runs.join(i, j)
                if kind == AckType.RENEW:
                    self._lock(deadline, member_id, first, last)
        self._advance()
        return ErrorCode.none

    def release_member(self, member_id: str, now_ms: int) -> int:
        """R6: release what ``member_id`` holds; how many records were released."""
        self.expire(now_ms)
        released = 0
        for run in self._runs.runs:
            if run.state == RecordState.ACQUIRED and run.member == member_id:
                released += run.size
                self._release(run)
        if released:
            self._runs.join(0, len(self._runs))
            self._advance()
        return released

    def expire(self, now_ms: int) -> int:
        """R5: release every record whose lock expired at or before ``now_ms``; how many."""
        released = 0
        while self._locks and self._locks[0].deadline <= now_ms:
            lock = heapq.heappop(self._locks)
            touched = [run for run in self._runs.overlapping(lock.first, lock.last)]
            for run in touched:
                if self._holds(run, lock):
                    released += run.size
                    self._release(run)
            if touched:
                runs = self._runs
                runs.join(runs.index_of(touched[0].first), runs.index_of(touched[-1].first) + 1)
        if released:
            self._advance()
        return released

    def next_expiry(self) -> int | None:
        """The earliest lock deadline, None if nothing is acquired."""
        while self._locks:
            top = self._locks[0]
            if any(self._holds(run, top) for run in self._runs.overlapping(top.first, top.last)):
                return top.deadline
            heapq.heappop(self._locks)  # renewed or released since
        return None

    def advance_start(self, log_start_offset: int) -> None:
        """R9: the log's start moved to ``log_start_offset``."""
        if log_start_offset <= self._runs.start:
            return
        self._archived += self._runs.drop_before(log_start_offset)
        self._start_moved = True
        self._advance()

    def take_write(self) -> StateWrite | None:
        """R8: the changes since the last call to persist, None if there are none."""
        runs = self._runs
        batches: list[StateBatch] = []
        for first, last in _merged_spans(self._dirty):
            for run in runs.overlapping(first, last):
                state, count = _persisted_view(run)
                batches.append(StateBatch(max(run.first, first), min(run.last, last), state, count))
        moved = self._start_moved
        self._dirty.clear()
        self._start_moved = False
        if not batches and not moved:
            return None
        return StateWrite(runs.start, tuple(_joined_batches(batches)))

    def persisted(self) -> PersistedState:
        """R8: the whole state as the share coordinator should now hold it."""
        batches = []
        for run in self._runs.runs:
            state, count = _persisted_view(run)
            if state != RecordState.AVAILABLE or count:
                batches.append(StateBatch(run.first, run.last, state, count))
        return PersistedState(
            state_epoch=self._state_epoch,
            start_offset=self._runs.start,
            batches=tuple(_joined_batches(batches)),
            leader_epoch=self._leader_epoch,
        )

    # Figures for describe, metrics and the console.
    def in_flight(self) -> int:
        """Records in flight (from the SPSO to the end offset, not yet done)."""
        counts = self._runs.counts
        return counts[RecordState.AVAILABLE] + counts[RecordState.ACQUIRED]

    def acquired(self) -> int:
        """Records ACQUIRED now."""
        return self._runs.counts[RecordState.ACQUIRED]

    def archived_count(self) -> int:
        """Records archived in this share partition since it was loaded."""
        return self._archived

    def in_flight_runs(self) -> tuple[InFlightRun, ...]:
        """The in-flight offsets from the SPSO to the end offset as runs of one state, delivery
        count and holder (for describe and the console)."""
        return tuple(run.view() for run in self._runs.runs)

    # Helpers.
    def _window_full(self) -> bool:
        """R3: whether the in-flight window (SPSO to end offset) is at its limit."""
        return self._runs.end - self._runs.start >= self._limits.max_in_flight

    def _take_available(
        self,
        first: int,
        last: int,
        holder: tuple[str, int] | None,
        taken: list[AcquiredRange],
    ) -> int:
        """Acquire for ``holder`` (member, lock deadline) the AVAILABLE records among the
        in-flight ``first .. last``, or archive them when there is no holder (not deliverable)
        or they reached the delivery limit; how many were acquired."""
        runs = self._runs
        if not any(r.state == RecordState.AVAILABLE for r in runs.overlapping(first, last)):
            return 0
        count = 0
        i, j = runs.carve(first, last)
        for run in runs.runs[i:j]:
            if run.state != RecordState.AVAILABLE:
                continue
            if holder is not None and run.count < self._limits.delivery_count_limit:
                runs.change(run, RecordState.ACQUIRED, run.count + 1, *holder)
                taken.append(AcquiredRange(run.first, run.last, run.count))
                count += run.size
            else:
                self._archive(run)
        runs.join(i, j)
        return count

    def _archive_gap(self, first: int, last: int) -> bool:
        """R2: archive ``first .. last``, offsets no log batch holds; False when the part past
        the end offset cannot be taken in (in-flight limit)."""
        runs = self._runs
        if first < runs.end:
            self._take_available(first, min(last, runs.end - 1), None, [])
        first = max(first, runs.end)
        if first > last:
            return True
        if self._window_full():
            return False
        self._append_archived(first, last)
        return True

    def _append_archived(self, first: int, last: int) -> None:
        self._runs.append(Run(first, last, RecordState.ARCHIVED, 0))
        self._archived += last - first + 1
        self._dirty.append((first, last))
        self._advance()

    def _archive(self, run: Run) -> None:
        self._runs.change(run, RecordState.ARCHIVED, run.count)
        self._archived += run.size
        self._dirty.append((run.first, run.last))

    def _release(self, run: Run) -> None:
        """RELEASE, lock expiry and member gone: AVAILABLE again, or ARCHIVED at the limit."""
        if run.count >= self._limits.delivery_count_limit:
            self._archive(run)
        else:
            self._runs.change(run, RecordState.AVAILABLE, run.count)
            self._dirty.append((run.first, run.last))

    def _settle(self, run: Run, kind: int, deadline: int) -> None:
        """Apply one acknowledgement type to an ACQUIRED run (R4)."""
        if kind == AckType.ACCEPT:
            self._runs.change(run, RecordState.ACKNOWLEDGED, run.count)
            self._dirty.append((run.first, run.last))
        elif kind == AckType.RELEASE:
            self._release(run)
        elif kind == AckType.RENEW:
            self._runs.change(run, RecordState.ACQUIRED, run.count, run.member, deadline)
        else:  # REJECT, GAP
            self._archive(run)

    def _lock(self, deadline: int, member_id: str, first: int, last: int) -> None:
        heapq.heappush(self._locks, _Lock(deadline, next(self._lock_seq), member_id, first, last))

    @staticmethod
    def _holds(run: Run, lock: _Lock) -> bool:
        """Whether ``run`` is still under ``lock``."""
        return (
            run.state == RecordState.ACQUIRED
            and run.member == lock.member
            and run.deadline == lock.deadline
        )

    def _not_held(self, member_id: str, acks: Sequence[Acknowledgement]) -> int:
        """INVALID_RECORD_STATE unless every offset named is in flight and ACQUIRED by
        ``member_id``; the bounds are checked first, so a huge range costs nothing."""
        runs = self._runs
        for ack in acks:
            if ack.first_offset < runs.start or ack.last_offset >= runs.end:
                return ErrorCode.invalid_record_state
        for ack in acks:
            for run in runs.overlapping(ack.first_offset, ack.last_offset):
                if run.state != RecordState.ACQUIRED or run.member != member_id:
                    return ErrorCode.invalid_record_state
        return ErrorCode.none

    def _advance(self) -> None:
        """R7: move the SPSO past the leading done records."""
        if self._runs.drop_leading_done():
            self._start_moved = True


_STATES = {int(s): s for s in RecordState if s != RecordState.ACQUIRED}


def _loaded_runs(state: PersistedState) -> Iterable[Run]:
    """The runs of a loaded state: its batches from the SPSO on, the offsets between them
    AVAILABLE with no delivery (an ACQUIRED or unknown state read back as AVAILABLE)."""
    at = state.start_offset
    for batch in sorted(state.batches, key=lambda b: b.first_offset):
        first = max(batch.first_offset, at)
        if batch.last_offset < first:
            continue
        if first > at:
            yield Run(at, first - 1, RecordState.AVAILABLE, 0)
        kind = _STATES.get(batch.delivery_state, RecordState.AVAILABLE)
        yield Run(first, batch.last_offset, kind, batch.delivery_count)
        at = batch.last_offset + 1


def _persisted_view(run: Run) -> tuple[RecordState, int]:
    """What is persisted of ``run``: ACQUIRED is AVAILABLE without the acquisition (R8)."""
    if run.state == RecordState.ACQUIRED:
        return RecordState.AVAILABLE, run.count - 1
    return run.state, run.count


def _malformed(acks: Sequence[Acknowledgement]) -> int:
    """INVALID_REQUEST for a malformed acknowledgement, else 0."""
    previous: int | None = None
    for ack in acks:
        if ack.first_offset > ack.last_offset:
            return ErrorCode.invalid_request
        if previous is not None and ack.first_offset <= previous:
            return ErrorCode.invalid_request
        if len(ack.types) != 1 and len(ack.types) != ack.last_offset - ack.first_offset + 1:
            return ErrorCode.invalid_request
        if not _ACK_TYPES.issuperset(ack.types):
            return ErrorCode.invalid_request
        previous = ack.last_offset
    return ErrorCode.none


def _segments(ack: Acknowledgement) -> Iterable[tuple[int, int, int]]:
    """``ack`` as ranges of one type each."""
    if len(ack.types) == 1:
        yield ack.first_offset, ack.last_offset, ack.types[0]
        return
    at = ack.first_offset
    for kind, group in itertools.groupby(ack.types):
        size = sum(1 for _ in group)
        yield at, at + size - 1, kind
        at += size


def _merged_spans(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Offset ranges sorted, overlapping or touching ones joined."""
    out: list[tuple[int, int]] = []
    for first, last in sorted(spans):
        if out and first <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], last))
        else:
            out.append((first, last))
    return out


def _joined_batches(batches: list[StateBatch]) -> list[StateBatch]:
    """Sorted batches with touching ones of one state and delivery count joined."""
    out: list[StateBatch] = []
    for batch in batches:
        if out:
            prev = out[-1]
            if (
                prev.last_offset + 1 == batch.first_offset
                and prev.delivery_state == batch.delivery_state
                and prev.delivery_count == batch.delivery_count
            ):
                out[-1] = StateBatch(
                    prev.first_offset, batch.last_offset, prev.delivery_state, prev.delivery_count
                )
                continue
        out.append(batch)
    return out


def _joined_ranges(taken: list[AcquiredRange]) -> list[AcquiredRange]:
    """Acquired ranges with touching ones of one delivery count joined."""
    out: list[AcquiredRange] = []
    for r in taken:
        if (
            out
            and out[-1].last_offset + 1 == r.first_offset
            and out[-1].delivery_count == r.delivery_count
        ):
            out[-1] = AcquiredRange(out[-1].first_offset, r.last_offset, r.delivery_count)
        else:
            out.append(r)
    return out
