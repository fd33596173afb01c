"""Exactly-once consume-transform-produce with real clients (issue 16's acceptance test).

A confluent-kafka worker (``scripts/eos_worker.py``: read_committed consumer in a group, a
transactional producer, ``send_offsets_to_transaction``) copies 20,000 records from an input to
an output topic while the broker is SIGKILLed twice and the worker is SIGKILLed and replaced by
a new one with the same transactional id. Read with read_committed, the output holds every input
record exactly once, in order per partition, and the group's committed offsets are the input's
end offsets. Also: an aborted transaction is invisible and commits no offsets; a zombie producer
is fenced; kafka-python's transactional producer works.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from .clients import create_topic
from .harness import ROOT, BrokerProcess, wait_for

WORKER = Path(__file__).parent / "scripts" / "eos_worker.py"
PARTITIONS = 3
RECORDS = 20_000
FAST = {"group.initial.rebalance.delay.ms": 0, "transaction.abort.timed.out.transaction.cleanup.interval.ms": 1000}


class Worker:
    def __init__(self, bootstrap: str, log: Path, group: str = "eos") -> None:
        self.committed = 0
        self.started = False
        err = open(log, "ab")  # noqa: SIM115 - kept for post-mortems
        self.proc = subprocess.Popen(
            [sys.executable, str(WORKER), "--bootstrap", bootstrap, "--group", group,
             "--input", "in", "--output", "out", "--transactional-id", "eos-worker", "--pause", "0.05"],
            stdout=subprocess.PIPE, stderr=err, cwd=ROOT,
        )
        err.close()
        threading.Thread(target=self._read, daemon=True).start()
        wait_for(lambda: self.started, 60, what="the worker started")

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if event.get("event") == "started":
                self.started = True
            self.committed += int(event.get("committed", 0))

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()


def _produce_input(bootstrap: str) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for i in range(RECORDS):
        p.produce("in", key=b"%d" % i, value=b"r%d-%d" % (i % PARTITIONS, i), partition=i % PARTITIONS)
        if i % 5000 == 0:
            p.poll(0)
    assert p.flush(60) == 0


def _end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "probe", "isolation.level": "read_committed"})
    try:
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=20)[1] for p in range(PARTITIONS)}
    finally:
        c.close()


def _committed(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        got = c.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=20)
        return {tp.partition: tp.offset for tp in got}
    finally:
        c.close()


def _read_committed(bootstrap: str, topic: str, partitions: int = PARTITIONS) -> dict[int, list[bytes]]:
    """Every record of ``topic`` a read_committed consumer sees, by partition."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader", "isolation.level": "read_committed",
                  "enable.auto.commit": False})
    ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=20)[1] for p in range(partitions)}
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    positions = {p: 0 for p in range(partitions)}
    deadline = time.monotonic() + 120
    try:
        while any(positions[p] < ends[p] for p in ends) and time.monotonic() < deadline:
            for m in c.consume(num_messages=1000, timeout=0.5):
                if m.error():
                    continue
                out[m.partition()].append(m.value())
                positions[m.partition()] = m.offset() + 1
            for tp in c.position([TopicPartition(topic, p) for p in range(partitions)]):
                if tp.offset >= 0:
                    positions[tp.partition] = max(positions[tp.partition], tp.offset)
    finally:
        c.close()
    return out


def test_consume_transform_produce_survives_broker_and_worker_kills(broker_factory: Any, tmp_path: Path) -> None:
    broker: BrokerProcess = broker_factory(FAST)
    create_topic(broker.bootstrap, "in", PARTITIONS)
    create_topic(broker.bootstrap, "out", PARTITIONS)
    _produce_input(broker.bootstrap)
    ends = _end_offsets(broker.bootstrap, "in")
    assert sum(ends.values()) == RECORDS
    worker = Worker(broker.bootstrap, tmp_path / "worker-1.err")
    try:
        wait_for(lambda: worker.committed >= 2000, 120, what="a first part copied")
        broker.kill()
        broker.restart()
        wait_for(lambda: worker.committed >= 6000, 120, what="copying after the first broker kill")
        worker.kill()  # mid-transaction, most likely
        worker = Worker(broker.bootstrap, tmp_path / "worker-2.err")  # same transactional id: fences the old
        wait_for(lambda: worker.committed >= 3000, 120, what="the replacement copying")
        broker.kill()
        broker.restart()
        wait_for(lambda: _committed(broker.bootstrap, "eos", "in") == ends, 240,
                 what="the group's offsets at the input's end")
    finally:
        worker.stop()
    out = _read_committed(broker.bootstrap, "out")
    for p in range(PARTITIONS):
        expected = [b"R%d-%d" % (p, i) for i in range(p, RECORDS, PARTITIONS)]
        assert out[p] == expected, f"partition {p}: {len(out[p])} records, first difference at " + str(
            next((i for i, (a, b) in enumerate(zip(out[p], expected, strict=False)) if a != b), min(len(out[p]), len(expected)))
        )


def test_an_aborted_transaction_is_invisible_and_commits_no_offsets(broker_factory: Any) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    broker: BrokerProcess = broker_factory(FAST)
    create_topic(broker.bootstrap, "src", 1)
    create_topic(broker.bootstrap, "dst", 1)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "aborter"})
    producer.init_transactions(30)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g-abort"})
    for commit in (True, False, True):
        producer.begin_transaction()
        for i in range(100):
            producer.produce("dst", value=b"%s-%d" % (b"kept" if commit else b"aborted", i), partition=0)
        producer.send_offsets_to_transaction([TopicPartition("src", 0, 50 if commit else 999)],
                                             consumer.consumer_group_metadata(), 30)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)
    consumer.close()
    values = _read_committed(broker.bootstrap, "dst", 1)[0]
    assert len(values) == 200 and all(v.startswith(b"kept") for v in values)
    assert _committed(broker.bootstrap, "g-abort", "src")[0] == 50


def test_a_zombie_producer_is_fenced(broker_factory: Any) -> None:
    from confluent_kafka import KafkaException, Producer

    broker: BrokerProcess = broker_factory(FAST)
    create_topic(broker.bootstrap, "z", 1)
    zombie = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "zombie"})
    zombie.init_transactions(30)
    zombie.begin_transaction()
    zombie.produce("z", value=b"from the zombie", partition=0)
    zombie.flush(30)
    successor = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "zombie"})
    successor.init_transactions(30)  # bumps the epoch and aborts the zombie's transaction
    with pytest.raises(KafkaException) as refused:
        zombie.commit_transaction(30)
    assert refused.value.args[0].fatal() or "fenced" in str(refused.value).lower()
    successor.begin_transaction()
    successor.produce("z", value=b"from the successor", partition=0)
    successor.commit_transaction(30)
    assert _read_committed(broker.bootstrap, "z", 1)[0] == [b"from the successor"]


def test_kafka_python_transactional_producer(broker_factory: Any) -> None:
    from kafka import KafkaProducer

    broker: BrokerProcess = broker_factory(FAST)
    create_topic(broker.bootstrap, "kp", 1)
    p = KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id="kp-txn")
    p.init_transactions()
    p.begin_transaction()
    for i in range(10):
        p.send("kp", value=b"v%d" % i, partition=0)
    p.commit_transaction()
    p.begin_transaction()
    p.send("kp", value=b"aborted", partition=0)
    p.abort_transaction()
    p.close()
    assert _read_committed(broker.bootstrap, "kp", 1)[0] == [b"v%d" % i for i in range(10)]
