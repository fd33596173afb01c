"""The Spark pipeline over a broker that keeps its logs in PostgreSQL (``storage.url``).

One scenario shared by the checks: a broker on a fresh database; two kafka-python consumers
of one group consume and commit; more records are produced behind them; a standalone commit
with metadata; a deleted offset. Then ``pipeline.job.run_job`` reads the database (its URL
with a password added, which the test server's trust authentication ignores, to check that it
is never written out) and the tables are compared with what the broker answers (OffsetFetch),
the log ends, and the members the consumers saw. Two share consumers also consume, releasing
and rejecting records (test_pipeline_share.py's scenario), so that ``__share_group_state`` is
read from the database too. The file-based counterpart is
test_pipeline.py; the ``spark`` session is conftest.py's.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kcoord.protocol.apis import ApiKey

from .clients import create_topic
from .harness import BrokerProcess, wait_for
from .rawclient import RawClient
from .test_pipeline import (
    FAST,
    FIRST,
    MORE,
    PARTITIONS,
    TOPIC,
    RecordingMember,
    _committed_all,
    _groups,
    _offset_fetch,
    _produce,
    _ts,
    settled,
)
from .test_pipeline_share import BROKER as SHARE_SETTINGS
from .test_pipeline_share import PER_PARTITION, REJECTED, consume_with_rejects

PASSWORD = "not-for-the-report"


@pytest.fixture(scope="module")
def scenario(
    tmp_path_factory: pytest.TempPathFactory, postgres: Any, spark: Any
) -> Iterator[dict[str, Any]]:
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import AdminClient

    from kcoord.pipeline.job import run_job

    base = tmp_path_factory.mktemp("pipeline-pg")
    url = postgres.database()
    broker = BrokerProcess(base / "data", {**FAST, **SHARE_SETTINGS, "storage.url": url}).start()
    try:
        b = broker.bootstrap
        create_topic(b, TOPIC, PARTITIONS)
        _produce(b, 0, FIRST)

        seen: dict[str, Any] = {"lock": threading.Lock(), "joined": [], "leaders": {}}
        m1 = RecordingMember(b, "g-live", "m1", seen)
        m2 = RecordingMember(b, "g-live", "m2", seen)
        wait_for(lambda: settled([m1, m2]), 60, what="two members balanced")
        seen["settled"] = m1.generation
        wait_for(lambda: _committed_all(broker.port, "g-live", FIRST), 60, what="all consumed")
        m1.stop()
        m2.stop()
        _produce(b, FIRST, MORE)

        admin = AdminClient({"bootstrap.servers": b})
        admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions("g-standalone", [
            TopicPartition(TOPIC, 0, 3, metadata="meta-0"), TopicPartition(TOPIC, 1, 10)])
        ])["g-standalone"].result(20)
        admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions("g-partial", [
            TopicPartition(TOPIC, p, 20 + p) for p in range(PARTITIONS)])])["g-partial"].result(20)
        with RawClient(broker.port) as c:
            r = c.request(ApiKey.OFFSET_DELETE, 0, group_id="g-partial",
                          topics=[dict(name=TOPIC, partitions=[dict(partition_index=1)])])
        assert r.error_code == 0 and r.topics[0].partitions[0].error_code == 0

        consume_with_rejects(broker)
        expected = {g: _offset_fetch(broker.port, g) for g in _groups(broker.port) if g != "sg"}
        out = base / "out"
        with_password = url.replace("postgresql://kcoord@", f"postgresql://kcoord:{PASSWORD}@")
        assert PASSWORD in with_password
        summary = run_job(spark, with_password, str(out))
        tables = {
            name: [r.asDict(recursive=True) for r in spark.read.parquet(str(out / name)).collect()]
            for name in ("offset_commits", "offsets_latest", "group_generations", "consumer_lag",
                         "share_state_latest")
        }
        yield {"out": out, "summary": summary, "tables": tables, "expected": expected, "seen": seen}
    finally:
        broker.stop()


def test_offsets_latest_equals_offset_fetch(scenario: dict[str, Any]) -> None:
    got: dict[str, dict[tuple[str, int], tuple[int, int, str]]] = {}
    for r in scenario["tables"]["offsets_latest"]:
        epoch = -1 if r["leader_epoch"] is None else r["leader_epoch"]
        got.setdefault(r["group"], {})[(r["topic"], r["partition"])] = (r["offset"], epoch, r["metadata"])
    assert got == {g: o for g, o in scenario["expected"].items() if o}
    offset, _, metadata = got["g-standalone"][(TOPIC, 0)]
    assert (offset, metadata.rstrip("\x00")) == (3, "meta-0")
    assert set(got["g-partial"]) == {(TOPIC, p) for p in (0, 2, 3)}  # the deleted one is gone
    summary = scenario["summary"]
    assert summary.problems == []
    assert summary.totals["offset_tombstones"] >= 1
    assert len(scenario["tables"]["offset_commits"]) == summary.totals["offset_commits"] > 0


def test_consumer_lag_is_end_offset_minus_committed(scenario: dict[str, Any]) -> None:
    lag = {(r["group"], r["topic"], r["partition"]): r for r in scenario["tables"]["consumer_lag"]}
    end = FIRST + MORE
    for p in range(PARTITIONS):
        r = lag[("g-live", TOPIC, p)]
        assert (r["committed_offset"], r["log_start_offset"], r["log_end_offset"]) == (FIRST, 0, end)
        assert (r["lag"], r["oldest_unconsumed_offset"]) == (MORE, FIRST)
        assert r["oldest_unconsumed_timestamp"] == _ts(p, FIRST)
    standalone = lag[("g-standalone", TOPIC, 0)]
    assert (standalone["lag"], standalone["oldest_unconsumed_timestamp"]) == (end - 3, _ts(0, 3))
    assert lag[("g-standalone", TOPIC, 1)]["lag"] == end - 10
    assert ("g-partial", TOPIC, 1) not in lag
    for key, r in lag.items():
        assert r["lag"] == r["log_end_offset"] - r["committed_offset"], key


def test_group_generations_name_the_members_the_consumers_saw(scenario: dict[str, Any]) -> None:
    rows = [r for r in scenario["tables"]["group_generations"] if r["group"] == "g-live"]
    by_generation = {r["generation"]: r for r in rows}
    members_of: dict[int, set[str]] = {}
    for generation, member_id, parts in scenario["seen"]["joined"]:
        members_of.setdefault(generation, set()).add(member_id)
        mine = {m["member_id"]: m["partitions"] for m in by_generation[generation]["partitions_per_member"]}
        assert mine[member_id] == parts, (generation, member_id)
    for generation, members in members_of.items():
        row = by_generation[generation]
        assert members <= {m["member_id"] for m in row["members"]}, generation
        assert row["leader"] == scenario["seen"]["leaders"][generation]
    settled_at = scenario["seen"]["settled"]  # both members completed it
    assert len(members_of[settled_at]) == 2 == by_generation[settled_at]["member_count"]
    assert {m["member_id"] for m in by_generation[settled_at]["members"]} == members_of[settled_at]
    assert max(rows, key=lambda r: r["log_offset"])["member_count"] == 0  # both left


def test_share_state_is_read_from_the_database(scenario: dict[str, Any]) -> None:
    latest = scenario["tables"]["share_state_latest"]
    assert sorted((r["group"], r["topic"], r["partition"]) for r in latest) == [("sg", "jobs", 0), ("sg", "jobs", 1)]
    for r in latest:
        assert (r["start_offset"], r["archived_total"], r["in_flight_batches"]) == (PER_PARTITION, len(REJECTED), [])
    totals = scenario["summary"].totals
    assert totals["share_snapshots"] > 0 and totals["share_updates"] > 0
    assert any(s["name"].startswith("__share_group_state-") for s in scenario["summary"].segments)


def test_the_password_is_never_written(scenario: dict[str, Any]) -> None:
    out: Path = scenario["out"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["data_dir"].startswith("postgresql://kcoord:***@127.0.0.1:")
    assert PASSWORD not in (out / "summary.json").read_text()
    assert PASSWORD not in (out / "report" / "index.html").read_text()
    # Runs of rows stand for segments: statistics, no torn tails.
    assert summary["segments"] and all(s["torn_tail_bytes"] == 0 for s in summary["segments"])
