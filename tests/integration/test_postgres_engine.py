"""The broker on the PostgreSQL engine (``storage.url``): a real PostgreSQL, real clients.

Nothing durable stays on the node: a broker killed with -9 and started on an empty data
directory serves the same topics, records and committed offsets.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from .clients import consume_confluent, create_topic, produce_confluent
from .harness import BrokerProcess


@pytest.fixture
def pg_broker(tmp_path: Path, postgres_url: str) -> Iterator[BrokerProcess]:
    broker = BrokerProcess(
        tmp_path / "data",
        {"storage.url": postgres_url, "group.initial.rebalance.delay.ms": 0},
    )
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


def _committed(bootstrap: str, group: str, topic: str, partitions: int) -> list[int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        tps = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=30)
        return [tp.offset for tp in tps]
    finally:
        c.close()


def _commit(bootstrap: str, group: str, topic: str, offsets: list[int]) -> None:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        c.commit(
            offsets=[TopicPartition(topic, p, o) for p, o in enumerate(offsets)], asynchronous=False
        )
    finally:
        c.close()


def test_records_and_offsets_outlive_the_node_and_its_disk(pg_broker: BrokerProcess) -> None:
    create_topic(pg_broker.bootstrap, "orders", 3)
    messages = [(i % 3, f"k{i}".encode(), f"v{i}".encode()) for i in range(60)]
    produce_confluent(pg_broker.bootstrap, "orders", messages, "lz4")
    _commit(pg_broker.bootstrap, "billing", "orders", [5, 7, 20])

    pg_broker.kill()
    shutil.rmtree(pg_broker.data_dir)  # a fresh node: an empty disk
    pg_broker.restart()

    assert not any(pg_broker.data_dir.glob("orders-*")), "partitions belong in the database"
    got = consume_confluent(pg_broker.bootstrap, "orders", 3, 60)
    assert sorted(v for *_, v in got) == sorted(v for *_, v in messages)
    assert _committed(pg_broker.bootstrap, "billing", "orders", 3) == [5, 7, 20]
    produce_confluent(pg_broker.bootstrap, "orders", [(0, b"k", b"after")], "none")
    got = consume_confluent(pg_broker.bootstrap, "orders", 1, 21)
    assert got[-1][1:] == (20, b"k", b"after")
