"""A durable partition log in Kafka's on-disk layout.

``<data-dir>/<topic>-<partition>/`` holds segments named by their base offset zero-padded to
20 digits: ``<base>.log`` with the v2 record batches exactly as Kafka stores them (baseOffset
is the absolute offset), ``<base>.index``, Kafka's sparse offset index, and ``<base>.timeindex``,
Kafka's time index. ``PartitionLog`` owns that directory: it assigns offsets on append, rolls
segments by size, serves reads by offset or timestamp, recovers after a crash and flushes on
request (the broker groups several appends into one flush). Segment files are opened lazily
through a bounded pool of descriptors (``storage.files``).

Recovery at open (checking or rebuilding the segments, cutting a torn tail, reporting lost
data) is ``storage.recovery``'s.

Offline logs (``storage.offline``): a partition that cannot be opened (``storage.file_engine.open_or_offline``)
or whose files are lost under the running broker gets a log on which every operation raises
``LogOffline``.

Threading: one writer. ``append``, ``truncate_to``, ``read``, ``iter_batches``,
``offset_for_timestamp``, ``max_timestamp_batch``, ``replace_sealed``, ``close`` and ``delete``
must be called from one thread at a time (the broker's event loop). ``flush`` may run concurrently with ``append`` and
``read`` in another thread (e.g. via ``asyncio.to_thread``) so the fsync does not block the loop,
and so may ``begin_cleaning`` and reading through the private handles it returns. This module
does plain blocking file I/O and never touches asyncio or sockets.

Producer state, snapshots, the aborted-transaction indexes and the last stable offset are
``storage.txn_log``'s (mixed in).

Compaction: ``storage.compaction`` decides what to keep and ``storage.cleaning`` (mixed into
``PartitionLog``) hands the cleaner a snapshot and swaps the cleaned files in. The log start
offset, rolls by time and deleting old segments are ``storage.retention``'s (mixed in too). Crash leftovers
of compaction and what recovery reports are handled by ``storage.recovery``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
import uuid
from bisect import bisect_right
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType

from kcoord.protocol.batch import BatchHeader, CorruptBatch, iter_headers, set_base_offset
from kcoord.storage.cleaning import CleaningMixin
from kcoord.storage.compaction import (
    CompactionPlan,
    CompactionStats,
    abort_compaction,
    commit_compaction,
    prepare_compaction,
)
from kcoord.storage.compaction_rules import PreparedCompaction
from kcoord.storage.engine import LogClosed, OffsetOutOfRange
from kcoord.storage.files import DEFAULT_POOL, FilePool, describe_error, fsync_dir
from kcoord.storage.index import INT32_MAX
from kcoord.storage.journal import JournaledLog
from kcoord.storage.offline import LogOffline, report_went_offline
from kcoord.storage.recovery import recover_segments
from kcoord.storage.retention import RetentionMixin
from kcoord.storage.segment import Segment
from kcoord.storage.txn_log import DEFAULT_PRODUCER_EXPIRATION_MS, TxnLogMixin


class PartitionLog(CleaningMixin, TxnLogMixin, RetentionMixin, JournaledLog):
    """The segments of one partition. Create with :meth:`open` (or :meth:`fresh` for a
    directory :meth:`initialize` just made, or :meth:`offline_log`)."""

    def __init__(
        self,
        path: Path,
        segments: list[Segment],
        *,
        segment_bytes: int,
        index_interval_bytes: int,
        fsync: bool,
        pool: FilePool | None = None,
        offline: LogOffline | None = None,
        producer_expiration_ms: int = DEFAULT_PRODUCER_EXPIRATION_MS,
        clock: Callable[[], int] | None = None,
    ) -> None:
        self._path = path
        self._segments = segments
        self._bases = [s.base_offset for s in segments]
        self._segment_bytes = segment_bytes
        self._index_interval_bytes = index_interval_bytes
        self._fsync = fsync
        self._pool = pool or DEFAULT_POOL
        self._lock = threading.Lock()  # guards state shared with flush()
        self._flush_lock = threading.Lock()  # one flush at a time; excludes file deletion
        self._dirty: list[Segment] = []  # sealed segments written since the last flush
        self._dir_dirty = False
        self._flushed_offset = segments[-1].next_offset if segments else -1
        self._closed = False
        self._offline = offline
        self._truncations = 0  # bumped by truncate_to: invalidates a cleaning in progress
        self._swaps = 0  # bumped by replace_sealed: tells suspended iterators to re-resolve
        self._cleaning = False
        self._start_offset = segments[0].base_offset if segments else -1
        self._txn_init(producer_expiration_ms, clock)

    # -- opening and recovery --------------------------------------------------------------

    @classmethod
    def open(
        cls,
        path: Path,
        *,
        segment_bytes: int = 1 << 30,
        index_interval_bytes: int = 4096,
        fsync: bool = True,
        compacted: bool = False,
        pool: FilePool | None = None,
        producer_expiration_ms: int = DEFAULT_PRODUCER_EXPIRATION_MS,
        clock: Callable[[], int] | None = None,
    ) -> PartitionLog:
        """Open (creating if needed) the partition directory ``path`` and recover it, its
        producer state too (``storage.txn_log``).

        ``compacted``: the log is compacted, so offsets may legitimately be missing between
        segments (otherwise a gap is reported as lost data). ``clock``: wall clock in ms for
        the producer state.
        """
        if not 0 < segment_bytes <= INT32_MAX:
            raise ValueError(f"segment_bytes must be in 1..{INT32_MAX}")
        if index_interval_bytes < 0:
            raise ValueError("index_interval_bytes must be >= 0")
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)

        segments = recover_segments(
            path,
            index_interval_bytes=index_interval_bytes,
            fsync=fsync,
            compacted=compacted,
            pool=pool,
        )
        plog = cls(
            path,
            segments,
            segment_bytes=segment_bytes,
            index_interval_bytes=index_interval_bytes,
            fsync=fsync,
            pool=pool,
            producer_expiration_ms=producer_expiration_ms,
            clock=clock,
        )
        plog._txn_recover()
        return plog

    @staticmethod
    def initialize(path: Path, *, fsync: bool = True) -> None:
        """Create the files of a new, empty partition in the existing directory ``path`` (one
        empty segment at offset 0), fsyncing the directory if ``fsync``."""
        Segment.create_files(path, 0)
        if fsync:
            fsync_dir(path)

    @classmethod
    def fresh(
        cls,
        path: Path,
        *,
        segment_bytes: int = 1 << 30,
        index_interval_bytes: int = 4096,
        fsync: bool = True,
        pool: FilePool | None = None,
        producer_expiration_ms: int = DEFAULT_PRODUCER_EXPIRATION_MS,
        clock: Callable[[], int] | None = None,
    ) -> PartitionLog:
        """The log of a directory :meth:`initialize` just made, built without any file I/O
        (the new partition holds no descriptor until it is used)."""
        return cls(
            Path(path),
            [Segment.empty(Path(path), 0, index_interval_bytes, pool)],
            segment_bytes=segment_bytes,
            index_interval_bytes=index_interval_bytes,
            fsync=fsync,
            pool=pool,
            producer_expiration_ms=producer_expiration_ms,
            clock=clock,
        )

    @classmethod
    def offline_log(cls, path: Path, cause: BaseException | str) -> PartitionLog:
        """A log for the partition at ``path`` that could not be opened: every operation
        raises LogOffline; offsets read as -1."""
        return cls(
            Path(path),
            [],
            segment_bytes=1 << 30,
            index_interval_bytes=4096,
            fsync=False,
            offline=LogOffline(Path(path), cause),
        )

    # -- state -----------------------------------------------------------------------------

    @property
    def path(self) -> Path:
        return self._path

    @property
    def name(self) -> str:
        """``<topic>-<partition>``: the directory's name."""
        return self._path.name

    @property
    def offline(self) -> LogOffline | None:
        """Why the log is offline, or None if it is not."""
        return self._offline

    @property
    def log_start_offset(self) -> int:
        """The first offset the log can hold: the first segment's base offset, or later
        (DeleteRecords, ``storage.retention``); -1 if the log was never opened (offline at
        start-up)."""
        return self._start_offset

    @property
    def log_end_offset(self) -> int:
        """The offset the next appended record will get."""
        return self._segments[-1].next_offset if self._segments else -1

    @property
    def high_watermark(self) -> int:
        """Single node: everything appended is committed."""
        return self.log_end_offset

    @property
    def flushed_offset(self) -> int:
        """Every offset below this has been fsynced (or handed to the OS when fsync is off)."""
        return self._flushed_offset

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    @property
    def segment_base_offsets(self) -> list[int]:
        return list(self._bases)

    @property
    def compactable(self) -> bool:
        """Whether there is a sealed segment (compaction never touches the active one)."""
        return len(self._bases) >= 2

    def _go_offline(self, cause: BaseException | str, lost: str) -> LogOffline:
        """Take the log offline (once), logging why and which offsets are affected."""
        if self._offline is None:
            self._offline = LogOffline(self._path, cause)
            report_went_offline(self._path, cause, lost)
        return self._offline

    # -- writing ---------------------------------------------------------------------------

    def append(self, batches: bytes | bytearray | memoryview) -> tuple[int, int]:
        """Append one or more whole v2 batches, assigning offsets from log_end_offset.

        Every batch is validated (framing, magic, CRC) before anything is written; on any
        invalid batch CorruptBatch is raised and the log is unchanged. The caller's buffer is
        not modified. Does not fsync. Returns (first offset, last offset) assigned.
        """
        self._check_open()
        buf = bytearray(batches)
        if not buf:
            raise CorruptBatch("no record batches")
        headers = iter_headers(buf, verify_crc=True)
        view = memoryview(buf)
        with self._lock:
            if self._closed:  # detached by a worker thread since the check above
                raise LogClosed(f"log {self._path} is closed")
            first = next_offset = self.log_end_offset
            assigned: list[tuple[int, BatchHeader]] = []
            for pos, h in headers:
                set_base_offset(buf, pos, next_offset)
                assigned.append((pos, h.rebased(next_offset)))
                next_offset += h.last_offset_delta + 1

            n_segments = len(self._segments)
            n_dirty = len(self._dirty)
            active = self._segments[-1]
            old_size, old_next = active.size, active.next_offset
            try:
                i = 0
                while i < len(assigned):
                    seg = self._segments[-1]
                    if not self._fits(seg, 0, assigned[i][1]):
                        seg = self._roll(assigned[i][1].base_offset)
                    j = i
                    extra = 0
                    while j < len(assigned) and self._fits(seg, extra, assigned[j][1]):
                        extra += assigned[j][1].size
                        j += 1
                    start = assigned[i][0]
                    seg.append(
                        view[start : start + extra],
                        [(pos - start, h) for pos, h in assigned[i:j]],
                    )
                    i = j
            except BaseException as e:
                self._txn_discard_rolls()
                for seg in self._segments[n_segments:]:
                    with contextlib.suppress(OSError):
                        seg.delete_files()
                del self._segments[n_segments:]
                del self._bases[n_segments:]
                del self._dirty[n_dirty:]
                try:
                    if active.size != old_size:
                        active.truncate(old_size, old_next)
                except OSError as undo:
                    raise self._go_offline(
                        f"an append failed ({describe_error(e)}) and could not be undone"
                        f" ({describe_error(undo)})",
                        f"offsets from {old_next} on are in doubt",
                    ) from e
                if isinstance(e, FileNotFoundError):
                    raise self._go_offline(
                        e, f"offsets {active.base_offset} to {old_next - 1} are lost"
                    ) from e
                raise
            self._journal_appended(buf)
        self._txn_appended(buf, assigned)
        return first, next_offset - 1

    def _fits(self, seg: Segment, extra: int, h: BatchHeader) -> bool:
        """Whether batch ``h`` can follow ``extra`` pending bytes in segment ``seg``."""
        if h.last_offset - seg.base_offset > INT32_MAX:
            return False
        used = seg.size + extra
        return used == 0 or used + h.size <= self._segment_bytes

    def _roll(self, base_offset: int) -> Segment:
        self._sync_before_roll()  # journaled (storage.journal)
        seg = Segment.create(self._path, base_offset, self._index_interval_bytes, self._pool)
        self._segments[-1].seal()  # sealed: its indexes are complete on disk
        self._sealed_pending.append(self._segments[-1])  # storage.txn_log: _txn_after_roll
        self._dirty.append(self._segments[-1])
        self._segments.append(seg)
        self._bases.append(base_offset)
        self._dir_dirty = True
        return seg

    compaction_commits_anywhere = False  # segment files are swapped under the appends
    shared_flush = None  # each file is fsynced alone, in parallel (or the journal's: use_journal)

    def flush(self) -> None:
        """Make everything appended so far durable (fsync), then advance flushed_offset.

        Syncs the segments sealed since the last flush (log and indexes), the active segment's
        log (its indexes are rebuilt by recovery anyway) and the directory if segments were
        created. With fsync disabled only flushed_offset moves. Safe to call from another thread
        while append()/read() run.

        If the active segment's file turns out to have been deleted (no link left, or gone),
        what was appended to it would vanish at the next start: the log goes offline and
        LogOffline is raised instead of flushed_offset moving.
        """
        with self._flush_lock:
            self._check_open()
            self._flush_locked()

    def _flush_locked(self) -> None:
        with self._lock:
            target = self.log_end_offset
            active = self._segments[-1]
            sealed, self._dirty = self._dirty, []
            dir_dirty, self._dir_dirty = self._dir_dirty, False
        if self._fsync:
            try:
                for seg in sealed:
                    seg.sync(index=True)
                written = active.sync(index=False)
                if dir_dirty:
                    fsync_dir(self._path)
                gone = written and active.unlinked()
            except FileNotFoundError:
                gone = True
            except BaseException:
                with self._lock:
                    self._dirty[:0] = sealed
                    self._dir_dirty = self._dir_dirty or dir_dirty
                raise
            if gone:
                raise self._go_offline(
                    f"segment file {active.log_path.name} was deleted while in use",
                    f"offsets {active.base_offset} to {target - 1} (durable up to"
                    f" {self._flushed_offset - 1}) are lost at the next start",
                )
        with self._lock:
            self._flushed_offset = max(self._flushed_offset, target)

    def truncate_to(self, offset: int) -> None:
        """Remove every batch holding an offset >= ``offset``.

        Works at batch granularity: if ``offset`` falls inside a batch the whole batch goes and
        log_end_offset becomes that batch's base offset. Durable on return when fsync is on.
        """
        self._check_open()
        if offset >= self.log_end_offset:
            return
        if offset < self.log_start_offset:
            raise OffsetOutOfRange(offset, self.log_start_offset, self.log_end_offset)
        with self._flush_lock, self._lock:
            self._truncations += 1
            while len(self._segments) > 1 and self._segments[-1].base_offset >= offset:
                gone = self._segments.pop()
                self._bases.pop()
                if gone in self._dirty:
                    self._dirty.remove(gone)
                gone.delete_files()
                self._dir_dirty = True
            seg = self._segments[-1]
            if seg in self._dirty:
                self._dirty.remove(seg)
            pos = seg.find(offset)
            if pos is not None:
                seg.truncate(pos, seg.header_at(pos).base_offset)
            self._flushed_offset = min(self._flushed_offset, self.log_end_offset)
        self._txn_truncated(self.log_end_offset)
        if self._fsync:
            self.flush()

    # -- reading ---------------------------------------------------------------------------

    # Segment files are read through the page cache, and their time indexes are in memory.
    looks_up_locally = True

    def reads_locally(self, offset: int) -> bool:
        return True

    def read(self, offset: int, max_bytes: int) -> bytes:
        """Whole batches starting with the one holding ``offset``, about ``max_bytes`` worth.

        As in Kafka the first batch may start before ``offset``; at least one whole batch is
        returned whenever one exists at or after ``offset``, even if larger than ``max_bytes``,
        and never a partial batch. Data comes from one segment per call. Returns b"" at
        log_end_offset; raises OffsetOutOfRange outside [log_start_offset, log_end_offset].
        """
        self._check_open()
        end = self.log_end_offset
        if offset < self.log_start_offset or offset > end:
            raise OffsetOutOfRange(offset, self.log_start_offset, end)
        i = bisect_right(self._bases, offset) - 1
        for seg in self._segments[max(i, 0) :]:
            pos = seg.find(offset)
            if pos is not None:
                return seg.read(pos, max_bytes)
        return b""

    def iter_batches(
        self, start_offset: int | None = None, *, verify_crc: bool = False
    ) -> Iterator[tuple[int, BatchHeader, memoryview]]:
        """Yield (base offset, header, batch bytes) for every batch from ``start_offset`` on.

        The first batch may start before ``start_offset`` (it is the one holding it). Segments
        are read in large chunks; each memoryview stays valid after iteration moves on. Only
        what was in the log when the call was made is yielded. If compaction swaps segments
        (``replace_sealed``) while the iterator is suspended, it continues after the last batch
        it yielded on the new segments, so it yields what compaction kept from there on.
        """
        self._check_open()
        start = self.log_start_offset if start_offset is None else start_offset
        end = self.log_end_offset
        swaps = self._swaps
        resumed = False
        snapshot = [(seg, seg.size, seg.next_offset) for seg in self._segments]
        while True:
            resume_at: int | None = None
            for seg, size, next_offset in snapshot:
                if next_offset <= start or size == 0:
                    continue
                pos = seg.find(start) if start > seg.base_offset else 0
                if pos is None:
                    continue
                for _, h, data in seg.scan(pos, size, verify_crc=verify_crc):
                    if resumed and h.base_offset >= end:
                        return
                    yield h.base_offset, h, data
                    if self._swaps != swaps:  # segments were replaced while we were suspended
                        resume_at = h.next_offset
                        break
                if resume_at is not None:
                    break
            if resume_at is None:
                return
            self._check_open()
            sizes = {id(seg): size for seg, size, _ in snapshot}
            start, swaps, resumed = resume_at, self._swaps, True
            snapshot = [
                (seg, sizes.get(id(seg), seg.size), seg.next_offset) for seg in self._segments
            ]

    def offset_for_timestamp(self, ts_ms: int) -> tuple[int, int] | None:
        """(offset, timestamp) for the first batch, in offset order, whose max timestamp >= ts_ms.

        Granularity is the batch: the offset is that batch's base offset and the timestamp its
        maxTimestamp (records are not decoded). None if no batch qualifies. Segments whose
        largest timestamp is too small are skipped without reading them; in the segment that
        qualifies, the time index says where to start and a few batch headers are walked.
        """
        self._check_open()
        for seg in self._segments:
            if seg.size == 0 or seg.max_timestamp < ts_ms:
                continue
            found = seg.find_timestamp(ts_ms)
            if found is not None:
                return found
        return None

    def max_timestamp_batch(self) -> tuple[int, int] | None:
        """(base offset, max timestamp) of the first batch carrying the log's largest timestamp
        (ListOffsets MAX_TIMESTAMP), or None if the log is empty.

        Each segment knows its largest timestamp and where it is (time index), so this reads a
        few batch headers of one segment, never the whole log. Decode that one batch to find
        the record.
        """
        self._check_open()
        best: Segment | None = None
        for seg in self._segments:
            if seg.size and (best is None or seg.max_timestamp > best.max_timestamp):
                best = seg
        return best.max_timestamp_batch() if best is not None else None

    # -- compaction (storage.compaction) -----------------------------------------------------

    def prepare_compaction(self, *, now_ms: int, delete_retention_ms: int) -> CompactionPlan:
        """Phase 1 (any thread): the cleaned files, written beside the segments."""
        return prepare_compaction(self, now_ms=now_ms, delete_retention_ms=delete_retention_ms)

    def commit_compaction(self, plan: PreparedCompaction) -> CompactionStats:
        """Phase 2 (the writer): swap the cleaned files in."""
        return commit_compaction(self, plan)

    def abort_compaction(self, plan: PreparedCompaction) -> None:
        abort_compaction(self, plan)

    def close(self) -> None:
        """Flush (if fsync is on) and release file descriptors. Idempotent.

        The descriptors are released even if the flush fails (the error propagates)."""
        if self._closed:
            return
        with self._flush_lock:
            try:
                if self._offline is None:
                    self._flush_locked()
                    self._txn_closing()
            finally:
                self._closed = True
                for seg in self._segments:
                    seg.close()

    def delete(self) -> None:
        """Remove the partition directory (DeleteTopics).

        The directory is first renamed to ``<name>.<uuid>-delete`` (as Kafka does) and that
        rename fsynced, so a crash part-way through never leaves a half-deleted log that would
        load as a live partition; the renamed directory is then removed.
        """
        doomed = self.detach()
        if self._fsync:
            fsync_dir(self._path.parent)
        shutil.rmtree(doomed)

    def detach(self) -> Path:
        """Close the log and rename its directory to ``<name>.<uuid>-delete`` (a name the
        loader removes); returns the new path. The caller fsyncs the parent directory and
        removes the renamed one (many partitions: one fsync, removal off the event loop).
        Any thread: an append running on the event loop finishes first or gets LogClosed."""
        with self._flush_lock, self._lock:
            self._closed = True
            for seg in self._segments:
                with contextlib.suppress(OSError):
                    seg.close()
            doomed = self._path.with_name(f"{self._path.name}.{uuid.uuid4().hex}-delete")
            os.rename(self._path, doomed)
            return doomed

    def __enter__(self) -> PartitionLog:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosed(f"log {self._path} is closed")
        if self._offline is not None:
            raise self._offline

