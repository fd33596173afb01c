"""Key-based compaction of a partition log's sealed segments (Kafka's log cleaner, simplified).

Used for the compacted ``__consumer_offsets`` partitions: for every record key only the newest
record (by offset) survives. The rules:

* The key -> newest offset map is built from every segment, sealed and active, but only from
  batches below the log's flushed offset (compaction starts with a flush): a record may only
  supersede older ones once it is durable, or a crash could lose both.
* Only sealed segments wholly below the flushed offset are rewritten; the active segment is
  never touched. Kept records keep their original offsets, so offsets stay strictly increasing
  (with gaps) and the log end offset does not change.
* A tombstone (null value) that is the newest record for its key is dropped when its batch's
  max timestamp is older than ``now_ms - delete_retention_ms`` and it lies in a rewritten
  segment; otherwise it is kept, so consumers get ``delete.retention.ms`` to see the delete.
* Records without a key are dropped (Kafka rejects them in compacted topics).
* Transactions: the records of a transactional batch count only once their producer's marker
  is durable: a COMMIT makes them compete by offset like any record (Kafka's cleaner), an
  ABORT drops them. While the marker is not (yet) below the flushed offset they are pending:
  kept, and superseding nothing, so a later abort cannot leave a key without its older
  value; the first tombstone after a pending record of its key is kept too, even if
  superseded or droppable (on replay it removes that pending record). Control batches
  (markers) are always kept verbatim, so no kept transactional record loses its marker. The
  ``.txnindex`` entries of a group's segments are carried into the merged segment's.
* A batch keeps its base offset, last offset delta (so its offset span), timestamps,
  compression codec, producer id/epoch, base sequence and leader epoch. A batch whose records
  all survive is copied byte for byte; one that lost some is re-encoded from the survivors with
  ``protocol.record_encoding``; one that lost all is dropped.
* Adjacent sealed segments are merged while the cleaned result stays within ``segment_bytes``
  (and the offsets within the index's int32 range); the merged segment takes the base offset
  of the first one. A single segment that would come out unchanged is left alone. A group
  whose records all went is deleted, except that the log's first segment is kept (empty) so the
  log start offset does not move.

Two phases, so that requests are not blocked (``storage.cleaning`` documents the file protocol):

1. :func:`prepare_compaction` only reads segments (through private file handles) and writes
   ``<base>.log.cleaned``/``<base>.index.cleaned``/``<base>.timeindex.cleaned`` files (the
   indexes built exactly as a segment builds them while appending, sealed with the time
   index's final entry). It may run in a worker thread while
   the event loop keeps appending and serving reads.
2. :func:`commit_compaction` swaps the files in on the writer thread (``replace_sealed``); it is
   short: renames, deletes, two directory fsyncs and loading the new segments' indexes. If the
   log was truncated or closed in between, the plan is discarded (``stats.stale``).

:func:`compact` runs both in the calling thread.

The rules about records (the key map, tombstones, keyless records, transactions, what becomes
of a batch) are engine-neutral and live in ``storage.compaction_rules``, which the PostgreSQL
engine applies too; this module owns what is about segments: which are sealed, merging them,
the cleaned files and their indexes.
"""

from __future__ import annotations

import contextlib
import os
import struct
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from kcoord.protocol.batch import CorruptBatch
from kcoord.storage.cleaning import CleaningSnapshot
from kcoord.storage.compaction_rules import (
    DEFAULT_DELETE_RETENTION_MS,
    Batch,
    BatchFilter,
    CompactionStats,
    PreparedCompaction,
    surviving_offsets,
)
from kcoord.storage.index import INT32_MAX, pwrite_all
from kcoord.storage.recovery import CLEANED_SUFFIX, cleaned_path
from kcoord.storage.segment import INDEX_SUFFIX, LOG_SUFFIX, SCAN_CHUNK, TIMEINDEX_SUFFIX, Segment
from kcoord.storage.time_index import NO_TIMESTAMP
from kcoord.storage.txn_index import TXN_INDEX_SUFFIX

__all__ = [
    "DEFAULT_DELETE_RETENTION_MS",
    "CompactionPlan",
    "CompactionStats",
    "abort_compaction",
    "commit_compaction",
    "compact",
    "prepare_compaction",
]


class CleanableLog(Protocol):
    """What compaction needs of a log (``storage.log.PartitionLog``, through
    ``storage.cleaning``)."""

    @property
    def path(self) -> Path: ...

    def flush(self) -> None: ...

    def begin_cleaning(self) -> CleaningSnapshot: ...

    def end_cleaning(self, snapshot: CleaningSnapshot) -> None: ...

    def replace_sealed(
        self,
        snapshot: CleaningSnapshot,
        replacements: Sequence[tuple[Sequence[Segment], int | None]],
    ) -> bool: ...


_INDEX_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")


@dataclass(eq=False)
class CompactionPlan(PreparedCompaction):
    """The result of phase 1: cleaned files on disk and how they replace the sealed segments."""

    snapshot: CleaningSnapshot | None
    replacements: list[tuple[list[Segment], int | None]] = field(default_factory=list)
    stats: CompactionStats = field(default_factory=CompactionStats)


def compact(
    log: CleanableLog, *, now_ms: int, delete_retention_ms: int = DEFAULT_DELETE_RETENTION_MS
) -> CompactionStats:
    """Compact the log's sealed segments in the calling thread (both phases)."""
    plan = prepare_compaction(log, now_ms=now_ms, delete_retention_ms=delete_retention_ms)
    return commit_compaction(log, plan)


def prepare_compaction(
    log: CleanableLog, *, now_ms: int, delete_retention_ms: int = DEFAULT_DELETE_RETENTION_MS
) -> CompactionPlan:
    """Phase 1 (any thread): flush, build the offset map and write the cleaned files.

    Raises ``storage.cleaning.CleaningInProgress`` if another compaction of this log is under way.
    The returned plan must be passed to :func:`commit_compaction` or :func:`abort_compaction`.
    """
    started = time.perf_counter()
    log.flush()
    snap = log.begin_cleaning()
    plan = CompactionPlan(snap)
    try:
        if snap.sealed:
            _Cleaner(snap, now_ms - delete_retention_ms, plan).run()
    except BaseException:
        _discard(log, plan)
        raise
    plan.stats.seconds = time.perf_counter() - started
    return plan


def commit_compaction(log: CleanableLog, plan: PreparedCompaction) -> CompactionStats:
    """Phase 2 (writer thread): swap the cleaned files in. Returns the plan's stats."""
    plan = _own(plan)
    if plan.snapshot is None:
        raise ValueError("plan already committed or aborted")
    started = time.perf_counter()
    snap, plan.snapshot = plan.snapshot, None
    stats = plan.stats
    if not log.replace_sealed(snap, plan.replacements):
        stats.discard()
    stats.seconds += time.perf_counter() - started
    return stats


def abort_compaction(log: CleanableLog, plan: PreparedCompaction) -> None:
    """Delete a prepared plan's cleaned files and end the cleaning without changing the log."""
    _discard(log, _own(plan))


def _own(plan: PreparedCompaction) -> CompactionPlan:
    if not isinstance(plan, CompactionPlan):
        raise ValueError(f"not a plan of the files engine: {type(plan).__name__}")
    return plan


def _discard(log: CleanableLog, plan: CompactionPlan) -> None:
    snap, plan.snapshot = plan.snapshot, None
    if snap is None:
        return
    try:
        # Only one cleaning runs at a time, so every .cleaned file in the directory is ours.
        for entry in os.listdir(log.path):
            if entry.endswith(CLEANED_SUFFIX):
                with contextlib.suppress(OSError):
                    (log.path / entry).unlink()
    except OSError:
        pass  # the directory is gone (the log was deleted)
    finally:
        log.end_cleaning(snap)


# -- phase 1 -------------------------------------------------------------------------------


@dataclass(slots=True)
class _Cleaned:
    """One input segment's surviving batches and (size, last offset) of each.

    A piece is either a re-encoded batch or a (position, size) range of batches kept verbatim,
    copied from ``reader`` when written (so unchanged data is never held in memory).
    ``batches`` holds (size, last offset, max timestamp) of each surviving batch.
    """

    segment: Segment
    reader: Segment
    pieces: list[bytes | tuple[int, int]]
    batches: list[tuple[int, int, int]]
    size: int
    records: int
    unchanged: bool


class _Group:
    """Adjacent cleaned segments that become one output segment."""

    def __init__(self, base: int) -> None:
        self.base = base
        self.members: list[_Cleaned] = []
        self.size = 0
        self.fd: int | None = None
        self.written = 0
        self.entries: list[tuple[int, int]] = []
        self.times: list[tuple[int, int]] = []  # (timestamp, relative offset)
        self.since_index = 0
        self.max_ts = NO_TIMESTAMP
        self.max_offset = base


class _Cleaner:
    def __init__(self, snap: CleaningSnapshot, tombstone_horizon_ms: int, plan: CompactionPlan):
        self.snap = snap
        self.horizon = tombstone_horizon_ms
        self.plan = plan
        self.stats = plan.stats
        self.directory = snap.segments[0].log_path.parent

    def run(self) -> None:
        snap = self.snap
        surviving, self.stats.tombstones_dropped = surviving_offsets(
            self._batches(),
            durable_end=snap.flushed_offset,
            cleanable_end=snap.segments[snap.sealed - 1].next_offset,
            horizon_ms=self.horizon,
        )
        self.stats.segments_before = snap.sealed
        keep = BatchFilter(surviving)
        group: _Group | None = None
        try:
            for i in range(snap.sealed):
                seg = snap.segments[i]
                cleaned = self._clean_segment(snap.readers[i], seg, keep)
                self.stats.bytes_before += snap.readers[i].size
                if group is not None and (
                    group.size + cleaned.size > snap.segment_bytes
                    or seg.next_offset - 1 - group.base > INT32_MAX
                ):
                    done, group = group, None
                    self._finish(done)
                if group is None:
                    group = _Group(seg.base_offset)
                self._add(group, cleaned)
            assert group is not None
            done, group = group, None
            self._finish(done)
        finally:
            if group is not None and group.fd is not None:
                os.close(group.fd)

    def _batches(self) -> Iterator[Batch]:
        """Every batch of every segment, sealed and active, in offset order. The sealed
        segments hold exactly the batches ending at or below the last sealed one's next
        offset, so that offset is where the cleanable part ends."""
        for reader in self.snap.readers:
            for _, h, data in reader.scan(0, reader.size):
                yield h.base_offset, h, data

    def _clean_segment(self, reader: Segment, segment: Segment, keep: BatchFilter) -> _Cleaned:
        pieces: list[bytes | tuple[int, int]] = []
        batches: list[tuple[int, int, int]] = []
        size = records_before = records = 0
        unchanged = True
        for pos, h, data in reader.scan(0, reader.size):
            records_before += h.records_count
            verdict = keep.decide(h, data)
            out: bytes | tuple[int, int]
            if verdict.action == "drop":
                unchanged = False
                continue
            if verdict.data is None:
                out = (pos, h.size)
            else:
                out = verdict.data
                unchanged = False
            n = verdict.records
            out_size = out[1] if isinstance(out, tuple) else len(out)
            if isinstance(out, tuple) and pieces and isinstance(pieces[-1], tuple):
                prev_pos, prev_size = pieces[-1]
                if prev_pos + prev_size == pos:  # coalesce adjacent verbatim batches
                    out = (prev_pos, prev_size + out_size)
                    pieces.pop()
            pieces.append(out)
            batches.append((out_size, h.last_offset, h.max_timestamp))
            size += out_size
            records += n
        self.stats.records_before += records_before
        self.stats.records_after += records
        return _Cleaned(segment, reader, pieces, batches, size, records, unchanged)

    # -- output ----------------------------------------------------------------------------

    def _add(self, group: _Group, cleaned: _Cleaned) -> None:
        group.members.append(cleaned)
        group.size += cleaned.size
        # A lone unchanged segment may be left alone: only write once that is ruled out.
        if group.fd is None and (len(group.members) > 1 or not cleaned.unchanged):
            group.fd = os.open(
                cleaned_path(self.directory, group.base, LOG_SUFFIX),
                os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
                0o644,
            )
            for member in group.members:
                self._write(group, member)
        elif group.fd is not None:
            self._write(group, cleaned)

    def _write(self, group: _Group, cleaned: _Cleaned) -> None:
        assert group.fd is not None
        interval = self.snap.index_interval_bytes
        pos = group.written
        for size, last_offset, max_ts in cleaned.batches:
            if max_ts > group.max_ts:
                group.max_ts, group.max_offset = max_ts, last_offset
            if group.since_index >= interval:
                group.entries.append((last_offset - group.base, pos))
                _maybe_add_time(group.times, group.max_ts, group.max_offset - group.base)
                group.since_index = 0
            group.since_index += size
            pos += size
        at = group.written
        for piece in cleaned.pieces:
            if isinstance(piece, bytes):
                pwrite_all(group.fd, piece, at)
                at += len(piece)
                continue
            src, remaining = piece
            while remaining:
                chunk = cleaned.reader.pread(min(remaining, SCAN_CHUNK), src)
                if not chunk:
                    raise CorruptBatch(f"{cleaned.reader.log_path} shrank while being cleaned")
                pwrite_all(group.fd, chunk, at)
                src += len(chunk)
                at += len(chunk)
                remaining -= len(chunk)
        assert at == pos
        cleaned.pieces = []  # written: free the memory
        group.written = pos

    def _finish(self, group: _Group) -> None:
        snap, stats = self.snap, self.stats
        old = [m.segment for m in group.members]
        if group.fd is None:  # a single unchanged segment: keep it as it is
            stats.segments_after += 1
            stats.bytes_after += group.size
            return
        keep_empty = old[0] is snap.segments[0]  # the log start offset must not move
        if group.size == 0 and not keep_empty:
            os.close(group.fd)
            cleaned_path(self.directory, group.base, LOG_SUFFIX).unlink()
            self.plan.replacements.append((old, None))
            return
        try:
            if snap.fsync:
                os.fsync(group.fd)
        finally:
            os.close(group.fd)
        self.plan.replacements.append((old, group.base))
        _maybe_add_time(group.times, group.max_ts, group.max_offset - group.base)  # sealed
        _write_index(
            cleaned_path(self.directory, group.base, INDEX_SUFFIX),
            b"".join(_INDEX_ENTRY.pack(r, p) for r, p in group.entries),
            snap.fsync,
        )
        _write_index(
            cleaned_path(self.directory, group.base, TIMEINDEX_SUFFIX),
            b"".join(_TIME_ENTRY.pack(t, r) for t, r in group.times),
            snap.fsync,
        )
        _write_index(  # the aborted transactions of the merged segments, for read_committed
            cleaned_path(self.directory, group.base, TXN_INDEX_SUFFIX),
            b"".join(e.encode() for seg in old for e in seg.txn_index.entries()),
            snap.fsync,
        )
        stats.segments_after += 1
        stats.bytes_after += group.size


def _maybe_add_time(times: list[tuple[int, int]], timestamp: int, rel_offset: int) -> None:
    """A time index entry if the timestamp grew (``storage.time_index``'s rule)."""
    if timestamp != NO_TIMESTAMP and (not times or timestamp > times[-1][0]):
        times.append((timestamp, rel_offset))


def _write_index(path: os.PathLike[str], blob: bytes, fsync: bool) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        pwrite_all(fd, blob, 0)
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)
