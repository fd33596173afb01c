"""An example consumer group for kcoord (the ``consumer`` service of docker-compose.yml).

Creates a topic, produces a message every ``--interval`` seconds in a background thread and
consumes them in a consumer group, committing after each message, so that the group, its
committed offsets and its lag show up in ``kcoord groups describe`` and on ``/metrics``.

    BOOTSTRAP_SERVERS=localhost:9092 python deploy/example_consumer.py [--max-messages N]

Settings come from the environment: BOOTSTRAP_SERVERS (localhost:9092), TOPIC
(example-events), GROUP (example-group), PARTITIONS (3).
"""

from __future__ import annotations

import argparse
import os
import signal
import threading
import time

from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic


def ensure_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    future = admin.create_topics([NewTopic(topic, partitions, 1)])[topic]
    try:
        future.result(timeout=30)
    except Exception as e:
        err = e.args[0] if e.args else None
        if not (isinstance(err, KafkaError) and err.code() == KafkaError.TOPIC_ALREADY_EXISTS):
            raise


def produce_forever(bootstrap: str, topic: str, interval: float, stop: threading.Event) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    n = 0
    while not stop.is_set():
        producer.produce(topic, key=str(n).encode(), value=f"event {n} at {time.time():.3f}".encode())
        producer.poll(0)
        n += 1
        stop.wait(interval)
    producer.flush(10)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--max-messages", type=int, default=0, help="stop after N (0: never)")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between messages")
    args = parser.parse_args()
    bootstrap = os.environ.get("BOOTSTRAP_SERVERS", "localhost:9092")
    topic = os.environ.get("TOPIC", "example-events")
    group = os.environ.get("GROUP", "example-group")
    ensure_topic(bootstrap, topic, int(os.environ.get("PARTITIONS", "3")))

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    producer = threading.Thread(
        target=produce_forever, args=(bootstrap, topic, args.interval, stop), daemon=True
    )
    producer.start()
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "client.id": "example-consumer",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([topic])
    consumed = 0
    try:
        while not stop.is_set():
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                print(f"error: {msg.error()}", flush=True)
                continue
            consumer.commit(message=msg, asynchronous=False)
            consumed += 1
            print(f"{msg.topic()}-{msg.partition()}@{msg.offset()}: {msg.value()!r}", flush=True)
            if args.max_messages and consumed >= args.max_messages:
                break
    except KeyboardInterrupt:
        pass
    finally:
        stop.set()
        consumer.close()
        producer.join(timeout=15)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
