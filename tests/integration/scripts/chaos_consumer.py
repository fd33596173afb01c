"""A consumer-group member for the chaos test, run as its own process.

Consumes a topic, appends "partition offset" for every processed message to its output file
(flushed before the offsets are committed: processing happens-before the commit), and commits
synchronously after every poll that processed something. SIGTERM closes it cleanly; SIGKILL is
the crash case.

    python chaos_consumer.py BOOTSTRAP GROUP TOPIC OUTFILE ASSIGNOR
"""

from __future__ import annotations

import contextlib
import signal
import sys

from confluent_kafka import Consumer, KafkaException


def main() -> None:
    bootstrap, group, topic, outfile, assignor = sys.argv[1:6]
    stopping = False

    def on_term(_signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_term)
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "partition.assignment.strategy": assignor,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 300,
            "max.poll.interval.ms": 30000,
        }
    )
    consumer.subscribe([topic])
    with open(outfile, "a") as out:
        print("started", flush=True)
        while not stopping:
            messages = consumer.consume(num_messages=200, timeout=0.2)
            processed = False
            for m in messages:
                if m.error():
                    continue
                out.write(f"{m.partition()} {m.offset()}\n")
                processed = True
            if processed:
                out.flush()
                # A rebalance or coordinator move may refuse it: the next owner re-reads from
                # the last commit.
                with contextlib.suppress(KafkaException):
                    consumer.commit(asynchronous=False)
        with contextlib.suppress(KafkaException):
            consumer.commit(asynchronous=False)
        consumer.close()


if __name__ == "__main__":
    main()
