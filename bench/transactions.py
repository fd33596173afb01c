"""Transactions against a real kcoord broker (fsync on), confluent-kafka's transactional producer.

1. ``produce``: one transaction after the other (begin, one 100-byte message, commit) for a
   fixed time: transactions/s, p50/p99 of commit_transaction, broker CPU per transaction.
2. ``offsets``: the transactional commit of 64 consumer offsets (begin, one message, then
   timed: send_offsets_to_transaction of 64 partitions and commit_transaction, that is
   AddOffsetsToTxn, TxnOffsetCommit, EndTxn and the markers) beside a plain synchronous commit
   of the same 64 offsets by a consumer (one OffsetCommit): p50/p99 of each and the added
   latency at the median.

    .venv/bin/python bench/transactions.py [--seconds 5]
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._peers import cpu_seconds  # noqa: E402
from tests.integration.clients import create_topic  # noqa: E402
from tests.integration.harness import BrokerProcess  # noqa: E402

OFFSETS = 64


def _ms(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "p50_ms": round(statistics.median(ordered) * 1000, 3),
        "p99_ms": round(ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] * 1000, 3),
    }


def _transactions(b: BrokerProcess, seconds: float, offsets: bool) -> dict[str, Any]:
    from confluent_kafka import Consumer, Producer, TopicPartition

    p = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": f"bench-{offsets}",
                  "linger.ms": 0})
    p.init_transactions(30)
    consumer = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "bench-txn",
                         "enable.auto.commit": False})
    metadata = consumer.consumer_group_metadata()
    commits: list[float] = []
    value = b"x" * 100
    n = 0
    cpu0 = cpu_seconds(b.pid)
    started = time.perf_counter()
    until = started + seconds
    try:
        while time.perf_counter() < until:
            n += 1
            p.begin_transaction()
            p.produce("bench-out", value=value, partition=0)
            t = time.perf_counter()
            if offsets:
                p.send_offsets_to_transaction(
                    [TopicPartition("bench-in", i, n) for i in range(OFFSETS)], metadata, 30
                )
            p.commit_transaction(30)
            commits.append(time.perf_counter() - t)
    finally:
        consumer.close()
    elapsed = time.perf_counter() - started
    cpu = cpu_seconds(b.pid) - cpu0
    return {
        "transactions": n,
        "transactions_per_s": round(n / elapsed, 1),
        "commit": _ms(commits),
        "broker_cpu_ms_per_transaction": round(cpu / n * 1000, 3),
    }


def _plain_commits(b: BrokerProcess, seconds: float) -> dict[str, Any]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "bench-plain",
                  "enable.auto.commit": False})
    took: list[float] = []
    until = time.perf_counter() + seconds
    n = 0
    try:
        while time.perf_counter() < until:
            n += 1
            t = time.perf_counter()
            c.commit(offsets=[TopicPartition("bench-in", i, n) for i in range(OFFSETS)],
                     asynchronous=False)
            took.append(time.perf_counter() - t)
    finally:
        c.close()
    return {"commits": n, "commit": _ms(took)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=5.0)
    args = ap.parse_args()
    out: dict[str, Any] = {
        "benchmark": "transactions",
        "date": datetime.date.today().isoformat(),
        "seconds": args.seconds,
    }
    with tempfile.TemporaryDirectory() as tmp:
        b = BrokerProcess(Path(tmp) / "data", {"group.initial.rebalance.delay.ms": 0}).start()
        try:
            create_topic(b.bootstrap, "bench-out", 1)
            create_topic(b.bootstrap, "bench-in", OFFSETS)
            out["produce"] = _transactions(b, args.seconds, offsets=False)
            txn = _transactions(b, args.seconds, offsets=True)
            plain = _plain_commits(b, args.seconds)
            out["offsets"] = {
                "transactional": txn,
                "plain_offset_commit": plain,
                "added_p50_ms": round(txn["commit"]["p50_ms"] - plain["commit"]["p50_ms"], 3),
            }
        finally:
            b.stop()
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
