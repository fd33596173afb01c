"""The PostgreSQL engine: the storage interface over one database (``storage.url``).

Nothing durable stays on the node: documents, the catalogue of partitions (with their log
starts, ends and sizes) and every record batch live in the tables of
``storage.postgres.schema``, which :meth:`PostgresEngine.start` creates or migrates. Each
partition's log is a :class:`~storage.postgres.log.PostgresLog`.

Every statement is parameterised. Database errors reach the broker as OSErrors
(``DatabaseError``), which it answers with retriable errors; connections that failed are
dropped and reopened on next use. A log that went offline (a write failed) is opened again
once :meth:`PostgresEngine.may_reopen` finds the database answering (broker/data/reopening.py),
so the node serves again by itself when the database comes back.
"""

from __future__ import annotations

import errno
import logging
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import cast
from urllib.parse import urlsplit, urlunsplit

from kcoord.storage.engine import DocumentChange, LeaderFence, Log, LogSpec, StoredTopic
from kcoord.storage.txn_log import DEFAULT_PRODUCER_EXPIRATION_MS

from .cluster import ClusterStore
from .flush_round import FlushTogether
from .log import PostgresLog
from .pool import ConnectionPool, DatabaseError, database_errors
from .recent import DEFAULT_BUDGET_BYTES, RecentBatches
from .schema import migrate

log = logging.getLogger("kcoord.storage")

UPDATE_ATTEMPTS = 5
"""How many times :meth:`PostgresEngine.update_document` tries a document that another writer
keeps creating under it (the second attempt finds the row; more is only a bound)."""


def redacted(url: str) -> str:
    """``url`` without its password."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{parts.username}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


@dataclass(frozen=True, slots=True)
class LogStarts:
    """A checkpoint: each listed partition row's log start, and the leader and epoch it was
    moved under (-1, -1 outside cluster mode): a node that lost the partition writes nothing."""

    starts: tuple[tuple[int, int, int, int], ...]


class PostgresEngine:
    def __init__(
        self,
        url: str,
        *,
        producer_expiration_ms: int = DEFAULT_PRODUCER_EXPIRATION_MS,
        pool_size: int = 8,
        recent_bytes: int = DEFAULT_BUDGET_BYTES,
    ) -> None:
        self.url = url
        self.producer_expiration_ms = producer_expiration_ms
        self.pool = ConnectionPool(url, pool_size)
        self.recent = RecentBatches(recent_bytes)
        self.flush_together = FlushTogether(self.pool)

    @property
    def description(self) -> str:
        return f"PostgreSQL at {redacted(self.url)}"

    def start(self) -> None:
        with database_errors(), self.pool.connection() as conn:
            migrate(conn)
        self.remove_deleted()

    def cluster_store(self, node_id: int, incarnation: uuid.UUID, session_ms: int) -> ClusterStore:
        """The membership and leadership statements of one node (cluster mode)."""
        return ClusterStore(self.pool, node_id, incarnation, session_ms)

    # documents ----------------------------------------------------------------------------------
    def read_document(self, name: str) -> bytes | None:
        with database_errors(), self.pool.connection() as conn:
            row = conn.execute("SELECT body FROM documents WHERE name = %s", (name,)).fetchone()
        return None if row is None else bytes(row[0])

    def write_document(self, name: str, data: bytes) -> None:
        with database_errors(), self.pool.connection() as conn:
            conn.execute(
                "INSERT INTO documents (name, body) VALUES (%s, %s)"
                " ON CONFLICT (name) DO UPDATE SET body = EXCLUDED.body",
                (name, data),
            )

    def update_document(self, name: str, change: DocumentChange) -> bytes | None:
        # Why no update is lost: the change is computed and written in one transaction that
        # holds the document's row lock (SELECT ... FOR UPDATE) from the read to the commit, so
        # any other writer of the row (another node's update or write) waits for the commit and
        # then works on what this one wrote. A document that does not exist yet has no row to
        # lock: it is inserted only if still absent (ON CONFLICT DO NOTHING); if another writer
        # created it meanwhile, nothing was written, and the change is made again on its row.
        for _ in range(UPDATE_ATTEMPTS):
            with database_errors(), self.pool.connection() as conn, conn.transaction():
                row = conn.execute(
                    "SELECT body FROM documents WHERE name = %s FOR UPDATE", (name,)
                ).fetchone()
                current = None if row is None else bytes(row[0])
                new = change(current)
                if new is None:
                    return current
                if row is not None:
                    conn.execute("UPDATE documents SET body = %s WHERE name = %s", (new, name))
                    return new
                inserted = conn.execute(
                    "INSERT INTO documents (name, body) VALUES (%s, %s)"
                    " ON CONFLICT (name) DO NOTHING",
                    (name, new),
                ).rowcount
                if inserted:
                    return new
        raise DatabaseError(errno.EAGAIN, f"document {name} kept being created by another writer")

    # partitions ---------------------------------------------------------------------------------
    def stored_topics(self) -> dict[str, StoredTopic]:
        found: dict[str, tuple[uuid.UUID, set[int]]] = {}
        with database_errors(), self.pool.connection() as conn:
            for topic, partition, topic_id in conn.execute(
                "SELECT topic, partition, topic_id FROM partitions WHERE NOT deleted"
            ):
                found.setdefault(topic, (topic_id, set()))[1].add(partition)
        return {
            name: StoredTopic(name, topic_id, frozenset(partitions))
            for name, (topic_id, partitions) in sorted(found.items())
        }

    def open_log(
        self,
        topic: str,
        partition: int,
        topic_id: uuid.UUID,
        spec: LogSpec,
        leader: LeaderFence | None = None,
    ) -> Log:
        name = f"{topic}-{partition}"
        try:
            with database_errors(), self.pool.connection() as conn:
                row = conn.execute(
                    "SELECT id, log_start, next_offset, size_bytes FROM partitions"
                    " WHERE topic = %s AND partition = %s AND NOT deleted",
                    (topic, partition),
                ).fetchone()
            if row is None:
                raise FileNotFoundError(f"partition {name} is not in the database")
            plog = self._log(name, *row, spec=spec, leader=leader)
            plog.load()
        except OSError as e:
            return PostgresLog.offline_log(name, e)
        return plog

    def _log(
        self,
        name: str,
        row_id: int,
        log_start: int,
        log_end: int,
        size: int,
        *,
        spec: LogSpec,
        leader: LeaderFence | None = None,
    ) -> PostgresLog:
        return PostgresLog(
            self.pool,
            name,
            row_id,
            log_start=log_start,
            log_end=log_end,
            size_bytes=size,
            segment_bytes=spec.segment_bytes,
            producer_expiration_ms=self.producer_expiration_ms,
            recent=self.recent.tail(),
            shared_flush=self.flush_together,
            leader=leader,
        )

    def create_logs(
        self, topic: str, topic_id: uuid.UUID, partitions: range, spec: LogSpec
    ) -> list[Log]:
        """All the rows in one transaction: all or nothing."""
        ids = []
        with database_errors(), self.pool.connection() as conn, conn.transaction():
            for p in partitions:
                row = conn.execute(
                    "INSERT INTO partitions (topic, partition, topic_id) VALUES (%s, %s, %s)"
                    " RETURNING id",
                    (topic, p, topic_id),
                ).fetchone()
                assert row is not None
                ids.append(row[0])
        return [
            self._log(f"{topic}-{p}", row_id, 0, 0, 0, spec=spec)
            for p, row_id in zip(partitions, ids, strict=True)
        ]

    def offline_log(self, topic: str, partition: int, cause: BaseException | str) -> Log:
        return PostgresLog.offline_log(f"{topic}-{partition}", cause)

    def delete_logs(self, topic: str, logs: Sequence[Log]) -> None:
        """Marks the rows deleted (durable on return); their batches go in
        :meth:`remove_deleted`."""
        for plog in logs:
            plog.close()
        with database_errors(), self.pool.connection() as conn:
            conn.execute(
                "UPDATE partitions SET deleted = true WHERE topic = %s AND NOT deleted", (topic,)
            )

    def remove_deleted(self) -> None:
        with database_errors(), self.pool.connection() as conn:
            doomed = [row[0] for row in conn.execute("SELECT id FROM partitions WHERE deleted")]
            for row_id in doomed:
                with conn.transaction():
                    conn.execute("DELETE FROM batches WHERE partition_id = %s", (row_id,))
                    conn.execute("DELETE FROM aborted_txns WHERE partition_id = %s", (row_id,))
                    conn.execute("DELETE FROM partitions WHERE id = %s", (row_id,))

    def may_reopen(self) -> bool:
        try:
            with database_errors(), self.pool.connection() as conn:
                conn.execute("SELECT 1")
        except OSError:
            return False
        return True

    # checkpoints --------------------------------------------------------------------------------
    def checkpoint(self, topics: Iterable[tuple[str, Sequence[Log]]]) -> LogStarts:
        starts = []
        for _, logs in topics:
            for plog in logs:
                if plog.offline is None:
                    plog = cast(PostgresLog, plog)
                    fence = plog.leader or LeaderFence(-1, -1)
                    starts.append(
                        (plog.row_id, plog.log_start_offset, fence.node_id, fence.epoch)
                    )
        return LogStarts(tuple(starts))

    def write_checkpoint(self, snapshot: object) -> bool:
        starts = cast(LogStarts, snapshot).starts
        try:
            with database_errors(), self.pool.connection() as conn, conn.transaction():
                conn.cursor().executemany(
                    "UPDATE partitions SET log_start = %s WHERE id = %s AND log_start < %s"
                    " AND (%s < 0 OR (leader = %s AND leader_epoch = %s))",
                    [
                        (start, row_id, start, node, node, epoch)
                        for row_id, start, node, epoch in starts
                    ],
                )
        except OSError as e:
            log.warning("writing the log starts failed: %s", e)
            return False
        return True

    def close(self) -> None:
        self.pool.close()
