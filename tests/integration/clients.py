"""Produce and consume helpers for each real client library, with one calling convention.

Each ``produce_*`` sends (partition, key, value) triples with acks=all and fails the test on any
delivery error; each ``consume_*`` reads partitions from offset 0 until ``count`` messages
arrived (bounded by a deadline) and returns (partition, offset, key, value) tuples.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

Message = tuple[int, bytes, bytes]
Consumed = tuple[int, int, bytes | None, bytes | None]


KAFKA_PYTHON_POLL_MS = 1000
"""What kafka-python members pass to ``poll()`` in the tests. kafka-python 3.0.12 loses a rejoin
that its leader starts from its metadata check (the topic's partitions learned after the first
assignment) when the JoinGroup/SyncGroup round trip completes after ``poll()`` has returned:
the next poll no longer sees a rejoin to finish, so the new assignment is never applied and
heartbeats stay off until the session times out (a client race, seen under CPU load). A poll
longer than ``fetch.max.wait.ms`` (500) leaves a rejoin started after a fetch time to finish
within the same call."""


def create_topic(bootstrap: str, topic: str, partitions: int, timeout: float = 10) -> None:
    """Create ``topic``; ``timeout``: the broker's time for it (thousands of partitions take a
    while on a loaded machine)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [NewTopic(topic, partitions, 1)], operation_timeout=timeout,
        request_timeout=max(timeout, 60),
    )
    futures[topic].result(timeout=timeout + 20)


# confluent-kafka ---------------------------------------------------------------------------------
def produce_confluent(bootstrap: str, topic: str, messages: Sequence[Message], compression: str) -> None:
    from confluent_kafka import Producer

    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "compression.type": compression,
            "linger.ms": 5,
        }
    )
    errors: list[object] = []

    def on_delivery(err: object, _msg: object) -> None:
        if err is not None:
            errors.append(err)

    for part, key, value in messages:
        p.produce(topic, key=key, value=value, partition=part, on_delivery=on_delivery)
        p.poll(0)
    remaining = p.flush(30)
    assert remaining == 0, f"{remaining} messages not delivered"
    assert not errors, errors


def consume_confluent(
    bootstrap: str, topic: str, partitions: int, count: int, timeout: float = 30.0
) -> list[Consumed]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "kcoord-test-reader",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        out: list[Consumed] = []
        deadline = time.monotonic() + timeout
        while len(out) < count and time.monotonic() < deadline:
            for m in c.consume(num_messages=500, timeout=0.5):
                if m.error():
                    raise AssertionError(f"consume error: {m.error()}")
                out.append((m.partition(), m.offset(), m.key(), m.value()))
        return out
    finally:
        c.close()


# kafka-python --------------------------------------------------------------------------------------
def produce_kafka_python(
    bootstrap: str, topic: str, messages: Sequence[Message], compression: str
) -> None:
    from kafka import KafkaProducer

    p = KafkaProducer(
        bootstrap_servers=bootstrap,
        acks="all",
        compression_type=None if compression == "none" else compression,
        linger_ms=5,
    )
    try:
        futures = [p.send(topic, key=k, value=v, partition=part) for part, k, v in messages]
        p.flush(timeout=30)
        for f in futures:
            f.get(timeout=30)
    finally:
        p.close(timeout=10)


def consume_kafka_python(
    bootstrap: str, topic: str, partitions: int, count: int, timeout: float = 30.0
) -> list[Consumed]:
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        c.assign(tps)
        c.seek_to_beginning(*tps)
        out: list[Consumed] = []
        deadline = time.monotonic() + timeout
        while len(out) < count and time.monotonic() < deadline:
            for _tp, records in c.poll(timeout_ms=500).items():
                for r in records:
                    out.append((r.partition, r.offset, r.key, r.value))
        return out
    finally:
        c.close()


# aiokafka ------------------------------------------------------------------------------------------
def produce_aiokafka(bootstrap: str, topic: str, messages: Sequence[Message], compression: str) -> None:
    async def run() -> None:
        from aiokafka import AIOKafkaProducer

        p = AIOKafkaProducer(
            bootstrap_servers=bootstrap,
            acks="all",
            compression_type=None if compression == "none" else compression,
            linger_ms=5,
        )
        await p.start()
        try:
            futures = [await p.send(topic, key=k, value=v, partition=part) for part, k, v in messages]
            await p.flush()
            for f in futures:
                await asyncio.wait_for(f, 30)
        finally:
            await p.stop()

    asyncio.run(run())


def consume_aiokafka(
    bootstrap: str, topic: str, partitions: int, count: int, timeout: float = 30.0
) -> list[Consumed]:
    async def run() -> list[Consumed]:
        from aiokafka import AIOKafkaConsumer, TopicPartition

        c = AIOKafkaConsumer(
            bootstrap_servers=bootstrap,
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
        )
        await c.start()
        try:
            tps = [TopicPartition(topic, p) for p in range(partitions)]
            c.assign(tps)
            await c.seek_to_beginning(*tps)
            out: list[Consumed] = []
            deadline = time.monotonic() + timeout
            while len(out) < count and time.monotonic() < deadline:
                batch = await c.getmany(timeout_ms=500)
                for _tp, records in batch.items():
                    for r in records:
                        out.append((r.partition, r.offset, r.key, r.value))
            return out
        finally:
            await c.stop()

    return asyncio.run(run())


PRODUCERS = {
    "confluent": produce_confluent,
    "kafka-python": produce_kafka_python,
    "aiokafka": produce_aiokafka,
}
CONSUMERS = {
    "confluent": consume_confluent,
    "kafka-python": consume_kafka_python,
    "aiokafka": consume_aiokafka,
}
