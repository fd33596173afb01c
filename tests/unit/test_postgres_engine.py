"""What only the PostgreSQL engine has: its schema's versions, fencing by the partition row's
log end, a database that goes away under a flush, the newest batches read from memory. (What every engine keeps is
``test_engine_contract.py``.)"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest

from kcoord.protocol.record_encoding import build_batch
from kcoord.storage.engine import LogSpec
from kcoord.storage.offline import LogFenced, LogOffline
from kcoord.storage.postgres.engine import PostgresEngine, redacted
from kcoord.storage.postgres.schema import MIGRATIONS, SchemaTooNew, migrate
from tests.pg_server import PostgresServer, running_server

TOPIC_ID = uuid.UUID("00000000-0000-4000-8000-000000000002")
SPEC = LogSpec(1 << 20)
COMPACTED = LogSpec(300, compacted=True)  # all but the newest 300 bytes are cleaned


def batch(value: bytes) -> bytes:
    return build_batch([(b"k", value, [], 1_700_000_000_000)])


def started(url: str) -> PostgresEngine:
    engine = PostgresEngine(url, pool_size=2)
    engine.start()
    return engine


def test_migrations_run_once_and_a_newer_schema_is_refused(postgres_url: str) -> None:
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        assert migrate(conn) == 0
        assert migrate(conn) == len(MIGRATIONS)
        conn.execute("UPDATE kcoord_schema SET version = version + 1")
        with pytest.raises(SchemaTooNew, match=f"version {len(MIGRATIONS) + 1}, newer"):
            migrate(conn)


def test_a_second_writer_of_a_partition_is_fenced(postgres_url: str) -> None:
    (mine,) = started(postgres_url).create_logs("t", TOPIC_ID, range(1), SPEC)
    theirs = started(postgres_url).open_log("t", 0, TOPIC_ID, SPEC)
    mine.append(batch(b"mine"))
    theirs.append(batch(b"theirs"))
    mine.flush()
    with pytest.raises(LogOffline) as refused:
        theirs.flush()
    assert isinstance(refused.value.cause, LogFenced)
    assert theirs.offline is not None
    again = started(postgres_url).open_log("t", 0, TOPIC_ID, SPEC)
    assert [b"mine" in bytes(d) for _, _, d in again.iter_batches()] == [True]


def test_logs_flushed_together_share_a_transaction_and_a_fenced_one_fails_alone(
    postgres_url: str,
) -> None:
    engine = started(postgres_url)
    a, b = engine.create_logs("t", TOPIC_ID, range(2), SPEC)
    rival = started(postgres_url).open_log("t", 1, TOPIC_ID, SPEC)
    rival.append(batch(b"theirs"))
    rival.flush()  # b's log end moved under it
    a.append(batch(b"a"))
    b.append(batch(b"b"))
    assert a.shared_flush is b.shared_flush is not None
    failed = engine.flush_together.flush_all([a, b])
    assert list(failed) == [b] and isinstance(failed[b].__cause__, LogFenced)
    assert b.offline is not None and a.offline is None and a.flushed_offset == 1
    again = started(postgres_url)
    assert [b"a" in bytes(d) for _, _, d in again.open_log("t", 0, TOPIC_ID, SPEC).iter_batches()] == [True]
    assert [b"theirs" in bytes(d) for _, _, d in again.open_log("t", 1, TOPIC_ID, SPEC).iter_batches()] == [True]


@pytest.fixture
def own_server() -> Iterator[PostgresServer]:
    """A server of this test's own, to kill."""
    with running_server() as server:
        yield server


def test_a_flush_the_database_cannot_take_loses_only_what_was_not_acknowledged(
    own_server: PostgresServer,
) -> None:
    url = own_server.database()
    engine = started(url)
    (plog,) = engine.create_logs("t", TOPIC_ID, range(1), SPEC)
    plog.append(batch(b"acknowledged"))
    plog.flush()
    plog.append(batch(b"in flight"))
    own_server.kill9()
    with pytest.raises(LogOffline):
        plog.flush()
    assert plog.offline is not None
    with pytest.raises(LogOffline):
        plog.append(batch(b"after"))  # nothing reaches the database behind the failure

    assert not engine.may_reopen()

    own_server.start()
    assert engine.may_reopen()  # the same engine: its pool opens fresh connections
    again = engine.open_log("t", 0, TOPIC_ID, SPEC)
    assert again.log_end_offset == 1
    assert [b"acknowledged" in bytes(d) for _, _, d in again.iter_batches()] == [True]
    assert again.append(batch(b"next")) == (1, 1)
    again.flush()


def test_the_newest_batches_are_read_from_memory_within_the_budget(
    own_server: PostgresServer,
) -> None:
    size = len(batch(b"a" * 100))
    engine = PostgresEngine(own_server.database(), pool_size=2, recent_bytes=2 * size)
    engine.start()
    (plog,) = engine.create_logs("t", TOPIC_ID, range(1), SPEC)
    for value in (b"a", b"b", b"c"):
        plog.append(batch(value * 100))
        plog.flush()
    assert engine.recent.held_bytes == 2 * size
    # what Fetch and ListOffsets read on the event loop, and what they leave to a worker
    assert plog.reads_locally(1) and plog.reads_locally(3) and not plog.reads_locally(0)
    assert not plog.looks_up_locally
    own_server.kill9()
    # The two newest batches need no database; the first one does.
    newest = [bytes(d) for _, _, d in plog.iter_batches(1)]
    assert len(newest) == 2 and b"b" * 100 in newest[0] and b"c" * 100 in newest[1]
    assert plog.read(2, 1 << 20) == newest[1]
    with pytest.raises(OSError):
        plog.read(0, 1 << 20)


def test_the_url_is_shown_without_its_password() -> None:
    assert redacted("postgresql://kcoord:hunter2@db:5432/k") == "postgresql://kcoord:***@db:5432/k"
    assert redacted("postgresql://kcoord@db/k") == "postgresql://kcoord@db/k"


# -- compaction (what every engine does is in test_engine_contract.py) ---------------------------


def keyed(key: bytes, value: bytes | None) -> bytes:
    return build_batch([(key, value, [], 1_700_000_000_000)])


def stored_sizes(url: str) -> tuple[int, int]:
    """(partitions.size_bytes, sum of length(data)) of the one partition of topic t."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT p.size_bytes, (SELECT coalesce(sum(length(b.data)), 0) FROM batches b"
            " WHERE b.partition_id = p.id) FROM partitions p WHERE p.topic = 't'"
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def test_compaction_keeps_the_partition_rows_size_exact(postgres_url: str) -> None:
    (plog,) = started(postgres_url).create_logs("t", TOPIC_ID, range(1), COMPACTED)
    for i in range(50):
        # batches of two records, one of which is superseded: rows are rebuilt, others deleted
        plog.append(build_batch([(b"k%d" % (i % 4), b"v%d" % i, [], 0), (b"x%d" % i, b"y", [], 0)]))
    plog.flush()
    before = stored_sizes(postgres_url)
    assert before[0] == before[1] == plog.size_bytes
    stats = plog.commit_compaction(plog.prepare_compaction(now_ms=0, delete_retention_ms=0))
    assert not stats.stale and stats.bytes_after < stats.bytes_before
    size, total = stored_sizes(postgres_url)
    assert size == total == plog.size_bytes == before[0] - stats.bytes_before + stats.bytes_after
    assert not plog.compactable  # nothing flushed since
    plog.append(keyed(b"k0", b"again"))
    plog.flush()
    assert plog.compactable


def test_a_plan_whose_rows_another_compaction_rewrote_is_discarded(postgres_url: str) -> None:
    (plog,) = started(postgres_url).create_logs("t", TOPIC_ID, range(1), COMPACTED)
    for i in range(10):
        plog.append(keyed(b"k", b"v%d" % i))
    plog.flush()
    first = plog.prepare_compaction(now_ms=0, delete_retention_ms=0)
    second = plog.prepare_compaction(now_ms=0, delete_retention_ms=0)
    assert not plog.commit_compaction(first).stale
    size = plog.size_bytes
    assert plog.commit_compaction(second).stale
    assert plog.size_bytes == size == stored_sizes(postgres_url)[0]
    with pytest.raises(ValueError):
        plog.commit_compaction(second)  # a plan is used once


def test_a_compaction_the_database_fails_is_an_error_that_leaves_the_log_online(
    postgres_url: str,
) -> None:
    engine = started(postgres_url)
    (plog,) = engine.create_logs("t", TOPIC_ID, range(1), COMPACTED)
    for i in range(20):
        plog.append(keyed(b"k", b"v%d" % i))
    plog.flush()
    plan = plog.prepare_compaction(now_ms=0, delete_retention_ms=0)
    engine.pool.close()  # every query now fails
    with pytest.raises(OSError):
        plog.commit_compaction(plan)
    assert plog.offline is None
    with pytest.raises(OSError):
        plog.prepare_compaction(now_ms=0, delete_retention_ms=0)
    assert plog.offline is None
    assert stored_sizes(postgres_url)[0] == plog.size_bytes  # nothing half-done
