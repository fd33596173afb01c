"""One log segment: a ``<base>.log`` file of v2 record batches plus its ``<base>.index``.

A segment owns its two files and the per-segment bookkeeping: valid byte size, next offset,
the sparse offset index, and a sparse in-memory time index (the running maximum batch
timestamp at each offset-index entry, built lazily for segments loaded from disk). It knows how
to recover itself (validate every batch, cut at the first bad one), walk batch headers without
reading record bodies, scan whole batches in large chunks, and read whole batches for Fetch.

Segments do plain synchronous file I/O through raw descriptors (``os.pread``/``os.pwrite``);
``PartitionLog`` decides when to roll, flush or delete them and serialises all writers.
"""

from __future__ import annotations

import contextlib
import os
from bisect import bisect_left
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from protocol.batch import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    CorruptBatch,
    crc_ok,
    parse_header,
    peek_size,
)
from storage.index import INT32_MAX, OffsetIndex, pwrite_all

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
NO_TIMESTAMP = -1

SCAN_CHUNK = 8 << 20  # whole-batch scans (recovery, replay)
WALK_CHUNK = 16 << 10  # header-only walks near an index entry
BUILD_CHUNK = 1 << 20  # header-only walks over a whole segment


def segment_name(base_offset: int) -> str:
    """Kafka's file stem: the base offset zero-padded to 20 digits."""
    return f"{base_offset:020d}"


@dataclass(frozen=True, slots=True)
class Cut:
    """What recovery removed from a segment."""

    position: int  # first byte removed
    removed_bytes: int
    reason: str


class Segment:
    """A ``.log``/``.index`` pair starting at ``base_offset``."""

    def __init__(self, directory: Path, base_offset: int, index_interval_bytes: int) -> None:
        self.base_offset = base_offset
        stem = segment_name(base_offset)
        self.log_path = directory / (stem + LOG_SUFFIX)
        self.index = OffsetIndex(directory / (stem + INDEX_SUFFIX), base_offset)
        self.index_interval_bytes = index_interval_bytes
        self.size = 0  # bytes of whole, valid batches
        self.next_offset = base_offset  # one past the last offset held
        self._fd: int | None = None
        self._bytes_since_index = 0
        # Time index: _ts_marks[i] is the max timestamp of all batches before index entry i;
        # _max_ts the max over the whole segment. None until known (built lazily).
        self._ts_marks: list[int] | None = None
        self._max_ts: int | None = None

    # -- lifecycle -------------------------------------------------------------------------

    @classmethod
    def create(cls, directory: Path, base_offset: int, index_interval_bytes: int) -> Segment:
        """Create a new, empty segment (both files, truncated if they somehow existed)."""
        seg = cls(directory, base_offset, index_interval_bytes)
        seg._fd = os.open(seg.log_path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        seg.index.reset([])
        seg._ts_marks = []
        seg._max_ts = NO_TIMESTAMP
        return seg

    def open_reader(self) -> Segment:
        """A read-only handle on this segment's ``.log`` with its own file descriptor.

        For readers in another thread (compaction): the handle's ``scan``/``pread`` keep
        working on the same file contents even if this segment is closed or its files are
        deleted meanwhile. Its ``size`` and ``next_offset`` are copied from this segment; its
        index is not loaded (use ``scan``, not ``find``). Close it when done.
        """
        reader = Segment(self.log_path.parent, self.base_offset, self.index_interval_bytes)
        reader._fd = os.open(self.log_path, os.O_RDONLY)
        reader.size = self.size
        reader.next_offset = self.next_offset
        return reader

    def file_size(self) -> int:
        return os.fstat(self._open()).st_size

    def load_sealed(self) -> bool:
        """Trust the on-disk index of a non-active segment, after cheap consistency checks.

        Walks only the headers after the last index entry (to learn the next offset) and checks
        that the last entry points at a batch ending at the offset it claims. Returns False if
        the index is missing or anything disagrees; the caller then runs :meth:`recover`.
        """
        file_size = self.file_size()
        if not self.index.load(file_size):
            return False
        start = 0
        expect_last: int | None = None
        if len(self.index):
            expect_last, start = self.index.entry(len(self.index) - 1)
        next_offset = self.base_offset
        try:
            for pos, h in self.walk_headers(start, file_size):
                if expect_last is not None and pos == start and h.last_offset != expect_last:
                    return False
                if h.base_offset < next_offset:
                    return False
                next_offset = h.next_offset
        except CorruptBatch:
            return False
        self.size = file_size
        self.next_offset = next_offset
        self._bytes_since_index = file_size - start
        self._ts_marks = None
        self._max_ts = None
        return True

    def recover(self) -> Cut | None:
        """Validate every batch; cut the file at the first torn or corrupt one; rebuild the index.

        A batch is valid when it is wholly present, parses as magic 2, its CRC-32C matches, its
        base offset is not below the previous batch's next offset (nor the segment's base) and
        its last offset fits the index's int32 relative offsets. Returns what was cut, if any.
        """
        file_size = self.file_size()
        entries: list[tuple[int, int]] = []
        marks: list[int] = []
        max_ts = NO_TIMESTAMP
        valid = 0
        since_index = 0
        next_offset = self.base_offset
        reason: str | None = None
        try:
            for pos, h, _ in self.scan(0, file_size, verify_crc=True):
                if h.base_offset < next_offset:
                    reason = f"offset {h.base_offset} not above previous {next_offset - 1}"
                    break
                if h.last_offset - self.base_offset > INT32_MAX:
                    reason = f"offset {h.last_offset} too far from segment base"
                    break
                if since_index >= self.index_interval_bytes:
                    entries.append((h.last_offset - self.base_offset, pos))
                    marks.append(max_ts)
                    since_index = 0
                since_index += h.size
                max_ts = max(max_ts, h.max_timestamp)
                next_offset = h.next_offset
                valid = pos + h.size
        except CorruptBatch as exc:
            reason = str(exc)
        cut: Cut | None = None
        if valid < file_size:
            fd = self._open()
            os.ftruncate(fd, valid)
            os.fsync(fd)
            cut = Cut(valid, file_size - valid, reason or "trailing bytes")
        self.index.reset(entries)
        self.size = valid
        self.next_offset = next_offset
        self._bytes_since_index = since_index
        self._ts_marks = marks
        self._max_ts = max_ts
        return cut

    def sync(self, *, index: bool) -> None:
        """fsync the log file (and the index file too if ``index``)."""
        if self._fd is not None:
            os.fsync(self._fd)
        if index:
            self.index.sync()

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        self.index.close()

    def delete_files(self) -> None:
        self.close()
        for p in (self.log_path, self.index.path):
            with contextlib.suppress(FileNotFoundError):
                p.unlink()

    # -- writing ---------------------------------------------------------------------------

    def append(self, data: memoryview, batches: list[tuple[int, BatchHeader]]) -> None:
        """Write ``data`` (whole batches with offsets already assigned) at the end.

        ``batches`` lists (position within ``data``, header) for each batch. On an I/O error the
        file and index are put back as they were and the error propagates.
        """
        start = self.size
        fd = self._open()
        try:
            pwrite_all(fd, data, start)
            for rel, h in batches:
                pos = start + rel
                if self._bytes_since_index >= self.index_interval_bytes:
                    self.index.append(h.last_offset, pos)
                    if self._ts_marks is not None and self._max_ts is not None:
                        self._ts_marks.append(self._max_ts)
                    self._bytes_since_index = 0
                self._bytes_since_index += h.size
                if self._max_ts is not None:
                    self._max_ts = max(self._max_ts, h.max_timestamp)
        except BaseException:
            with contextlib.suppress(OSError):  # the original error is the one to report
                self.truncate(start, self.next_offset)
            raise
        self.size = start + len(data)
        self.next_offset = batches[-1][1].next_offset

    def truncate(self, position: int, next_offset: int) -> None:
        """Cut the segment to ``position`` bytes (a batch boundary) ending at ``next_offset``."""
        os.ftruncate(self._open(), position)
        self.index.truncate_to_position(position)
        self.size = position
        self.next_offset = next_offset
        last = len(self.index)
        self._bytes_since_index = position - (self.index.entry(last - 1)[1] if last else 0)
        self._ts_marks = None  # rebuilt lazily
        self._max_ts = None

    # -- reading ---------------------------------------------------------------------------

    def pread(self, size: int, position: int) -> bytes:
        return os.pread(self._open(), size, position)

    def header_at(self, position: int) -> BatchHeader:
        return parse_header(self.pread(HEADER_SIZE, position))

    def walk_headers(
        self, start: int, end: int, chunk: int = WALK_CHUNK
    ) -> Iterator[tuple[int, BatchHeader]]:
        """Yield (position, header) for each batch in [start, end), reading only headers.

        Large batches are skipped over rather than read. Raises CorruptBatch on a bad header or
        a batch running past ``end``.
        """
        pos = start
        while pos < end:
            buf = self.pread(min(chunk, end - pos), pos)
            n = len(buf)
            off = 0
            while n - off >= HEADER_SIZE:
                h = parse_header(buf, off)
                if pos + off + h.size > end:
                    raise CorruptBatch("truncated batch")
                yield pos + off, h
                off += h.size
            if off == 0:
                raise CorruptBatch("truncated batch header")
            pos += off

    def scan(
        self, start: int, end: int, *, verify_crc: bool = False, chunk: int = SCAN_CHUNK
    ) -> Iterator[tuple[int, BatchHeader, memoryview]]:
        """Yield (position, header, batch bytes) for each batch in [start, end).

        Reads big chunks; each yielded memoryview is a slice of an immutable chunk, so it stays
        valid after the generator moves on. Raises CorruptBatch on a truncated or bad batch
        (and on a CRC mismatch if ``verify_crc``).
        """
        pos = start
        while pos < end:
            buf = self.pread(min(chunk, end - pos), pos)
            view = memoryview(buf)
            n = len(buf)
            off = 0
            while n - off >= HEADER_SIZE:
                h = parse_header(view, off)
                if h.size > n - off:
                    break
                if verify_crc and not crc_ok(view, off, h):
                    raise CorruptBatch("CRC mismatch")
                yield pos + off, h, view[off : off + h.size]
                off += h.size
            if off == 0:
                # The batch at pos does not fit in one chunk (or the file ends inside it).
                if n < HEADER_SIZE:
                    raise CorruptBatch("truncated batch header")
                h = parse_header(view, 0)
                if pos + h.size > end:
                    raise CorruptBatch("truncated batch")
                whole = memoryview(self.pread(h.size, pos))
                if len(whole) < h.size:
                    raise CorruptBatch("truncated batch")
                if verify_crc and not crc_ok(whole, 0, h):
                    raise CorruptBatch("CRC mismatch")
                yield pos, h, whole
                off = h.size
            pos += off

    def find(self, offset: int) -> int | None:
        """Position of the first batch whose last offset is >= ``offset``, or None if none."""
        if offset >= self.next_offset or self.size == 0:
            return None
        start = self.index.lookup(offset) if offset > self.base_offset else 0
        for pos, h in self.walk_headers(start, self.size):
            if h.last_offset >= offset:
                return pos
        return None

    def read(self, position: int, max_bytes: int) -> bytes:
        """Whole batches from ``position``, about ``max_bytes`` worth but never fewer than one."""
        avail = self.size - position
        if avail <= 0:
            return b""
        buf = self.pread(min(max(max_bytes, 0), avail), position)
        n = len(buf)
        end = 0
        while True:
            size = peek_size(buf, end)
            if size is None or end + size > n:
                break
            end += size
        if end == 0:
            head = self.pread(LOG_OVERHEAD, position)
            size = peek_size(head)
            if size is None or size > avail:
                raise CorruptBatch(f"bad batch at position {position} of {self.log_path}")
            return self.pread(size, position)
        return buf if end == n else buf[:end]

    # -- timestamps ------------------------------------------------------------------------

    def max_timestamp(self) -> int:
        self._ensure_time_index()
        assert self._max_ts is not None
        return self._max_ts

    def find_timestamp(self, ts_ms: int) -> tuple[int, int] | None:
        """(base offset, max timestamp) of the first batch whose max timestamp >= ``ts_ms``."""
        self._ensure_time_index()
        assert self._ts_marks is not None and self._max_ts is not None
        if self._max_ts < ts_ms:
            return None
        k = bisect_left(self._ts_marks, ts_ms)
        start = self.index.positions[k - 1] if k > 0 else 0
        for _, h in self.walk_headers(start, self.size):
            if h.max_timestamp >= ts_ms:
                return h.base_offset, h.max_timestamp
        return None

    def _ensure_time_index(self) -> None:
        """Build the running-max marks for each index entry by walking all headers once."""
        if self._ts_marks is not None and self._max_ts is not None:
            return
        positions = self.index.positions
        n = len(positions)
        marks: list[int] = []
        running = NO_TIMESTAMP
        j = 0
        for pos, h in self.walk_headers(0, self.size, BUILD_CHUNK):
            # An entry at or before this batch only covers batches before it: using the running
            # max up to here can only overestimate, which makes lookups start earlier (still right).
            while j < n and positions[j] <= pos:
                marks.append(running)
                j += 1
            running = max(running, h.max_timestamp)
        while j < n:
            marks.append(running)
            j += 1
        self._ts_marks = marks
        self._max_ts = running

    def _open(self) -> int:
        if self._fd is None:
            self._fd = os.open(self.log_path, os.O_RDWR)
        return self._fd
