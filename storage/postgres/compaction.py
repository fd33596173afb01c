"""Key-based compaction of one partition's batch rows (``storage.compaction_rules``' rules).

The part that may be rewritten is what the files engine would hold in sealed segments: the
flushed rows (below the log's ``flushed_offset`` when the compaction starts, from the log start
on) except the newest ``segment_bytes`` of them, which stand for the active segment
(:func:`sealed_end`). As there, the recent history of a compacted log (the group records of
the last rebalances, which the console's timeline and the pipeline read) stays whole until
more than a segment's worth follows it. The key map is built from every flushed row. Batches
still waiting in memory are never read nor touched, and neither are rows flushed after the
start.

Two phases, as for the files engine:

1. :func:`prepare` reads the rows twice, a page at a time on pooled connections (any thread,
   while the event loop keeps appending and flushing): once to build the key -> newest offset
   map, once to decide each row's fate. The plan lists the rows to delete and those to replace
   with a batch rebuilt from its survivors (same base offset and last offset: offsets never
   move), each with a digest of the bytes it was planned from, and the change in size.
2. :func:`commit` applies the plan in one transaction that first locks the partition row
   (``SELECT ... FOR UPDATE``, as a flush and retention's deletion do, so none of them runs
   beside it) and checks that the plan still holds: the partition is not deleted, the log
   start has not moved past a row the plan touches, and every such row is still there with
   the bytes it was planned from (retention, or another compaction, may have deleted or
   rewritten it). If not, nothing is changed and the plan is stale. Otherwise the rows go, the
   rebuilt ones replace theirs and ``partitions.size_bytes`` moves by the plan's delta.

The log start stays where it is even when its first rows go (Kafka keeps the first offset).
The ``aborted_txns`` rows are kept: a read_committed fetch of the control batches that stay
still finds its transaction listed, as the files engine keeps its ``.txnindex`` entries.

Database errors escape as psycopg's: the log wraps them (``database_errors``) into OSErrors.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from kcoord.protocol.batch import parse_header
from kcoord.storage.compaction_rules import (
    Batch,
    BatchFilter,
    CompactionStats,
    PreparedCompaction,
    surviving_offsets,
)

from .pool import ConnectionPool

READ_ROWS = 256  # rows per page of a pass


@dataclass(frozen=True, slots=True)
class Touched:
    """A row the plan changes: its base and last offsets, the MD5 (hex) of the bytes the plan
    was made from, and what replaces them (None: the row goes)."""

    base_offset: int
    last_offset: int
    digest: str
    data: bytes | None


@dataclass(eq=False)
class RowsPlan(PreparedCompaction):
    """The result of :func:`prepare` for the partition row ``row_id``: the rows below
    ``covered`` were cleaned with the key map of those below ``seen``, those in ``touched``
    (in offset order) change."""

    row_id: int
    covered: int
    seen: int
    touched: list[Touched] = field(default_factory=list)
    delta: int = 0  # bytes
    stats: CompactionStats = field(default_factory=CompactionStats)
    finished: bool = False


def sealed_end(
    pool: ConnectionPool, row_id: int, *, start: int, flushed: int, segment_bytes: int
) -> int:
    """The offset below which the rows in [start, flushed) are sealed: all but the newest
    ``segment_bytes`` of them (``start`` when nothing is)."""
    with pool.connection() as conn:
        row = conn.execute(
            "SELECT last_offset FROM (SELECT base_offset, last_offset,"
            " sum(length(data)) OVER (ORDER BY base_offset DESC) AS newer FROM batches"
            " WHERE partition_id = %s AND last_offset >= %s AND base_offset < %s) AS tail"
            " WHERE newer > %s ORDER BY base_offset DESC LIMIT 1",
            (row_id, start, flushed, segment_bytes),
        ).fetchone()
    return start if row is None else int(row[0]) + 1


def prepare(
    pool: ConnectionPool,
    row_id: int,
    *,
    start: int,
    flushed: int,
    sealed: int,
    horizon_ms: int,
) -> RowsPlan:
    """Phase 1: the key map over the rows holding offsets in [start, flushed), the rows
    below ``sealed`` cleaned (module docstring)."""
    started = time.perf_counter()
    plan = RowsPlan(row_id, sealed, flushed)
    stats = plan.stats
    surviving, stats.tombstones_dropped = surviving_offsets(
        _rows(pool, row_id, start, flushed),
        durable_end=flushed,
        cleanable_end=sealed,
        horizon_ms=horizon_ms,
    )
    keep = BatchFilter(surviving)
    for base, h, data in _rows(pool, row_id, start, sealed):
        verdict = keep.decide(h, data)
        stats.records_before += h.records_count
        stats.records_after += verdict.records
        stats.bytes_before += len(data)
        if verdict.action == "keep":
            stats.bytes_after += len(data)
            continue
        replaced = verdict.data
        stats.bytes_after += len(replaced) if replaced is not None else 0
        plan.touched.append(
            Touched(base, h.last_offset, hashlib.md5(data).hexdigest(), replaced)
        )
    plan.delta = stats.bytes_after - stats.bytes_before
    stats.seconds = time.perf_counter() - started
    return plan


def finish(plan: PreparedCompaction, row_id: int) -> RowsPlan:
    """``plan`` as this module's, marked used; ValueError if it is not the partition row's
    plan or was used already."""
    if not isinstance(plan, RowsPlan) or plan.row_id != row_id:
        raise ValueError("not a compaction plan of this partition")
    if plan.finished:
        raise ValueError("plan already committed or aborted")
    plan.finished = True
    return plan


def _rows(pool: ConnectionPool, row_id: int, start: int, below: int) -> Iterator[Batch]:
    """Every stored batch holding offsets in [start, below), in order, a page per query."""
    while start < below:
        with pool.connection() as conn:
            rows = conn.cursor(binary=True).execute(
                "SELECT base_offset, data FROM batches WHERE partition_id = %s"
                " AND last_offset >= %s AND base_offset < %s ORDER BY base_offset LIMIT %s",
                (row_id, start, below, READ_ROWS),
            ).fetchall()
        if not rows:
            return
        for base, data in rows:
            whole = bytes(data)
            h = parse_header(whole)
            yield int(base), h, memoryview(whole)
            start = h.next_offset


def commit(pool: ConnectionPool, plan: RowsPlan, *, log_start: int) -> bool:
    """Phase 2 (module docstring): whether the plan was applied (False: stale, nothing
    changed). ``log_start`` is the log's start now."""
    touched = plan.touched
    if not touched:
        return True
    if touched[0].last_offset < log_start:
        return False
    bases = [t.base_offset for t in touched]
    with pool.connection() as conn, conn.transaction():
        row = conn.execute(
            "SELECT log_start FROM partitions WHERE id = %s AND NOT deleted FOR UPDATE",
            (plan.row_id,),
        ).fetchone()
        if row is None or touched[0].last_offset < row[0]:
            return False
        found = dict(
            conn.execute(
                "SELECT base_offset, md5(data) FROM batches WHERE partition_id = %s"
                " AND base_offset = ANY(%s)",
                (plan.row_id, bases),
            ).fetchall()
        )
        if any(found.get(t.base_offset) != t.digest for t in touched):
            return False
        doomed = [t.base_offset for t in touched if t.data is None]
        if doomed:
            conn.execute(
                "DELETE FROM batches WHERE partition_id = %s AND base_offset = ANY(%s)",
                (plan.row_id, doomed),
            )
        rebuilt = [(t.data, plan.row_id, t.base_offset) for t in touched if t.data is not None]
        if rebuilt:
            conn.cursor().executemany(
                "UPDATE batches SET data = %s WHERE partition_id = %s AND base_offset = %s",
                rebuilt,
            )
        conn.execute(
            "UPDATE partitions SET size_bytes = size_bytes + %s WHERE id = %s",
            (plan.delta, plan.row_id),
        )
    return True
