"""Transactions across nodes (cluster mode): markers for partitions led elsewhere, and the
verification of transactional batches with a transaction coordinator on another node.

- :meth:`RemoteTxn.write_markers`: the markers of partitions this node does not lead go, as
  WriteTxnMarkers (API 27, v1), to their leaders as the cluster view names them, one request
  per leader; each partition's error code comes back as the leader answered it. A partition
  with no live leader, or one the view says this node leads (the view lags a hand-over),
  is NOT_LEADER_OR_FOLLOWER; a leader that cannot be reached gives NETWORK_EXCEPTION. The
  transaction coordinator's completion loop retries every such code with a backoff.
- :class:`TxnVerification`: Produce's check of a transactional batch (KIP-890). Where the view
  names another node as the leader of the id's ``__transaction_state`` partition, that node is
  asked with AddPartitionsToTxn v4 in verify-only mode and its answer mapped as Kafka's partition
  leader maps it for Produce; otherwise the local coordinator answers, as on one node. Nothing is
  cached: each batch is verified with the coordinator of the moment.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Sequence
from typing import TYPE_CHECKING, Any

from kcoord.protocol.apis import ApiKey
from kcoord.protocol.errors import ErrorCode

from ..cluster.peers import PeerUnavailable
from ..data.topic_names import TRANSACTION_STATE_TOPIC

if TYPE_CHECKING:
    from ..cluster.peers import Peers
    from ..cluster.view import ClusterView
    from .runtime import TxnRuntime

log = logging.getLogger("kcoord.txn")

Where = tuple[str, int]

WRITE_TXN_MARKERS_VERSION = 1
VERIFY_VERSION = 4

_RETRY_PRODUCE = frozenset({
    # The coordinator cannot answer now: Produce answers NOT_ENOUGH_REPLICAS, which producers
    # retry (Kafka's partition leader does the same with these answers).
    ErrorCode.not_coordinator,
    ErrorCode.coordinator_not_available,
    ErrorCode.coordinator_load_in_progress,
    ErrorCode.network_exception,
    ErrorCode.request_timed_out,
})


def produce_error(code: int) -> int:
    """Produce's error for a coordinator's verify-only answer for one partition."""
    if code in _RETRY_PRODUCE:
        return ErrorCode.not_enough_replicas
    if code == ErrorCode.producer_fenced:
        return ErrorCode.invalid_producer_epoch  # Produce's versions predate PRODUCER_FENCED
    if code == ErrorCode.transaction_abortable:
        return ErrorCode.invalid_txn_state
    return code


def _by_topic(partitions: Sequence[Where]) -> list[tuple[str, list[int]]]:
    topics: dict[str, list[int]] = {}
    for topic, p in partitions:
        topics.setdefault(topic, []).append(p)
    return list(topics.items())


class RemoteTxn:
    def __init__(self, peers: Peers, view: ClusterView) -> None:
        self.peers = peers
        self.view = view

    # markers ------------------------------------------------------------------------------------
    async def write_markers(
        self,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        coordinator_epoch: int,
        partitions: Sequence[Where],
    ) -> dict[Where, int]:
        """Write the markers of ``partitions`` (led elsewhere) through their leaders; an error
        code per partition (module docstring)."""
        results: dict[Where, int] = {}
        by_leader: dict[int, list[Where]] = {}
        for where in partitions:
            leader = self.view.leader(*where)
            if leader is None or leader.node_id == self.view.node_id:
                results[where] = ErrorCode.not_leader_or_follower
            else:
                by_leader.setdefault(leader.node_id, []).append(where)
        answers = await asyncio.gather(*(
            self._markers_to(node, producer_id, producer_epoch, commit, coordinator_epoch, wheres)
            for node, wheres in by_leader.items()
        ))
        for answer in answers:
            results.update(answer)
        return results

    async def _markers_to(
        self,
        node_id: int,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        coordinator_epoch: int,
        partitions: list[Where],
    ) -> dict[Where, int]:
        try:
            response = await self.peers.request(
                node_id, ApiKey.WRITE_TXN_MARKERS, WRITE_TXN_MARKERS_VERSION,
                markers=[dict(
                    producer_id=producer_id, producer_epoch=producer_epoch,
                    transaction_result=commit, coordinator_epoch=coordinator_epoch,
                    topics=[dict(name=t, partition_indexes=ps) for t, ps in _by_topic(partitions)],
                )],
            )
        except PeerUnavailable:
            return dict.fromkeys(partitions, ErrorCode.network_exception)
        got: dict[Where, int] = {}
        for marker in response.markers:
            if int(marker.producer_id) != producer_id:
                continue
            for topic in marker.topics:
                for p in topic.partitions:
                    got[(topic.name, int(p.partition_index))] = int(p.error_code)
        missing = [w for w in partitions if w not in got]
        if missing:
            log.warning("node %d did not answer the markers of %s", node_id, missing)
        return {w: got.get(w, ErrorCode.unknown_server_error) for w in partitions}

    # verification -------------------------------------------------------------------------------
    async def verify(
        self,
        node_id: int,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        topic: str,
        partition: int,
    ) -> int:
        """Ask node ``node_id``, the id's coordinator, whether ``topic``-``partition`` is in the
        producer's transaction; 0 or Produce's error."""
        try:
            response = await self.peers.request(
                node_id, ApiKey.ADD_PARTITIONS_TO_TXN, VERIFY_VERSION,
                transactions=[dict(
                    transactional_id=transactional_id, producer_id=producer_id,
                    producer_epoch=producer_epoch, verify_only=True,
                    topics=[dict(name=topic, partitions=[partition])],
                )],
            )
        except PeerUnavailable:
            return ErrorCode.not_enough_replicas
        return produce_error(_verified(response, transactional_id, topic, partition))


def _verified(response: Any, transactional_id: str, topic: str, partition: int) -> int:
    """The coordinator's code for the one partition asked about."""
    if response.error_code:
        return int(response.error_code)
    for result in response.results_by_transaction:
        if result.transactional_id != transactional_id:
            continue
        for t in result.topic_results:
            if t.name != topic:
                continue
            for p in t.results_by_partition:
                if int(p.partition_index) == partition:
                    return int(p.partition_error_code)
    return ErrorCode.unknown_server_error


class TxnVerification:
    """Produce's ``verify_txn`` (``broker.txn.data.TxnVerifier``): the local coordinator's
    answer at once, or, when another node coordinates the id, an awaitable of that node's."""

    def __init__(self, runtime: TxnRuntime, view: ClusterView, remote: RemoteTxn | None) -> None:
        self.runtime = runtime
        self.view = view
        self.remote = remote

    def __call__(
        self, transactional_id: str, producer_id: int, producer_epoch: int, topic: str, partition: int
    ) -> int | Awaitable[int]:
        if self.remote is not None:
            leader = self.view.leader(TRANSACTION_STATE_TOPIC, self.runtime.partition_of(transactional_id))
            if leader is None and self.runtime.topics.get(TRANSACTION_STATE_TOPIC) is not None:
                return ErrorCode.not_enough_replicas  # no coordinator now: the producer retries
            if leader is not None and leader.node_id != self.view.node_id:
                return self.remote.verify(
                    leader.node_id, transactional_id, producer_id, producer_epoch, topic, partition
                )
        return self.runtime.verify_partition(
            transactional_id, producer_id, producer_epoch, topic, partition
        )
