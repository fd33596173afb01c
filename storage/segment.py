"""One log segment: a ``<base>.log`` file of v2 record batches, its ``<base>.index``,
``<base>.timeindex`` and ``<base>.txnindex`` (aborted transactions, ``storage.txn_index``).

A segment owns its three files and the per-segment bookkeeping: valid byte size, next offset,
the sparse offset index, the time index, and the segment's largest batch timestamp with the
last offset of the earliest batch carrying it (Kafka's "max timestamp so far", always known: it
is read from the time index plus a short walk of the batches after its last entry, or computed
by recovery). It knows how to recover itself (validate every batch, cut at the first bad one,
rebuild both indexes), walk batch headers without reading record bodies, scan whole batches in
large chunks, and read whole batches for Fetch.

Files are opened lazily through ``storage.files`` (a bounded pool of descriptors): a segment
holds no descriptor until it is read or written, and may lose it to eviction between uses.
Segments do plain synchronous file I/O (``os.pread``/``os.pwrite``); ``PartitionLog`` decides
when to roll, flush or delete them and serialises all writers.

Writes that recovery wants to make (cutting a torn tail, rewriting an index) may fail on a full
disk or a read-only file: the rebuilt index is then kept in memory only, and a segment whose
tail could not be cut refuses appends (``writable`` is False); both are logged as warnings.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from kcoord.protocol.batch import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    CorruptBatch,
    crc_ok,
    parse_header,
    peek_size,
)
from kcoord.storage.files import DEFAULT_POOL, FilePool, FileReadOnly, ManagedFile
from kcoord.storage.index import INT32_MAX, OffsetIndex, pwrite_all
from kcoord.storage.time_index import NO_TIMESTAMP, TimeIndex
from kcoord.storage.txn_index import TXN_INDEX_SUFFIX, TxnIndex

log = logging.getLogger("kcoord.storage")

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIMEINDEX_SUFFIX = ".timeindex"
INDEX_SUFFIXES = (INDEX_SUFFIX, TIMEINDEX_SUFFIX, TXN_INDEX_SUFFIX)

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


@dataclass(frozen=True, slots=True)
class _State:
    """In-memory state before an append, to put back if the append fails."""

    size: int
    next_offset: int
    index_len: int
    time_len: int
    bytes_since_index: int
    max_timestamp: int
    offset_of_max: int


class Segment:
    """A ``.log``/``.index``/``.timeindex`` triple starting at ``base_offset``."""

    def __init__(
        self,
        directory: Path,
        base_offset: int,
        index_interval_bytes: int,
        pool: FilePool | None = None,
        *,
        log_file: Path | None = None,
    ) -> None:
        pool = pool or DEFAULT_POOL
        self.base_offset = base_offset
        stem = segment_name(base_offset)
        self.log_path = log_file or directory / (stem + LOG_SUFFIX)
        self.index = OffsetIndex(directory / (stem + INDEX_SUFFIX), base_offset, pool)
        self.time_index = TimeIndex(directory / (stem + TIMEINDEX_SUFFIX), base_offset, pool)
        self.txn_index = TxnIndex(directory / (stem + TXN_INDEX_SUFFIX))
        self.index_interval_bytes = index_interval_bytes
        self.size = 0  # bytes of whole, valid batches
        self.next_offset = base_offset  # one past the last offset held
        self.writable = True  # False if recovery could not cut a bad tail off the file
        self.recovered = False  # scanned batch by batch at open (its .txnindex is rebuilt)
        self._log = ManagedFile(self.log_path, pool)
        self._bytes_since_index = 0
        self.max_timestamp = NO_TIMESTAMP
        self.offset_of_max_timestamp = base_offset  # last offset of the first batch with it

    # -- lifecycle -------------------------------------------------------------------------

    @staticmethod
    def create_files(directory: Path, base_offset: int) -> None:
        """Create the three files of an empty segment (truncated if they somehow existed),
        log first, keeping no descriptor. Not fsynced (the caller fsyncs the directory)."""
        stem = segment_name(base_offset)
        for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIMEINDEX_SUFFIX):
            fd = os.open(directory / (stem + suffix), os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
            os.close(fd)

    @classmethod
    def create(
        cls,
        directory: Path,
        base_offset: int,
        index_interval_bytes: int,
        pool: FilePool | None = None,
    ) -> Segment:
        """Create a new, empty segment. It holds no descriptor until used."""
        cls.create_files(directory, base_offset)
        return cls(directory, base_offset, index_interval_bytes, pool)

    @classmethod
    def empty(
        cls,
        directory: Path,
        base_offset: int,
        index_interval_bytes: int,
        pool: FilePool | None = None,
    ) -> Segment:
        """The segment of files :meth:`create_files` made, without touching them."""
        return cls(directory, base_offset, index_interval_bytes, pool)

    def open_reader(self) -> Segment:
        """A read-only handle on this segment's ``.log`` with its own file descriptor.

        For readers in another thread (compaction): the handle's ``scan``/``pread`` keep
        working on the same file contents even if this segment is closed or its files are
        deleted meanwhile (its descriptor is private, never evicted). Its ``size``,
        ``next_offset`` and max timestamp are copied from this segment; its indexes are not
        loaded (use ``scan``, not ``find``). Close it when done.
        """
        reader = Segment.private_reader(self.log_path, self.base_offset)
        reader.size = self.size
        reader.next_offset = self.next_offset
        reader.max_timestamp = self.max_timestamp
        reader.offset_of_max_timestamp = self.offset_of_max_timestamp
        return reader

    @classmethod
    def private_reader(cls, log_file: Path, base_offset: int) -> Segment:
        """A read-only handle with a private descriptor on any file of batches (``log_file``
        may be a compaction ``.swap`` file) based at ``base_offset``."""
        reader = cls(log_file.parent, base_offset, 0, log_file=log_file)
        reader._log = ManagedFile(log_file, None, writable=False)
        return reader

    def file_size(self) -> int:
        with self._log as fd:
            return os.fstat(fd).st_size

    def load_sealed(self) -> bool:
        """Trust the on-disk indexes of a non-active segment, after cheap consistency checks.

        Walks only the headers after the last index entries (to learn the next offset and the
        largest timestamp) and checks that the last offset-index entry points at a batch ending
        at the offset it claims and that the time index names offsets inside the segment.
        Returns False if an index is missing or anything disagrees; the caller then runs
        :meth:`recover`.
        """
        file_size = self.file_size()
        if not self.index.load(file_size) or not self.time_index.load():
            return False
        index_start = 0
        expect_last: int | None = None
        if len(self.index):
            expect_last, index_start = self.index.entry(len(self.index) - 1)
        max_ts, max_offset = self.time_index.last_entry()
        time_start = self.index.lookup(max_offset) if max_offset > self.base_offset else 0
        start = min(index_start, time_start)
        next_offset = self.base_offset
        try:
            for pos, h in self.walk_headers(start, file_size):
                if expect_last is not None and pos == index_start and h.last_offset != expect_last:
                    return False
                if h.base_offset < next_offset:
                    return False
                if h.max_timestamp > max_ts:
                    max_ts, max_offset = h.max_timestamp, h.last_offset
                next_offset = h.next_offset
        except CorruptBatch:
            return False
        if len(self.time_index) and self.time_index.last_entry()[1] >= next_offset:
            return False
        self.size = file_size
        self.next_offset = next_offset
        self._bytes_since_index = file_size - index_start
        self.max_timestamp = max_ts
        self.offset_of_max_timestamp = max_offset
        return True

    def recover(self) -> Cut | None:
        """Validate every batch; cut the file at the first torn or corrupt one; rebuild both
        indexes.

        A batch is valid when it is wholly present, parses as magic 2, its CRC-32C matches, its
        base offset is not below the previous batch's next offset (nor the segment's base) and
        its last offset fits the index's int32 relative offsets. Returns what was cut, if any.
        Failing writes (the cut, the index files) are logged and leave the result in memory.
        """
        file_size = self.file_size()
        entries: list[tuple[int, int]] = []
        times: list[tuple[int, int]] = []
        max_ts, max_offset = NO_TIMESTAMP, self.base_offset
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
                if h.max_timestamp > max_ts:
                    max_ts, max_offset = h.max_timestamp, h.last_offset
                if since_index >= self.index_interval_bytes:
                    entries.append((h.last_offset - self.base_offset, pos))
                    if max_ts != NO_TIMESTAMP and (not times or max_ts > times[-1][0]):
                        times.append((max_ts, max_offset - self.base_offset))
                    since_index = 0
                since_index += h.size
                next_offset = h.next_offset
                valid = pos + h.size
        except CorruptBatch as exc:
            reason = str(exc)
        cut: Cut | None = None
        if valid < file_size:
            cut = Cut(valid, file_size - valid, reason or "trailing bytes")
            try:
                self._log.check_writable()
                with self._log as fd:
                    os.ftruncate(fd, valid)
                    os.fsync(fd)
            except OSError as e:
                self.writable = False
                log.warning(
                    "recovery of %s: could not cut %d bytes at position %d (%s); the segment is"
                    " read as if they were gone and refuses writes until the broker restarts",
                    self.log_path,
                    file_size - valid,
                    valid,
                    _describe(e),
                )
        self.size = valid
        self.next_offset = next_offset
        self._bytes_since_index = since_index
        self.max_timestamp = max_ts
        self.offset_of_max_timestamp = max_offset
        for index, wanted in ((self.index, entries), (self.time_index, times)):
            try:
                index.reset(wanted)
            except OSError as e:
                log.warning(
                    "recovery of %s: rebuilt index kept in memory only, writing %s failed: %s",
                    self.log_path,
                    index.path.name,
                    _describe(e),
                )
        return cut

    def seal(self) -> None:
        """The segment stops being the active one: add the final time index entry and write
        both indexes' pending entries."""
        self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
        self.index.write_pending()
        self.time_index.write_pending()

    def sync(self, *, index: bool) -> bool:
        """fsync the log file if written since the last sync (and the index files too if
        ``index``); whether the log file had anything to sync."""
        synced = self._log.sync()
        if index:
            self.index.sync()
            self.time_index.sync()
        self.txn_index.sync()
        return synced

    def sync_existing(self) -> None:
        """fsync each of the segment's files that exists, whoever wrote it (start-up: what a
        previous process left in the page cache becomes durable)."""
        for f in (self._log, self.index.file, self.time_index.file):
            if f.path.exists():
                with f as fd:
                    os.fsync(fd)
        self.txn_index.sync()

    def unlinked(self) -> bool:
        """Whether the ``.log`` file was deleted under us (no link left, or gone)."""
        try:
            return self._log.nlink() == 0
        except FileNotFoundError:
            return True

    def close(self) -> None:
        self.index.close()
        self.time_index.close()
        self._log.close()

    def delete_files(self) -> None:
        """Close and delete the files, indexes first: a ``.log`` never loses its indexes
        except to this, so an index without its ``.log`` means the ``.log`` was lost."""
        self.index.delete()
        self.time_index.delete()
        self.txn_index.delete()
        self._log.close()
        with contextlib.suppress(FileNotFoundError):
            self.log_path.unlink()

    # -- writing ---------------------------------------------------------------------------

    def check_writable(self) -> None:
        """Raise an OSError if this segment refuses appends."""
        if not self.writable:
            raise FileReadOnly(
                errno.EIO, "segment has a bad tail that could not be cut", str(self.log_path)
            )
        self._log.check_writable()

    def append(self, data: memoryview, batches: list[tuple[int, BatchHeader]]) -> None:
        """Write ``data`` (whole batches with offsets already assigned) at the end.

        ``batches`` lists (position within ``data``, header) for each batch. On an I/O error the
        file and indexes are put back as they were and the error propagates.
        """
        self.check_writable()
        start = self.size
        saved = self._snapshot()
        try:
            with self._log as fd:
                pwrite_all(fd, data, start)
            self._log.written()
            for rel, h in batches:
                if h.max_timestamp > self.max_timestamp:
                    self.max_timestamp = h.max_timestamp
                    self.offset_of_max_timestamp = h.last_offset
                if self._bytes_since_index >= self.index_interval_bytes:
                    self.index.append(h.last_offset, start + rel)
                    self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
                    self._bytes_since_index = 0
                self._bytes_since_index += h.size
        except BaseException:
            self._restore(saved)
            # The original error is the one to report.
            with contextlib.suppress(OSError), self._log as fd:
                os.ftruncate(fd, start)
            raise
        self.size = start + len(data)
        self.next_offset = batches[-1][1].next_offset

    def _snapshot(self) -> _State:
        return _State(
            self.size,
            self.next_offset,
            len(self.index),
            len(self.time_index),
            self._bytes_since_index,
            self.max_timestamp,
            self.offset_of_max_timestamp,
        )

    def _restore(self, s: _State) -> None:
        self.size = s.size
        self.next_offset = s.next_offset
        with contextlib.suppress(OSError):
            self.index._drop_from(s.index_len)
        with contextlib.suppress(OSError):
            self.time_index._drop_from(s.time_len)
        self._bytes_since_index = s.bytes_since_index
        self.max_timestamp = s.max_timestamp
        self.offset_of_max_timestamp = s.offset_of_max

    def truncate(self, position: int, next_offset: int) -> None:
        """Cut the segment to ``position`` bytes (a batch boundary) ending at ``next_offset``."""
        with self._log as fd:
            os.ftruncate(fd, position)
        self._log.written()
        self.index.truncate_to_position(position)
        self.time_index.truncate_to_offset(next_offset)
        self.txn_index.truncate_from(next_offset)
        self.size = position
        self.next_offset = next_offset
        last = len(self.index)
        self._bytes_since_index = position - (self.index.entry(last - 1)[1] if last else 0)
        self.max_timestamp, self.offset_of_max_timestamp = self._largest_timestamp()

    def _largest_timestamp(self) -> tuple[int, int]:
        """(max timestamp, its offset) from the time index and the batches after its last
        entry (Kafka's readLargestTimestamp)."""
        max_ts, max_offset = self.time_index.last_entry()
        start = self.index.lookup(max_offset) if max_offset > self.base_offset else 0
        for _, h in self.walk_headers(start, self.size, BUILD_CHUNK):
            if h.max_timestamp > max_ts:
                max_ts, max_offset = h.max_timestamp, h.last_offset
        return max_ts, max_offset

    # -- reading ---------------------------------------------------------------------------

    def pread(self, size: int, position: int) -> bytes:
        with self._log as fd:
            return os.pread(fd, size, position)

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

    def find_timestamp(self, ts_ms: int) -> tuple[int, int] | None:
        """(base offset, max timestamp) of the first batch whose max timestamp >= ``ts_ms``.

        The time index gives where to start (its last entry at or below ``ts_ms``); from there
        a few batch headers are walked.
        """
        if self.size == 0 or self.max_timestamp < ts_ms:
            return None
        _, from_offset = self.time_index.lookup(ts_ms)
        start = self.index.lookup(from_offset) if from_offset > self.base_offset else 0
        for _, h in self.walk_headers(start, self.size):
            if h.max_timestamp >= ts_ms:
                return h.base_offset, h.max_timestamp
        return None

    def max_timestamp_batch(self) -> tuple[int, int] | None:
        """(base offset, max timestamp) of the first batch carrying this segment's largest
        timestamp, found from the offset of it that the segment tracks."""
        if self.size == 0:
            return None
        target = self.max_timestamp
        offset = self.offset_of_max_timestamp
        start = self.index.lookup(offset) if offset > self.base_offset else 0
        for _, h in self.walk_headers(start, self.size):
            if h.max_timestamp == target:
                return h.base_offset, h.max_timestamp
        return None


def _describe(e: OSError) -> str:
    return e.strerror or str(e)
