"""Share groups (issue 29): records/s delivered and acknowledged by 1, 4 and 16 share consumers
on one 4-partition topic, beside a consumer group of 4 on the same topic in the same run, and
the acknowledgement round trip (``commit_sync`` in explicit mode: answered once durable).

A broker starts on a temp data dir (compiled hot paths if built); ``--records`` records of
``--size`` bytes are produced once. Each share run is a new share group starting at the earliest
offset (group config ``share.auto.offset.reset``), its consumers in threads of this process
(librdkafka does the network work in its own threads), each polling, accepting every record of
a poll and committing synchronously; a run ends when every record was acknowledged once. The
consumer group reads the same records (KIP-848 protocol, auto-commit off). Each run gives its
rate over the whole run (joining included) and from its first record on.

    .venv/bin/python bench/share.py [--records 200000] [--size 100] [--consumers 1,4,16]

Prints one JSON document. Wall-clock figures on a shared machine: orders of magnitude.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.integration.clients import create_topic  # noqa: E402
from tests.integration.harness import BrokerProcess  # noqa: E402
from tests.integration.test_share_groups import earliest  # noqa: E402

TOPIC = "bench"


def produce(bootstrap: str, records: int, size: int) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 20,
                  "batch.num.messages": 2000})
    value = b"x" * size
    for i in range(records):
        while True:
            try:
                p.produce(TOPIC, value=value, partition=i % 4)
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                p.poll(0.1)
    assert p.flush(60) == 0


def share_run(bootstrap: str, group: str, consumers: int, records: int) -> dict[str, Any]:
    from confluent_kafka import AcknowledgeType, ShareConsumer

    lock = threading.Lock()
    seen: set[tuple[int, int]] = set()
    duplicates = 0
    ack_ms: list[float] = []
    done = threading.Event()
    first: list[float] = []

    def work(name: str) -> None:
        nonlocal duplicates
        c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                           "share.acknowledgement.mode": "explicit", "client.id": name})
        c.subscribe([TOPIC])
        while not done.is_set():
            batch = c.poll(0.2)
            got = [m for m in batch if m.error() is None]
            for m in got:
                c.acknowledge(m, AcknowledgeType.ACCEPT)
            if got:
                started = time.perf_counter()
                c.commit_sync()
                rtt = (time.perf_counter() - started) * 1000
                with lock:
                    if not first:
                        first.append(time.perf_counter())
                    ack_ms.append(rtt)
                    for m in got:
                        key = (m.partition(), m.offset())
                        duplicates += key in seen
                        seen.add(key)
                    if len(seen) >= records:
                        done.set()
        c.close()

    earliest_start = time.perf_counter()
    threads = [threading.Thread(target=work, args=(f"c{i}",)) for i in range(consumers)]
    for t in threads:
        t.start()
    finished = done.wait(600)
    elapsed = time.perf_counter() - earliest_start
    done.set()
    for t in threads:
        t.join(60)
    ack_ms.sort()
    return {
        "consumers": consumers,
        "completed": finished,
        "records": len(seen),
        "redelivered": duplicates,
        "seconds": round(elapsed, 2),
        **_rates(len(seen), earliest_start, first, elapsed),
        "acks": len(ack_ms),
        "ack_p50_ms": round(statistics.median(ack_ms), 2) if ack_ms else None,
        "ack_p99_ms": round(ack_ms[int(len(ack_ms) * 0.99)], 2) if ack_ms else None,
    }


def consumer_group_run(bootstrap: str, consumers: int, records: int) -> dict[str, Any]:
    from confluent_kafka import Consumer

    lock = threading.Lock()
    count = 0
    done = threading.Event()
    first: list[float] = []

    def work(name: str) -> None:
        nonlocal count
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": "cg", "group.protocol": "consumer",
                      "auto.offset.reset": "earliest", "enable.auto.commit": False,
                      "client.id": name})
        c.subscribe([TOPIC])
        while not done.is_set():
            msgs = c.consume(1000, 0.2)
            n = sum(1 for m in msgs if m.error() is None)
            with lock:
                if n and not first:
                    first.append(time.perf_counter())
                count += n
                if count >= records:
                    done.set()
        c.close()

    started = time.perf_counter()
    threads = [threading.Thread(target=work, args=(f"g{i}",)) for i in range(consumers)]
    for t in threads:
        t.start()
    finished = done.wait(600)
    elapsed = time.perf_counter() - started
    done.set()
    for t in threads:
        t.join(60)
    return {"consumers": consumers, "completed": finished, "records": count,
            "seconds": round(elapsed, 2), **_rates(count, started, first, elapsed)}


def _rates(records: int, started: float, first: list[float], elapsed: float) -> dict[str, Any]:
    """Records/s over the whole run (joining included) and from the first record on (the
    group formed), and how long the first record took."""
    to_first = (first[0] - started) if first else elapsed
    steady = elapsed - to_first
    return {
        "first_record_s": round(to_first, 2),
        "records_per_s": round(records / elapsed),
        "records_per_s_after_first": round(records / steady) if steady > 0 else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=200000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--consumers", default="1,4,16")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        broker = BrokerProcess(Path(tmp) / "data", {"group.share.heartbeat.interval.ms": 5000}).start()
        try:
            create_topic(broker.bootstrap, TOPIC, 4)
            produce(broker.bootstrap, args.records, args.size)
            runs = []
            for n in (int(x) for x in args.consumers.split(",")):
                group = f"share-{n}"
                earliest(broker, group)
                runs.append(share_run(broker.bootstrap, group, n, args.records))
            group_run = consumer_group_run(broker.bootstrap, 4, args.records)
        finally:
            broker.stop()
    print(json.dumps({"benchmark": "share", "records": args.records, "size": args.size,
                      "share_groups": runs, "consumer_group": group_run}, indent=2))


if __name__ == "__main__":
    main()
