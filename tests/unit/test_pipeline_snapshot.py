"""One snapshot per pipeline run (issue 31): every read of a run stops at the partition ends
fixed when it started, so what a broker writes meanwhile -- the rest of a batch being written,
batches appended, a segment rolled, a transaction's marker, a new partition -- is in no table,
and the counts agree between the datasets. Read through the Spark sources' own readers (no
Spark session) and the single-process pass, over a data directory in Kafka's format and over
the PostgreSQL engine's tables."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import psycopg
import pyarrow.parquet as pq
import pytest

pytest.importorskip("pyspark")

from kcoord.pipeline.local import python_pass  # noqa: E402
from kcoord.pipeline.logs import OFFSETS_TOPIC  # noqa: E402
from kcoord.pipeline.snapshot import Snapshot, take  # noqa: E402
from kcoord.pipeline.source import InternalLogReader, TopicLogsReader  # noqa: E402
from kcoord.protocol.batch import parse_header, set_base_offset  # noqa: E402
from kcoord.protocol.record_encoding import build_batch  # noqa: E402

from .test_pipeline_postgres import _insert, url  # noqa: E402, F401 (url: the fixture)
from .test_pipeline_txn import commit, end, plain, txn  # noqa: E402

NOW = int(time.time() * 1000)
LATER = NOW + 3_600_000  # the timestamps of what is written after the snapshot


def placed(batches: list[bytes], first: int) -> tuple[bytes, int]:
    """The batches given offsets from ``first`` on, concatenated; and the next offset."""
    raw, offset = bytearray(), first
    for b in batches:
        batch = bytearray(b)
        set_base_offset(batch, 0, offset)
        raw += batch
        offset = parse_header(batch).next_offset
    return bytes(raw), offset


def records(ts: int, n: int) -> bytes:
    return build_batch([(None, b"v", (), ts + i) for i in range(n)])


def read_all(reader: Any) -> list[dict[str, Any]]:
    return [r for p in reader.partitions() for b in reader.read(p) for r in b.to_pylist()]


def views(source: str, snap: Snapshot, data_dir: str = "") -> dict[str, list[dict[str, Any]]]:
    db = None if data_dir else source
    fixed = snap.to_json()
    return {
        "commits": read_all(InternalLogReader(data_dir, "commits", OFFSETS_TOPIC, db, fixed)),
        "state": read_all(InternalLogReader(data_dir, "state", OFFSETS_TOPIC, db, fixed)),
        "topics": read_all(TopicLogsReader(data_dir, db, fixed)),
    }


def check_nothing_after(got: dict[str, list[dict[str, Any]]], snap: Snapshot) -> list[dict[str, Any]]:
    """What every run over a growing log must show; the state view's segment rows."""
    commits, state = got["commits"], got["state"]
    assert sorted((r["partition"], r["offset"]) for r in commits) == [(0, 1), (1, 2)]
    offsets = {(r["partition"], r["offset"]) for r in state if r["kind"] == "offset"}
    assert offsets == {(0, 1), (1, 2)}  # the open transaction's commit (2, 50) is not there
    segments = [r for r in state if r["kind"] == "segment"]
    counted = sum(json.loads(r["detail"])["offset_commits"] for r in segments)
    assert counted == len(commits)  # what the job prints is what its Parquet holds
    assert not [r for r in state if r["kind"] == "problem"]
    assert [(t["topic"], t["partition"], t["log_end_offset"]) for t in got["topics"]] == [("t", 0, 3)]
    return segments


def test_a_data_dir_is_read_as_of_its_snapshot(tmp_path: Path) -> None:
    data = tmp_path / "data"
    offsets, topic = data / f"{OFFSETS_TOPIC}-0", data / "t-0"
    offsets.mkdir(parents=True)
    topic.mkdir()
    written, next_offset = placed(
        [plain(commit(0, 1)), txn(5, commit(2, 50)), plain(commit(1, 2))], 0
    )
    torn, after = placed([plain(commit(0, 99)), end(5, True), plain(commit(3, 98))], next_offset)
    active = offsets / f"{0:020d}.log"
    active.write_bytes(written + torn[:30])  # a batch being written when the run starts
    (topic / f"{0:020d}.log").write_bytes(placed([records(NOW - 1000, 3)], 0)[0])

    before = int(time.time() * 1000)
    snap = take(str(data))
    assert before <= snap.taken_ms <= int(time.time() * 1000)

    # The broker goes on: the batch completed, a marker committing the open transaction, more
    # commits; then a segment rolled, records appended to the topic, a new partition.
    with active.open("ab") as f:
        f.write(torn[30:])
    (offsets / f"{after:020d}.log").write_bytes(placed([plain(commit(4, 97))], after)[0])
    with (topic / f"{0:020d}.log").open("ab") as f:
        f.write(placed([records(LATER, 2)], 3)[0])
    (data / "t-1").mkdir()
    (data / "t-1" / f"{0:020d}.log").write_bytes(records(LATER, 1))

    segments = check_nothing_after(views(str(data), snap, str(data)), snap)
    assert [r["segment"] for r in segments] == [f"{OFFSETS_TOPIC}-0/{0:020d}.log"]
    assert '"torn_tail_bytes": 30' in segments[0]["detail"]

    out = tmp_path / "out"
    result = python_pass(str(data), str(out), snapshot=snap)
    assert result["as_of_ms"] == snap.taken_ms and result["problems"] == []
    assert result["rows"]["offset_commits"] == pq.read_table(out / "offset_commits.parquet").num_rows == 2
    lag = {r["partition"]: r for r in pq.read_table(out / "consumer_lag.parquet").to_pylist()}
    assert (lag[0]["log_end_offset"], lag[0]["lag"]) == (3, 2)  # "t", partition 0, committed 1
    assert lag[0]["oldest_unconsumed_timestamp"] == NOW - 1000 + 1 <= snap.taken_ms
    assert lag[1]["log_end_offset"] is None  # t-1 was created after the snapshot


def test_a_database_is_read_as_of_its_snapshot(url: str) -> None:  # noqa: F811 (the fixture)
    with psycopg.connect(url, autocommit=True) as conn:
        offsets_id = _insert(conn, OFFSETS_TOPIC, 0, [
            plain(commit(0, 1)), txn(5, commit(2, 50)), plain(commit(1, 2))])
        topic_id = _insert(conn, "t", 0, [records(NOW - 1000, 3)])
    snap = take(url)

    with psycopg.connect(url, autocommit=True) as conn:
        for row_id, batches, first in [
            (offsets_id, [plain(commit(0, 99)), end(5, True), plain(commit(3, 98))], 3),
            (topic_id, [records(LATER, 2)], 3),
        ]:
            offset = first
            for b in batches:
                raw, next_offset = placed([b], offset)
                h = parse_header(raw)
                conn.execute(
                    "INSERT INTO batches (partition_id, base_offset, last_offset, max_timestamp,"
                    " producer_id, producer_epoch, attributes, data)"
                    " VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
                    (row_id, h.base_offset, h.last_offset, h.max_timestamp, h.producer_id,
                     h.producer_epoch, h.attributes, raw),
                )
                offset = next_offset
            conn.execute("UPDATE partitions SET next_offset = %s WHERE id = %s", (offset, row_id))
        _insert(conn, "t", 1, [records(LATER, 1)])

    check_nothing_after(views(url, snap), snap)
