"""Transactions against a real broker (issue 16, the coordinator's part): confluent-kafka's
transactional producer commits and aborts; the transaction's state is what
``kcoord transactions list|describe`` show, and its markers are in the partition logs; a zombie
producer (older epoch) is fenced on AddPartitionsToTxn and EndTxn; a broker SIGKILLed in the
middle of a transaction comes back with it Ongoing, which is then aborted (by its timeout, or by
a new producer with the same transactional id), and one SIGKILLed right after a commit was
answered completes it after the restart; ``kcoord transactions abort`` aborts a hanging
transaction; kafka-python's transactional producer works; ACLs refuse the transactional id.
(read_committed reading is tested in test_txn_data.py and test_exactly_once.py.)
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from kcoord.admin.transactions import parse_describe_transactions
from kcoord.protocol.apis import ApiKey
from kcoord.protocol.codec import encode_body, request_type
from kcoord.protocol.errors import ErrorCode
from kcoord.protocol.responses import build

from .clients import create_topic
from .harness import BrokerProcess, free_port, wait_for
from .rawclient import RawClient
from .test_admin_cli import kcoord

SETTINGS = {
    "transaction.state.log.num.partitions": 5,
    "offsets.topic.num.partitions": 5,
    "group.initial.rebalance.delay.ms": 0,
}


def producer(b: BrokerProcess, txn_id: str, **extra: Any) -> Producer:
    return Producer({"bootstrap.servers": b.bootstrap, "transactional.id": txn_id, "linger.ms": 5,
                     **extra})


def describe(b: BrokerProcess, txn_id: str) -> dict[str, Any]:
    r = kcoord(b, "transactions", "describe", "--transactional-id", txn_id, "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout)  # type: ignore[no-any-return]


def end_offsets(b: BrokerProcess, topic: str, partitions: int) -> list[int]:
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "probe"})
    try:
        return [c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                for p in range(partitions)]
    finally:
        c.close()


def read_all(b: BrokerProcess, topic: str, count: int) -> list[bytes]:
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "reader",
                  "auto.offset.reset": "earliest", "isolation.level": "read_uncommitted"})
    c.subscribe([topic])
    got: list[bytes] = []
    try:
        wait_for(lambda: _poll_into(c, got) >= count, 30, what=f"{count} messages")
    finally:
        c.close()
    return got


def _poll_into(c: Consumer, got: list[bytes]) -> int:
    m = c.poll(0.2)
    if m is not None and m.error() is None:
        got.append(m.value())
    return len(got)


def test_commit_and_abort(broker_factory: Any) -> None:
    b: BrokerProcess = broker_factory(SETTINGS)
    create_topic(b.bootstrap, "out", 2)
    # The coordinator's topic is its own: no client creates it.
    with pytest.raises(KafkaException, match="INVALID_REQUEST"):
        create_topic(b.bootstrap, "__transaction_state", 1)
    p = producer(b, "copy-1")
    p.init_transactions(30)
    first = describe(b, "copy-1")
    assert (first["state"], first["producer_epoch"], first["partitions"]) == ("Empty", 0, [])
    p.begin_transaction()
    for i in range(10):
        p.produce("out", value=b"c%d" % i, partition=i % 2)
    p.commit_transaction(30)
    wait_for(lambda: describe(b, "copy-1")["state"] == "CompleteCommit", 10, what="commit")

    p.begin_transaction()
    for i in range(5):
        p.produce("out", value=b"a%d" % i, partition=i % 2)
    p.flush(10)
    ongoing = describe(b, "copy-1")
    assert ongoing["state"] == "Ongoing"
    assert sorted(ongoing["partitions"]) == ["out-0", "out-1"]
    r = kcoord(b, "transactions", "list", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == [
        {"transactional_id": "copy-1", "producer_id": first["producer_id"], "state": "Ongoing"}
    ]
    p.abort_transaction(30)
    wait_for(lambda: describe(b, "copy-1")["state"] == "CompleteAbort", 10, what="abort")
    # Each partition holds its records and one marker per transaction (5 + 1 + 3 + 1, 5 + 1 + 2 + 1).
    assert end_offsets(b, "out", 2) == [10, 9]
    # The consumer skips the markers (it parses them as control batches).
    assert sorted(read_all(b, "out", 15)) == sorted(
        [b"c%d" % i for i in range(10)] + [b"a%d" % i for i in range(5)]
    )
    # The committed state survives a restart.
    b.stop()
    b.restart()
    again = describe(b, "copy-1")
    assert (again["state"], again["producer_id"], again["producer_epoch"]) == (
        "CompleteAbort", first["producer_id"], 0
    )


def test_zombie_producer_is_fenced(broker_factory: Any) -> None:
    b: BrokerProcess = broker_factory(SETTINGS)
    create_topic(b.bootstrap, "out", 1)
    zombie = producer(b, "z")
    zombie.init_transactions(30)
    zombie.begin_transaction()
    zombie.produce("out", value=b"zombie", partition=0)
    zombie.flush(10)
    old = describe(b, "z")
    fresh = producer(b, "z")
    fresh.init_transactions(30)  # fences the zombie: its transaction is aborted first
    new = describe(b, "z")
    assert new["producer_id"] == old["producer_id"]
    assert new["producer_epoch"] == old["producer_epoch"] + 2  # the fence, then the new instance
    assert new["state"] == "Empty"
    with pytest.raises(KafkaException):
        zombie.commit_transaction(10)
    with RawClient(b.port) as c:
        pid, epoch = old["producer_id"], old["producer_epoch"]
        for version, fenced in ((3, ErrorCode.producer_fenced), (1, ErrorCode.invalid_producer_epoch)):
            r = c.request(ApiKey.ADD_PARTITIONS_TO_TXN, version, v3_and_below_transactional_id="z",
                          v3_and_below_producer_id=pid, v3_and_below_producer_epoch=epoch,
                          v3_and_below_topics=[dict(name="out", partitions=[0])])
            assert r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == fenced
            r = c.request(ApiKey.END_TXN, version, transactional_id="z", producer_id=pid,
                          producer_epoch=epoch, committed=True)
            assert r.error_code == fenced
        # A partition that does not exist fails the whole request before anything is added.
        r = c.request(ApiKey.ADD_PARTITIONS_TO_TXN, 3, v3_and_below_transactional_id="z",
                      v3_and_below_producer_id=pid, v3_and_below_producer_epoch=new["producer_epoch"],
                      v3_and_below_topics=[dict(name="out", partitions=[0, 7])])
        codes = {x.partition_index: x.partition_error_code
                 for x in r.results_by_topic_v3_and_below[0].results_by_partition}
        assert codes == {0: ErrorCode.operation_not_attempted, 7: ErrorCode.unknown_topic_or_partition}
        # KIP-360 recovery with a producer id that is not the id's: fenced, by version.
        for version, fenced in ((4, ErrorCode.producer_fenced), (3, ErrorCode.invalid_producer_epoch)):
            r = c.request(ApiKey.INIT_PRODUCER_ID, version, transactional_id="z",
                          transaction_timeout=60_000, producer_id=pid + 999, producer_epoch=0)
            assert (r.error_code, r.producer_id, r.producer_epoch) == (fenced, -1, -1)
        r = c.request(ApiKey.INIT_PRODUCER_ID, 4, transactional_id="z", transaction_timeout=60_000,
                      producer_id=-1, producer_epoch=3)
        assert r.error_code == ErrorCode.invalid_request
        r = c.request(ApiKey.INIT_PRODUCER_ID, 4, transactional_id="z",
                      transaction_timeout=900_001, producer_id=-1, producer_epoch=-1)
        assert r.error_code == ErrorCode.invalid_transaction_timeout
        # Idempotent producers get a new producer id each, epoch 0 (also when recovering).
        ids = set()
        for _ in range(3):
            r = c.request(ApiKey.INIT_PRODUCER_ID, 4, transactional_id=None, transaction_timeout=0,
                          producer_id=pid, producer_epoch=epoch)
            assert (r.error_code, r.producer_epoch) == (0, 0)
            ids.add(r.producer_id)
        assert len(ids) == 3 and pid not in ids
        # __consumer_offsets only comes in through AddOffsetsToTxn.
        r = c.request(ApiKey.ADD_PARTITIONS_TO_TXN, 3, v3_and_below_transactional_id="z",
                      v3_and_below_producer_id=pid, v3_and_below_producer_epoch=new["producer_epoch"],
                      v3_and_below_topics=[dict(name="__consumer_offsets", partitions=[0])])
        assert r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == (
            ErrorCode.topic_authorization_failed
        )
    fresh.begin_transaction()
    fresh.produce("out", value=b"fresh", partition=0)
    fresh.commit_transaction(30)
    assert describe(b, "z")["state"] == "CompleteCommit"


def test_sigkill_mid_transaction_then_aborted_by_its_timeout(broker_factory: Any) -> None:
    b: BrokerProcess = broker_factory(
        {**SETTINGS, "transaction.abort.timed.out.transaction.cleanup.interval.ms": 200}
    )
    create_topic(b.bootstrap, "out", 1)
    # Long enough for the restart and a CLI describe after it even on a busy machine (with 4 s
    # the timeout could pass before the describe and the test raced the machine's speed).
    p = producer(b, "k", **{"transaction.timeout.ms": 10000})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce("out", value=b"lost", partition=0)
    p.flush(10)
    before = describe(b, "k")
    written = time.monotonic()
    b.kill()
    b.restart()
    after = describe(b, "k")
    if time.monotonic() - written < 9:  # inside its timeout: the reloaded transaction is open
        assert (after["state"], after["partitions"]) == ("Ongoing", ["out-0"])
    # (else, on a machine too slow to describe it in time, the abort below is what shows that
    # the transaction outlived the kill: a lost one would never be aborted nor its epoch bumped)
    wait_for(lambda: describe(b, "k")["state"] == "CompleteAbort", 30, what="the timeout abort")
    assert describe(b, "k")["producer_epoch"] == before["producer_epoch"] + 1
    assert end_offsets(b, "out", 1) == [2]  # the record and its ABORT marker


def test_sigkill_mid_transaction_then_a_new_producer_takes_over(broker_factory: Any) -> None:
    b: BrokerProcess = broker_factory(SETTINGS)
    create_topic(b.bootstrap, "out", 1)
    p = producer(b, "k2")
    p.init_transactions(30)
    p.begin_transaction()
    p.produce("out", value=b"lost", partition=0)
    p.flush(10)
    b.kill()
    b.restart()
    q = producer(b, "k2")
    q.init_transactions(30)
    q.begin_transaction()
    q.produce("out", value=b"kept", partition=0)
    q.commit_transaction(30)
    wait_for(lambda: describe(b, "k2")["state"] == "CompleteCommit", 10, what="commit")
    assert end_offsets(b, "out", 1) == [4]  # lost, ABORT, kept, COMMIT


def test_sigkill_right_after_commit_completes_it_after_restart(broker_factory: Any) -> None:
    b: BrokerProcess = broker_factory(SETTINGS)
    create_topic(b.bootstrap, "out", 1)
    p = producer(b, "k3")
    p.init_transactions(30)
    p.begin_transaction()
    for i in range(3):
        p.produce("out", value=b"m%d" % i, partition=0)
    p.commit_transaction(30)  # answered once PrepareCommit is durable; markers may follow
    b.kill()
    b.restart()
    wait_for(lambda: describe(b, "k3")["state"] == "CompleteCommit", 10, what="the commit")
    # The COMMIT marker is there (twice if it was written before the kill and again after).
    assert end_offsets(b, "out", 1)[0] in (4, 5)
    assert read_all(b, "out", 3) == [b"m0", b"m1", b"m2"]


def test_kcoord_transactions_abort(broker_factory: Any) -> None:
    b: BrokerProcess = broker_factory(SETTINGS)
    create_topic(b.bootstrap, "out", 1)
    p = producer(b, "hanging")
    p.init_transactions(30)
    p.begin_transaction()
    p.produce("out", value=b"x", partition=0)
    p.flush(10)
    before = describe(b, "hanging")
    r = kcoord(b, "transactions", "abort", "--transactional-id", "hanging", "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    after = json.loads(r.stdout)
    assert (after["state"], after["producer_epoch"]) == ("CompleteAbort", before["producer_epoch"] + 1)
    with pytest.raises(KafkaException):
        p.commit_transaction(10)
    r = kcoord(b, "transactions", "abort", "--transactional-id", "hanging")
    assert r.returncode == 1 and "no transaction to abort" in r.stderr
    r = kcoord(b, "transactions", "describe", "--transactional-id", "nobody")
    assert r.returncode == 1 and "TRANSACTIONAL_ID_NOT_FOUND" in r.stderr
    r = kcoord(b, "transactions", "list")
    assert r.returncode == 0 and "hanging" in r.stdout and "CompleteAbort" in r.stdout
    r = kcoord(b, "transactions", "list", "--state", "Ongoing", "--json")
    assert (r.returncode, json.loads(r.stdout)) == (0, [])
    r = kcoord(b, "transactions", "list", "--state", "Stuck")
    assert r.returncode == 0 and "unknown state 'Stuck'" in r.stderr and "hanging" not in r.stdout
    r = kcoord(f"127.0.0.1:{free_port()}", "transactions", "list", "--timeout", "2")
    assert r.returncode == 1 and r.stderr.startswith("Error: broker 127.0.0.1:"), r.stderr


def test_kafka_python_transactional_producer(broker_factory: Any) -> None:
    from kafka import KafkaProducer

    b: BrokerProcess = broker_factory(SETTINGS)
    create_topic(b.bootstrap, "out", 1)
    p = KafkaProducer(bootstrap_servers=b.bootstrap, transactional_id="kp")
    try:
        p.init_transactions()
        p.begin_transaction()
        p.send("out", b"one", partition=0)
        p.commit_transaction()
        p.begin_transaction()
        p.send("out", b"two", partition=0).get(timeout=10)
        p.abort_transaction()
    finally:
        p.close(timeout=10)
    wait_for(lambda: describe(b, "kp")["state"] == "CompleteAbort", 10, what="abort")
    assert end_offsets(b, "out", 1) == [4]


def test_acls_refuse_the_transactional_id(broker_factory: Any) -> None:
    b: BrokerProcess = broker_factory(
        {**SETTINGS, "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer"}
    )
    denied = ErrorCode.transactional_id_authorization_failed
    with RawClient(b.port) as c:  # User:ANONYMOUS, no ACLs: nothing is allowed
        r = c.request(ApiKey.FIND_COORDINATOR, 4, key_type=1, coordinator_keys=["t"])
        assert r.coordinators[0].error_code == denied
        r = c.request(ApiKey.INIT_PRODUCER_ID, 4, transactional_id="t", transaction_timeout=1000,
                      producer_id=-1, producer_epoch=-1)
        assert (r.error_code, r.producer_id) == (denied, -1)
        r = c.request(ApiKey.INIT_PRODUCER_ID, 4, transactional_id=None, transaction_timeout=1000,
                      producer_id=-1, producer_epoch=-1)
        assert r.error_code == ErrorCode.cluster_authorization_failed
        r = c.request(ApiKey.END_TXN, 3, transactional_id="t", producer_id=1, producer_epoch=0,
                      committed=True)
        assert r.error_code == denied
        r = c.request(ApiKey.ADD_OFFSETS_TO_TXN, 3, transactional_id="t", producer_id=1,
                      producer_epoch=0, group_id="g")
        assert r.error_code == denied
        c.send(ApiKey.DESCRIBE_TRANSACTIONS, 0, encode_body(build(
            request_type(ApiKey.DESCRIBE_TRANSACTIONS, 0), transactional_ids=["t"])))
        [state] = parse_describe_transactions(c.recv_frame())
        assert (state["error_code"], state["start_time_ms"]) == (denied, -1)
        r = c.request(ApiKey.LIST_TRANSACTIONS, 1, state_filters=[], producer_id_filters=[],
                      duration_filter=-1)
        assert (r.error_code, r.transaction_states) == (0, ())
