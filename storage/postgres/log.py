"""One partition's log in PostgreSQL: rows of ``batches`` (``storage.postgres.schema``).

An append is validated and given its offsets at once, as in the files engine, and waits in
memory (readable by the broker, not yet by Fetch, which serves only up to ``flushed_offset``).
:meth:`PostgresLog.flush`, or :func:`flush_logs` for several logs of an engine at once (a
flush round: ``storage.postgres.flush_round``), writes everything waiting in one database transaction
(``storage.postgres.flush``): the batch rows, the aborted transactions they ended, and each
partition row's log end and size. The transaction first reads each partition row's log end
under a row lock and writes a log only if it is where the log left it, so a write is never
doubled (a commit whose answer was lost is found done) and never lands on a log someone else
wrote. Only after the commit does ``flushed_offset``
move: what was acknowledged is in the database; what was appended and not flushed is lost
wholly with the process, from the first unflushed batch on.

A flush that fails (the database unreachable, the row moved by another writer) takes the log
offline (``storage.offline``) and drops what was waiting: every waiter of those appends, in this
flush or a later one, gets the error, and nothing written after a failure can reach the
database behind a caller that was told it failed (the group coordinator undoes what a failed
append carried, so the log must not keep it). The broker opens the partition again once the
database answers (broker/data/reopening.py): a new log, replayed from what was committed.

Reads are served from memory for the newest flushed batches (``storage.postgres.recent``: the
engine's budget of them) and the pending ones, and query the database below; the producer state
is rebuilt at open by replaying the batch headers from the log start (control batches read
whole, for their markers).

Segments: the rows are one run, so :attr:`segment_base_offsets` has one entry and nothing
rolls. Retention deletes rows below the new log start. Compaction
(``storage.postgres.compaction``) cleans the flushed rows but the newest ``segment_bytes`` of
them, which stand for the active segment: :attr:`PostgresLog.compactable` says whether there is
more than that and rows flushed since the last compaction started; rows are deleted or replaced
in place, each keeping its offsets, and never those still waiting to be flushed. A failed
compaction is an OSError to its caller and leaves the log online (only the write path takes it
offline).
"""

from __future__ import annotations

import bisect
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from kcoord.protocol.batch import (
    HEADER_SIZE,
    BatchHeader,
    CorruptBatch,
    iter_headers,
    parse_header,
    set_base_offset,
    set_leader_epoch,
)
from kcoord.storage.compaction_rules import CompactionStats, PreparedCompaction
from kcoord.storage.engine import LeaderFence, LogClosed, OffsetOutOfRange, SharedFlush
from kcoord.storage.offline import LogFenced, LogOffline, report_went_offline
from kcoord.storage.producer_state import ProducerState
from kcoord.storage.retention import DeletionPlan
from kcoord.storage.txn_index import AbortedTxn
from kcoord.storage.txn_log import DEFAULT_PRODUCER_EXPIRATION_MS, marker_of, wall_clock_ms

from . import compaction
from .flush import PendingFlush
from .pool import ConnectionPool, database_errors
from .recent import LogTail

log = logging.getLogger("kcoord.storage")

CONTROL_BIT = 0x20
READ_ROWS = 256  # rows per query of a read or an iteration


class PostgresLog:
    """The log of the partition whose ``partitions`` row is ``row_id``."""

    def __init__(
        self,
        pool: ConnectionPool | None,
        name: str,
        row_id: int,
        *,
        log_start: int = 0,
        log_end: int = 0,
        size_bytes: int = 0,
        segment_bytes: int = 1 << 30,
        producer_expiration_ms: int = DEFAULT_PRODUCER_EXPIRATION_MS,
        clock: Callable[[], int] | None = None,
        offline: LogOffline | None = None,
        recent: LogTail | None = None,
        shared_flush: SharedFlush | None = None,
        leader: LeaderFence | None = None,
    ) -> None:
        self._pool = pool
        self._name = name
        self.row_id = row_id
        self._start = log_start
        self._end = log_end
        self._flushed = log_end
        self._size = size_bytes
        self._segment_bytes = segment_bytes
        self._pending: list[tuple[BatchHeader, bytes]] = []
        self._pending_aborts: list[AbortedTxn] = []
        self._aborted: list[AbortedTxn] = []  # by last offset
        self._lock = threading.Lock()  # pending state shared with flush()
        self._flush_lock = threading.Lock()
        self._producers = ProducerState(producer_expiration_ms, clock or wall_clock_ms)
        self._offline = offline
        self._closed = False
        self._recent = recent  # the newest flushed batches, read without a query
        self._shared_flush = shared_flush
        self._compacted = log_start  # the flushed offset the last compaction saw
        self.leader = leader  # the leadership every flush is fenced by (cluster mode)

    @classmethod
    def offline_log(cls, name: str, cause: BaseException | str) -> PostgresLog:
        plog = cls(None, name, -1, log_start=-1, log_end=-1)
        plog._offline = LogOffline(Path(name), cause)
        return plog

    # -- state --------------------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self._name

    @property
    def offline(self) -> LogOffline | None:
        return self._offline

    @property
    def log_start_offset(self) -> int:
        return self._start

    @property
    def log_end_offset(self) -> int:
        return self._end

    @property
    def high_watermark(self) -> int:
        return self._end

    @property
    def flushed_offset(self) -> int:
        return self._flushed

    @property
    def size_bytes(self) -> int:
        return self._size

    @property
    def segment_base_offsets(self) -> list[int]:
        return [self._start] if self._end >= 0 else []

    @property
    def compactable(self) -> bool:
        """Whether more than a segment's worth was flushed (the newest ``segment_bytes`` are
        never cleaned: ``storage.postgres.compaction``), some of it since the last compaction
        (in this process) started."""
        return self._size > self._segment_bytes and self._flushed > max(self._compacted, self._start)

    @property
    def compaction_commits_anywhere(self) -> bool:
        return True  # one transaction under the partition row's lock

    @property
    def shared_flush(self) -> SharedFlush | None:
        return self._shared_flush

    @property
    def producer_state(self) -> ProducerState:
        return self._producers

    def _check_open(self) -> ConnectionPool:
        if self._closed:
            raise LogClosed(f"log {self._name} is closed")
        if self._offline is not None:
            raise self._offline
        assert self._pool is not None
        return self._pool

    # -- opening ------------------------------------------------------------------------------

    def load(self) -> None:
        """Rebuild the producer state and the aborted transactions from the database."""
        pool = self._check_open()
        state = self._producers
        state.reset(self._start)
        with database_errors(), pool.connection() as conn:
            self._aborted = [
                AbortedTxn(*row)
                for row in conn.execute(
                    "SELECT producer_id, first_offset, last_offset, last_stable_offset"
                    " FROM aborted_txns WHERE partition_id = %s ORDER BY last_offset",
                    (self.row_id,),
                )
            ]
            cursor = conn.cursor(binary=True)
            for head, whole in cursor.execute(
                "SELECT substring(data FROM 1 FOR %s),"
                " CASE WHEN attributes & %s <> 0 THEN data END"
                " FROM batches WHERE partition_id = %s AND last_offset >= %s ORDER BY base_offset",
                (HEADER_SIZE, CONTROL_BIT, self.row_id, self._start),
            ):
                h = parse_header(head)
                if h.producer_id < 0:
                    state.offset = h.next_offset
                    continue
                state.apply(h, marker_of(whole) if whole is not None else None, replay=True)
        state.offset = max(state.offset, self._end)

    # -- writing ------------------------------------------------------------------------------

    def append(self, batches: bytes | bytearray | memoryview) -> tuple[int, int]:
        """Validate whole v2 batches and give them offsets from the log end; durable only
        after :meth:`flush`. CorruptBatch (nothing appended) for an invalid one."""
        self._check_open()
        buf = bytearray(batches)
        if not buf:
            raise CorruptBatch("no record batches")
        headers = iter_headers(buf, verify_crc=True)
        state = self._producers
        with self._lock:
            first = next_offset = self._end
            added: list[tuple[BatchHeader, bytes]] = []
            epoch = self.leader.epoch if self.leader is not None else None
            for pos, h in headers:
                set_base_offset(buf, pos, next_offset)
                if epoch is None:
                    h = replace(h, base_offset=next_offset)
                else:  # cluster mode: the batch says which leadership wrote it
                    set_leader_epoch(buf, pos, epoch)
                    h = replace(h, base_offset=next_offset, partition_leader_epoch=epoch)
                added.append((h, bytes(buf[pos : pos + h.size])))
                next_offset = h.next_offset
            self._pending.extend(added)
            self._end = next_offset
            self._size += len(buf)
        state.forget_ended(self._flushed)
        for h, data in added:
            if h.producer_id < 0:
                state.offset = h.next_offset
                continue
            done = state.apply(h, marker_of(data) if h.is_control else None)
            if done is not None and done.aborted:
                entry = AbortedTxn(
                    done.producer_id,
                    done.first_offset,
                    done.last_offset,
                    state.stable_offset_at(h.next_offset),
                )
                with self._lock:
                    self._aborted.append(entry)
                    self._pending_aborts.append(entry)
        return first, next_offset - 1

    def flush(self) -> None:
        """Write what was appended in one transaction (module docstring); blocking."""
        self._check_open()
        assert self._shared_flush is not None  # every open log has its engine's (engine.py)
        failed = self._shared_flush.flush_all([self])
        if self in failed:
            raise failed[self]

    def _pending_flush(self) -> PendingFlush | None:
        """What waits to be flushed (the caller holds ``_flush_lock``)."""
        with self._lock:
            if not self._pending:
                return None
            return PendingFlush(
                self.row_id,
                self._name,
                list(self._pending),
                list(self._pending_aborts),
                self.leader,
            )

    def _flushed_up_to(self, done: PendingFlush) -> None:
        """``done`` is committed: readable and acknowledged."""
        with self._lock:
            del self._pending[: len(done.batches)]
            del self._pending_aborts[: len(done.aborts)]
            self._flushed = done.end
            if self._recent is not None:
                self._recent.add(done.batches)

    def _went_offline(self, failed: PendingFlush, cause: OSError) -> LogOffline:
        """``failed`` could not be written: what waits is dropped and the log goes offline
        (module docstring)."""
        with self._lock:
            self._pending.clear()
            self._pending_aborts.clear()
            offline = self._offline = LogOffline(Path(self._name), cause)
        offline.__cause__ = cause
        lost = f"offsets {failed.expected} to {self._end - 1} were not written"
        if isinstance(cause, LogFenced):  # another node leads it: not a failure of this one
            log.warning("%s: %s; %s", self._name, cause.strerror, lost)
        else:
            report_went_offline(
                Path(self._name), cause, lost, until="the database answers again"
            )
        return offline

    # -- reading ------------------------------------------------------------------------------

    def _rows(self, conn: Any, start: int, below: int, limit: int) -> list[tuple[int, bytes]]:
        """(base offset, bytes) of up to ``limit`` stored batches holding offsets in
        [start, below), in order."""
        return [
            (int(base), bytes(data))
            for base, data in conn.cursor(binary=True).execute(
                "SELECT base_offset, data FROM batches WHERE partition_id = %s"
                " AND last_offset >= %s AND base_offset < %s ORDER BY base_offset LIMIT %s",
                (self.row_id, start, below, limit),
            )
        ]

    def iter_batches(
        self, start_offset: int | None = None
    ) -> Iterator[tuple[int, BatchHeader, memoryview]]:
        """Every batch from the one holding ``start_offset`` (or the log start) on, as the log
        was when the call was made."""
        pool = self._check_open()
        start = max(self._start if start_offset is None else start_offset, self._start)
        with self._lock:
            flushed, pending = self._flushed, list(self._pending)
            cached_from, cached = (
                self._recent.since(start, flushed) if self._recent is not None else (flushed, [])
            )
        while start < cached_from:
            with database_errors(), pool.connection() as conn:
                rows = self._rows(conn, start, cached_from, READ_ROWS)
            if not rows:
                break
            for base, data in rows:
                h = parse_header(data)
                yield base, h, memoryview(data)
                start = h.next_offset
        for h, data in (*cached, *pending):
            if h.last_offset >= start:
                yield h.base_offset, h, memoryview(data)

    looks_up_locally = False  # a query each (offset_for_timestamp, max_timestamp_batch)

    def reads_locally(self, offset: int) -> bool:
        flushed, recent = self._flushed, self._recent
        return offset >= (flushed if recent is None else recent.first_offset(flushed))

    def read(self, offset: int, max_bytes: int) -> bytes:
        """Whole batches from the one holding ``offset``, about ``max_bytes`` worth (at least
        one batch if there is any); OffsetOutOfRange outside [log start, log end]."""
        self._check_open()
        if offset < self._start or offset > self._end:
            raise OffsetOutOfRange(offset, self._start, self._end)
        out = bytearray()
        for _, h, data in self.iter_batches(offset):
            if out and len(out) + h.size > max_bytes:
                break
            out += data
            if len(out) >= max_bytes:
                break
        return bytes(out)

    def offset_for_timestamp(self, ts_ms: int) -> tuple[int, int] | None:
        """(base offset, max timestamp) of the first batch, in offset order, whose max
        timestamp is at least ``ts_ms`` (the files engine's granularity)."""
        pool = self._check_open()
        with database_errors(), pool.connection() as conn:
            row = conn.execute(
                "SELECT base_offset, max_timestamp FROM batches WHERE partition_id = %s"
                " AND last_offset >= %s AND max_timestamp >= %s ORDER BY base_offset LIMIT 1",
                (self.row_id, self._start, ts_ms),
            ).fetchone()
        if row is not None:
            return int(row[0]), int(row[1])
        with self._lock:
            pending = list(self._pending)
        for h, _ in pending:
            if h.max_timestamp >= ts_ms and h.last_offset >= self._start:
                return h.base_offset, h.max_timestamp
        return None

    def max_timestamp_batch(self) -> tuple[int, int] | None:
        pool = self._check_open()
        with database_errors(), pool.connection() as conn:
            row = conn.execute(
                "SELECT base_offset, max_timestamp FROM batches WHERE partition_id = %s"
                " AND last_offset >= %s ORDER BY max_timestamp DESC, base_offset LIMIT 1",
                (self.row_id, self._start),
            ).fetchone()
        best = (int(row[0]), int(row[1])) if row is not None else None
        with self._lock:
            pending = list(self._pending)
        for h, _ in pending:
            if best is None or h.max_timestamp > best[1]:
                best = (h.base_offset, h.max_timestamp)
        return best

    def last_stable_offset(self, high_watermark: int) -> int:
        return self._producers.last_stable_offset(high_watermark)

    def aborted_transactions(self, start: int, upper: int) -> list[AbortedTxn]:
        """The aborted transactions overlapping [start, upper) (as ``storage.txn_log``)."""
        with self._lock:
            aborted = list(self._aborted)
        out = []
        for e in aborted[bisect.bisect_left([a.last_offset for a in aborted], start) :]:
            if e.first_offset < upper:
                out.append(e)
            if e.last_stable_offset >= upper:
                break
        return out

    # -- the log start and retention ------------------------------------------------------------

    def advance_log_start(self, offset: int) -> bool:
        """Move the log start up to ``offset`` (at most the log end); whether it moved. Durable
        at the engine's next checkpoint."""
        self._check_open()
        offset = min(offset, self._end)
        if offset <= self._start:
            return False
        self._start = offset
        return True

    def restore_log_start(self, offset: int) -> None:
        self._start = max(self._start, min(offset, self._end))

    def set_segment_bytes(self, segment_bytes: int) -> None:
        self._segment_bytes = segment_bytes

    def roll_if_due(self, now_ms: int, segment_ms: int) -> bool:
        return False  # no segments

    def plan_deletion(
        self, now_ms: int, *, retention_ms: int = -1, retention_bytes: int = -1
    ) -> DeletionPlan | None:
        """The rows that may go: those below the log start, then (oldest first, flushed only)
        those past ``retention_ms`` or over ``retention_bytes``."""
        pool = self._check_open()
        new_start, reasons = self._start, set()
        with database_errors(), pool.connection() as conn:
            below = conn.execute(
                "SELECT 1 FROM batches WHERE partition_id = %s AND last_offset < %s LIMIT 1",
                (self.row_id, self._start),
            ).fetchone()
            if below is not None:
                reasons.add("log start offset")
            if retention_ms >= 0 or retention_bytes >= 0:
                excess = self._size - retention_bytes if retention_bytes >= 0 else -1
                for last, ts, size in conn.execute(
                    "SELECT last_offset, max_timestamp, length(data) FROM batches"
                    " WHERE partition_id = %s AND last_offset >= %s AND base_offset < %s"
                    " ORDER BY base_offset",
                    (self.row_id, self._start, self._flushed),
                ):
                    if retention_ms >= 0 and now_ms - ts > retention_ms:
                        reasons.add(f"retention.ms {retention_ms}")
                    elif retention_bytes >= 0 and excess - size >= 0:
                        reasons.add(f"retention.bytes {retention_bytes}")
                    else:
                        break
                    excess -= size
                    new_start = max(new_start, last + 1)
        if not reasons:
            return None
        return DeletionPlan((), new_start, ", ".join(sorted(reasons)))

    def delete_planned(self, plan: DeletionPlan) -> int:
        """Delete the rows wholly below the log start (call :meth:`advance_log_start` with the
        plan's new start, and checkpoint, first); how many were deleted."""
        pool = self._check_open()
        upto = min(plan.new_log_start, self._start)
        with database_errors(), pool.connection() as conn, conn.transaction():
            # the partition row first, as a flush and a compaction lock it: never a deadlock
            conn.execute("SELECT 1 FROM partitions WHERE id = %s FOR UPDATE", (self.row_id,))
            deleted = conn.execute(
                "DELETE FROM batches WHERE partition_id = %s AND last_offset < %s"
                " RETURNING length(data)",
                (self.row_id, upto),
            ).fetchall()
            conn.execute(
                "DELETE FROM aborted_txns WHERE partition_id = %s AND last_offset < %s",
                (self.row_id, upto),
            )
            freed = sum(int(n) for (n,) in deleted)
            conn.execute(
                "UPDATE partitions SET size_bytes = size_bytes - %s WHERE id = %s",
                (freed, self.row_id),
            )
        with self._lock:
            self._size -= freed
            self._aborted = [a for a in self._aborted if a.last_offset >= upto]
        return len(deleted)

    # -- compaction (storage.postgres.compaction) ------------------------------------------------

    def prepare_compaction(
        self, *, now_ms: int, delete_retention_ms: int
    ) -> PreparedCompaction:
        """Phase 1 (any thread): read the flushed rows and plan what goes and what is
        rebuilt. A database error is an OSError; the log stays online."""
        pool = self._check_open()
        with self._lock:
            start, flushed = self._start, self._flushed
        with database_errors():
            sealed = compaction.sealed_end(
                pool, self.row_id, start=start, flushed=flushed, segment_bytes=self._segment_bytes
            )
            return compaction.prepare(
                pool,
                self.row_id,
                start=start,
                flushed=flushed,
                sealed=sealed,
                horizon_ms=now_ms - delete_retention_ms,
            )

    def commit_compaction(self, plan: PreparedCompaction) -> CompactionStats:
        """Phase 2 (the writer): apply the plan in one transaction unless the rows changed
        underneath (then ``stats.stale``, nothing changed). A database error is an OSError and
        the log stays online (a commit whose answer was lost may still have been applied: the
        in-memory size is then off until the log is next opened)."""
        rows = compaction.finish(plan, self.row_id)
        stats = rows.stats
        started = time.perf_counter()
        if self._closed or self._offline is not None:
            stats.discard()
            return stats
        assert self._pool is not None
        with database_errors():
            applied = compaction.commit(self._pool, rows, log_start=self._start)
        stats.seconds += time.perf_counter() - started
        if not applied:
            stats.discard()
            return stats
        with self._lock:
            self._size += rows.delta
            self._compacted = max(self._compacted, rows.seen)
            if self._recent is not None:  # what readers get from memory must be the rows
                self._recent.drop_below(rows.covered)
        return stats

    def abort_compaction(self, plan: PreparedCompaction) -> None:
        compaction.finish(plan, self.row_id)

    def close(self) -> None:
        """Flush what is pending (an error propagates), then refuse further use."""
        try:
            if not self._closed and self._offline is None:
                self.flush()
        finally:
            self._closed = True
            if self._recent is not None:
                self._recent.clear()

