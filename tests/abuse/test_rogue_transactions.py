"""Transactional batches outside a transaction are refused (KIP-890's verification).

Once, one transactional Produce with a made-up producer id (no InitProducerId, no
AddPartitionsToTxn) opened a transaction in its partition that no coordinator knew of: the last
stable offset stayed there through every timeout and a kill -9, ListTransactions did not show it,
``kcoord transactions abort`` could not end it, and read_committed consumers of the partition
saw nothing new. Now a transactional batch is appended only inside the ongoing transaction of
its transactional id that added the partition, with that transaction's producer id and epoch;
otherwise nothing is appended and Produce answers as Kafka's does.
"""

from __future__ import annotations

from typing import Any

from confluent_kafka import Consumer

from kcoord.protocol.apis import ApiKey
from kcoord.protocol.errors import ErrorCode
from kcoord.protocol.record_encoding import build_batch
from tests.integration.clients import create_topic
from tests.integration.harness import BrokerProcess, wait_for
from tests.integration.rawclient import RawClient

from .conftest import assert_survived
from .healthy import HealthyGroup

TOPIC = "rogue"
T0 = 1_700_000_000_000


class Writer:
    """A raw transactional writer of partition 0 of :data:`TOPIC`."""

    def __init__(self, c: RawClient) -> None:
        self.c = c
        self.seq: dict[int, int] = {}

    def produce(self, txn_id: str | None, pid: int, epoch: int, value: bytes, txn: bool = True) -> int:
        seq = self.seq.get(pid, 0)
        batch = build_batch(
            [(None, value, (), T0)], producer_id=pid, producer_epoch=epoch,
            base_sequence=seq if pid >= 0 else -1, is_transactional=txn,
        )
        resp = self.c.request(
            ApiKey.PRODUCE, 9, transactional_id=txn_id, acks=-1, timeout=5000,
            topic_data=[dict(name=TOPIC, partition_data=[dict(index=0, records=batch)])],
        )
        error = int(resp.responses[0].partition_responses[0].error_code)
        if error == 0:
            self.seq[pid] = seq + 1
        return error

    def init(self, txn_id: str) -> tuple[int, int]:
        r = self.c.request_coordinated(ApiKey.INIT_PRODUCER_ID, 4, transactional_id=txn_id,
                                       transaction_timeout=60_000, producer_id=-1, producer_epoch=-1)
        assert r.error_code == 0
        return int(r.producer_id), int(r.producer_epoch)

    def add_partition(self, txn_id: str, pid: int, epoch: int) -> int:
        r = self.c.request(ApiKey.ADD_PARTITIONS_TO_TXN, 3, v3_and_below_transactional_id=txn_id,
                           v3_and_below_producer_id=pid, v3_and_below_producer_epoch=epoch,
                           v3_and_below_topics=[dict(name=TOPIC, partitions=[0])])
        return int(r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code)

    def end(self, txn_id: str, pid: int, epoch: int, commit: bool) -> int:
        r = self.c.request(ApiKey.END_TXN, 3, transactional_id=txn_id, producer_id=pid,
                           producer_epoch=epoch, committed=commit)
        return int(r.error_code)

    def latest(self, isolation: int) -> int:
        """ListOffsets LATEST: the high watermark (0), the last stable offset (1)."""
        r = self.c.request(
            ApiKey.LIST_OFFSETS, 7, replica_id=-1, isolation_level=isolation,
            topics=[dict(name=TOPIC, partitions=[
                dict(partition_index=0, current_leader_epoch=-1, timestamp=-1)])],
        )
        return int(r.topics[0].partitions[0].offset)

    def producers(self) -> set[int]:
        r = self.c.request(ApiKey.DESCRIBE_PRODUCERS, 0,
                           topics=[dict(name=TOPIC, partition_indexes=[0])])
        return {int(p.producer_id) for p in r.topics[0].partitions[0].active_producers}


def _read_committed(bootstrap: str, expect: int) -> list[bytes]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "rogue-reader",
                  "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    got: list[bytes] = []

    def more() -> bool:
        msg: Any = c.poll(0.5)
        if msg is not None and not msg.error():
            got.append(msg.value())
        return len(got) >= expect

    try:
        c.subscribe([TOPIC])
        wait_for(more, 60, interval=0, what=f"{expect} read_committed messages (got {got})")
    finally:
        c.close()
    return got


def test_transactional_batches_outside_their_transaction_are_refused(
    abuse_broker: BrokerProcess, healthy: HealthyGroup
) -> None:
    create_topic(abuse_broker.bootstrap, TOPIC, 1)
    with RawClient(abuse_broker.port) as c:
        w = Writer(c)
        # A made-up producer id, under a transactional id that does not exist or is not its own.
        assert w.produce("nobody", 987654, 0, b"rogue") == ErrorCode.invalid_producer_id_mapping
        pid, epoch = w.init("real")
        assert w.produce("real", 987654, 0, b"rogue") == ErrorCode.invalid_producer_id_mapping
        # The id's own producer, but outside a transaction, then with another epoch.
        assert w.produce("real", pid, epoch, b"early") == ErrorCode.invalid_txn_state
        assert w.add_partition("real", pid, epoch) == 0
        assert w.produce("real", pid, epoch + 1, b"future") == ErrorCode.invalid_producer_epoch
        assert 987654 not in w.producers() and w.latest(0) == w.latest(1) == 0
        # Inside its transaction it goes in, holds the last stable offset until the commit...
        assert w.produce("real", pid, epoch, b"committed") == 0
        assert (w.latest(0), w.latest(1)) == (1, 0)
        assert w.end("real", pid, epoch, commit=True) == 0
        wait_for(lambda: w.latest(1) == w.latest(0) == 2, 15, what="the commit marker")
        # ...and once the transaction is over, the producer is outside one again.
        assert w.produce("real", pid, epoch, b"late") == ErrorCode.invalid_txn_state
        assert w.produce(None, -1, -1, b"plain", txn=False) == 0
        assert w.latest(1) == w.latest(0) == 3
    assert _read_committed(abuse_broker.bootstrap, expect=2) == [b"committed", b"plain"]
    assert_survived(abuse_broker, healthy, "transactional batches outside a transaction")
