"""A durable partition log in Kafka's on-disk layout.

``<data-dir>/<topic>-<partition>/`` holds segments named by their base offset zero-padded to
20 digits: ``<base>.log`` with the v2 record batches exactly as Kafka stores them (baseOffset
is the absolute offset) and ``<base>.index``, Kafka's sparse offset index. ``PartitionLog`` owns
that directory: it assigns offsets on append, rolls segments by size, serves reads by offset or
timestamp, recovers after a crash and flushes on request (the broker groups several appends
into one flush).

Recovery at open: every segment but the last is trusted if its index passes a consistency
check; the last (active) segment, and any segment whose index is missing or inconsistent, is
scanned batch by batch (framing, magic 2, CRC-32C, increasing offsets). The first torn or
corrupt batch and everything after it is cut from the file, later segments are deleted, and a
single warning is logged on the ``kcoord.storage`` logger.

Threading: one writer. ``append``, ``truncate_to``, ``read``, ``iter_batches``,
``offset_for_timestamp``, ``close`` and ``delete`` must be called from one thread at a time (the
broker's event loop). ``flush`` may run concurrently with ``append`` and ``read`` in another
thread (e.g. via ``asyncio.to_thread``) so the fsync does not block the loop. This module does
plain blocking file I/O and never touches asyncio or sockets.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import threading
import uuid
from bisect import bisect_right
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from types import TracebackType

from protocol.batch import BatchHeader, CorruptBatch, iter_headers, set_base_offset
from storage.index import INT32_MAX
from storage.segment import INDEX_SUFFIX, LOG_SUFFIX, Cut, Segment

log = logging.getLogger("kcoord.storage")

_SEGMENT_FILE = re.compile(r"^(\d{20})(\.log|\.index)$")


class OffsetOutOfRange(Exception):
    """A read asked for an offset outside [log_start_offset, log_end_offset]."""

    def __init__(self, offset: int, log_start_offset: int, log_end_offset: int) -> None:
        super().__init__(f"offset {offset} out of range [{log_start_offset}, {log_end_offset}]")
        self.offset = offset
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset


class LogClosed(RuntimeError):
    """The log was closed or deleted."""


class PartitionLog:
    """The segments of one partition. Create with :meth:`open`."""

    def __init__(
        self,
        path: Path,
        segments: list[Segment],
        *,
        segment_bytes: int,
        index_interval_bytes: int,
        fsync: bool,
    ) -> None:
        self._path = path
        self._segments = segments
        self._bases = [s.base_offset for s in segments]
        self._segment_bytes = segment_bytes
        self._index_interval_bytes = index_interval_bytes
        self._fsync = fsync
        self._lock = threading.Lock()  # guards state shared with flush()
        self._flush_lock = threading.Lock()  # one flush at a time; excludes file deletion
        self._dirty: list[Segment] = []  # sealed segments written since the last flush
        self._dir_dirty = False
        self._flushed_offset = segments[-1].next_offset
        self._closed = False

    # -- opening and recovery --------------------------------------------------------------

    @classmethod
    def open(
        cls,
        path: Path,
        *,
        segment_bytes: int = 1 << 30,
        index_interval_bytes: int = 4096,
        fsync: bool = True,
    ) -> PartitionLog:
        """Open (creating if needed) the partition directory ``path`` and recover it."""
        if not 0 < segment_bytes <= INT32_MAX:
            raise ValueError(f"segment_bytes must be in 1..{INT32_MAX}")
        if index_interval_bytes < 0:
            raise ValueError("index_interval_bytes must be >= 0")
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)

        log_bases: set[int] = set()
        index_bases: set[int] = set()
        for entry in os.listdir(path):
            m = _SEGMENT_FILE.match(entry)
            if m:
                (log_bases if m.group(2) == LOG_SUFFIX else index_bases).add(int(m.group(1)))
        dir_changed = False
        for base in index_bases - log_bases:  # an index without its log is useless
            (path / f"{base:020d}{INDEX_SUFFIX}").unlink()
            dir_changed = True

        segments = [Segment(path, b, index_interval_bytes) for b in sorted(log_bases)]
        kept: list[Segment] = []
        cut: tuple[Segment, Cut] | None = None
        dropped: list[Segment] = []
        for i, seg in enumerate(segments):
            if kept and seg.base_offset < kept[-1].next_offset:
                cut = (kept[-1], Cut(kept[-1].size, 0, f"segment {seg.base_offset} overlaps"))
                dropped = segments[i:]
                break
            is_last = i == len(segments) - 1
            if is_last or not seg.load_sealed():
                c = seg.recover()
                if seg.base_offset not in index_bases:
                    dir_changed = True  # recover() created the index file
                if c is not None:
                    cut = (seg, c)
                    kept.append(seg)
                    dropped = segments[i + 1 :]
                    break
            kept.append(seg)

        dropped_bytes = 0
        for seg in dropped:
            with contextlib.suppress(FileNotFoundError):
                dropped_bytes += seg.log_path.stat().st_size
            seg.delete_files()
            dir_changed = True
        if cut is not None or dropped:
            _warn_recovery(path, cut, dropped, dropped_bytes)

        if not kept:
            kept.append(Segment.create(path, 0, index_interval_bytes))
            dir_changed = True
        if fsync:
            # Whatever the previous process left in the page cache becomes durable now.
            for seg in kept:
                seg.sync(index=True)
            if dir_changed:
                _fsync_dir(path)
        return cls(
            path,
            kept,
            segment_bytes=segment_bytes,
            index_interval_bytes=index_interval_bytes,
            fsync=fsync,
        )

    # -- state -----------------------------------------------------------------------------

    @property
    def path(self) -> Path:
        return self._path

    @property
    def log_start_offset(self) -> int:
        """The first offset the log can hold (the first segment's base offset)."""
        return self._segments[0].base_offset

    @property
    def log_end_offset(self) -> int:
        """The offset the next appended record will get."""
        return self._segments[-1].next_offset

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
            first = next_offset = self.log_end_offset
            assigned: list[tuple[int, BatchHeader]] = []
            for pos, h in headers:
                set_base_offset(buf, pos, next_offset)
                assigned.append((pos, replace(h, base_offset=next_offset)))
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
            except BaseException:
                for seg in self._segments[n_segments:]:
                    seg.delete_files()
                del self._segments[n_segments:]
                del self._bases[n_segments:]
                del self._dirty[n_dirty:]
                if active.size != old_size:
                    active.truncate(old_size, old_next)
                raise
        return first, next_offset - 1

    def _fits(self, seg: Segment, extra: int, h: BatchHeader) -> bool:
        """Whether batch ``h`` can follow ``extra`` pending bytes in segment ``seg``."""
        if h.last_offset - seg.base_offset > INT32_MAX:
            return False
        used = seg.size + extra
        return used == 0 or used + h.size <= self._segment_bytes

    def _roll(self, base_offset: int) -> Segment:
        seg = Segment.create(self._path, base_offset, self._index_interval_bytes)
        self._dirty.append(self._segments[-1])
        self._segments.append(seg)
        self._bases.append(base_offset)
        self._dir_dirty = True
        return seg

    def flush(self) -> None:
        """Make everything appended so far durable (fsync), then advance flushed_offset.

        Syncs the segments sealed since the last flush (log and index), the active segment's
        log (its index is rebuilt by recovery anyway) and the directory if segments were
        created. With fsync disabled only flushed_offset moves. Safe to call from another thread
        while append()/read() run.
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
                active.sync(index=False)
                if dir_dirty:
                    _fsync_dir(self._path)
            except BaseException:
                with self._lock:
                    self._dirty[:0] = sealed
                    self._dir_dirty = self._dir_dirty or dir_dirty
                raise
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
        if self._fsync:
            self.flush()

    # -- reading ---------------------------------------------------------------------------

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
        what was in the log when the call was made is yielded.
        """
        self._check_open()
        start = self.log_start_offset if start_offset is None else start_offset
        snapshot = [(seg, seg.size, seg.next_offset) for seg in self._segments]
        for seg, size, next_offset in snapshot:
            if next_offset <= start or size == 0:
                continue
            pos = seg.find(start) if start > seg.base_offset else 0
            if pos is None:
                continue
            for _, h, data in seg.scan(pos, size, verify_crc=verify_crc):
                yield h.base_offset, h, data

    def offset_for_timestamp(self, ts_ms: int) -> tuple[int, int] | None:
        """(offset, timestamp) for the first batch, in offset order, whose max timestamp >= ts_ms.

        Granularity is the batch: the offset is that batch's base offset and the timestamp its
        maxTimestamp (records are not decoded). None if no batch qualifies. The first lookup in
        a segment loaded from disk walks its batch headers once to build its time index.
        """
        self._check_open()
        for seg in self._segments:
            if seg.size == 0:
                continue
            found = seg.find_timestamp(ts_ms)
            if found is not None:
                return found
        return None

    # -- closing ---------------------------------------------------------------------------

    def close(self) -> None:
        """Flush (if fsync is on) and release file descriptors. Idempotent."""
        if self._closed:
            return
        with self._flush_lock:
            self._flush_locked()
            self._closed = True
            for seg in self._segments:
                seg.close()

    def delete(self) -> None:
        """Remove the partition directory (DeleteTopics).

        The directory is first renamed to ``<name>.<uuid>-delete`` (as Kafka does) and that
        rename fsynced, so a crash part-way through never leaves a half-deleted log that would
        load as a live partition; the renamed directory is then removed.
        """
        with self._flush_lock:
            self._closed = True
            for seg in self._segments:
                seg.close()
            doomed = self._path.with_name(f"{self._path.name}.{uuid.uuid4().hex}-delete")
            os.rename(self._path, doomed)
            if self._fsync:
                _fsync_dir(self._path.parent)
            shutil.rmtree(doomed)

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


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _warn_recovery(
    path: Path, cut: tuple[Segment, Cut] | None, dropped: list[Segment], dropped_bytes: int
) -> None:
    parts: list[str] = []
    if cut is not None:
        seg, c = cut
        if c.removed_bytes:
            parts.append(
                f"cut {c.removed_bytes} bytes from {seg.log_path.name} at position "
                f"{c.position} (next offset {seg.next_offset}): {c.reason}"
            )
        else:
            parts.append(c.reason)
    if dropped:
        names = ", ".join(s.log_path.name for s in dropped)
        parts.append(f"deleted {len(dropped)} later segment(s) ({dropped_bytes} bytes): {names}")
    log.warning("recovery of %s: %s", path, "; ".join(parts))
