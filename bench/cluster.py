"""Cluster mode's figures (issue 28): failover time, and what a second node adds.

Every case runs on a fresh database of one throwaway PostgreSQL (tests/pg_server.py, its
default configuration) and fresh kcoord nodes (``broker.heartbeat.interval.ms`` 500):

* ``failover``: three nodes, a topic of 16 partitions, a classic group of 16 confluent-kafka
  consumers committing every message they read while a producer feeds them; the coordinator's
  node is SIGKILLed, and the figure is the time until every partition has had a commit
  acknowledged again. Issue 28's target: at most ``broker.session.timeout.ms`` + 2 s.
* ``scale``: one node, then two over one database: steady Heartbeats of joined classic members
  (8 connections, 16 in flight each) and durable OffsetCommits of 64 partitions (16 committers,
  one in flight each), each connection at the coordinator of its group. Issue 28's target for
  heartbeats: at least 1.6x with two nodes. On a 2-core machine the load generator and
  PostgreSQL share the cores with the nodes, which bounds what a second node can add.

    .venv/bin/python bench/cluster.py [--seconds 5] [--session-ms 3000] [--out FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent))
sys.path.insert(0, str(BENCH))

import _wire as wire  # noqa: E402
from _peers import cpu_seconds  # noqa: E402
from compare import _commit_frames  # noqa: E402
from confluent_kafka import Consumer, KafkaException, Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from tests.integration.harness import BrokerProcess, wait_for  # noqa: E402
from tests.pg_server import PostgresServer, ensure_installed  # noqa: E402

HEARTBEAT_MS = 500


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def nodes(root: Path, url: str, count: int, session_ms: int) -> list[BrokerProcess]:
    root.mkdir(parents=True, exist_ok=True)
    out = []
    for n in range(1, count + 1):
        out.append(
            BrokerProcess(
                root / f"node{n}",
                {
                    "node.id": n,
                    "storage.url": url,
                    "broker.heartbeat.interval.ms": HEARTBEAT_MS,
                    "broker.session.timeout.ms": session_ms,
                    "group.initial.rebalance.delay.ms": 0,
                    "group.min.session.timeout.ms": 1000,
                },
            ).start(60)
        )
    return out


def settled(brokers: list[BrokerProcess], topic: str, partitions: int) -> bool:
    for b in brokers:
        md = AdminClient({"bootstrap.servers": b.bootstrap}).list_topics(timeout=10)
        t = md.topics.get(topic)
        if len(md.brokers) != len(brokers) or t is None or len(t.partitions) != partitions:
            return False
        if any(p.leader < 0 for p in t.partitions.values()):
            return False
    return True


def coordinator_port(brokers: list[BrokerProcess], group: str) -> int:
    async def ask() -> int:
        conn = await wire.Conn.open(brokers[0].port)
        try:
            r = await conn.request(10, 3, key=group, key_type=0)
        finally:
            conn.close()
        if r.error_code:
            raise RuntimeError(f"FindCoordinator {group}: {r.error_code}")
        return int(r.port)

    return int(wire_run_retry(ask))


def wire_run_retry(job: Any) -> Any:
    deadline = time.monotonic() + 60
    while True:
        try:
            return wire.run(job())
        except RuntimeError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


# failover ----------------------------------------------------------------------------------------
def failover(pg: PostgresServer, root: Path, session_ms: int) -> dict[str, Any]:
    brokers = nodes(root / "failover", pg.database(), 3, session_ms)
    bootstrap = ",".join(b.bootstrap for b in brokers)
    try:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for f in admin.create_topics([NewTopic("work", 16, 1)]).values():
            f.result(30)
        wait_for(lambda: settled(brokers, "work", 16), 60, 0.2, "leaders")
        group = "failover"
        port = coordinator_port(brokers, group)
        victim = next(b for b in brokers if b.port == port)
        last_ack: dict[int, float] = {}
        lock = threading.Lock()
        stop = threading.Event()

        def consume(i: int) -> None:
            c = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                          "enable.auto.commit": False, "auto.offset.reset": "earliest",
                          "session.timeout.ms": 10000, "heartbeat.interval.ms": 500,
                          "log_level": 0})
            c.subscribe(["work"])
            try:
                while not stop.is_set():
                    msg = c.poll(0.1)
                    if msg is None or msg.error() is not None:
                        continue
                    try:
                        c.commit(message=msg, asynchronous=False)
                    except KafkaException:
                        continue
                    with lock:
                        last_ack[msg.partition()] = time.monotonic()
            finally:
                c.close()

        def produce() -> None:
            p = Producer({"bootstrap.servers": bootstrap, "log_level": 0})
            i = 0
            while not stop.is_set():
                try:
                    p.produce("work", b"x", partition=i % 16)
                    i += 1
                except BufferError:
                    pass
                p.poll(0.002)
            p.flush(10)

        threads = [threading.Thread(target=consume, args=(i,)) for i in range(16)]
        threads.append(threading.Thread(target=produce))
        for t in threads:
            t.start()
        try:
            wait_for(lambda: len(last_ack) == 16, 120, 0.2, "every partition committing")
            time.sleep(2)
            victim.kill()
            killed = time.monotonic()

            def all_again() -> bool:
                with lock:
                    return len(last_ack) == 16 and min(last_ack.values()) > killed

            wait_for(all_again, 120, 0.05, "every partition committing again")
            seconds = max(last_ack.values()) - killed
        finally:
            stop.set()
            for t in threads:
                t.join(60)
        result = {
            "consumers": 16,
            "partitions": 16,
            "session_timeout_ms": session_ms,
            "every_partition_committing_again_s": round(seconds, 3),
            "target_s": session_ms / 1000 + 2,
        }
        log(f"failover: {result}")
        return result
    finally:
        for b in brokers:
            b.stop()


# scale -------------------------------------------------------------------------------------------
def scale(pg: PostgresServer, root: Path, count: int, seconds: float) -> dict[str, Any]:
    brokers = nodes(root / f"scale{count}", pg.database(), count, 9000)
    try:
        bootstrap = ",".join(b.bootstrap for b in brokers)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for f in admin.create_topics([NewTopic("bench", 64, 1)]).values():
            f.result(30)
        wait_for(lambda: settled(brokers, "__consumer_offsets", 50), 60, 0.2, "offsets leaders")
        cpu = [lambda b=b: cpu_seconds(b.pid) for b in brokers]

        def by_node(prefix: str, wanted: int) -> dict[int, list[str]]:
            """``wanted`` group ids per node, each coordinated there."""
            groups: dict[int, list[str]] = {b.port: [] for b in brokers}
            i = 0
            while any(len(g) < wanted for g in groups.values()):
                group = f"{prefix}-{i}"
                i += 1
                port = coordinator_port(brokers, group)
                if len(groups[port]) < wanted:
                    groups[port].append(group)
            return groups

        async def members(groups: dict[int, list[str]]) -> dict[int, list[wire.Member]]:
            out: dict[int, list[wire.Member]] = {}
            for port, ids in groups.items():
                out[port] = []
                for g in ids:
                    c = await wire.Conn.open(port)
                    try:
                        out[port].append(await wire.join(c, g, 30000, 30000))
                    finally:
                        c.close()
            return out

        def measure(frames: dict[int, list[list[bytes]]], depth: int, check: Any) -> dict[str, Any]:
            async def all_nodes() -> list[dict[str, Any]]:
                return list(await asyncio.gather(*(
                    wire.pipelined(port, per_conn, depth, seconds, 10**9, check, sample_every=997,
                                   latencies=True)
                    for port, per_conn in frames.items()
                )))

            cpu0 = [f() for f in cpu]
            results = wire.run(all_nodes())
            used = sum(f() - c0 for f, c0 in zip(cpu, cpu0, strict=True))
            requests = sum(r["requests"] for r in results)
            wall = max(r["seconds"] for r in results)
            return {"requests_per_s": round(requests / wall), "broker_cpu_s": round(used, 3),
                    "errors": sum(r["errors"] for r in results),
                    "p99_ms": max((r["latency_ms"] or {}).get("p99", 0.0) for r in results)}

        hb_groups = by_node("hb", 8 // count)
        joined = wire.run(members(hb_groups))
        hb = measure(
            {port: [[m.heartbeat_frame(c) for c in range(1, 65)] for m in ms] for port, ms in joined.items()},
            16, wire.checker(12, wire.VERSIONS[12]),
        )
        commit_groups = by_node("commit", 16 // count)
        commits = measure(
            {port: [_commit_frames(g) for g in ids] for port, ids in commit_groups.items()},
            1, wire.checker(8, wire.VERSIONS[8]),
        )
        commits["offsets_per_s"] = commits.pop("requests_per_s") * 64
        result = {"nodes": count, "heartbeats": hb, "commits": commits}
        log(f"scale: {result}")
        return result
    finally:
        for b in brokers:
            b.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--session-ms", type=int, default=3000)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    bindir = ensure_installed()
    if isinstance(bindir, str):
        log(bindir)
        return 1
    pg = PostgresServer(bindir)
    pg.start()
    try:
        with tempfile.TemporaryDirectory(prefix="kcoord-bench-cluster-") as tmp:
            root = Path(tmp)
            one = scale(pg, root, 1, args.seconds)
            two = scale(pg, root, 2, args.seconds)
            result = {
                "benchmark": "cluster",
                "machine": platform.machine(),
                "python": platform.python_version(),
                "failover": failover(pg, root, args.session_ms),
                "scale": [one, two],
                "heartbeats_two_over_one": round(
                    two["heartbeats"]["requests_per_s"] / one["heartbeats"]["requests_per_s"], 2
                ),
                "commits_two_over_one": round(
                    two["commits"]["offsets_per_s"] / one["commits"]["offsets_per_s"], 2
                ),
            }
    finally:
        pg.stop()
    text = json.dumps(result, indent=2)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
