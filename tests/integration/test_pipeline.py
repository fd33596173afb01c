"""The Spark pipeline over logs written by a real broker run with real consumers.

One session-scoped local SparkSession (``local[2]``, the ``spark`` fixture of conftest.py) and one broker scenario shared by the
checks: kafka-python consumers rebalance (join, a third member joins and leaves, all leave)
while they consume and commit; a standalone committer; a deleted group; a deleted offset.
Then ``pipeline.job.run_job`` reads the data directory and the tables are compared with what
the broker answers (OffsetFetch) and what the consumers saw (generations, leaders).

Spark needs Java: without it these tests fail (they do not skip).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kcoord.protocol.apis import ApiKey

from .clients import KAFKA_PYTHON_POLL_MS, create_topic
from .groups import balanced
from .harness import ROOT, BrokerProcess, wait_for
from .rawclient import RawClient

FAST = {"group.initial.rebalance.delay.ms": 0, "group.min.session.timeout.ms": 1000}
TOPIC = "orders"
PARTITIONS = 4
FIRST = 40  # messages per partition consumed by the group
MORE = 7  # produced after the group stopped: its lag
T0 = 1_700_000_000_000


def _ts(partition: int, offset: int) -> int:
    return T0 + partition * 100_000 + offset * 10


# ----------------------------------------------------------------------------- consumers


class RecordingMember:
    """A kafka-python consumer in a thread that consumes, commits after every poll, and
    records each generation it completed (with its assignment) and the leader of each
    generation it led.

    ``generation`` and ``assignment`` are set together when a join completes: kafka-python
    keeps the previous assignment while a rebalance is under way, so an assignment alone
    can look balanced beside another member's newer one."""

    def __init__(self, bootstrap: str, group: str, name: str, seen: dict[str, Any]) -> None:
        self.name = name
        self.assignment: frozenset[int] = frozenset()
        self.generation = -1
        self.errors: list[str] = []
        self._seen = seen
        self._stop = threading.Event()
        self._kwargs = dict(
            bootstrap_servers=bootstrap, group_id=group, client_id=name,
            session_timeout_ms=6000, heartbeat_interval_ms=300, enable_auto_commit=False,
            auto_offset_reset="earliest", max_poll_records=5,
        )
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        from kafka import KafkaConsumer

        consumer = KafkaConsumer(**self._kwargs)
        coordinator = consumer._coordinator
        seen = self._seen
        joined = coordinator._on_join_complete_async
        assign = coordinator._perform_assignment

        async def on_join_complete(generation: int, member_id: str, protocol: str, data: bytes) -> Any:
            result = await joined(generation, member_id, protocol, data)
            assigned = frozenset(tp.partition for tp in consumer.assignment())
            with seen["lock"]:
                seen["joined"].append((generation, member_id, len(assigned)))
                self.generation, self.assignment = generation, assigned
            return result

        def perform_assignment(leader_id: str, protocol: str, members: Any) -> Any:
            with seen["lock"]:
                seen["leaders"][coordinator._generation.generation_id] = leader_id
            return assign(leader_id, protocol, members)

        coordinator._on_join_complete_async = on_join_complete
        coordinator._perform_assignment = perform_assignment
        # Learn the topic's partitions before joining: kafka-python 3.0.12 otherwise assigns
        # nothing, rejoins at once, and now and then hangs in that rejoin (a client race).
        consumer.partitions_for_topic(TOPIC)
        consumer.subscribe([TOPIC])
        try:
            while not self._stop.is_set():
                try:
                    if consumer.poll(timeout_ms=KAFKA_PYTHON_POLL_MS):
                        consumer.commit()
                except Exception as e:  # a commit racing a rebalance; the next poll retries
                    self.errors.append(repr(e))
        finally:
            consumer.close()

    def stop(self) -> None:
        self._stop.set()
        self.thread.join(timeout=30)
        assert not self.thread.is_alive(), f"{self.name} did not stop"


def settled(members: list[RecordingMember]) -> bool:
    """Balanced, and every member has completed the same generation."""
    return balanced(members, PARTITIONS) and len({m.generation for m in members}) == 1


def _produce(bootstrap: str, start: int, count: int) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for part in range(PARTITIONS):
        for off in range(start, start + count):
            p.produce(TOPIC, value=b"m%d" % off, key=b"k", partition=part, timestamp=_ts(part, off))
    assert p.flush(30) == 0


def _offset_fetch(port: int, group: str) -> dict[tuple[str, int], tuple[int, int, str]]:
    with RawClient(port) as c:
        r = c.request(ApiKey.OFFSET_FETCH, 7, group_id=group, topics=None, require_stable=False)
    assert r.error_code == 0
    return {
        (t.name, p.partition_index): (p.committed_offset, p.committed_leader_epoch, p.metadata)
        for t in r.topics
        for p in t.partitions
        if p.committed_offset >= 0
    }


def _groups(port: int) -> list[str]:
    with RawClient(port) as c:
        r = c.request(ApiKey.LIST_GROUPS, 4, states_filter=[])
    return sorted(g.group_id for g in r.groups)


def _committed_all(port: int, group: str, offset: int) -> bool:
    got = _offset_fetch(port, group)
    return all(got.get((TOPIC, p), (-1,))[0] == offset for p in range(PARTITIONS))


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory, spark: Any) -> Iterator[dict[str, Any]]:
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import AdminClient

    from kcoord.pipeline.job import run_job

    base = tmp_path_factory.mktemp("pipeline")
    broker = BrokerProcess(base / "data", FAST).start()
    try:
        b = broker.bootstrap
        create_topic(b, TOPIC, PARTITIONS)
        _produce(b, 0, FIRST)

        seen: dict[str, Any] = {"lock": threading.Lock(), "joined": [], "leaders": {}, "settled": []}
        m1 = RecordingMember(b, "g-live", "m1", seen)
        m2 = RecordingMember(b, "g-live", "m2", seen)
        wait_for(lambda: settled([m1, m2]), 60, what="two members balanced")
        seen["settled"].append(m1.generation)
        m3 = RecordingMember(b, "g-live", "m3", seen)
        wait_for(lambda: settled([m1, m2, m3]), 60, what="three members balanced")
        seen["settled"].append(m1.generation)
        m3.stop()
        wait_for(lambda: settled([m1, m2]), 60, what="two members again")
        seen["settled"].append(m1.generation)
        wait_for(lambda: _committed_all(broker.port, "g-live", FIRST), 60, what="all consumed")
        m1.stop()
        m2.stop()
        _produce(b, FIRST, MORE)

        admin = AdminClient({"bootstrap.servers": b})
        # A standalone committer, with metadata; and one more partition behind.
        admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions("g-standalone", [
            TopicPartition(TOPIC, 0, 3, metadata="meta-0"), TopicPartition(TOPIC, 1, 10),
            TopicPartition(TOPIC, 2, FIRST + MORE)])])["g-standalone"].result(20)
        # Offsets of a topic since deleted: tombstoned with it (Kafka's onPartitionsDeleted).
        create_topic(b, "elsewhere", 1)
        admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions("g-standalone", [
            TopicPartition("elsewhere", 0, 5)])])["g-standalone"].result(20)
        admin.delete_topics(["elsewhere"], operation_timeout=10)["elsewhere"].result(20)
        wait_for(lambda: not (broker.data_dir / "elsewhere-0").exists(), 30, what="topic deleted")
        wait_for(lambda: ("elsewhere", 0) not in _offset_fetch(broker.port, "g-standalone"), 30,
                 what="the deleted topic's offsets removed")  # fmt: skip
        # A group that had members, committed, and was deleted.
        gone = RecordingMember(b, "g-gone", "gone", {"lock": threading.Lock(), "joined": [], "leaders": {}})
        wait_for(lambda: _committed_all(broker.port, "g-gone", FIRST + MORE), 60, what="g-gone consumed")
        gone.stop()
        admin.delete_consumer_groups(["g-gone"])["g-gone"].result(20)
        # One deleted offset.
        admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions("g-partial", [
            TopicPartition(TOPIC, p, 20 + p) for p in range(PARTITIONS)])])["g-partial"].result(20)
        with RawClient(broker.port) as c:
            r = c.request(ApiKey.OFFSET_DELETE, 0, group_id="g-partial",
                          topics=[dict(name=TOPIC, partitions=[dict(partition_index=1)])])
        assert r.error_code == 0 and r.topics[0].partitions[0].error_code == 0

        groups = _groups(broker.port)
        expected = {g: _offset_fetch(broker.port, g) for g in groups}
        out = base / "out"
        summary = run_job(spark, str(broker.data_dir), str(out))
        tables = {
            name: [r.asDict(recursive=True) for r in spark.read.parquet(str(out / name)).collect()]
            for name in ("offset_commits", "offsets_latest", "group_generations",
                         "consumer_group_epochs", "consumer_lag")
        }
        yield {
            "broker": broker, "out": out, "summary": summary, "tables": tables,
            "expected": expected, "groups": groups, "seen": seen,
        }
    finally:
        broker.stop()


# ----------------------------------------------------------------------------- checks


def test_offsets_latest_equals_offset_fetch(scenario: dict[str, Any]) -> None:
    got: dict[str, dict[tuple[str, int], tuple[int, int, str]]] = {}
    for r in scenario["tables"]["offsets_latest"]:
        epoch = -1 if r["leader_epoch"] is None else r["leader_epoch"]
        got.setdefault(r["group"], {})[(r["topic"], r["partition"])] = (r["offset"], epoch, r["metadata"])
    expected = {g: o for g, o in scenario["expected"].items() if o}
    assert got == expected
    # librdkafka's AdminClient sends the metadata with a trailing NUL; both sides agree on it.
    offset, epoch, metadata = got["g-standalone"][(TOPIC, 0)]
    assert (offset, epoch, metadata.rstrip("\x00")) == (3, -1, "meta-0")
    assert scenario["summary"].problems == []


def test_offset_commits_hold_every_commit(scenario: dict[str, Any]) -> None:
    commits = scenario["tables"]["offset_commits"]
    live = [r for r in commits if r["group"] == "g-live"]
    # Every partition was committed repeatedly on the way to FIRST, in log order.
    for p in range(PARTITIONS):
        offsets = [r["offset"] for r in sorted(live, key=lambda r: r["log_offset"]) if r["partition"] == p]
        assert len(offsets) > 1 and offsets[-1] == FIRST and offsets == sorted(offsets)
    # The deleted group's commits are history: still here.
    assert any(r["group"] == "g-gone" for r in commits)
    assert all(r["commit_time"] is not None for r in commits)
    assert len(commits) == scenario["summary"].totals["offset_commits"]


def test_group_generations_match_what_the_consumers_saw(scenario: dict[str, Any]) -> None:
    rows = sorted(
        (r for r in scenario["tables"]["group_generations"] if r["group"] == "g-live"),
        key=lambda r: r["log_offset"],
    )
    by_generation = {r["generation"]: r for r in rows}
    seen = scenario["seen"]
    members_of: dict[int, set[str]] = {}
    for generation, member_id, parts in seen["joined"]:
        members_of.setdefault(generation, set()).add(member_id)
        row = by_generation[generation]
        mine = {m["member_id"]: m["partitions"] for m in row["partitions_per_member"]}
        assert mine[member_id] == parts, (generation, member_id)
    # A generation is recorded when its leader syncs; a member whose own SyncGroup was then
    # overtaken by the next rebalance is named in the record without having completed it.
    for generation, members in members_of.items():
        row = by_generation[generation]
        assert members <= {m["member_id"] for m in row["members"]}, generation
        assert row["leader"] == seen["leaders"][generation]
        assert row["protocol_type"] == "consumer" and row["protocol"] == "range"
    # The generations the group settled in (two, three, two members) were completed by every
    # member the record names.
    assert len(set(seen["settled"])) == 3, seen["settled"]
    for generation in seen["settled"]:
        row, members = by_generation[generation], members_of[generation]
        assert {m["member_id"] for m in row["members"]} == members
        assert row["member_count"] == len(members)
        total = sum(parts for g, _, parts in seen["joined"] if g == generation)
        assert sum(m["partitions"] for m in row["partitions_per_member"]) == total == PARTITIONS
    # The last generation with members had every partition assigned.
    last_busy = [r for r in rows if r["member_count"]][-1]
    assert sum(m["partitions"] for m in last_busy["partitions_per_member"]) == PARTITIONS
    assert [r["generation"] for r in rows] == sorted(r["generation"] for r in rows)
    assert rows[-1]["member_count"] == 0  # everyone left: the Empty group's record


def test_consumer_lag_is_end_offset_minus_committed(scenario: dict[str, Any]) -> None:
    lag = {(r["group"], r["topic"], r["partition"]): r for r in scenario["tables"]["consumer_lag"]}
    end = FIRST + MORE
    for p in range(PARTITIONS):
        r = lag[("g-live", TOPIC, p)]
        assert (r["committed_offset"], r["log_start_offset"], r["log_end_offset"]) == (FIRST, 0, end)
        assert r["lag"] == MORE
        assert r["oldest_unconsumed_offset"] == FIRST
        assert r["oldest_unconsumed_timestamp"] == _ts(p, FIRST)
        as_of = scenario["summary"].as_of_ms
        assert r["lag_ms"] == as_of - _ts(p, FIRST)
    assert lag[("g-standalone", TOPIC, 0)]["lag"] == end - 3
    assert lag[("g-standalone", TOPIC, 0)]["oldest_unconsumed_timestamp"] == _ts(0, 3)
    assert lag[("g-standalone", TOPIC, 1)]["lag"] == end - 10
    caught_up = lag[("g-standalone", TOPIC, 2)]
    assert (caught_up["lag"], caught_up["lag_ms"], caught_up["oldest_unconsumed_offset"]) == (0, 0, None)
    # The deleted topic's offset was tombstoned with it: no lag row (a partition without a log
    # is tests/unit/test_pipeline_snapshot.py's).
    assert ("g-standalone", "elsewhere", 0) not in lag
    for key, r in lag.items():
        if r["log_end_offset"] is not None:
            assert r["lag"] == r["log_end_offset"] - max(r["committed_offset"], r["log_start_offset"]), key


def test_deleted_groups_and_offsets_are_absent(scenario: dict[str, Any]) -> None:
    tables = scenario["tables"]
    assert "g-gone" not in scenario["groups"]
    for name in ("offsets_latest", "consumer_lag", "group_generations"):
        assert not [r for r in tables[name] if r["group"] == "g-gone"], name
    partial = {r["partition"] for r in tables["offsets_latest"] if r["group"] == "g-partial"}
    assert partial == {0, 2, 3}
    assert {r["partition"] for r in tables["consumer_lag"] if r["group"] == "g-partial"} == {0, 2, 3}
    assert scenario["summary"].totals["group_tombstones"] >= 1
    assert scenario["summary"].totals["offset_tombstones"] >= PARTITIONS + 1


def test_report_page_and_charts(scenario: dict[str, Any]) -> None:
    report = scenario["out"] / "report"
    page = (report / "index.html").read_text()
    for png in ("lag_per_group.png", "rebalances.png", "commit_rate.png"):
        assert f'src="{png}"' in page
        data = (report / png).read_bytes()
        assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 5000
    assert "g-live" in page and "No problems" in page
    summary = json.loads((scenario["out"] / "summary.json").read_text())
    assert summary["rows"]["offsets_latest"] == len(scenario["tables"]["offsets_latest"])
    # Classic groups only here: the KIP-848 table is written, and empty.
    assert summary["rows"]["consumer_group_epochs"] == 0 == len(scenario["tables"]["consumer_group_epochs"])
    assert summary["totals"]["consumer_group_records"] == 0


# ----------------------------------------------------------------------------- bad input


def _write_offsets(data_dir: Path, partition: int, records: list[tuple[bytes, bytes | None]], ts: int,
                   base_offset: int = 0) -> Path:
    from kcoord.protocol.batch import set_base_offset
    from kcoord.protocol.record_encoding import encode_kv_batch

    d = data_dir / f"__consumer_offsets-{partition}"
    d.mkdir(parents=True, exist_ok=True)
    batch = bytearray(encode_kv_batch(records, ts))
    set_base_offset(batch, 0, base_offset)
    path = d / f"{base_offset:020d}.log"
    path.write_bytes(bytes(batch))
    return path


def _commit(group: str, topic: str, partition: int, offset: int) -> tuple[bytes, bytes]:
    from kcoord.coordinator.schemas import (
        OffsetCommitKey,
        OffsetCommitValue,
        encode_key,
        encode_offset_commit_value,
    )

    return (encode_key(OffsetCommitKey(group, topic, partition)),
            encode_offset_commit_value(OffsetCommitValue(offset, "", T0)))


def test_lag_is_clamped_at_the_log_start_offset(tmp_path: Path, spark: Any) -> None:
    from kcoord.pipeline.job import run_job
    from kcoord.protocol.record_encoding import build_batch

    data = tmp_path / "data"
    _write_offsets(data, 0, [_commit("behind", "t", 0, 50), _commit("inside", "t", 0, 105)], T0)
    topic = data / "t-0"
    topic.mkdir()
    # The log starts at 100 (older segments deleted by retention).
    entries = [(None, b"v", (), T0 + 1000 + i) for i in range(10)]
    (topic / f"{100:020d}.log").write_bytes(build_batch(entries, base_offset=100))
    summary = run_job(spark, str(data), str(tmp_path / "out"), as_of_ms=T0 + 60_000, report=False)
    rows = {r["group"]: r for r in spark.read.parquet(str(tmp_path / "out" / "consumer_lag")).collect()}
    assert (rows["behind"]["lag"], rows["behind"]["oldest_unconsumed_offset"]) == (10, 100)
    assert rows["behind"]["lag_ms"] == 60_000 - 1000
    assert (rows["inside"]["lag"], rows["inside"]["oldest_unconsumed_timestamp"]) == (5, T0 + 1005)
    assert summary.problems == []


def test_cli_names_and_skips_corrupt_and_missing_segments(tmp_path: Path) -> None:
    data = tmp_path / "data"
    _write_offsets(data, 0, [_commit("fine", "t", 0, 7)], T0)
    bad = _write_offsets(data, 1, [_commit("damaged", "t", 0, 8)], T0)
    raw = bytearray(bad.read_bytes())
    raw[-3] ^= 0xFF  # inside the records: the CRC no longer matches
    bad.write_bytes(bytes(raw))
    # A second segment of partition 0 whose .log is gone (its .index is still there).
    (data / "__consumer_offsets-0" / f"{500:020d}.index").write_bytes(b"")
    # A torn batch at the end of an active segment is a write in flight, not a problem.
    torn = _write_offsets(data, 2, [_commit("torn", "t", 0, 9)], T0)
    torn.write_bytes(torn.read_bytes() + _write_offsets(tmp_path / "x", 0, [_commit("x", "t", 0, 1)], T0).read_bytes()[:30])

    out = tmp_path / "out"
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
    done = subprocess.run(
        [sys.executable, "-m", "kcoord", "pipeline", "run", "--data-dir", str(data), "--out", str(out),
         "--master", "local[1]", "--shuffle-partitions", "1"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 3, done.stderr[-3000:]
    assert "SKIPPED __consumer_offsets-1/00000000000000000000.log: corrupt: CRC mismatch" in done.stderr
    assert "SKIPPED __consumer_offsets-0/00000000000000000500.log: segment file missing" in done.stderr
    assert "torn" not in done.stderr
    import pyarrow.parquet as pq

    latest = pq.read_table(out / "offsets_latest").to_pylist()
    assert sorted((r["group"], r["offset"]) for r in latest) == [("fine", 7), ("torn", 9)]
    page = (out / "report" / "index.html").read_text()
    assert "2 problem(s)" in page and "__consumer_offsets-1/00000000000000000000.log" in page


# ----------------------------------------------------------------------------- a growing log


def test_one_run_reads_one_snapshot_while_the_log_grows(tmp_path: Path, spark: Any, monkeypatch: Any) -> None:
    """Issue 31: a broker appending while the job runs added to some of its tables and not
    to others (the printed commit count was not the Parquet's), and the report showed records
    newer than its "as of". Here commits of a group "late" are appended to the active segment
    after the first table was written and before the others are read."""
    import time

    import pyarrow.parquet as pq

    from kcoord.pipeline import job
    from kcoord.protocol.batch import set_base_offset
    from kcoord.protocol.record_encoding import encode_kv_batch

    data, out = tmp_path / "data", tmp_path / "out"
    segment = _write_offsets(data, 0, [_commit("early", "t", 0, 1), _commit("early", "t", 1, 2)], T0)
    later = int(time.time() * 1000) + 3_600_000
    real_topic_names = job.topic_names
    appended: list[int] = []

    def topic_names_while_the_broker_writes(source: str) -> dict[str, str]:
        batch = bytearray(encode_kv_batch([_commit("late", "t", 0, 5), _commit("late", "t", 2, 6)], later))
        set_base_offset(batch, 0, 2)
        with segment.open("ab") as f:
            f.write(bytes(batch))
        appended.append(int(time.time() * 1000))
        return real_topic_names(source)

    monkeypatch.setattr(job, "topic_names", topic_names_while_the_broker_writes)
    summary = job.run_job(spark, str(data), str(out), report=False)
    assert appended, "the log did not grow during the run"

    tables = {name: pq.read_table(out / name).to_pylist() for name in job.TABLES}
    assert summary.rows["offset_commits"] == len(tables["offset_commits"]) == 2
    assert summary.totals["offset_commits"] == 2 and summary.totals["records"] == 2
    for name in ("offset_commits", "offsets_latest", "consumer_lag"):
        assert {r["group"] for r in tables[name]} == {"early"}, name
    assert summary.as_of_ms <= appended[0]
    newest = max(r["commit_time"].timestamp() * 1000 for r in tables["offsets_latest"])
    assert newest <= summary.as_of_ms
