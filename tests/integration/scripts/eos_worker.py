"""One worker of the exactly-once test: a consume-transform-produce loop in transactions.

Reads --input with a read_committed consumer in group --group, writes each record's value,
upper-cased, to the same partition of --output, and commits the consumed offsets inside the
same transaction (``send_offsets_to_transaction``), one transaction per batch. An abortable
error aborts the transaction and rewinds the consumer to the committed offsets; a fatal one
(this transactional id was fenced) exits with status 3. Prints one JSON line per committed
transaction ({"committed": n}) and {"event": "started"} once. SIGTERM stops it cleanly.

    python eos_worker.py --bootstrap B --group G --input IN --output OUT --transactional-id T
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from collections.abc import Callable

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

stopping = False


def _on_term(_signum: int, _frame: object) -> None:
    global stopping
    stopping = True


def _say(**fields: object) -> None:
    print(json.dumps(fields), flush=True)


def rewind(consumer: Consumer) -> None:
    """Back to the committed offsets (what the aborted transaction consumed is read again)."""
    assignment = consumer.assignment()
    if not assignment:
        return
    for tp in consumer.committed(assignment, timeout=30):
        offset = tp.offset if tp.offset >= 0 else 0
        consumer.seek(TopicPartition(tp.topic, tp.partition, offset))


def settle(step: Callable[[], object]) -> bool:
    """Run ``step`` until it succeeds (retrying what a broker restart makes fail); False if
    a fatal error ends this producer."""
    while True:
        try:
            step()
            return True
        except KafkaException as e:
            if e.args[0].fatal():
                print(f"fatal: {e.args[0]}", file=sys.stderr, flush=True)
                return False
            print(f"retrying: {e.args[0]}", file=sys.stderr, flush=True)


def main() -> int:
    parser = argparse.ArgumentParser()
    for name in ("--bootstrap", "--group", "--input", "--output", "--transactional-id"):
        parser.add_argument(name, required=True)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--pause", type=float, default=0.0, help="seconds between transactions")
    a = parser.parse_args()
    signal.signal(signal.SIGTERM, _on_term)
    consumer = Consumer({
        "bootstrap.servers": a.bootstrap,
        "group.id": a.group,
        "isolation.level": "read_committed",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 500,
        "metadata.recovery.strategy": "none",  # see the producer's
    })
    producer = Producer({
        "bootstrap.servers": a.bootstrap,
        "transactional.id": a.transactional_id,
        "transaction.timeout.ms": 20000,
        "linger.ms": 5,
        # librdkafka 2.16 re-bootstraps when its only broker is down, decommissions the broker
        # it knew, and send_offsets_to_transaction then waits forever for that broker as group
        # coordinator (librdkafka#5511, open): keep the broker instead.
        "metadata.recovery.strategy": "none",
    })
    producer.init_transactions(60)
    consumer.subscribe([a.input])
    _say(event="started")
    while not stopping:
        messages = [m for m in consumer.consume(num_messages=a.batch, timeout=0.5) if not m.error()]
        if not messages:
            continue
        try:
            producer.begin_transaction()
            for m in messages:
                producer.produce(a.output, key=m.key(), value=(m.value() or b"").upper(),
                                 partition=m.partition())
            producer.send_offsets_to_transaction(
                consumer.position(consumer.assignment()), consumer.consumer_group_metadata(), 60
            )
            while True:
                try:
                    producer.commit_transaction(60)
                    break
                except KafkaException as e:
                    if not e.args[0].retriable():
                        raise
            _say(committed=len(messages))
            if a.pause:
                time.sleep(a.pause)
        except KafkaException as e:
            error = e.args[0]
            if error.fatal():
                print(f"fatal: {error}", file=sys.stderr, flush=True)
                return 3
            print(f"aborting: {error}", file=sys.stderr, flush=True)
            if not settle(lambda: producer.abort_transaction(60)) or not settle(lambda: rewind(consumer)):
                return 3
    consumer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
