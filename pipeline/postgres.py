"""Reading the logs of a kcoord broker that stores them in PostgreSQL (``storage.url``).

The pipeline's other source, beside a data directory: the same record batches, as rows of the
engine's tables (``storage.postgres.schema``). This module owns everything the pipeline reads
from the database, in plain Python so that the Spark executors, the driver and the tests share
it:

* :func:`live_partitions` (driver): every live partition's log start and end, the run's
  snapshot (``pipeline.snapshot``);
* :func:`offsets_runs` (driver): the ``__consumer_offsets`` partitions as :class:`PgRun` s, runs
  of batches by offset range (:data:`RUN_OFFSETS` offsets each), the unit of work that a segment
  file is for a data directory;
* :func:`read_batches` and :func:`txn_outcomes` (executors): a run's batches in offset order,
  CRC checked, and which of its transactional batches were committed;
* :func:`topic_logs`, :func:`topic_names` and :func:`first_record_at_or_after`: the topic
  partitions' log start and end, topic ids, and the oldest unconsumed record for lag.

Only rows of partitions that are ``NOT deleted`` count. A partition's log start is its row's
``log_start``: rows wholly below it (not yet removed by retention) are not read, and records
below it in a batch that straddles it are left out (:attr:`PgRun.min_offset`). Its log end is
``next_offset`` as the driver read it at the start of the job (one statement for every
partition): runs stop there, so every table of the job sees the same cut of each partition
even while the broker goes on writing.

Each process opens its own connections from the URL; every statement is parameterised. A
psycopg error reaches the caller as an ``OSError`` whose message has no password in it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field
from typing import Any

import psycopg

from kcoord.protocol.batch import (
    CONTROL_FLAG,
    TRANSACTIONAL_FLAG,
    BatchHeader,
    CorruptBatch,
    crc_ok,
    parse_header,
)
from kcoord.protocol.record_scan import batch_first_at_or_after
from kcoord.storage.partition_metadata import topic_id_to_str
from kcoord.storage.postgres.pool import database_errors

from .logs import ScanStats, TopicLog
from .txn import marker_commit, resolve

SCHEMES = ("postgresql", "postgres")
RUN_OFFSETS = 1 << 20  # offsets per run: bounds what one task buffers, like a segment file
PAGE_ROWS = 256  # rows fetched per round trip of a server-side cursor
_ANY_TIMESTAMP = -(2**63)


def is_postgres_url(source: str) -> bool:
    """Whether ``source`` names a PostgreSQL database rather than a data directory."""
    scheme, sep, _ = source.partition("://")
    return bool(sep) and scheme.lower() in SCHEMES


@contextlib.contextmanager
def connect(url: str) -> Iterator[Any]:
    """A psycopg connection (closed on exit); psycopg's errors as OSError."""
    with database_errors():
        conn = psycopg.connect(url)
    try:
        with database_errors():
            yield conn
    finally:
        conn.close()


@dataclass(frozen=True, slots=True)
class PgRun:
    """The batches of one partition whose base offset is in [lo, hi), and none wholly below
    ``log_start`` (picklable: it travels to the executors). ``end`` is the partition's log end
    as the driver read it: transaction markers are looked for up to there."""

    url: str = field(repr=False)  # a password in it stays out of messages
    topic: str
    log_partition: int
    row_id: int
    log_start: int
    lo: int
    hi: int
    end: int

    @property
    def name(self) -> str:
        """What the summary and the problems call it (no URL in it)."""
        return f"{self.topic}-{self.log_partition}/offsets {self.base_offset}-{self.hi - 1}"

    @property
    def base_offset(self) -> int:
        return max(self.lo, self.log_start)

    @property
    def min_offset(self) -> int:
        """Records below this offset are not part of the log."""
        return self.log_start


def plan_runs(
    url: str, topic: str, partition: int, row_id: int, log_start: int, end: int,
    step: int = RUN_OFFSETS,
) -> list[PgRun]:
    """The runs covering [log_start, end) of one partition, ``step`` offsets each (the first
    also takes a batch that straddles the log start)."""
    runs: list[PgRun] = []
    if log_start >= end:
        return runs  # nothing left in the log
    lo = log_start - log_start % step
    while lo < end:
        hi = min(lo + step, end)
        runs.append(PgRun(url, topic, partition, row_id, log_start, 0 if not runs else lo, hi, end))
        lo = hi
    return runs


PartitionRow = tuple[str, int, int, int, int]
"""A live partition: topic, partition, row id, log start, log end (``next_offset``)."""


def live_partitions(url: str) -> list[PartitionRow]:
    """Every live partition, read in one statement (so one consistent cut of them all)."""
    with connect(url) as conn:
        rows = conn.execute(
            "SELECT topic, partition, id, log_start, next_offset FROM partitions"
            " WHERE NOT deleted ORDER BY topic, partition"
        ).fetchall()
    return [(str(t), int(p), int(i), int(s), int(e)) for t, p, i, s, e in rows]


def offsets_runs(
    url: str, topic: str, step: int = RUN_OFFSETS, partitions: list[PartitionRow] | None = None
) -> list[PgRun]:
    """The runs of every live partition of ``topic`` (empty partitions have none), as
    ``partitions`` (a snapshot's) has them, or as they are now."""
    runs: list[PgRun] = []
    for t, partition, row_id, log_start, end in (live_partitions(url) if partitions is None else partitions):
        if t == topic:
            runs += plan_runs(url, topic, partition, row_id, log_start, end, step)
    return runs


def offsets_partitions(url: str, topic: str) -> int:
    """How many live partitions ``topic`` has in the database."""
    with connect(url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM partitions WHERE topic = %s AND NOT deleted", (topic,)
        ).fetchone()
    return int(row[0]) if row else 0


def _run_rows(
    conn: Any,
    run: PgRun,
    columns: str,
    extra: str = "",
    params: tuple[Any, ...] = (),
    column_params: tuple[Any, ...] = (),
) -> Any:
    """A server-side cursor over the run's rows in base offset order; ``extra`` adds
    conditions whose ``params`` follow the run's (``column_params`` go before them)."""
    cur = conn.cursor(name="kcoord_pipeline_run", binary=True)
    cur.itersize = PAGE_ROWS
    cur.execute(
        f"SELECT {columns} FROM batches WHERE partition_id = %s AND base_offset >= %s"
        f" AND base_offset < %s AND last_offset >= %s{extra} ORDER BY base_offset",
        (*column_params, run.row_id, run.lo, run.hi, run.log_start, *params),
    )
    return cur


def read_batches(run: PgRun, stats: ScanStats) -> Generator[tuple[BatchHeader, memoryview], None, None]:
    """(header, whole batch) for each batch of the run, in offset order, CRC checked.
    Raises CorruptBatch for a bad one, OSError if the database fails."""
    with connect(run.url) as conn, _run_rows(conn, run, "data") as cur:
        for (data,) in cur:
            view = memoryview(bytes(data))
            h = parse_header(view)
            if h.size != len(view):
                raise CorruptBatch(f"the batch at offset {h.base_offset} is {len(view)} bytes,"
                                   f" its header says {h.size}")
            if not crc_ok(view, 0, h):
                raise CorruptBatch(f"CRC mismatch in the batch at offset {h.base_offset}")
            stats.batches += 1
            stats.bytes += h.size
            yield h, view


def txn_outcomes(run: PgRun) -> dict[int, bool]:
    """Base offset of each transactional data batch of the run -> whether it was committed
    (``pipeline.txn``): its producer's next marker, in the run or later up to the log end."""
    txn = TRANSACTIONAL_FLAG
    txns: list[tuple[int, int]] = []
    markers: list[tuple[int, int, bool]] = []
    with connect(run.url) as conn:
        # the transactional rows of the run, with the bodies of the markers only
        with _run_rows(
            conn, run, "base_offset, producer_id, CASE WHEN attributes & %s <> 0 THEN data END",
            " AND attributes & %s <> 0", (txn,), (CONTROL_FLAG,),
        ) as cur:
            for base, pid, data in cur:
                if data is None:
                    txns.append((pid, base))
                    continue
                commit = marker_commit(parse_header(data), data)
                if commit is not None:
                    markers.append((pid, base, commit))

        def later(wanted: set[int]) -> Iterator[tuple[int, int, bool]]:
            cur = conn.cursor(name="kcoord_pipeline_markers", binary=True)
            cur.itersize = PAGE_ROWS
            with cur:
                cur.execute(
                    "SELECT producer_id, base_offset, data FROM batches WHERE partition_id = %s"
                    " AND base_offset >= %s AND base_offset < %s AND attributes & %s = %s"
                    " AND producer_id = ANY(%s) ORDER BY base_offset",
                    (run.row_id, run.hi, run.end, txn | CONTROL_FLAG, txn | CONTROL_FLAG,
                     sorted(wanted)),
                )
                for pid, base, data in cur:
                    commit = marker_commit(parse_header(data), data)
                    if commit is not None:
                        yield pid, base, commit

        return resolve(txns, markers, later)


# --------------------------------------------------------------------------- topic logs


def topic_logs(url: str, partitions: list[PartitionRow] | None = None) -> list[TopicLog]:
    """Log start and end of every live topic partition (internal ``__*`` topics excluded),
    from the ``partitions`` rows (``partitions``: a snapshot's, else read now). ``dirname``
    is ``<topic>-<partition>`` as in a data directory, and ``segments`` holds the log start
    alone: the rows are one run."""
    return [
        TopicLog(topic, partition, f"{topic}-{partition}", start, end, [start])
        for topic, partition, _id, start, end in (live_partitions(url) if partitions is None else partitions)
        if not topic.startswith("__")
    ]


def topic_names(url: str) -> dict[str, str]:
    """Topic id (Kafka's text form) -> name of every live topic (``__*`` excluded)."""
    with connect(url) as conn:
        rows = conn.execute(
            "SELECT DISTINCT topic, topic_id FROM partitions WHERE NOT deleted"
        ).fetchall()
    return {topic_id_to_str(tid): topic for topic, tid in rows if not topic.startswith("__")}


def first_record_at_or_after(
    conn: Any, topic: str, partition: int, offset: int
) -> tuple[int, int] | None:
    """(offset, timestamp) of the first record whose offset is >= ``offset`` in the live
    partition, or None: the batch holding ``offset`` first, then the following ones (records of
    compacted topics may have gaps); control batches and undecodable ones are skipped."""
    cur = conn.cursor(name="kcoord_pipeline_lookup", binary=True)
    cur.itersize = 8  # usually the first row answers
    try:
        return _first_found(cur, topic, partition, offset)
    finally:
        cur.close()
        conn.rollback()  # end the read's transaction: the connection serves more lookups


def _first_found(cur: Any, topic: str, partition: int, offset: int) -> tuple[int, int] | None:
    cur.execute(
        "SELECT b.data FROM batches b JOIN partitions p ON p.id = b.partition_id"
        " WHERE p.topic = %s AND p.partition = %s AND NOT p.deleted"
        " AND b.last_offset >= %s AND b.last_offset >= p.log_start"
        " AND b.attributes & %s = 0 ORDER BY b.base_offset",
        (topic, partition, offset, CONTROL_FLAG),
    )
    for (data,) in cur:
        try:
            found = batch_first_at_or_after(data, offset, _ANY_TIMESTAMP)
        except CorruptBatch:
            continue
        if found is not None:
            return found
    return None
