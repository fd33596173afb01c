"""The broker on the PostgreSQL engine (``storage.url``): a real PostgreSQL, real clients.

Nothing durable stays on the node: a broker killed with -9 and started on an empty data
directory serves the same topics, records and committed offsets. PostgreSQL killed with -9
under offset commits, idempotent produces and transactions loses nothing acknowledged, and the
broker serves again by itself once the database is back.
"""

from __future__ import annotations

import re
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from tests.pg_server import running_server

from .clients import consume_confluent, create_topic, produce_confluent
from .harness import BrokerProcess, wait_for


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


def test_reads_below_the_in_memory_batches_answer_fetch_list_offsets_and_share_fetch(
    tmp_path: Path, postgres_url: str
) -> None:
    """With no batch kept in memory every read and timestamp lookup is a query, which the broker
    makes in a worker thread: consumers, offsets_for_times and a share consumer get it all."""
    from confluent_kafka import Producer

    from .shares import ShareMember
    from .test_share_groups import set_group_config

    broker = BrokerProcess(tmp_path / "data", {
        "storage.url": postgres_url, "group.initial.rebalance.delay.ms": 0,
        "storage.recent.batches.bytes": 0,
    })
    broker.start()
    share = None
    try:
        create_topic(broker.bootstrap, "old", 2)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 0})
        base = 1_700_000_000_000
        for i in range(40):
            producer.produce("old", value=b"v%d" % i, partition=i % 2, timestamp=base + 1000 * i)
            if i % 5 == 4:
                assert producer.flush(30) == 0  # several batches per partition
        got = consume_confluent(broker.bootstrap, "old", 2, 40)
        assert sorted(v for *_, v in got) == sorted(b"v%d" % i for i in range(40))

        reader = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "times"})
        try:
            # record 21 is the 11th of partition 1 (offset 10); 30 s past the last: none (-1)
            asked = [TopicPartition("old", 1, base + 21_000), TopicPartition("old", 0, base + 99_000)]
            found = reader.offsets_for_times(asked, timeout=30)
            assert [(tp.partition, tp.offset) for tp in found] == [(1, 10), (0, -1)]
        finally:
            reader.close()

        set_group_config(broker, "sg", share_auto_offset_reset="earliest")
        share = ShareMember(broker.bootstrap, "sg", ["old"], "s1")
        wait_for(lambda: len(share.received) >= 40, 60, what="the share consumer's 40 records")
        assert sorted(v for *_, v in share.received) == sorted(b"v%d" % i for i in range(40))
        assert not share.errors
    finally:
        if share is not None:
            share.stop()
        broker.stop()


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


class Committer:
    """Commits ever higher offsets of every partition of ``topic`` for ``group``, one
    synchronous commit after another, in a thread; remembers which were acknowledged."""

    def __init__(self, bootstrap: str, group: str, topic: str, partitions: int) -> None:
        self.acked: list[int] = []
        self.attempted: list[int] = []
        self.failures = 0
        self._consumer = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False}
        )
        self._topic, self._partitions = topic, partitions
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        n = 0
        while not self._stop.is_set():
            n += 1
            self.attempted.append(n)
            offsets = [TopicPartition(self._topic, p, n) for p in range(self._partitions)]
            try:
                self._consumer.commit(offsets=offsets, asynchronous=False)
            except KafkaException:
                self.failures += 1
                continue
            self.acked.append(n)

    def stop(self) -> None:
        self._stop.set()
        self.thread.join(60)
        assert not self.thread.is_alive(), "the committer did not stop"
        self._consumer.close()


class Transactor:
    """Commits one transaction after another, each holding one record of ``topic``, in a
    thread; remembers the records of the transactions whose commit was acknowledged."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.committed: list[bytes] = []
        self.fatal: str | None = None
        self.in_doubt = 0
        """Producers replaced after the in-doubt race (see :meth:`_run`)."""
        self._config = {
            "bootstrap.servers": bootstrap, "transactional.id": "kill9", "linger.ms": 2,
            # A record that cannot be written makes its transaction abortable this soon, and
            # the abort writes to __transaction_state during the outage too.
            "message.timeout.ms": 5000,
        }
        self._producer = Producer(self._config)
        self._topic = topic
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        if not self._init():
            return
        n = 0
        while not self._stop.is_set():
            n += 1
            p = self._producer
            try:
                p.begin_transaction()
                p.produce(self._topic, value=b"t%d" % n)
                while True:
                    try:
                        p.commit_transaction(60)
                        break
                    except KafkaException as e:
                        if not e.args[0].retriable():  # a retriable failure: commit again
                            raise
            except KafkaException as e:
                if not e.args[0].txn_requires_abort():
                    self.fatal = str(e)
                    return
                try:
                    p.abort_transaction(60)
                except KafkaException as abort_failed:
                    # The in-doubt race: the database died after the previous commit was
                    # acknowledged (its PrepareCommit durable) but before its markers were
                    # written. Until they are, the coordinator refuses an abort with
                    # INVALID_TXN_STATE, as Kafka's does, and the client makes that fatal: an
                    # application replaces its producer, whose InitProducerId waits for the
                    # markers (CONCURRENT_TRANSACTIONS) once the database is back.
                    if abort_failed.args[0].code() != KafkaError.INVALID_TXN_STATE:
                        self.fatal = str(abort_failed)
                        return
                    self.in_doubt += 1
                    self._producer = Producer(self._config)
                    if not self._init():
                        return
                continue
            self.committed.append(b"t%d" % n)

    def _init(self) -> bool:
        """init_transactions, again while it fails retriably (the outage, markers pending);
        False (``fatal`` said why) if it failed otherwise, or the test is stopping."""
        while not self._stop.is_set():
            try:
                self._producer.init_transactions(30)
                return True
            except KafkaException as e:
                if not e.args[0].retriable():
                    self.fatal = str(e)
                    return False
        return False

    def stop(self) -> None:
        self._stop.set()
        self.thread.join(120)
        assert not self.thread.is_alive(), "the transactions did not stop"
        assert self.fatal is None, self.fatal


def test_acknowledged_writes_survive_a_postgresql_kill9_and_the_node_serves_again_by_itself(
    tmp_path: Path,
) -> None:
    with running_server() as server:
        broker = BrokerProcess(
            tmp_path / "data",
            {"storage.url": server.database(), "group.initial.rebalance.delay.ms": 0},
        ).start()
        try:
            b = broker.bootstrap
            create_topic(b, "orders", 2)
            delivered: list[bytes] = []
            producer = Producer({  # idempotent: its retries are not read twice
                "bootstrap.servers": b, "enable.idempotence": True, "linger.ms": 2,
                "message.timeout.ms": 120_000,
            })

            def on_delivery(err: object, msg: Any) -> None:
                if err is None:
                    delivered.append(msg.value())

            committer = Committer(b, "billing", "orders", 2)
            transactor = Transactor(b, "orders")
            sent = 0

            def produce_some(count: int) -> None:
                nonlocal sent
                for _ in range(count):
                    producer.produce("orders", value=b"v%d" % sent, on_delivery=on_delivery)
                    sent += 1
                producer.poll(0)

            def log_says(pattern: str) -> bool:
                produce_some(5)  # records written meanwhile, in and after the outage
                return re.search(pattern, broker.log_path.read_text(errors="replace")) is not None

            wait_for(lambda: len(committer.acked) >= 20 and len(transactor.committed) >= 5, 60,
                     what="commits and transactions before the kill")
            server.kill9()
            # The transaction coordinator meets the outage writing __transaction_state (an
            # abort), or, in the in-doubt race (Transactor._run), writing the markers of a
            # commit it acknowledged: then nothing writes __transaction_state until they are.
            txn_offline = r"__transaction_state-\d+ is offline"
            for went_offline in (r"__consumer_offsets-\d+ is offline",
                                 rf"{txn_offline}|marker for producer \d+ in .* not durable"):
                wait_for(lambda p=went_offline: log_says(p), 60, what=went_offline)
            txn_log_offline = log_says(txn_offline)
            acked_before, txns_before = len(committer.acked), len(transactor.committed)
            server.start()  # the same files and port
            came_back = [r"__consumer_offsets-\d+ is online again"]
            if txn_log_offline:
                came_back.append(r"__transaction_state-\d+ is online again")
            for pattern in came_back:
                wait_for(lambda p=pattern: log_says(p), 60, what=pattern)
            wait_for(lambda: len(committer.acked) >= acked_before + 20
                     and len(transactor.committed) >= txns_before + 5, 60,
                     what="commits and transactions acknowledged again, the broker never restarted")
            committer.stop()
            transactor.stop()
            assert producer.flush(120) == 0
            assert broker.alive

            committed = _committed(b, "billing", "orders", 2)
            last = committer.acked[-1]
            for offset in committed:  # the last acknowledged commit, or a later attempt
                assert offset >= last and offset in committer.attempted
            expected = set(delivered) | set(transactor.committed)
            got = {v for *_, v in consume_confluent(b, "orders", 2, len(expected), timeout=60)}
            assert expected <= got  # read_committed: the committed transactions' records too
            producer.close()
        finally:
            broker.stop()
