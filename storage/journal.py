"""The shared journal: one fsync makes the appends of many partition logs durable.

The logs of ``__consumer_offsets`` take small durable writes from fifty shards at once; one
fsync per partition file per group-commit round costs more CPU than the commits themselves. A
journaled log (:class:`JournaledLog`, mixed into ``PartitionLog``) keeps the batches appended
since its last round in memory; at a round, :meth:`SharedJournal.flush_all` writes them, for
every log of the round, as records of one file, ``<data-dir>/offsets.journal``, fsyncs that
file once, and only then moves each log's ``flushed_offset``. The segment files stay Kafka's
readable form: they hold the same batches at the same offsets, in the page cache until a
checkpoint.

Record: ``length`` (u32), ``crc32c`` of the payload (u32), payload = name length (u16), the log's
directory name (``<topic>-<partition>``), whole v2 batches with their offsets assigned.

Why an acknowledged write survives a crash:

* A log's ``flushed_offset`` (what its waiters are told is durable) moves past a batch only
  after the journal record holding it was fsynced, or after the log's own files were.
* Only the active segment's tail may lag its journal records: a journaled log fsyncs the
  segment it seals before it creates the next (``_sync_before_roll``; one fsync per segment,
  on the event loop), and a log with a segment sealed, a directory entry or a transaction
  index written since its last fsync is flushed whole in a round
  (:meth:`JournaledLog.journal_take` refuses). Recovery scans the active segment batch by
  batch and cuts it at the first torn batch; every batch acknowledged after its last fsync is
  in the journal, so the replay, which only appends, gives back all of them.
* At start-up (:meth:`SharedJournal.open`) the records are read up to the first torn one
  (never acknowledged: its fsync did not complete); a log opened later gets back, in order, the
  batches recovery cut from its tail (:func:`replay`), and is fsynced.
* A checkpoint empties the journal only after every journaled log was fsynced whole and no
  log still waits for its replay.
* If writing the journal fails, the round falls back to fsyncing each log's files; a journal
  that cannot be cut back to its last whole record is no longer used.
"""

from __future__ import annotations

import logging
import os
import struct
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from crc32c import crc32c

from kcoord.protocol.batch import CorruptBatch, iter_headers
from kcoord.storage.engine import LogClosed
from kcoord.storage.files import describe_error, fsync_dir
from kcoord.storage.offline import LogOffline
from kcoord.storage.segment import Segment

log = logging.getLogger("kcoord.storage")

JOURNAL_FILE = "offsets.journal"
CHECKPOINT_BYTES = 256 << 20
"""A journal past this size is emptied at the end of its round (a checkpoint)."""

_HEADER = struct.Struct(">II")
_NAME = struct.Struct(">H")


class JournaledLog:
    """The journal's side of ``PartitionLog`` (mixed in): batches appended since the log's
    last journal round, and moving ``flushed_offset`` once the journal holds them."""

    _lock: threading.Lock
    _segments: list[Segment]
    _dirty: list[Segment]
    _dir_dirty: bool
    _flushed_offset: int
    _truncations: int
    _fsync: bool
    _journal_pending: list[bytes | bytearray] | None = None  # None: not journaled
    shared_flush: Any

    # ``PartitionLog`` has these.
    def _check_open(self) -> None:
        raise NotImplementedError

    @property
    def name(self) -> str:
        raise NotImplementedError

    @property
    def log_end_offset(self) -> int:
        raise NotImplementedError

    def flush(self) -> None:
        raise NotImplementedError

    def use_journal(self, journal: SharedJournal) -> None:
        """From now on, rounds of the group commit flush this log through ``journal``."""
        self._journal_pending = []
        self.shared_flush = journal
        journal.add(self)

    def _sync_before_roll(self) -> None:
        """Called by ``_roll`` before it seals the active segment: a journaled log fsyncs it
        first, so that only the active segment's tail may lag the journal (module docstring)."""
        if self._journal_pending is not None and self._fsync:
            self._segments[-1].sync(index=False)

    def _journal_appended(self, batches: bytes | bytearray) -> None:
        """Called by ``append`` under the log's lock with the batches as written."""
        pending = self._journal_pending
        if pending is not None:
            pending.append(batches)

    def journal_take(self) -> tuple[int, int, list[bytes | bytearray]] | None:
        """What a journal round must write for this log: (log end offset, truncation count,
        the batches appended since the last round); None when the log must be flushed whole
        (module docstring)."""
        self._check_open()
        with self._lock:
            if self._dirty or self._dir_dirty or self._segments[-1].txn_index.unsynced:
                return None
            taken, self._journal_pending = self._journal_pending or [], []
            return self.log_end_offset, self._truncations, taken

    def journal_synced(self, end: int, truncations: int) -> None:
        """The journal holds everything below ``end`` (taken with ``truncations``) durably."""
        with self._lock:
            if truncations == self._truncations:
                self._flushed_offset = max(self._flushed_offset, end)


class SharedJournal:
    """The journal file and its rounds (module docstring); ``flush_all`` is the
    ``shared_flush`` of every log added, called by the broker's flusher, one round at a time."""

    def __init__(self, path: Path, fd: int, size: int, replays: dict[str, list[memoryview]]) -> None:
        self.path = path
        self._fd: int | None = fd
        self._size = size
        self._replays = replays
        self._logs: set[JournaledLog] = set()
        self._lock = threading.Lock()
        self._failing = False  # the last write failed
        self.checkpoint_bytes = CHECKPOINT_BYTES

    @classmethod
    def open(cls, path: Path, *, exists: Callable[[str], bool] | None = None) -> SharedJournal:
        """Open (creating) the journal at ``path``, keeping the batches of its whole records
        for :meth:`replay_of`, and cutting a torn last record. ``exists(name)``: whether the
        log ``name`` still exists (records of others are dropped)."""
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            data = memoryview(_read_all(fd))
            replays: dict[str, list[memoryview]] = {}
            pos = 0
            while pos + _HEADER.size <= len(data):
                length, crc = _HEADER.unpack_from(data, pos)
                payload = data[pos + _HEADER.size : pos + _HEADER.size + length]
                if len(payload) < length or crc32c(payload) != crc or length < _NAME.size:
                    break
                (name_len,) = _NAME.unpack_from(payload, 0)
                name = bytes(payload[_NAME.size : _NAME.size + name_len]).decode("utf-8", "replace")
                replays.setdefault(name, []).append(payload[_NAME.size + name_len :])
                pos += _HEADER.size + length
            if pos < len(data):
                log.warning(
                    "%s: a torn record at byte %d (of %d) is cut (it was never acknowledged)",
                    path.name,
                    pos,
                    len(data),
                )
                os.ftruncate(fd, pos)
                os.fsync(fd)
            if exists is not None:
                for name in [n for n in replays if not exists(n)]:
                    del replays[name]
            fsync_dir(path.parent)
        except BaseException:
            os.close(fd)
            raise
        return cls(path, fd, pos, replays)

    def add(self, plog: JournaledLog) -> None:
        with self._lock:
            self._logs.add(plog)

    def replay_of(self, name: str) -> list[memoryview]:
        """The journaled batches of log ``name`` (given once), for :func:`replay`."""
        with self._lock:
            return self._replays.pop(name, [])

    def keep(self, name: str, batches: list[memoryview]) -> None:
        """Batches of log ``name`` whose replay failed: the journal is kept for the next start."""
        with self._lock:
            self._replays.setdefault(name, []).extend(batches)

    def flush_all(self, logs: Sequence[Any]) -> Mapping[Any, BaseException]:
        """One round: the batches ``logs`` took since their last round, one write and one
        fsync; logs that must be flushed whole are (as are all, should the journal fail)."""
        failed: dict[Any, BaseException] = {}
        with self._lock:
            records: list[bytes | bytearray] = []
            taken: list[tuple[JournaledLog, int, int]] = []
            whole: list[JournaledLog] = []
            for plog in logs:
                try:
                    took = plog.journal_take() if self._fd is not None else None
                except Exception as e:
                    failed[plog] = e
                    continue
                if took is None:
                    whole.append(plog)
                    continue
                end, truncations, batches = took
                if batches:
                    records += _record(plog.name, batches)
                taken.append((plog, end, truncations))
            if records and not self._write(records):
                whole += (plog for plog, _, _ in taken)
                taken = []
            for plog, end, truncations in taken:
                plog.journal_synced(end, truncations)
            for plog in whole:
                try:
                    plog.flush()
                except Exception as e:
                    failed[plog] = e
            if self._size >= self.checkpoint_bytes:
                self._checkpoint()
        return failed

    def _write(self, records: list[bytes | bytearray]) -> bool:
        """Append and fsync ``records``; False (the journal cut back, or given up) on failure."""
        fd = self._fd
        assert fd is not None
        data = b"".join(records)
        try:
            written = 0
            while written < len(data):
                written += os.pwrite(fd, data[written:], self._size + written)
            os.fdatasync(fd)
        except OSError as e:
            if not self._failing:  # once until a write succeeds again (a full disk: each round)
                log.error(
                    "%s: write failed (%s); the logs are fsynced instead",
                    self.path.name,
                    describe_error(e),
                )
            self._failing = True
            try:
                os.ftruncate(fd, self._size)
                os.fsync(fd)
            except OSError as cut:
                log.error(
                    "%s: could not be cut back (%s); no longer used: each log is fsynced",
                    self.path.name,
                    describe_error(cut),
                )
                self._give_up()
            return False
        self._size += len(data)
        self._failing = False
        return True

    def _checkpoint(self) -> bool:
        """fsync every journaled log whole, then empty the journal; False if that could not
        be done now (a log failed to flush, or a log still waits for its replay)."""
        for plog in list(self._logs):
            try:
                plog.flush()
            except (LogClosed, LogOffline):  # flushed when it closed; or its files are gone,
                self._logs.discard(plog)  # and what the journal holds for it cannot help
            except OSError as e:
                log.error("%s: checkpoint put off: %s", self.path.name, describe_error(e))
                return False
        if self._replays or self._fd is None:
            return False
        try:
            os.ftruncate(self._fd, 0)
            os.fsync(self._fd)
        except OSError as e:
            log.error("%s: could not be emptied (%s)", self.path.name, describe_error(e))
            self._give_up()
            return False
        self._size = 0
        return True

    def _give_up(self) -> None:
        # Every later round flushes the logs whole. The records written so far stay readable
        # at the next start (the file is not removed), and any already replayed are skipped.
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def close(self) -> None:
        """A checkpoint (the logs are closed or flushed by now), then the file is closed."""
        with self._lock:
            if self._fd is not None:
                self._checkpoint()
                self._give_up()


def _record(name: str, batches: list[bytes | bytearray]) -> list[bytes | bytearray]:
    """The pieces of one journal record of log ``name`` holding ``batches``."""
    encoded = name.encode("utf-8")
    head = _NAME.pack(len(encoded)) + encoded
    crc = crc32c(head)
    length = len(head)
    for b in batches:
        crc = crc32c(b, crc)
        length += len(b)
    return [_HEADER.pack(length, crc), head, *batches]


def _read_all(fd: int) -> bytes:
    chunks: list[bytes] = []
    pos = 0
    while True:
        chunk = os.pread(fd, 1 << 20, pos)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        pos += len(chunk)


def replay(plog: Any, chunks: list[memoryview]) -> int:
    """Append to ``plog`` (just opened and recovered) the journaled batches it lacks, in
    order; returns how many. Batches below its end are there already; a batch past its end
    (never expected: the journal holds everything after the log's last fsync) ends the replay,
    reported at ERROR."""
    replayed = 0
    for chunk in chunks:
        try:
            headers = iter_headers(chunk, verify_crc=True)
        except CorruptBatch as e:  # the record's own CRC matched: not expected
            log.error("%s: a journal record holds a corrupt batch (%s)", plog.name, e)
            return replayed
        for pos, h in headers:
            end = plog.log_end_offset
            if h.base_offset + h.last_offset_delta < end:
                continue
            if h.base_offset != end:
                log.error(
                    "%s: the journal's batch of offsets %d to %d does not follow the log's end,"
                    " %d: the journal's later batches of it are lost",
                    plog.name,
                    h.base_offset,
                    h.base_offset + h.last_offset_delta,
                    end,
                )
                return replayed
            plog.append(chunk[pos : pos + h.size])
            replayed += 1
    return replayed
