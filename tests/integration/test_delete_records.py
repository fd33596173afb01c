"""DeleteRecords (API 21) with real clients (issue 19): confluent-kafka's AdminClient and
kafkajs move a partition's log start offset; Fetch, ListOffsets, lag and consumers whose
committed offset fell below it follow; the deletion survives kill -9."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kcoord.protocol.apis import ApiKey
from kcoord.protocol.errors import ErrorCode

from .clients import create_topic, produce_confluent
from .harness import ROOT, BrokerProcess, wait_for
from .rawclient import RawClient
from .test_admin_cli import commit, kcoord_json

FAST = {"group.initial.rebalance.delay.ms": 0, "group.min.session.timeout.ms": 1000}
JS_DIR = ROOT / "tests" / "js"


def _produce(bootstrap: str, topic: str, first: int, count: int) -> None:
    produce_confluent(
        bootstrap,
        topic,
        [(0, f"k{i}".encode(), f"v{i}".encode()) for i in range(first, first + count)],
        "none",
    )


def _watermarks(bootstrap: str, topic: str) -> tuple[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "watermarks"})
    try:
        low, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        return int(low), int(high)
    finally:
        c.close()


def _group_reads(bootstrap: str, group: str, topic: str, reset: str, want: int) -> list[int]:
    """The offsets a member of ``group`` (committed offset as it is) reads, until ``want``."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": reset,
            "enable.auto.commit": False,
        }
    )
    got: list[int] = []
    try:
        c.subscribe([topic])

        def enough() -> bool:
            for m in c.consume(num_messages=100, timeout=0.2):
                assert not m.error(), m.error()
                got.append(m.offset())
            return len(got) >= want

        wait_for(enough, 30, interval=0, what=f"{group} reads {want} messages")
        return got
    finally:
        c.close()


def _delete(admin: AdminClient, topic: str, offset: int) -> Any:
    futures = admin.delete_records([TopicPartition(topic, 0, offset)], request_timeout=10)
    return next(iter(futures.values())).result(timeout=30)


def test_confluent_delete_records_moves_the_log_start(broker_factory: Any) -> None:
    broker: BrokerProcess = broker_factory(FAST)
    b = broker.bootstrap
    create_topic(b, "t", 1)
    _produce(b, "t", 0, 10)
    for group in ("early", "lag"):
        commit(b, group, {("t", 0): 2})
    admin = AdminClient({"bootstrap.servers": b})

    deleted = _delete(admin, "t", 5)
    assert deleted.low_watermark == 5
    assert _watermarks(b, "t") == (5, 10)  # ListOffsets EARLIEST follows
    # a committed offset below the log start is out of range: auto.offset.reset decides
    assert _group_reads(b, "early", "t", "earliest", 5) == [5, 6, 7, 8, 9]
    # lag counts from the log start, not from the committed offset (10 - 5)
    [row] = kcoord_json(broker, "groups", "describe", "lag")
    assert (row["current_offset"], row["log_end_offset"], row["lag"]) == (2, 10, 5)

    # errors, per partition, as Kafka answers them
    with pytest.raises(KafkaException, match="OFFSET_OUT_OF_RANGE"):
        _delete(admin, "t", 11)
    with pytest.raises(KafkaException, match="OFFSET_OUT_OF_RANGE"):
        _delete(admin, "t", -5)
    assert _delete(admin, "t", 4).low_watermark == 5  # never backwards

    broker.kill()  # an acknowledged deletion survives kill -9
    broker.restart()
    wait_for(lambda: _watermarks(b, "t") == (5, 10), 30, what="log start 5 after restart")
    _produce(b, "t", 10, 1)
    assert _watermarks(b, "t") == (5, 11)
    # -1: everything up to the high watermark
    admin = AdminClient({"bootstrap.servers": b})  # (the old one's broker connection died)
    assert _delete(admin, "t", -1).low_watermark == 11
    assert _watermarks(b, "t") == (11, 11)


def test_delete_records_refusals_on_the_wire(broker_factory: Any) -> None:
    """Kafka's per-partition errors, on every version (v2 is flexible)."""
    broker: BrokerProcess = broker_factory(FAST)
    b = broker.bootstrap
    create_topic(b, "t", 1)
    admin = AdminClient({"bootstrap.servers": b})
    admin.create_topics([NewTopic("compacted", 1, 1, config={"cleanup.policy": "compact"})])[
        "compacted"
    ].result(timeout=30)
    commit(b, "g", {("t", 0): 0})  # __consumer_offsets exists now
    _produce(b, "t", 0, 3)
    cases = [
        ("__consumer_offsets", 0, 0, ErrorCode.invalid_topic_exception, -1),
        ("nope", 0, 0, ErrorCode.unknown_topic_or_partition, -1),
        ("t", 7, 0, ErrorCode.unknown_topic_or_partition, -1),
        ("compacted", 0, 0, ErrorCode.policy_violation, -1),
        ("t", 0, 4, ErrorCode.offset_out_of_range, -1),
        ("t", 0, -2, ErrorCode.offset_out_of_range, -1),
        ("t", 0, 1, ErrorCode.none, 1),
    ]
    for version in (0, 1, 2):
        with RawClient(broker.port) as c:
            r = c.request(
                ApiKey.DELETE_RECORDS,
                version,
                topics=[
                    dict(name=name, partitions=[dict(partition_index=p, offset=offset)])
                    for name, p, offset, _, _ in cases
                ],
                timeout=1000,
            )
        got = [(t.name, t.partitions[0].error_code, t.partitions[0].low_watermark) for t in r.topics]
        assert got == [(name, code, low) for name, _, _, code, low in cases], version


def _node_ready() -> None:
    if shutil.which("node") is None or not (JS_DIR / "node_modules" / "kafkajs").is_dir():
        raise AssertionError("kafkajs needs node and `npm install --prefix tests/js` (scripts/test does it)")


def test_kafkajs_delete_topic_records_and_a_consumer_below_the_log_start(
    broker_factory: Any, tmp_path: Path
) -> None:
    _node_ready()
    broker: BrokerProcess = broker_factory(FAST)
    b = broker.bootstrap
    create_topic(b, "t", 1)
    _produce(b, "t", 0, 10)
    commit(b, "js", {("t", 0): 3})
    r = subprocess.run(
        ["node", str(JS_DIR / "admin.js"), "--bootstrap", b, "delete-records", "t", "0", "6"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    [offsets] = json.loads(r.stdout.splitlines()[-1])["offsets"]
    assert (offsets["low"], offsets["high"]) == ("6", "10")
    assert _watermarks(b, "t") == (6, 10)
    # kafkajs' member of "js": committed 3 is below the log start; fromBeginning resets to 6
    out = tmp_path / "consumed.txt"
    proc = subprocess.Popen(
        ["node", str(JS_DIR / "consumer.js"), "--bootstrap", b, "--group", "js", "--topic", "t",
         "--out", str(out), "--session-ms", "6000"],
        stdout=subprocess.DEVNULL,
        cwd=ROOT,
    )  # fmt: skip
    try:
        wait_for(
            lambda: out.exists() and len(out.read_text().splitlines()) >= 4,
            60,
            what="kafkajs consumed from the new log start",
        )
        assert out.read_text().splitlines() == ["0 6", "0 7", "0 8", "0 9"]
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
