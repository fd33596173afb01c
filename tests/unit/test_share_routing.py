"""Share state across nodes (broker/share/remote_persister.py, broker/share/state_api.py),
against two real in-process brokers on loopback ports: node 1's RoutingPersister sends the
calls of a key whose ``__share_group_state`` partition node 2 leads to node 2, which holds the
state; node 2's refusals come back as ShareStateError with its code (fenced epochs, not the
coordinator, and retried by RetryingPersister until the partition is served again); a node
that cannot be asked is COORDINATOR_NOT_AVAILABLE; keys of nobody's partition are answered
locally; the APIs refuse bad keys with INVALID_REQUEST."""

from __future__ import annotations

import asyncio
import errno
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from kcoord.broker.app import Broker
from kcoord.broker.cluster.peers import Peers
from kcoord.broker.cluster.view import ClusterView, NodeInfo
from kcoord.broker.config import Config
from kcoord.broker.data.topic_names import SHARE_GROUP_STATE_TOPIC
from kcoord.broker.share.persister import RetryingPersister, ShareStateError
from kcoord.broker.share.remote_persister import RoutingPersister
from kcoord.broker.share.state_runtime import ShareStateRuntime
from kcoord.protocol.apis import ApiKey
from kcoord.protocol.errors import ErrorCode
from kcoord.share.model import (
    UNINITIALIZED,
    PersistedState,
    RecordState,
    SharePartitionKey,
    StateBatch,
    StateSummary,
    StateWrite,
)
from kcoord.storage.engine import LeaderFence
from kcoord.storage.offline import NotLeader

PEER = 2
LISTENER = "PLAINTEXT"
TOPIC_ID = uuid.UUID(int=7)
PARTITIONS = 4  # of __share_group_state


async def _broker(path: Path) -> Broker:
    config = Config.load(
        port=0, data_dir=path, environ={},
        overrides=[f"share.coordinator.state.topic.num.partitions={PARTITIONS}"],
    )
    b = Broker(config)
    await b.start()
    # A fresh node makes __share_group_state at its first use, in a worker thread
    # (COORDINATOR_NOT_AVAILABLE meanwhile, which a caller retries): these tests start after it.
    assert await b.share_state.state_topic.wait()
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


def view_of(port: int, leaders: dict[int, int]) -> ClusterView:
    """Node 1's view: itself, and node 2 at ``port``; ``leaders`` maps partitions of
    ``__share_group_state`` to their leader."""
    view = ClusterView(1, ((LISTENER, "127.0.0.1", 1),), None, clustered=True)
    view.update(
        [NodeInfo(1, ((LISTENER, "127.0.0.1", 1),), None),
         NodeInfo(PEER, ((LISTENER, "127.0.0.1", port),), None)],
        [((SHARE_GROUP_STATE_TOPIC, p), LeaderFence(n, 3)) for p, n in leaders.items()],
    )
    return view


def keys_by_partition(runtime: ShareStateRuntime) -> dict[int, SharePartitionKey]:
    """One key of group "g" per partition of __share_group_state."""
    found: dict[int, SharePartitionKey] = {}
    for index in range(200):
        key = SharePartitionKey("g", TOPIC_ID, index)
        found.setdefault(runtime.partition_of(key), key)
    assert len(found) == PARTITIONS
    return found


BATCHES = (StateBatch(10, 12, RecordState.ACKNOWLEDGED, 1), StateBatch(13, 13, RecordState.ARCHIVED, 5))


async def test_calls_for_a_partition_led_elsewhere_are_answered_there(
    pair: tuple[Broker, Broker],
) -> None:
    a, b = pair
    keys = keys_by_partition(a.share_state)
    remote_key, local_key = keys[0], keys[1]
    view = view_of(b.bound_port, {0: PEER, 1: 1})
    peers = Peers(view, LISTENER, "PLAINTEXT", 5.0)
    routed = RoutingPersister(a.share_state, view, peers)
    try:
        assert routed.coordinator_of(remote_key) == PEER
        assert routed.coordinator_of(local_key) is None
        for key in (remote_key, local_key):
            assert await routed.read(key) == UNINITIALIZED
            await routed.initialize(key, 1, 10)
            await routed.write(key, 1, 4, StateWrite(10, BATCHES))
        # The remote key's state is on node 2 only, the local one's on node 1 only.
        held = PersistedState(1, 10, BATCHES, leader_epoch=4)
        assert await b.share_state.read(remote_key) == held
        assert await a.share_state.read(remote_key) == UNINITIALIZED
        assert await a.share_state.read(local_key) == held
        assert await b.share_state.read(local_key) == UNINITIALIZED
        # ReadShareGroupState carries no leader epoch; the summary does, with KIP-1226's count.
        assert await routed.read(remote_key) == PersistedState(1, 10, BATCHES)
        assert await routed.read_summary(remote_key) == StateSummary(1, 4, 10, 4)
        assert await routed.read_summary(local_key) == StateSummary(1, 4, 10, 4)
        # Node 2's fencing, as it would answer its own share partitions.
        for epochs, code in (((0, 4), ErrorCode.fenced_state_epoch),
                             ((1, 3), ErrorCode.fenced_leader_epoch)):
            with pytest.raises(ShareStateError) as refused:
                await routed.write(remote_key, *epochs, StateWrite(11, ()))
            assert refused.value.code == code
        with pytest.raises(ShareStateError) as refused:
            await routed.initialize(remote_key, 0, 20)
        assert refused.value.code == ErrorCode.fenced_state_epoch
        with pytest.raises(ShareStateError) as refused:
            await routed.write(remote_key, 1, 4, StateWrite(10, (StateBatch(5, 4, 0, 1),)))
        assert refused.value.code == ErrorCode.invalid_request
        assert await b.share_state.read(remote_key) == held  # nothing refused changed it
        # Deleting keys of both nodes (and one nobody holds) at once.
        await routed.delete([remote_key, local_key, keys[2]])
        assert await b.share_state.read(remote_key) == UNINITIALIZED
        assert await a.share_state.read(local_key) == UNINITIALIZED
    finally:
        await peers.close()


async def test_a_leader_moving_is_retried_as_a_local_one_and_an_absent_node_is_not_available(
    pair: tuple[Broker, Broker],
) -> None:
    a, b = pair
    key = keys_by_partition(a.share_state)[0]
    view = view_of(b.bound_port, {0: PEER})
    peers = Peers(view, LISTENER, "PLAINTEXT", 5.0)
    routed = RoutingPersister(a.share_state, view, peers)
    try:
        await routed.initialize(key, 1, 0)
        # Node 2 gives the partition up (another node took it): NOT_COORDINATOR, the code a
        # local call gets; RetryingPersister waits until node 2 serves it again.
        runtime = b.share_state
        assert runtime.logs is not None
        plog = runtime.logs[0]
        await runtime.resign(0, b.engine.offline_log(
            SHARE_GROUP_STATE_TOPIC, 0, NotLeader(errno.EAGAIN, "led elsewhere")
        ))
        with pytest.raises(ShareStateError) as refused:
            await routed.read(key)
        assert refused.value.code == ErrorCode.not_coordinator
        asyncio.get_running_loop().call_later(0.2, lambda: asyncio.ensure_future(runtime.lead(0, plog)))
        retrying = RetryingPersister(routed, patience_s=5)
        await retrying.write(key, 1, 0, StateWrite(0, (StateBatch(0, 0, RecordState.ACKNOWLEDGED, 1),)))
        assert (await b.share_state.read(key)).batches == (
            StateBatch(0, 0, RecordState.ACKNOWLEDGED, 1),
        )
        # A leader that cannot be asked: COORDINATOR_NOT_AVAILABLE (retriable, then what the
        # consumer is told).
        await peers.close()
        gone = view_of(1, {0: PEER})  # nobody listens on port 1
        unreachable = RoutingPersister(a.share_state, gone, Peers(gone, LISTENER, "PLAINTEXT", 1.0))
        with pytest.raises(ShareStateError) as refused:
            await unreachable.read(key)
        assert refused.value.code == ErrorCode.coordinator_not_available
        with pytest.raises(ShareStateError) as refused:
            await RetryingPersister(unreachable, patience_s=0.1).read(key)
        assert refused.value.code == ErrorCode.coordinator_not_available
        # No leader in the view, or one not alive: this node's runtime answers.
        for leaders in ({}, {0: 9}):
            local = RoutingPersister(a.share_state, view_of(1, leaders), peers)
            assert local.coordinator_of(key) is None
            assert await local.read(key) == UNINITIALIZED
    finally:
        await peers.close()


async def test_the_state_apis_refuse_bad_keys_and_answer_each_partition(
    pair: tuple[Broker, Broker],
) -> None:
    a, b = pair
    peers = Peers(view_of(b.bound_port, {}), LISTENER, "PLAINTEXT", 5.0)
    keys = keys_by_partition(a.share_state)
    other = uuid.UUID(int=8)
    try:
        r = await peers.request(
            PEER, ApiKey.INITIALIZE_SHARE_GROUP_STATE, 0, group_id="g",
            topics=[dict(topic_id=TOPIC_ID, partitions=[
                        dict(partition=k.partition, state_epoch=0, start_offset=5)
                        for k in keys.values()] + [dict(partition=-1, state_epoch=0, start_offset=5)]),
                    dict(topic_id=other, partitions=[dict(partition=0, state_epoch=0, start_offset=-2)]),
                    dict(topic_id=uuid.UUID(int=0), partitions=[dict(partition=0, state_epoch=0, start_offset=1)])],
        )
        codes = [[(int(p.partition), int(p.error_code)) for p in t.partitions] for t in r.results]
        assert codes == [
            [(k.partition, 0) for k in keys.values()] + [(-1, ErrorCode.invalid_request)],
            [(0, ErrorCode.invalid_request)],
            [(0, ErrorCode.invalid_request)],
        ]
        r = await peers.request(
            PEER, ApiKey.READ_SHARE_GROUP_STATE, 0, group_id="",
            topics=[dict(topic_id=TOPIC_ID, partitions=[dict(partition=0, leader_epoch=0)])],
        )
        assert r.results[0].partitions[0].error_code == ErrorCode.invalid_request
        # One deletion of keys of every partition: each answered, all gone.
        r = await peers.request(
            PEER, ApiKey.DELETE_SHARE_GROUP_STATE, 0, group_id="g",
            topics=[dict(topic_id=TOPIC_ID, partitions=[dict(partition=k.partition) for k in keys.values()])],
        )
        assert [int(p.error_code) for p in r.results[0].partitions] == [0] * PARTITIONS
        for key in keys.values():
            assert await b.share_state.read(key) == UNINITIALIZED
    finally:
        await peers.close()
