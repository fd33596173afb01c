"""Transactions across the nodes of a cluster (issue 28): three kcoord nodes over the PostgreSQL
the test run starts, with the short heartbeats and sessions of ``test_cluster.Cluster``.

The partitions a transaction writes to are led by every node, so the transaction coordinator
(the leader of the id's ``__transaction_state`` partition) writes most markers through other
nodes (WriteTxnMarkers), and most transactional batches are verified by the leader asking the
coordinator on another node (AddPartitionsToTxn v4, verify only). The consume-transform-produce
copy also has its group coordinator on a node other than the transaction coordinator, so the
``__consumer_offsets`` marker crosses nodes too; once more with the transaction coordinator's
node SIGKILLed part-way through the copy.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from kcoord.protocol.apis import ApiKey

from .harness import wait_for
from .rawclient import RawClient
from .test_cluster import Cluster, coordinator_of, create_topic, started
from .test_exactly_once import Worker, _committed, _end_offsets, _read_committed

PARTITIONS = 6
TXN_KEY = 1  # FindCoordinator's key type of a transactional id


@pytest.fixture
def nodes(tmp_path: Path, postgres_url: str) -> Iterator[Cluster]:
    c = Cluster(tmp_path, postgres_url)
    try:
        yield started(c)
    finally:
        c.stop()


def spread_topic(cluster: Cluster, name: str, partitions: int) -> dict[int, int]:
    """Create ``name`` and wait until every node agrees on its leaders, which are all three
    nodes; the leader of each partition."""
    leaders = create_topic(cluster, name, partitions)
    assert set(leaders.values()) == {1, 2, 3}, leaders
    return leaders


def txn_coordinator(cluster: Cluster, transactional_id: str, other_than: int | None = None) -> int:
    """The node every serving node names as the coordinator of ``transactional_id`` (once it
    is not ``other_than``)."""

    def agreed() -> int | None:
        answers = set()
        for b in cluster.serving():
            with RawClient(b.port) as rc:
                r = rc.request(ApiKey.FIND_COORDINATOR, 3, key=transactional_id, key_type=TXN_KEY)
            if r.error_code:
                return None
            answers.add(int(r.node_id))
        if len(answers) != 1 or other_than in answers:
            return None
        return answers.pop()

    return int(wait_for(agreed, 30, 0.1, f"one coordinator for {transactional_id}"))  # type: ignore[arg-type]


def transactional(cluster: Cluster, transactional_id: str) -> Producer:
    p = Producer({
        "bootstrap.servers": cluster.bootstrap,
        "transactional.id": transactional_id,
        "transaction.timeout.ms": 30000,
        "linger.ms": 5,
    })
    p.init_transactions(30)
    return p


def test_a_transaction_over_partitions_of_every_node_commits_exactly_once(nodes: Cluster) -> None:
    leaders = spread_topic(nodes, "spread-txn", PARTITIONS)
    producer = transactional(nodes, "txn-spread")
    coordinator = txn_coordinator(nodes, "txn-spread")
    assert [p for p, n in leaders.items() if n != coordinator], "every partition led elsewhere"
    expected: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    for t in range(3):
        producer.begin_transaction()
        for i in range(60):
            value = b"t%d-%d" % (t, i)
            producer.produce("spread-txn", value=value, partition=i % PARTITIONS)
            expected[i % PARTITIONS].append(value)
        producer.commit_transaction(30)
    got = _read_committed(nodes.bootstrap, "spread-txn", PARTITIONS)
    assert got == expected
    # Every partition holds its records and the three COMMIT markers after them, and the last
    # stable offset is past the last marker: no transaction is left open anywhere.
    ends = _end_offsets_of(nodes, "spread-txn")
    assert ends == {p: 30 + 3 for p in range(PARTITIONS)}, ends


def _end_offsets_of(cluster: Cluster, topic: str) -> dict[int, int]:
    """The read_committed end offset (last stable offset) of each partition of ``topic``."""
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "probe-" + uuid.uuid4().hex,
                  "isolation.level": "read_committed"})
    try:
        return {
            p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=20)[1]
            for p in range(PARTITIONS)
        }
    finally:
        c.close()


def test_an_aborted_transaction_across_nodes_is_never_seen(nodes: Cluster) -> None:
    spread_topic(nodes, "spread-abort", PARTITIONS)
    producer = transactional(nodes, "txn-aborter")
    producer.begin_transaction()
    for i in range(60):
        producer.produce("spread-abort", value=b"aborted-%d" % i, partition=i % PARTITIONS)
    producer.flush(30)  # the batches are in every partition's log before the abort
    producer.abort_transaction(30)
    producer.begin_transaction()
    for i in range(PARTITIONS):
        producer.produce("spread-abort", value=b"kept-%d" % i, partition=i)
    producer.commit_transaction(30)
    got = _read_committed(nodes.bootstrap, "spread-abort", PARTITIONS)
    assert got == {p: [b"kept-%d" % p] for p in range(PARTITIONS)}


def test_exactly_once_copy_across_nodes(nodes: Cluster, tmp_path: Path) -> None:
    """The exactly-once worker of ``test_exactly_once`` copies ``in`` to ``out`` (3 partitions
    each, led by the three nodes) with its group coordinated by one node and its transactions
    by another."""
    copy(nodes, tmp_path, records=3000, kill_coordinator_after=None)


def test_exactly_once_copy_survives_a_sigkill_of_the_transaction_coordinator(
    nodes: Cluster, tmp_path: Path
) -> None:
    """The same copy, with the node coordinating its transactions SIGKILLed part-way: another
    node takes the id's partition over, completes or aborts what its log says, and the copy
    ends with every record exactly once."""
    copy(nodes, tmp_path, records=6000, kill_coordinator_after=1500)


def copy(nodes: Cluster, tmp_path: Path, records: int, kill_coordinator_after: int | None) -> None:
    in_leaders = spread_topic(nodes, "in", 3)
    spread_topic(nodes, "out", 3)
    txn_id = "eos-worker"  # the worker's
    transactional(nodes, txn_id).flush(1)  # creates __transaction_state, so it has a leader
    coordinator = txn_coordinator(nodes, txn_id)
    group = next(
        g for g in (f"eos-{i}" for i in range(64)) if coordinator_of(nodes, g) != coordinator
    )
    p = Producer({"bootstrap.servers": nodes.bootstrap, "linger.ms": 20})
    for i in range(records):
        p.produce("in", key=b"%d" % i, value=b"r%d-%d" % (i % 3, i), partition=i % 3)
    assert p.flush(60) == 0
    ends = _end_offsets(nodes.bootstrap, "in")
    assert sum(ends.values()) == records, (ends, in_leaders)
    worker = Worker(nodes.bootstrap, tmp_path / "worker.err", group=group)
    try:
        if kill_coordinator_after is not None:
            wait_for(lambda: worker.committed >= kill_coordinator_after, 120, 0.1,
                     "a first part copied")
            nodes.nodes[coordinator].kill()
            txn_coordinator(nodes, txn_id, other_than=coordinator)  # within the session
        wait_for(lambda: _committed(nodes.bootstrap, group, "in") == ends, 240, 0.5,
                 "the group's offsets at the input's end")
    finally:
        worker.stop()
    out = _read_committed(nodes.bootstrap, "out")
    for part in range(3):
        assert out[part] == [b"R%d-%d" % (part, i) for i in range(part, records, 3)], part

