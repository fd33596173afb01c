"""The pipeline's PostgreSQL reading (``pipeline.postgres``) without Spark: runs planned by
offset range, batches decoded by the same code as segment files, transactions resolved across
runs, the log start honoured inside a batch, topic log bounds, names and the oldest-record
lookup; rows written straight into the engine's tables on a real server."""

from __future__ import annotations

import uuid

import psycopg
import pytest

from kcoord.pipeline.decode import segment_commits, segment_state
from kcoord.pipeline.postgres import (
    PgRun,
    connect,
    first_record_at_or_after,
    is_postgres_url,
    offsets_runs,
    plan_runs,
    topic_logs,
    topic_names,
)
from kcoord.pipeline.txn import resolve
from kcoord.protocol.batch import parse_header, set_base_offset
from kcoord.protocol.record_encoding import build_batch
from kcoord.storage.partition_metadata import topic_id_to_str
from kcoord.storage.postgres.schema import migrate

from .test_pipeline_txn import T0, commit, end, plain, txn


def test_postgres_urls_are_told_from_data_dirs() -> None:
    assert is_postgres_url("postgresql://u:p@h:5432/db") and is_postgres_url("POSTGRES://h/db")
    assert not any(map(is_postgres_url, ["data", "/var/kcoord", "s3a://b/data", "file:///x"]))


def test_runs_cover_the_log_from_its_start_to_its_end() -> None:
    runs = plan_runs("postgresql://h/db", "__consumer_offsets", 3, 9, 5, 10, step=4)
    assert [(r.lo, r.hi, r.base_offset, r.end) for r in runs] == [(0, 8, 5, 10), (8, 10, 8, 10)]
    assert runs[0].name == "__consumer_offsets-3/offsets 5-7"
    assert plan_runs("u", "t", 0, 1, 7, 7) == [] and plan_runs("u", "t", 0, 1, 0, 0) == []
    assert "secret" not in repr(PgRun("postgresql://u:secret@h/db", "t", 0, 1, 0, 0, 1, 1))


def test_resolve_reads_later_markers_only_as_far_as_needed() -> None:
    asked: list[set[int]] = []
    taken: list[int] = []

    def later(wanted: set[int]):  # type: ignore[no-untyped-def]
        asked.append(wanted)
        for marker in [(5, 20, False), (8, 21, True), (9, 22, True)]:
            taken.append(marker[1])
            yield marker

    got = resolve([(5, 1), (6, 2), (8, 4), (7, 5)], [(6, 3, True)], later)
    assert got == {1: False, 2: True, 4: True, 5: False}  # 7 never ended: still open
    assert asked == [{5, 7, 8}] and taken == [20, 21, 22]
    assert resolve([(6, 2)], [(6, 3, False)], later) == {2: False} and len(asked) == 1


def _insert(conn: psycopg.Connection, topic: str, partition: int, batches: list[bytes],
            *, log_start: int = 0, first: int = 0, deleted: bool = False) -> int:
    """A partitions row and its batches rows, offsets given from ``first`` on; the row id."""
    offset = first
    rows = []
    for b in batches:
        batch = bytearray(b)
        set_base_offset(batch, 0, offset)
        h = parse_header(batch)
        rows.append((h.base_offset, h.last_offset, h.max_timestamp, h.producer_id,
                     h.producer_epoch, h.attributes, bytes(batch)))
        offset = h.next_offset
    row = conn.execute(
        "INSERT INTO partitions (topic, partition, topic_id, log_start, next_offset, deleted)"
        " VALUES (%s, %s, %s, %s, %s, %s) RETURNING id",
        (topic, partition, uuid.uuid4(), log_start, offset, deleted),
    ).fetchone()
    assert row is not None
    conn.cursor().executemany(
        "INSERT INTO batches (partition_id, base_offset, last_offset, max_timestamp,"
        " producer_id, producer_epoch, attributes, data) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
        [(row[0], *r) for r in rows],
    )
    return int(row[0])


@pytest.fixture
def url(postgres_url: str) -> str:
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        migrate(conn)
    return postgres_url


def test_transactions_resolve_across_runs_as_across_segments(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        _insert(conn, "__consumer_offsets", 0, [
            plain(commit(0, 1)),  # offset 0
            txn(5, commit(0, 50)),  # 1: aborted in the next run
            txn(6, commit(1, 60)),  # 2: committed in this run
            end(6, True),  # 3
            txn(8, commit(3, 80)),  # 4: committed in the next run
            end(5, False),  # 5
            txn(7, commit(2, 70)),  # 6: still open
            end(8, True),  # 7
        ])
        _insert(conn, "__consumer_offsets", 1, [plain(commit(9, 9))], deleted=True)
    runs = offsets_runs(url, "__consumer_offsets", step=5)
    assert [(r.log_partition, r.lo, r.hi) for r in runs] == [(0, 0, 5), (0, 5, 8)]

    batches, stats = segment_commits(runs[0])
    rows = [r for b in batches for r in b.to_pylist()]
    assert sorted((r["partition"], r["offset"]) for r in rows) == [(0, 1), (1, 60), (3, 80)]
    assert (stats.control_batches, stats.transactional_batches, stats.uncommitted_batches) == (1, 3, 1)
    state, _ = segment_state(runs[0])
    assert {(r["partition"], r["offset"]) for r in state if r["kind"] == "offset"} == {
        (0, 1), (1, 60), (3, 80)}
    segment = [r for r in state if r["kind"] == "segment"]
    assert [(r["segment"], r["log_offset"]) for r in segment] == [("__consumer_offsets-0/offsets 0-4", 0)]

    batches, stats = segment_commits(runs[1])
    assert [r for b in batches for r in b.to_pylist()] == []
    assert (stats.control_batches, stats.uncommitted_batches) == (2, 1)


def test_records_below_the_log_start_are_left_out(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        _insert(conn, "__consumer_offsets", 0, [
            plain(commit(0, 1)),  # offset 0: wholly below the log start
            plain(commit(0, 2), commit(1, 3), commit(2, 4)),  # 1-3: straddles it
            plain(commit(3, 5)),  # 4
        ], log_start=2)
    (run,) = offsets_runs(url, "__consumer_offsets")
    batches, stats = segment_commits(run)
    rows = [r for b in batches for r in b.to_pylist()]
    assert [(r["log_offset"], r["offset"]) for r in rows] == [(2, 3), (3, 4), (4, 5)]
    assert stats.records == 3 and stats.batches == 2


def test_topic_logs_names_and_the_oldest_unconsumed_record(url: str) -> None:
    entries = [(None, b"v", (), T0 + i) for i in range(5)]
    with psycopg.connect(url, autocommit=True) as conn:
        _insert(conn, "t", 0, [build_batch(entries), build_batch(entries),
                               end(3, True), build_batch(entries)], log_start=7)
        _insert(conn, "gone", 0, [build_batch(entries)], deleted=True)
        _insert(conn, "__consumer_offsets", 0, [plain(commit(0, 1))])
        topic_id = conn.execute("SELECT topic_id FROM partitions WHERE topic = 't'").fetchone()
    assert topic_id is not None
    logs = topic_logs(url)
    assert [(t.topic, t.partition, t.dirname, t.log_start_offset, t.log_end_offset, t.segments)
            for t in logs] == [("t", 0, "t-0", 7, 16, [7])]
    assert topic_names(url) == {topic_id_to_str(topic_id[0]): "t"}
    with connect(url) as conn:
        assert first_record_at_or_after(conn, "t", 0, 7) == (7, T0 + 2)
        assert first_record_at_or_after(conn, "t", 0, 10) == (11, T0)  # past the marker
        assert first_record_at_or_after(conn, "t", 0, 16) is None
        assert first_record_at_or_after(conn, "gone", 0, 0) is None
        assert first_record_at_or_after(conn, "t", 0, 14) == (14, T0 + 3)  # the same connection


def test_database_errors_are_os_errors_without_the_password() -> None:
    with pytest.raises(OSError) as e:
        offsets_runs("postgresql://u:hunter2@127.0.0.1:1/db", "__consumer_offsets")
    assert "hunter2" not in str(e.value)
