"""The inter-node client (broker/cluster/peers.py) and transactions across nodes
(broker/txn/remote.py), against real in-process brokers on loopback ports: pipelined requests
on one reused connection, a lost connection opened again, a peer that does not answer, peers
that cannot be asked; markers routed to the leader the view names (and never forwarded again
by it); AddPartitionsToTxn v4 verify-only and add answers, and Produce's mapping of them."""

from __future__ import annotations

import asyncio
import errno
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from kcoord.broker.app import Broker
from kcoord.broker.cluster.peers import Peers, PeerUnavailable
from kcoord.broker.cluster.view import ClusterView, NodeInfo
from kcoord.broker.config import Config
from kcoord.broker.txn.remote import RemoteTxn, TxnVerification, produce_error
from kcoord.protocol.apis import ApiKey
from kcoord.protocol.errors import ErrorCode
from kcoord.storage.engine import LeaderFence
from kcoord.storage.offline import NotLeader

PEER = 2
LISTENER = "PLAINTEXT"


async def _broker(path: Path) -> Broker:
    config = Config.load(port=0, data_dir=path, environ={},
                         overrides=["transaction.state.log.num.partitions=2"])
    b = Broker(config)
    await b.start()
    b.topics.create("t", 2)
    return b


@pytest.fixture
async def pair(tmp_path: Path) -> AsyncIterator[tuple[Broker, Broker]]:
    a = await _broker(tmp_path / "a")
    b = await _broker(tmp_path / "b")
    try:
        yield a, b
    finally:
        await a.stop()
        await b.stop()


def view_of(port: int, leaders: dict[tuple[str, int], int | None]) -> ClusterView:
    """Node 1's view: itself, and node 2 at ``port`` leading what ``leaders`` says."""
    view = ClusterView(1, ((LISTENER, "127.0.0.1", 1),), None, clustered=True)
    view.update(
        [NodeInfo(1, ((LISTENER, "127.0.0.1", 1),), None),
         NodeInfo(PEER, ((LISTENER, "127.0.0.1", port),), None)],
        [(k, LeaderFence(n, 0)) for k, n in leaders.items() if n is not None],
    )
    return view


async def _until(condition: object, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


async def test_pipelined_requests_share_one_connection_opened_again_once_lost(
    pair: tuple[Broker, Broker],
) -> None:
    _, b = pair
    peers = Peers(view_of(b.bound_port, {}), LISTENER, "PLAINTEXT", 5.0)
    try:
        answers = await asyncio.gather(*(
            peers.request(PEER, ApiKey.API_VERSIONS, v) for v in (0, 1, 2, 2, 1, 0)
        ))
        assert all(r.error_code == 0 for r in answers)
        assert len(b.connections) == 1
        first = peers._connections[PEER]
        for conn in list(b.connections):
            assert conn.transport is not None
            conn.transport.close()  # the peer drops the connection
        await _until(lambda: first.closed)
        r = await peers.request(PEER, ApiKey.METADATA, 12, topics=None,
                                allow_auto_topic_creation=False,
                                include_topic_authorized_operations=False)
        assert [t.name for t in r.topics] == ["t"]
        assert peers._connections[PEER] is not first
    finally:
        await peers.close()


async def test_a_silent_peer_times_out_and_unreachable_ones_fail_at_once() -> None:
    accepted: list[asyncio.StreamWriter] = []

    async def silent(_r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        accepted.append(w)  # reads nothing, answers nothing

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    peers = Peers(view_of(port, {}), LISTENER, "PLAINTEXT", 0.3)
    try:
        started = time.monotonic()
        with pytest.raises(PeerUnavailable, match="did not answer"):
            await peers.request(PEER, ApiKey.API_VERSIONS, 2)
        assert time.monotonic() - started < 3
        assert peers._connections[PEER].closed
        with pytest.raises(PeerUnavailable, match="not a live node"):
            await peers.request(7, ApiKey.API_VERSIONS, 2)
        other = Peers(view_of(port, {}), "INTERNAL", "PLAINTEXT", 0.3)
        with pytest.raises(PeerUnavailable, match="no listener named INTERNAL"):
            await other.request(PEER, ApiKey.API_VERSIONS, 2)
        secured = Peers(view_of(port, {}), LISTENER, "SASL_SSL", 0.3)
        with pytest.raises(PeerUnavailable, match="PLAINTEXT"):
            await secured.request(PEER, ApiKey.API_VERSIONS, 2)
    finally:
        await peers.close()
        for w in accepted:
            w.close()
        server.close()
        await server.wait_closed()
    closed = Peers(view_of(port, {}), LISTENER, "PLAINTEXT", 0.3)  # nobody listens there now
    with pytest.raises(PeerUnavailable, match="cannot connect"):
        await closed.request(PEER, ApiKey.API_VERSIONS, 2)


def _placeholder(broker: Broker, topic: str, partition: int) -> None:
    t = broker.topics.get(topic)
    assert t is not None
    t.partitions[partition] = broker.engine.offline_log(
        topic, partition, NotLeader(errno.EAGAIN, "led elsewhere")
    )


def _markers_in(broker: Broker, topic: str, partition: int) -> list[bool]:
    """Whether each batch of the partition is a control batch."""
    plog = broker.topics.partition(topic, partition)
    assert plog is not None
    return [h.is_control for _, h, _ in plog.iter_batches()]


async def test_markers_of_partitions_led_elsewhere_go_to_their_leader(
    pair: tuple[Broker, Broker],
) -> None:
    a, b = pair
    _placeholder(a, "t", 1)  # node 2 (b) leads t-1; a leads t-0
    view = view_of(b.bound_port, {("t", 1): PEER})
    peers = Peers(view, LISTENER, "PLAINTEXT", 5.0)
    a.markers.remote = RemoteTxn(peers, view)
    try:
        got = await a.markers.write_markers(5, 0, True, 0, [("t", 0), ("t", 1)])
        assert got == {("t", 0): 0, ("t", 1): 0}
        assert _markers_in(a, "t", 0) == [True]
        assert _markers_in(b, "t", 1) == [True] and _markers_in(b, "t", 0) == []
        # No live leader (or the view still naming this node): retried by the coordinator.
        view.update(view.live_nodes(), [])
        got = await a.markers.write_markers(5, 0, True, 0, [("t", 1)])
        assert got == {("t", 1): ErrorCode.not_leader_or_follower}
        # The receiver writes only what it leads: its placeholders are never forwarded on.
        _placeholder(b, "t", 0)
        b.markers.remote = RemoteTxn(peers, view_of(b.bound_port, {("t", 0): PEER}))
        r = await peers.request(PEER, ApiKey.WRITE_TXN_MARKERS, 1, markers=[dict(
            producer_id=5, producer_epoch=0, transaction_result=False, coordinator_epoch=0,
            topics=[dict(name="t", partition_indexes=[0])])])
        code = r.markers[0].topics[0].partitions[0].error_code
        assert code == ErrorCode.not_leader_or_follower
    finally:
        await peers.close()


async def test_verify_only_answers_and_their_produce_errors(pair: tuple[Broker, Broker]) -> None:
    a, b = pair
    view = view_of(b.bound_port, {})
    peers = Peers(view, LISTENER, "PLAINTEXT", 5.0)
    remote = RemoteTxn(peers, view)
    try:
        # b's __transaction_state, made first (the first InitProducerId would only start its
        # creation, answered COORDINATOR_NOT_AVAILABLE).
        assert await b.transactions.state_topic.wait()
        init = await peers.request(PEER, ApiKey.INIT_PRODUCER_ID, 4, transactional_id="x",
                                   transaction_timeout=60_000, producer_id=-1, producer_epoch=-1)
        assert init.error_code == 0
        pid, epoch = int(init.producer_id), int(init.producer_epoch)
        added = await peers.request(PEER, ApiKey.ADD_PARTITIONS_TO_TXN, 3,
                                    v3_and_below_transactional_id="x",
                                    v3_and_below_producer_id=pid, v3_and_below_producer_epoch=epoch,
                                    v3_and_below_topics=[dict(name="t", partitions=[0])])
        assert added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == 0
        assert await remote.verify(PEER, "x", pid, epoch, "t", 0) == 0
        assert await remote.verify(PEER, "x", pid, epoch, "t", 1) == ErrorCode.invalid_txn_state
        assert await remote.verify(PEER, "x", pid, epoch + 1, "t", 0) == ErrorCode.invalid_producer_epoch
        assert await remote.verify(PEER, "y", pid, epoch, "t", 0) == (
            ErrorCode.invalid_producer_id_mapping
        )
        # The v4 batch itself: several transactions, verify-only and add, answered per partition.
        r = await peers.request(PEER, ApiKey.ADD_PARTITIONS_TO_TXN, 4, transactions=[
            dict(transactional_id="x", producer_id=pid, producer_epoch=epoch, verify_only=False,
                 topics=[dict(name="t", partitions=[1])]),
            dict(transactional_id="x", producer_id=pid, producer_epoch=epoch + 1, verify_only=True,
                 topics=[dict(name="t", partitions=[0, 1])]),
            dict(transactional_id="x", producer_id=pid, producer_epoch=epoch, verify_only=False,
                 topics=[dict(name="nope", partitions=[0])]),
        ])
        assert r.error_code == 0
        codes = [
            {(t.name, p.partition_index): int(p.partition_error_code)
             for t in x.topic_results for p in t.results_by_partition}
            for x in r.results_by_transaction
        ]
        assert codes == [
            {("t", 1): 0},
            {("t", 0): ErrorCode.producer_fenced, ("t", 1): ErrorCode.producer_fenced},
            {("nope", 0): ErrorCode.unknown_topic_or_partition},
        ]
        assert await remote.verify(PEER, "x", pid, epoch, "t", 1) == 0  # added by v4 above
    finally:
        await peers.close()
    # A peer that cannot be asked: the producer retries.
    assert await remote.verify(9, "x", pid, epoch, "t", 0) == ErrorCode.not_enough_replicas
    for code, expected in (
        (ErrorCode.not_coordinator, ErrorCode.not_enough_replicas),
        (ErrorCode.coordinator_load_in_progress, ErrorCode.not_enough_replicas),
        (ErrorCode.producer_fenced, ErrorCode.invalid_producer_epoch),
        (ErrorCode.transaction_abortable, ErrorCode.invalid_txn_state),
        (ErrorCode.concurrent_transactions, ErrorCode.concurrent_transactions),
        (0, 0),
    ):
        assert produce_error(code) == expected


async def test_produce_asks_the_coordinator_the_view_names(pair: tuple[Broker, Broker]) -> None:
    a, b = pair
    state = "__transaction_state"
    p = a.transactions.partition_of("x")
    local = TxnVerification(a.transactions, a.view, None)
    assert isinstance(local("x", 1, 0, "t", 0), int)  # one node: the local coordinator, at once
    view = view_of(b.bound_port, {(state, p): PEER})
    peers = Peers(view, LISTENER, "PLAINTEXT", 5.0)
    verify = TxnVerification(a.transactions, view, RemoteTxn(peers, view))
    try:
        # b's __transaction_state made first (on its first use b answers COORDINATOR_NOT_AVAILABLE,
        # NOT_ENOUGH_REPLICAS to a produce, while it is created off the loop).
        assert await b.transactions.state_topic.wait()
        asked = verify("x", 1, 0, "t", 0)
        assert not isinstance(asked, int)
        assert await asked == ErrorCode.invalid_producer_id_mapping  # b's answer: no such id
        view.update(view.live_nodes(), [((state, p), LeaderFence(1, 0))])
        assert isinstance(verify("x", 1, 0, "t", 0), int)  # this node coordinates the id
        view.update(view.live_nodes(), [])
        assert a.topics.get(state) is None  # never created: the local answer (no such id)
        assert verify("x", 1, 0, "t", 0) == ErrorCode.invalid_producer_id_mapping
        assert await a.transactions.state_topic.wait()
        assert verify("x", 1, 0, "t", 0) == ErrorCode.not_enough_replicas  # no leader now
    finally:
        await peers.close()

