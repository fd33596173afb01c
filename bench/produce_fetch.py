"""Produce and fetch throughput through a real kcoord broker with confluent-kafka.

Starts a broker on a free loopback port with a temporary data dir (fsync on, the default),
produces N messages of 1 KB with acks=all, then consumes them all from the beginning, and prints
JSON: MB/s and messages/s each way, plus the broker's CPU seconds.

    .venv/bin/python bench/produce_fetch.py [--messages N] [--size BYTES] [--partitions P]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._peers import cpu_seconds  # noqa: E402
from tests.integration.clients import create_topic  # noqa: E402
from tests.integration.harness import BrokerProcess  # noqa: E402


def measure(
    bootstrap: str, pid: int, messages: int, size: int, partitions: int, compression: str = "none"
) -> dict[str, dict[str, float | int]]:
    """Produce ``messages`` of ``size`` bytes to topic ``bench`` (which must have
    ``partitions``), then consume them all from the beginning; ``pid``: the broker's."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

    payload = os.urandom(size // 2).hex().encode()[:size]
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "linger.ms": 5,
            "compression.type": compression,
            "queue.buffering.max.messages": 1_000_000,
            "queue.buffering.max.kbytes": 1_048_576,
        }
    )
    failed = 0

    def on_delivery(err: object, _msg: object) -> None:
        nonlocal failed
        if err is not None:
            failed += 1

    cpu0 = cpu_seconds(pid)
    t0 = time.perf_counter()
    for i in range(messages):
        while True:
            try:
                producer.produce("bench", value=payload, partition=i % partitions,
                                 on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
    left = producer.flush(120)
    produce_s = time.perf_counter() - t0
    produce_cpu = cpu_seconds(pid) - cpu0
    producer.close()

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-reader",
            "enable.auto.commit": False,
            "fetch.max.bytes": 52_428_800,
            "max.partition.fetch.bytes": 10_485_760,
        }
    )
    consumer.assign([TopicPartition("bench", p, OFFSET_BEGINNING) for p in range(partitions)])
    got = 0
    cpu0 = cpu_seconds(pid)
    t0 = time.perf_counter()
    deadline = t0 + 300
    while got < messages and time.perf_counter() < deadline:
        for m in consumer.consume(num_messages=10_000, timeout=1.0):
            if not m.error():
                got += 1
    fetch_s = time.perf_counter() - t0
    fetch_cpu = cpu_seconds(pid) - cpu0
    consumer.close()
    mb = messages * size / 1e6
    return {
        "produce": {
            "seconds": round(produce_s, 3),
            "mb_per_s": round(mb / produce_s, 2),
            "messages_per_s": round(messages / produce_s),
            "undelivered": left + failed,
            "broker_cpu_s": round(produce_cpu, 2),
        },
        "fetch": {
            "seconds": round(fetch_s, 3),
            "mb_per_s": round(mb / fetch_s, 2),
            "messages_per_s": round(got / fetch_s),
            "received": got,
            "broker_cpu_s": round(fetch_cpu, 2),
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--compression", default="none")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        broker = BrokerProcess(Path(tmp) / "data").start()
        assert broker.proc is not None
        try:
            create_topic(broker.bootstrap, "bench", args.partitions)
            figures = measure(
                broker.bootstrap, broker.proc.pid, args.messages, args.size, args.partitions,
                args.compression,
            )
        finally:
            broker.stop()
    print(
        json.dumps(
            {
                "benchmark": "produce_fetch",
                "client": "confluent-kafka",
                "messages": args.messages,
                "message_bytes": args.size,
                "partitions": args.partitions,
                "compression": args.compression,
                "acks": "all",
                "fsync": True,
                **figures,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
