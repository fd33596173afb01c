"""The start of a partition log: its log start offset, time-based rolls, and deleting old
segments (DeleteRecords, ``retention.ms``, ``retention.bytes``).

:class:`RetentionMixin` is mixed into ``storage.log.PartitionLog`` and works on that log's
segment list under the log's locks (the attributes it relies on are declared on the mixin), as
``storage.cleaning`` does. It follows Kafka's ``UnifiedLog``:

* The *log start offset* may lie inside the first segment (DeleteRecords moves it to any offset
  up to the high watermark): reads below it are refused (OFFSET_OUT_OF_RANGE), and ListOffsets
  EARLIEST answers it. It only moves forward. It is not stored in the segments: the broker keeps
  it in Kafka's ``log-start-offset-checkpoint`` (``storage.checkpoint``), written *before* any
  segment below it is deleted, and hands it back at open (:meth:`RetentionMixin.restore_log_start`).
* :meth:`RetentionMixin.plan_deletion` picks the oldest segments that may go, oldest first and
  stopping at the first that may not: those wholly below the log start offset, and, for a
  ``delete`` cleanup policy, those whose largest timestamp is older than ``retention.ms`` or
  whose removal keeps the log at or above ``retention.bytes``. Only durable segments (wholly
  below the flushed offset) qualify; the active one too when every segment does, and then the
  log is rolled first so that it keeps an (empty) active segment. The log start offset becomes
  the base offset of the first segment kept.
* :meth:`RetentionMixin.roll_if_due`: ``segment.ms``: a non-empty active segment whose first
  batch is that old is sealed and a new one started (so that it can be compacted or deleted).

Deleting is two steps so that the broker can checkpoint the new log start offset in between:
:meth:`RetentionMixin.advance_log_start` (memory only), then
:meth:`RetentionMixin.delete_planned` on the writer thread.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from pathlib import Path

from kcoord.storage.files import fsync_dir
from kcoord.storage.segment import Segment

log = logging.getLogger("kcoord.storage")


@dataclass(frozen=True, slots=True)
class DeletionPlan:
    """The oldest segments that may be deleted, and the log start offset after them."""

    segments: tuple[Segment, ...]
    new_log_start: int
    reason: str


class RetentionMixin:
    """Log start offset, rolls by time and deletion of old segments of ``PartitionLog``."""

    _path: Path
    _segments: list[Segment]
    _bases: list[int]
    _dirty: list[Segment]
    _lock: threading.Lock
    _flush_lock: threading.Lock
    _flushed_offset: int
    _fsync: bool
    _swaps: int
    _start_offset: int
    _segment_bytes: int

    def _check_open(self) -> None:
        raise NotImplementedError

    def _roll(self, base_offset: int) -> Segment:
        raise NotImplementedError

    def _txn_after_roll(self) -> None:
        raise NotImplementedError

    def _txn_segments_deleted(self) -> None:
        raise NotImplementedError

    @property
    def log_end_offset(self) -> int:
        raise NotImplementedError

    # -- the log start offset ----------------------------------------------------------------

    def advance_log_start(self, offset: int) -> bool:
        """Move the log start offset forward to ``offset`` (at most the log end offset); the
        segments wholly below it stay until deleted. Whether it moved."""
        self._check_open()
        with self._lock:
            if offset > self.log_end_offset:
                raise ValueError(f"log start {offset} past the log end {self.log_end_offset}")
            if offset <= self._start_offset:
                return False
            self._start_offset = offset
            return True

    def restore_log_start(self, offset: int) -> None:
        """At open: the log start offset the checkpoint recorded (kept within the log)."""
        if self._segments:
            self._start_offset = max(
                self._start_offset, min(offset, self.log_end_offset), self._segments[0].base_offset
            )

    # -- rolling ---------------------------------------------------------------------------

    def set_segment_bytes(self, segment_bytes: int) -> None:
        """``segment.bytes`` changed: the active segment rolls past the new size."""
        self._segment_bytes = segment_bytes

    def roll_if_due(self, now_ms: int, segment_ms: int) -> bool:
        """Seal the active segment and start a new one if its first batch is ``segment_ms``
        old or older (writer thread). Whether it rolled."""
        self._check_open()
        active = self._segments[-1]
        if active.size == 0:
            return False
        first = active.header_at(0).max_timestamp
        if first < 0 or now_ms - first < segment_ms:
            return False
        with self._lock:
            if self._segments[-1] is not active:
                return False
            self._roll(active.next_offset)
        self._txn_after_roll()
        return True

    # -- deleting old segments ---------------------------------------------------------------

    def plan_deletion(
        self,
        now_ms: int,
        *,
        retention_ms: int = -1,
        retention_bytes: int = -1,
    ) -> DeletionPlan | None:
        """The oldest segments that may be deleted now (module docstring); None if none.
        ``retention_ms``/``retention_bytes`` -1: no such limit (a compact-only topic passes
        neither)."""
        self._check_open()
        with self._lock:
            segments = list(self._segments)
            start = self._start_offset
            flushed = self._flushed_offset
        excess = sum(s.size for s in segments) - retention_bytes if retention_bytes >= 0 else -1
        chosen: list[Segment] = []
        reasons: set[str] = set()
        for i, seg in enumerate(segments):
            is_last = i == len(segments) - 1
            upper = seg.next_offset if is_last else segments[i + 1].base_offset
            if upper > flushed or (is_last and seg.size == 0):
                break
            if not is_last and segments[i + 1].base_offset <= start:
                reasons.add("log start offset")
            elif retention_ms >= 0 and now_ms - seg.max_timestamp > retention_ms:
                reasons.add(f"retention.ms {retention_ms}")
            elif retention_bytes >= 0 and excess - seg.size >= 0:
                reasons.add(f"retention.bytes {retention_bytes}")
            else:
                break
            excess -= seg.size
            chosen.append(seg)
        if not chosen:
            return None
        final = chosen[-1]
        new_start = final.next_offset if final is segments[-1] else segments[len(chosen)].base_offset
        return DeletionPlan(tuple(chosen), max(new_start, start), ", ".join(sorted(reasons)))

    def delete_planned(self, plan: DeletionPlan) -> int:
        """Delete the planned segments still at the head of the log (writer thread), rolling
        first if they are all of it. Call :meth:`advance_log_start` with the plan's new log
        start (and make it durable) before. Returns how many were deleted."""
        self._check_open()
        doomed = {id(s) for s in plan.segments}
        with self._flush_lock, self._lock:
            n = 0
            while n < len(self._segments) and id(self._segments[n]) in doomed:
                n += 1
            if n == 0:
                return 0
            if n == len(self._segments):
                self._roll(self._segments[-1].next_offset)
            gone = self._segments[:n]
            del self._segments[:n]
            del self._bases[:n]
            self._dirty = [s for s in self._dirty if id(s) not in doomed]
            self._start_offset = max(self._start_offset, self._segments[0].base_offset)
            self._swaps += 1  # suspended iterators re-resolve their position
            for seg in gone:
                seg.delete_files()
        self._txn_after_roll()
        self._txn_segments_deleted()
        if self._fsync:
            fsync_dir(self._path)
        log.info(
            "partition %s: deleted %d segment%s below offset %d (%s)",
            self._path.name,
            n,
            "" if n == 1 else "s",
            self._segments[0].base_offset,
            plan.reason,
        )
        return n
