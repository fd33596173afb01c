"""The PostgreSQL engine's schema, created and migrated by kcoord itself.

:data:`MIGRATIONS` is the one list of schema versions: migration *n* (1-based) takes a database
at version *n - 1* to version *n*. :func:`migrate` applies the missing ones, each in its own
transaction with the version row, under an advisory lock so that nodes starting together migrate
once. A database at a version newer than this code knows is refused with
:class:`SchemaTooNew`, naming both versions: an older kcoord must not write into a layout it does
not understand.

Tables (version 1):

* ``documents``: the small stores, one row per document, replaced whole;
* ``partitions``: one row per partition (topic, index, topic id), with its log start, and the log
  end and size as of its last flush; a deleted topic's rows are marked ``deleted`` at once and removed
  with their batches later;
* ``batches``: the record batches, Kafka's own bytes, keyed by (partition row, base offset),
  with the last offset, max timestamp and producer fields in columns for the queries that need
  them;
* ``aborted_txns``: per partition, the aborted transactions (Kafka's ``.txnindex`` entries) that
  ``read_committed`` fetches need.

Version 2 (cluster mode, ``storage.postgres.cluster``):

* ``nodes``: one row per node id, with the incarnation (one per process) that holds it, its
  advertised listeners and rack, and when its session expires (by the database's clock);
* ``partitions.leader`` and ``partitions.leader_epoch``: the node leading each partition (NULL:
  none) and the epoch it took it in; every flush checks both inside its transaction.

Version 3 (the console's cluster view):

* ``nodes.console``: the node's console URL (NULL: none, or a node of an older kcoord);
* ``nodes.renewed_at``: when the session was last renewed (the age of the last heartbeat).

Both columns may be NULL, so the statements of a node of version 2 still running beside one
that migrated keep working (they name their columns); only its restart is refused, as always.
"""

from __future__ import annotations

from typing import Any

SCHEMA_LOCK = 0x6B636F6F7264  # advisory lock key ("kcoord") held while migrating

MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE documents (
        name text PRIMARY KEY,
        body bytea NOT NULL
    );
    CREATE TABLE partitions (
        id bigserial PRIMARY KEY,
        topic text NOT NULL,
        partition integer NOT NULL,
        topic_id uuid NOT NULL,
        log_start bigint NOT NULL DEFAULT 0,
        next_offset bigint NOT NULL DEFAULT 0,
        size_bytes bigint NOT NULL DEFAULT 0,
        deleted boolean NOT NULL DEFAULT false
    );
    CREATE UNIQUE INDEX partitions_live ON partitions (topic, partition) WHERE NOT deleted;
    CREATE TABLE batches (
        partition_id bigint NOT NULL,
        base_offset bigint NOT NULL,
        last_offset bigint NOT NULL,
        max_timestamp bigint NOT NULL,
        producer_id bigint NOT NULL,
        producer_epoch smallint NOT NULL,
        attributes smallint NOT NULL,
        data bytea NOT NULL,
        PRIMARY KEY (partition_id, base_offset)
    );
    CREATE TABLE aborted_txns (
        partition_id bigint NOT NULL,
        producer_id bigint NOT NULL,
        first_offset bigint NOT NULL,
        last_offset bigint NOT NULL,
        last_stable_offset bigint NOT NULL,
        PRIMARY KEY (partition_id, last_offset)
    );
    """,
    """
    CREATE TABLE nodes (
        node_id integer PRIMARY KEY,
        incarnation uuid NOT NULL,
        listeners text NOT NULL,
        rack text,
        registered_at timestamptz NOT NULL DEFAULT now(),
        expires_at timestamptz NOT NULL
    );
    ALTER TABLE partitions ADD COLUMN leader integer, ADD COLUMN leader_epoch integer NOT NULL
        DEFAULT 0;
    """,
    """
    ALTER TABLE nodes ADD COLUMN console text, ADD COLUMN renewed_at timestamptz;
    """,
)


class SchemaTooNew(RuntimeError):
    """The database was migrated by a newer kcoord."""

    def __init__(self, found: int, known: int) -> None:
        super().__init__(
            f"the database's kcoord schema is version {found}, newer than this kcoord knows"
            f" (up to {known}): run a kcoord at least as new as the one that migrated it"
        )
        self.found = found
        self.known = known


def migrate(conn: Any, migrations: tuple[str, ...] = MIGRATIONS) -> int:
    """Bring the database of ``conn`` (a psycopg connection, not in a transaction) to the
    newest version; returns the version found before. Raises SchemaTooNew."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK,))
        conn.execute(
            "CREATE TABLE IF NOT EXISTS kcoord_schema"
            " (id integer PRIMARY KEY CHECK (id = 1), version integer NOT NULL)"
        )
        row = conn.execute("SELECT version FROM kcoord_schema WHERE id = 1").fetchone()
        found = row[0] if row else 0
        if found > len(migrations):
            raise SchemaTooNew(found, len(migrations))
        for version in range(found + 1, len(migrations) + 1):
            conn.execute(migrations[version - 1])
            conn.execute(
                "INSERT INTO kcoord_schema (id, version) VALUES (1, %s)"
                " ON CONFLICT (id) DO UPDATE SET version = EXCLUDED.version",
                (version,),
            )
    return found
