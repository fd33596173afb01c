"""The data plane of transactions against a real broker process (issue 16).

* An idempotent confluent-kafka producer keeps producing while the broker is SIGKILLed and
  restarted twice: every message lands exactly once, in order (the producer state, rebuilt at
  start-up, answers the retried batches with their first offsets).
* Transactions written with raw Produce requests and ended with WriteTxnMarkers: a
  read_committed confluent-kafka consumer sees only committed and plain records, in order, and
  nothing past the last stable offset while a transaction is open; ListOffsets
  read_committed answers the LSO; all of it holds after a SIGKILL and restart, where an open
  transaction still holds the LSO. A marker with a newer epoch fences the older producer
  (INVALID_PRODUCER_EPOCH), DescribeProducers shows the producers, and a transactional batch
  without a transactional id is refused.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from kcoord.protocol.apis import ApiKey
from kcoord.protocol.batch import iter_headers
from kcoord.protocol.errors import ErrorCode
from kcoord.protocol.record_encoding import build_batch

from .clients import create_topic
from .harness import BrokerProcess, wait_for
from .rawclient import RawClient

T0 = 1_700_000_000_000


def _consume(
    bootstrap: str, topic: str, partitions: int, isolation: str, *, expect: int, timeout: float
) -> list[tuple[int, int, bytes | None]]:
    """(partition, offset, value) of what a consumer with ``isolation.level`` reads from the
    start: until ``expect`` messages arrived, or, when more than ``expect`` may never come,
    until ``timeout``."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "txn-reader",
            "enable.auto.commit": False,
            "isolation.level": isolation,
        }
    )
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        out: list[tuple[int, int, bytes | None]] = []
        deadline = time.monotonic() + timeout
        while len(out) < expect and time.monotonic() < deadline:
            for m in c.consume(num_messages=1000, timeout=0.3):
                if m.error():
                    raise AssertionError(f"consume error: {m.error()}")
                out.append((m.partition(), m.offset(), m.value()))
        return out
    finally:
        c.close()


# -- an idempotent producer across SIGKILLs -----------------------------------------------------


def test_idempotent_producer_across_broker_sigkills(broker: BrokerProcess) -> None:
    from confluent_kafka import Producer

    topic, partitions, n = "idem", 3, 30_000
    create_topic(broker.bootstrap, topic, partitions)
    p = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "enable.idempotence": True,
            "linger.ms": 2,
            "batch.num.messages": 200,
            "message.timeout.ms": 120_000,
            "reconnect.backoff.max.ms": 200,
        }
    )
    delivered = 0
    errors: list[str] = []
    lock = threading.Lock()

    def on_delivery(err: Any, _msg: Any) -> None:
        nonlocal delivered
        with lock:
            if err is not None:
                errors.append(str(err))
            delivered += 1

    def produce_all() -> None:
        for i in range(n):
            while True:
                try:
                    p.produce(topic, value=b"%d" % i, partition=i % partitions,
                              on_delivery=on_delivery)
                    break
                except BufferError:
                    p.poll(0.05)
            p.poll(0)
            if i % 500 == 0:
                time.sleep(0.01)  # keep it going while the broker is killed
        p.flush(120)

    producer = threading.Thread(target=produce_all)
    producer.start()
    try:
        for share in (n // 3, 2 * n // 3):
            wait_for(lambda s=share: delivered >= s, 120, what=f"{share} delivered")
            broker.kill()
            time.sleep(0.3)
            broker.restart()
    finally:
        producer.join(180)
    assert not producer.is_alive()
    assert errors == [] and delivered == n
    got = _consume(broker.bootstrap, topic, partitions, "read_uncommitted", expect=n + 1,
                   timeout=20)
    values = [int(v or b"-1") for _, _, v in got]
    assert len(values) == n, f"{len(values) - len(set(values))} duplicates"
    assert sorted(values) == list(range(n))  # no gap, no duplicate
    for part in range(partitions):
        mine = [int(v or b"-1") for q, _, v in got if q == part]
        assert mine == sorted(mine) and mine == list(range(part, n, partitions))


# -- transactions with raw Produce and WriteTxnMarkers -------------------------------------------


OWN = "the producer id's own"


class Txns:
    """A raw client writing transactional batches for several producer ids, each in a
    transaction of its own transactional id (:meth:`begin`), which it ends with raw
    WriteTxnMarkers (:meth:`end`), as a transaction coordinator would."""

    def __init__(self, port: int, topic: str) -> None:
        self.c = RawClient(port)
        self.topic = topic
        self.seq: dict[int, int] = {}
        self.ids: dict[int, str] = {}

    def close(self) -> None:
        self.c.close()

    def begin(self, txn_id: str) -> int:
        """A producer id of ``txn_id`` (epoch 0) in a transaction holding the partition: only
        there may its transactional batches go (KIP-890)."""
        r = self.c.request_coordinated(ApiKey.INIT_PRODUCER_ID, 4, transactional_id=txn_id,
                                       transaction_timeout=900_000, producer_id=-1, producer_epoch=-1)
        assert (r.error_code, r.producer_epoch) == (0, 0)
        pid = int(r.producer_id)
        r = self.c.request(ApiKey.ADD_PARTITIONS_TO_TXN, 3, v3_and_below_transactional_id=txn_id,
                           v3_and_below_producer_id=pid, v3_and_below_producer_epoch=0,
                           v3_and_below_topics=[dict(name=self.topic, partitions=[0])])
        assert r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == 0
        self.ids[pid] = txn_id
        return pid

    def produce(
        self, pid: int, values: list[bytes], *, epoch: int = 0, txn: bool = True,
        txn_id: str | None = OWN,
    ) -> tuple[int, int]:
        if txn_id == OWN:
            txn_id = self.ids[pid]
        seq = self.seq.get(pid, 0)
        batch = build_batch(
            [(None, v, (), T0) for v in values],
            producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=txn,
        )
        resp = self.c.request(
            ApiKey.PRODUCE, 9, transactional_id=txn_id if txn else None, acks=-1, timeout=5000,
            topic_data=[dict(name=self.topic, partition_data=[dict(index=0, records=batch)])],
        )
        part = resp.responses[0].partition_responses[0]
        if part.error_code == 0:
            self.seq[pid] = seq + len(values)
        return int(part.error_code), int(part.base_offset)

    def plain(self, value: bytes) -> int:
        resp = self.c.request(
            ApiKey.PRODUCE, 9, transactional_id=None, acks=-1, timeout=5000,
            topic_data=[dict(name=self.topic, partition_data=[
                dict(index=0, records=build_batch([(None, value, (), T0)]))])],
        )
        part = resp.responses[0].partition_responses[0]
        assert part.error_code == 0
        return int(part.base_offset)

    def end(self, pid: int, commit: bool, *, epoch: int = 0, coordinator_epoch: int = 0) -> int:
        resp = self.c.request(
            ApiKey.WRITE_TXN_MARKERS, 1,
            markers=[dict(producer_id=pid, producer_epoch=epoch, transaction_result=commit,
                          topics=[dict(name=self.topic, partition_indexes=[0])],
                          coordinator_epoch=coordinator_epoch)],
        )
        return int(resp.markers[0].topics[0].partitions[0].error_code)

    def latest(self, isolation: int | None) -> int:
        """ListOffsets LATEST, v7 with an isolation level, or v1 (None: it has none)."""
        partitions = [dict(partition_index=0, current_leader_epoch=-1, timestamp=-1)]
        if isolation is None:
            resp = self.c.request(ApiKey.LIST_OFFSETS, 1, replica_id=-1,
                                  topics=[dict(name=self.topic, partitions=partitions)])
        else:
            resp = self.c.request(ApiKey.LIST_OFFSETS, 7, replica_id=-1, isolation_level=isolation,
                                  topics=[dict(name=self.topic, partitions=partitions)])
        return int(resp.topics[0].partitions[0].offset)

    def fetch(self, isolation: int, offset: int = 0) -> tuple[int, list[tuple[int, int]], list[int]]:
        """(last stable offset, aborted transactions, base offsets of the batches returned)."""
        resp = self.c.request(
            ApiKey.FETCH, 12, replica_id=-1, max_wait=0, min_bytes=0, max_bytes=1 << 20,
            isolation_level=isolation, session_id=0, session_epoch=-1, rack_id="",
            forgotten_topics_data=[],
            topics=[dict(topic=self.topic, partitions=[dict(
                partition=0, current_leader_epoch=-1, fetch_offset=offset, last_fetched_epoch=-1,
                log_start_offset=-1, partition_max_bytes=1 << 20)])],
        )
        part = resp.responses[0].partitions[0]
        assert part.error_code == 0
        aborted = [(int(a.producer_id), int(a.first_offset))
                   for a in (part.aborted_transactions or ())]
        data = bytes(part.records or b"")
        return int(part.last_stable_offset), aborted, [
            h.base_offset for _, h in iter_headers(data, verify_crc=True)]

    def producers(self) -> dict[int, Any]:
        resp = self.c.request(
            ApiKey.DESCRIBE_PRODUCERS, 0,
            topics=[dict(name=self.topic, partition_indexes=[0])],
        )
        part = resp.topics[0].partitions[0]
        assert part.error_code == 0
        return {int(p.producer_id): p for p in part.active_producers}


def _committed(broker: BrokerProcess, expect: int, timeout: float = 15) -> list[bytes | None]:
    return [v for _, _, v in _consume(broker.bootstrap, "txn", 1, "read_committed",
                                      expect=expect, timeout=timeout)]


def test_read_committed_over_committed_and_aborted_transactions(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "txn", 1)
    w = Txns(broker.port, "txn")
    try:
        a, b, c = w.begin("ta"), w.begin("tb"), w.begin("tc")
        assert w.plain(b"p0") == 0
        assert w.produce(a, [b"a0", b"a1"]) == (0, 1)
        assert w.produce(b, [b"b0"]) == (0, 3)
        w.plain(b"p1")
        w.produce(a, [b"a2"])
        w.produce(b, [b"b1", b"b2"])
        assert w.latest(0) == w.latest(None) == 8  # v1 has no isolation level: uncommitted
        assert w.latest(1) == 1  # the last stable offset: a0, the open transaction's first
        assert _committed(broker, expect=2, timeout=3) == [b"p0"]  # nothing past the LSO
        assert w.fetch(1) == (1, [], [0])
        assert w.fetch(0) == (1, [], [0, 1, 3, 4, 5, 6])  # read_uncommitted: everything

        assert w.end(a, True) == 0
        assert w.latest(1) == 3  # b0 now holds it
        assert w.end(b, False) == 0
        assert w.latest(1) == w.latest(0) == 10
        lso, aborted, bases = w.fetch(1)
        assert (lso, aborted) == (10, [(b, 3)])  # b0..b2 are dropped by the consumer
        assert bases == [0, 1, 3, 4, 5, 6, 8, 9]  # the markers at 8 and 9 too
        # from the abort's marker on: it is still listed (its marker is in range), as in Kafka
        assert w.fetch(1, offset=9) == (10, [(b, 3)], [9])
        visible = [b"p0", b"a0", b"a1", b"p1", b"a2"]
        assert _committed(broker, expect=len(visible) + 1, timeout=3) == visible
        everything = _consume(broker.bootstrap, "txn", 1, "read_uncommitted", expect=8,
                              timeout=15)
        assert len(everything) == 8

        assert w.produce(c, [b"c0"]) == (0, 10)  # open when the broker dies
        producers = w.producers()
        assert producers[b].current_txn_start_offset == -1
        assert producers[c].current_txn_start_offset == 10
        assert producers[a].last_sequence == 2
    finally:
        w.close()

    broker.kill()
    broker.restart()
    w = Txns(broker.port, "txn")
    try:
        w.seq, w.ids = {c: 1}, {c: "tc"}
        assert w.latest(1) == 10  # the open transaction still holds the LSO
        assert w.fetch(1)[:2] == (10, [(b, 3)])  # the .txnindex rebuilt
        assert _committed(broker, expect=len(visible) + 1, timeout=3) == visible
        assert w.producers()[c].current_txn_start_offset == 10
        # the sequence carried across the restart: a gap or a retry is recognised
        assert w.produce(c, [b"c9"], txn=True)[0] == 0
        w.seq[c] = 5
        assert w.produce(c, [b"c?"])[0] == ErrorCode.out_of_order_sequence_number
        w.seq[c] = 2
        # a newer epoch's abort marker fences the zombie
        assert w.end(c, False, epoch=1) == 0
        assert w.produce(c, [b"zombie"], epoch=0)[0] == ErrorCode.invalid_producer_epoch
        assert w.end(c, True, epoch=0) == ErrorCode.invalid_producer_epoch
        assert w.latest(1) == w.latest(0)
        assert _committed(broker, expect=len(visible) + 1, timeout=3) == visible
        # a transactional batch needs a transactional id
        err, _ = w.produce(c, [b"x"], txn_id=None)
        assert err == ErrorCode.transactional_id_authorization_failed
    finally:
        w.close()
