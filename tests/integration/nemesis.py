"""A fault-injection run against a three-node cluster, in the spirit of Jepsen (issue 28).

:func:`run` starts its own PostgreSQL and three kcoord nodes, then for ``seconds`` keeps
clients working while a nemesis injects one fault at a time, chosen at random (seeded):

* ``kill``: SIGKILL a node, start it again a moment later;
* ``pause``: SIGSTOP a node past its session timeout (others take its partitions), SIGCONT;
* ``restart``: SIGTERM a node (a clean hand-over), start it again;
* ``postgres``: SIGKILL the database and its backends, start it again.

The clients: an idempotent producer (every acknowledged record remembered), a classic group and
a KIP-848 group (two consumers each) committing what they consume (every acknowledged commit
remembered). Then everything is healed and a checker proves:

1. every acknowledged record is readable;
2. no acknowledged commit was followed by a lower one for the same group and partition, and each
   group's final committed offsets are at least its acknowledged ones;
3. in every partition, the batches' leader epochs (stamped by the leader that appended them) never
   decrease with the offset: no two leaderships ever interleaved their writes.

The short run is a test (``test_cluster_nemesis.py``); ``bench/nemesis.py`` runs it long.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kcoord.protocol.batch import HEADER_SIZE, parse_header
from tests.pg_server import running_server

from .harness import BrokerProcess, wait_for

TOPIC = "nemesis"
PARTITIONS = 6
HEARTBEAT_MS = 200
SESSION_MS = 3000
FAULTS = ("kill", "pause", "restart", "postgres")


@dataclass
class Report:
    seconds: float
    seed: int
    faults: dict[str, int] = field(default_factory=dict)
    records_acknowledged: int = 0
    records_read: int = 0
    commits_acknowledged: int = 0
    batches_checked: int = 0
    anomalies: list[str] = field(default_factory=list)


class _Nodes:
    def __init__(self, root: Path, url: str) -> None:
        self.nodes = {
            n: BrokerProcess(
                root / f"node{n}",
                {
                    "node.id": n,
                    "storage.url": url,
                    "broker.heartbeat.interval.ms": HEARTBEAT_MS,
                    "broker.session.timeout.ms": SESSION_MS,
                    "group.initial.rebalance.delay.ms": 0,
                    "group.min.session.timeout.ms": 1000,
                    "offsets.topic.num.partitions": 6,
                    "group.consumer.heartbeat.interval.ms": 500,
                    "group.consumer.min.heartbeat.interval.ms": 100,
                    "group.consumer.session.timeout.ms": 6000,
                    "group.consumer.min.session.timeout.ms": 1000,
                },
            )
            for n in (1, 2, 3)
        }

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.nodes.values())

    def start(self, n: int) -> None:
        # A node restarted while the database is down cannot join yet: it is retried.
        wait_for(lambda: self._started(n), 120, 0.5, f"node {n} started")

    def _started(self, n: int) -> bool:
        b = self.nodes[n]
        if b.alive():
            return True
        try:
            b.start(timeout=60)
        except AssertionError:
            b.kill()
            return False
        return True

    def stop_all(self) -> None:
        for b in self.nodes.values():
            if b.alive():
                os.kill(b.pid, signal.SIGCONT)
                b.stop()


class _Committer:
    """One consumer of a group, committing each message synchronously; every acknowledged
    commit is checked against the highest acknowledged before it."""

    def __init__(self, bootstrap: str, group: str, protocol: str, report: Report, lock: threading.Lock,
                 highest: dict[tuple[str, int], int]) -> None:
        conf: dict[str, Any] = {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "group.protocol": protocol,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "log_level": 0,
        }
        if protocol == "classic":
            conf.update({"session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
        self.consumer = Consumer(conf)
        self.consumer.subscribe([TOPIC])
        self.group = group
        self.report = report
        self.lock = lock
        self.highest = highest

    def step(self) -> None:
        msg = self.consumer.poll(0.1)
        if msg is None or msg.error() is not None:
            return
        try:
            done = self.consumer.commit(message=msg, asynchronous=False)
        except KafkaException:
            return  # not acknowledged: a failover or a rebalance under way
        with self.lock:
            for tp in done or []:
                key = (self.group, tp.partition)
                if tp.offset < self.highest.get(key, 0):
                    self.report.anomalies.append(
                        f"{self.group}-{tp.partition}: commit {tp.offset} acknowledged after"
                        f" {self.highest[key]}"
                    )
                self.highest[key] = max(self.highest.get(key, 0), tp.offset)
                self.report.commits_acknowledged += 1

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.consumer.close()


def run(root: Path, seconds: float, seed: int, log: Callable[[str], None] = lambda _: None,
        min_faults: int = 0) -> Report:
    """The run (module docstring); its figures and the anomalies found (none, we hope).
    Faults go on past ``seconds`` until ``min_faults`` were injected (a slow machine's restarts
    take longer, and fewer fit in the time)."""
    report = Report(seconds, seed, dict.fromkeys(FAULTS, 0))
    rng = random.Random(seed)
    with running_server() as pg:
        url = pg.database()
        nodes = _Nodes(root, url)
        try:
            for n in nodes.nodes:
                nodes.start(n)
            admin = AdminClient({"bootstrap.servers": nodes.bootstrap})
            for f in admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)]).values():
                f.result(30)
            acked: set[bytes] = set()
            highest: dict[tuple[str, int], int] = {}
            lock = threading.Lock()
            stop = threading.Event()
            threads = [
                threading.Thread(target=_produce, args=(nodes.bootstrap, acked, lock, stop)),
                threading.Thread(
                    target=_consume, args=(nodes.bootstrap, report, lock, highest, stop)
                ),
            ]
            for t in threads:
                t.start()
            try:
                _inject(nodes, pg, rng, seconds, min_faults, report, log)
            finally:
                stop.set()
                for t in threads:
                    t.join(120)
            for n in nodes.nodes:
                nodes.start(n)
            report.records_acknowledged = len(acked)
            _check(nodes, url, acked, highest, report)
        finally:
            nodes.stop_all()
    return report


def _produce(bootstrap: str, acked: set[bytes], lock: threading.Lock, stop: threading.Event) -> None:
    def delivered(err: Any, msg: Any) -> None:
        if err is None:
            with lock:
                acked.add(msg.value())

    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                  "message.timeout.ms": 120000, "log_level": 0})
    i = 0
    while not stop.is_set():
        with contextlib.suppress(BufferError):
            p.produce(TOPIC, f"r{i}".encode(), on_delivery=delivered)
            i += 1
        p.poll(0.005)
    p.flush(120)


def _consume(bootstrap: str, report: Report, lock: threading.Lock,
             highest: dict[tuple[str, int], int], stop: threading.Event) -> None:
    committers = [
        _Committer(bootstrap, f"nemesis-{protocol}", protocol, report, lock, highest)
        for protocol in ("classic", "classic", "consumer", "consumer")
    ]
    try:
        while not stop.is_set():
            for c in committers:
                c.step()
    finally:
        for c in committers:
            c.close()


def _inject(nodes: _Nodes, pg: Any, rng: random.Random, seconds: float, min_faults: int,
            report: Report, log: Callable[[str], None]) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline or sum(report.faults.values()) < min_faults:
        time.sleep(rng.uniform(2.0, 5.0))
        fault = rng.choice(FAULTS)
        n = rng.choice(list(nodes.nodes))
        b = nodes.nodes[n]
        log(f"{time.strftime('%H:%M:%S')} {fault} node {n}" if fault != "postgres" else "postgres")
        report.faults[fault] += 1
        if fault == "kill":
            b.kill()
            time.sleep(rng.uniform(0.5, 3.0))
            nodes.start(n)
        elif fault == "pause":
            os.kill(b.pid, signal.SIGSTOP)
            time.sleep(SESSION_MS / 1000 + rng.uniform(0.5, 2.0))
            os.kill(b.pid, signal.SIGCONT)
        elif fault == "restart":
            b.stop()
            nodes.start(n)
        else:
            pg.kill9()
            time.sleep(rng.uniform(0.5, 2.0))
            pg.start()
        # Let the cluster settle a little before the next fault (one fault at a time).
        time.sleep(rng.uniform(1.0, 3.0))


def _check(nodes: _Nodes, url: str, acked: set[bytes], highest: dict[tuple[str, int], int],
           report: Report) -> None:
    reader = Consumer({"bootstrap.servers": nodes.bootstrap, "group.id": "nemesis-reader",
                       "enable.auto.commit": False, "log_level": 0})
    reader.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    seen: set[bytes] = set()

    def everything() -> bool:
        for msg in reader.consume(1000, 0.5):
            if msg.error() is None:
                seen.add(msg.value())
        return acked <= seen

    try:
        with contextlib.suppress(AssertionError):
            wait_for(everything, 120, 0, "every acknowledged record")
    finally:
        reader.close()
    report.records_read = len(seen)
    missing = acked - seen
    if missing:
        report.anomalies.append(f"{len(missing)} acknowledged records missing, e.g. {sorted(missing)[:5]}")
    for group in ("nemesis-classic", "nemesis-consumer"):
        final = _committed(nodes.bootstrap, group)
        for (g, p), offset in highest.items():
            if g == group and final.get(p, -1) < offset:
                report.anomalies.append(f"{group}-{p}: committed {final.get(p)} < acknowledged {offset}")
    report.batches_checked, epoch_anomalies = _epochs_in_order(url)
    report.anomalies.extend(epoch_anomalies)


def _committed(bootstrap: str, group: str) -> dict[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "log_level": 0})
    try:
        tps = wait_for(
            lambda: c.committed([TopicPartition(TOPIC, p) for p in range(PARTITIONS)], timeout=10),
            60, 0.5, f"the committed offsets of {group}",
        )
        return {tp.partition: tp.offset for tp in tps}  # type: ignore[attr-defined]
    finally:
        c.close()


def _epochs_in_order(url: str) -> tuple[int, list[str]]:
    """Every partition's batches, in offset order, carry non-decreasing leader epochs."""
    anomalies = []
    checked = 0
    with psycopg.connect(url) as conn:
        rows: Iterator[Any] = conn.execute(
            "SELECT p.topic, p.partition, substring(b.data FROM 1 FOR %s) FROM batches b"
            " JOIN partitions p ON p.id = b.partition_id WHERE NOT p.deleted"
            " ORDER BY p.topic, p.partition, b.base_offset",
            (HEADER_SIZE,),
        )
        last: dict[tuple[str, int], tuple[int, int]] = {}
        for topic, partition, head in rows:
            h = parse_header(bytes(head))
            checked += 1
            key = (topic, partition)
            before = last.get(key)
            if before is not None and h.partition_leader_epoch < before[1]:
                anomalies.append(
                    f"{topic}-{partition}: epoch {h.partition_leader_epoch} at offset"
                    f" {h.base_offset} after epoch {before[1]} at offset {before[0]}"
                )
            last[key] = (h.base_offset, h.partition_leader_epoch)
    return checked, anomalies
