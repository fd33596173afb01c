"""The database transaction of a flush: what several partitions appended, written at once.

A flush round (broker/data/flusher.py) hands all the dirty logs of an engine over together
(``PostgresEngine.flush_all``), so one transaction, one round of statements and one commit carry
the appends of many partitions: :func:`write` takes each log's :class:`PendingFlush` and

1. locks the partition rows (``SELECT ... FOR UPDATE`` in id order, so two writers never wait
   on each other crosswise) and reads each log end;
2. goes on with each partition whose log end is where its log left it: the rows of all of them
   in one ``COPY``, their aborted transactions, their new log ends and sizes;
3. leaves out, as *fenced*, each partition whose row is gone (deleted), whose leader or leader
   epoch is not the one the log writes under (cluster mode: another node took the partition;
   checked here, under the row lock, so no successor's write can come between the check and
   the commit), or whose log end moved (another writer), unless the very batches are there
   already (a commit whose answer was lost): the others are written all the same.

The caller (``storage.postgres.log``) acknowledges the written partitions only after the commit,
and takes the fenced ones, or all of them when the transaction fails, offline.
"""

from __future__ import annotations

import errno
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kcoord.protocol.batch import BatchHeader
from kcoord.storage.engine import LeaderFence
from kcoord.storage.offline import LogFenced
from kcoord.storage.txn_index import AbortedTxn

from .pool import ConnectionPool

Batch = tuple[BatchHeader, bytes]


@dataclass(frozen=True, slots=True)
class PendingFlush:
    """What one partition (row ``row_id``) appended since its last flush."""

    row_id: int
    name: str
    batches: list[Batch]
    aborts: list[AbortedTxn]
    leader: LeaderFence | None = None

    @property
    def expected(self) -> int:
        """The log end the database must be at: the first batch's offset."""
        return self.batches[0][0].base_offset

    @property
    def end(self) -> int:
        return self.batches[-1][0].next_offset


def write(pool: ConnectionPool, flushes: Sequence[PendingFlush]) -> dict[int, LogFenced]:
    """The transaction (module docstring); the fenced partitions by row id. psycopg's errors
    escape (the caller wraps them)."""
    fenced: dict[int, LogFenced] = {}
    with pool.connection() as conn, conn.transaction():
        rows = {
            row[0]: row[1:]
            for row in conn.execute(
                "SELECT id, next_offset, leader, leader_epoch FROM partitions"
                " WHERE id = ANY(%s) AND NOT deleted ORDER BY id FOR UPDATE",
                ([f.row_id for f in flushes],),
            )
        }
        writing = []
        for f in flushes:
            row = rows.get(f.row_id)
            if row is None:
                fenced[f.row_id] = LogFenced(errno.ESTALE, f"partition {f.name} was deleted")
                continue
            at, leader, epoch = row
            if f.leader is not None and (leader, epoch) != (f.leader.node_id, f.leader.epoch):
                fenced[f.row_id] = LogFenced(
                    errno.ESTALE,
                    f"partition {f.name} is led by node {leader} in epoch {epoch}, no longer by"
                    f" this node (node {f.leader.node_id}, epoch {f.leader.epoch})",
                )
            elif at == f.expected:
                writing.append(f)
            elif not (at == f.end and _stored(conn, f)):
                fenced[f.row_id] = LogFenced(
                    errno.ESTALE,
                    f"partition {f.name}: the database's log end is {at}, this node's"
                    f" {f.expected}",
                )
        if writing:
            _insert(conn, writing)
    return fenced


def _stored(conn: Any, f: PendingFlush) -> bool:
    """Whether these very batches are in the database already: a commit of this log whose
    answer was lost (the same end alone could be another writer's)."""
    firsts = {h.base_offset: data for h, data in (f.batches[0], f.batches[-1])}
    rows = conn.execute(
        "SELECT base_offset, data FROM batches WHERE partition_id = %s AND base_offset = ANY(%s)",
        (f.row_id, list(firsts)),
    ).fetchall()
    return len(rows) == len(firsts) and all(bytes(d) == firsts[b] for b, d in rows)


def _insert(conn: Any, flushes: list[PendingFlush]) -> None:
    with conn.cursor().copy(
        "COPY batches (partition_id, base_offset, last_offset, max_timestamp, producer_id,"
        " producer_epoch, attributes, data) FROM STDIN (FORMAT BINARY)"
    ) as copy:
        copy.set_types(["int8", "int8", "int8", "int8", "int8", "int2", "int2", "bytea"])
        for f in flushes:
            for h, data in f.batches:
                copy.write_row(
                    (
                        f.row_id,
                        h.base_offset,
                        h.last_offset,
                        h.max_timestamp,
                        h.producer_id,
                        h.producer_epoch,
                        h.attributes,
                        data,
                    )
                )
    aborts = [
        (f.row_id, a.producer_id, a.first_offset, a.last_offset, a.last_stable_offset)
        for f in flushes
        for a in f.aborts
    ]
    cursor = conn.cursor()
    if aborts:
        cursor.executemany(
            "INSERT INTO aborted_txns (partition_id, producer_id, first_offset, last_offset,"
            " last_stable_offset) VALUES (%s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
            aborts,
        )
    cursor.executemany(
        "UPDATE partitions SET next_offset = %s, size_bytes = size_bytes + %s WHERE id = %s",
        [(f.end, sum(len(data) for _, data in f.batches), f.row_id) for f in flushes],
    )
