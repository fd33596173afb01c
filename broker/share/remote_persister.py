"""The share partitions' persister on a node of a cluster: :class:`RoutingPersister` sends each
state call to the share coordinator of its key, the node leading the key's
``__share_group_state`` partition, as Kafka's persister sends its RPCs.

Routing, per key: the partition is ``key.state_partition(num_partitions)`` (Kafka's routing);
its leader is the one the cluster view (``broker.cluster.view``) names. Where the view names
this node, nobody, or a node no longer alive, the local
:class:`~broker.share.state_runtime.ShareStateRuntime` answers (it creates the topic on first
use, and refuses with NOT_COORDINATOR a partition it does not lead); otherwise the call goes,
over ``broker.cluster.peers``, to that node as InitializeShareGroupState,
ReadShareGroupState, WriteShareGroupState (v1), DeleteShareGroupState or
ReadShareGroupStateSummary (v1), answered there by ``broker.share.state_api``. Its
per-partition error code comes back as :class:`~broker.share.persister.ShareStateError` with
that code, so that :class:`~broker.share.persister.RetryingPersister` (wrapped around this)
retries NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS and COORDINATOR_NOT_AVAILABLE exactly as
it does for local calls: a partition moving between nodes looks the same from here. A node
that cannot be asked (dead, not yet replaced, no answer within ``broker.session.timeout.ms``)
is COORDINATOR_NOT_AVAILABLE, also retried: the view names the successor within a heartbeat
of its taking over.

Why each step is safe:

- **Nothing is decided here.** The share coordinator that answers holds the state in its own
  shard and checks there, as for a local call, the leader epoch (FENCED_LEADER_EPOCH: a data
  partition's former leader cannot overwrite its successor's state) and the state epoch
  (FENCED_STATE_EPOCH: a state reset by AlterShareGroupOffsets is not overwritten by writes
  of the share partition it replaced).
- **An answer means durable.** That node answers a change only once it is in its log and
  durable (fsync, or the PostgreSQL commit); the commit checks, under the row's lock, that it
  still leads the ``__share_group_state`` partition in the epoch it took it in, so a node
  that lost the partition without knowing it (paused past its session) cannot make a write
  durable: its append fails and the call is answered NOT_COORDINATOR, then retried with the
  successor, which replayed the partition from the same database.
- **Retries repeat a call whole.** The share partition holds its lock across a write and
  its retries (broker/share/partitions.py), so no later write of the same key is sent while
  one is retried, and writing the same change twice leaves the same state. A call whose
  answer was lost is therefore safe to send again.
- **A stale view only delays.** A view a heartbeat old sends a call to the former leader,
  which refuses it (NOT_COORDINATOR); the retry goes where the newer view says.

Limits: a write answered neither way (the peer stopped answering) is retried on a new
connection; if the old request were still unread in the peer's socket and applied after a
later write of the same key, that later write would be overtaken. The lock above makes this
need a peer paused with the request unread for the whole retry, shorter than its session.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from kcoord.protocol.apis import ApiKey
from kcoord.protocol.errors import ErrorCode
from kcoord.share.model import (
    PersistedState,
    SharePartitionKey,
    StateBatch,
    StateSummary,
    StateWrite,
)

from ..cluster.peers import PeerUnavailable
from ..data.topic_names import SHARE_GROUP_STATE_TOPIC
from .persister import ShareStateError
from .state_api import batch_fields

if TYPE_CHECKING:
    from ..cluster.peers import Peers
    from ..cluster.view import ClusterView
    from .state_runtime import ShareStateRuntime

WRITE_VERSION = 1
SUMMARY_VERSION = 1
NO_LEADER_EPOCH = -1
"""ReadShareGroupState's leader epoch: not checked by the share coordinator here (state_api)."""


class RoutingPersister:
    """A :class:`~broker.share.persister.SharePersister` for a clustered node (module
    docstring)."""

    def __init__(self, local: ShareStateRuntime, view: ClusterView, peers: Peers) -> None:
        self.local = local
        self.view = view
        self.peers = peers

    def coordinator_of(self, key: SharePartitionKey) -> int | None:
        """The node to ask about ``key``, None for this one."""
        leader = self.view.leader(SHARE_GROUP_STATE_TOPIC, self.local.partition_of(key))
        if leader is None or leader.node_id == self.view.node_id:
            return None
        return leader.node_id

    async def _ask(self, node_id: int, api_key: int, version: int, **fields: Any) -> Any:
        try:
            return await self.peers.request(node_id, api_key, version, **fields)
        except PeerUnavailable as e:
            raise ShareStateError(ErrorCode.coordinator_not_available, str(e)) from None

    # SharePersister -----------------------------------------------------------------------------
    async def read(self, key: SharePartitionKey) -> PersistedState:
        node = self.coordinator_of(key)
        if node is None:
            return await self.local.read(key)
        response = await self._ask(
            node, ApiKey.READ_SHARE_GROUP_STATE, 0, group_id=key.group_id,
            topics=[_topic(key.topic_id, dict(partition=key.partition, leader_epoch=NO_LEADER_EPOCH))],
        )
        p = _result(response, key)
        # The answer carries no leader epoch: the share partition does not use it (its writes
        # carry the data partition's own, from the view).
        return PersistedState(
            state_epoch=int(p.state_epoch),
            start_offset=int(p.start_offset),
            batches=tuple(
                StateBatch(
                    int(b.first_offset), int(b.last_offset), int(b.delivery_state),
                    int(b.delivery_count),
                )
                for b in p.state_batches
            ),
        )

    async def read_summary(self, key: SharePartitionKey) -> StateSummary:
        node = self.coordinator_of(key)
        if node is None:
            return await self.local.read_summary(key)
        response = await self._ask(
            node, ApiKey.READ_SHARE_GROUP_STATE_SUMMARY, SUMMARY_VERSION, group_id=key.group_id,
            topics=[_topic(key.topic_id, dict(partition=key.partition, leader_epoch=NO_LEADER_EPOCH))],
        )
        p = _result(response, key)
        return StateSummary(
            int(p.state_epoch), int(p.leader_epoch), int(p.start_offset),
            int(p.delivery_complete_count),
        )

    async def write(
        self, key: SharePartitionKey, state_epoch: int, leader_epoch: int, change: StateWrite
    ) -> None:
        node = self.coordinator_of(key)
        if node is None:
            return await self.local.write(key, state_epoch, leader_epoch, change)
        response = await self._ask(
            node, ApiKey.WRITE_SHARE_GROUP_STATE, WRITE_VERSION, group_id=key.group_id,
            topics=[_topic(key.topic_id, dict(
                partition=key.partition, state_epoch=state_epoch, leader_epoch=leader_epoch,
                start_offset=change.start_offset, state_batches=batch_fields(change.batches),
            ))],
        )
        _result(response, key)

    async def initialize(self, key: SharePartitionKey, state_epoch: int, start_offset: int) -> None:
        node = self.coordinator_of(key)
        if node is None:
            return await self.local.initialize(key, state_epoch, start_offset)
        response = await self._ask(
            node, ApiKey.INITIALIZE_SHARE_GROUP_STATE, 0, group_id=key.group_id,
            topics=[_topic(key.topic_id, dict(
                partition=key.partition, state_epoch=state_epoch, start_offset=start_offset
            ))],
        )
        _result(response, key)

    async def delete(self, keys: Iterable[SharePartitionKey]) -> None:
        """Forget ``keys``: those of this node's partitions here, the others in one request
        per node and group; the first error once every one was tried."""
        local: list[SharePartitionKey] = []
        remote: dict[tuple[int, str], list[SharePartitionKey]] = {}
        for key in keys:
            node = self.coordinator_of(key)
            if node is None:
                local.append(key)
            else:
                remote.setdefault((node, key.group_id), []).append(key)
        calls = [self._delete_at(node, group, ks) for (node, group), ks in remote.items()]
        if local:
            calls.append(self.local.delete(local))
        for outcome in await asyncio.gather(*calls, return_exceptions=True):
            if isinstance(outcome, BaseException):
                raise outcome

    async def _delete_at(self, node: int, group_id: str, keys: list[SharePartitionKey]) -> None:
        by_topic: dict[uuid.UUID, list[dict[str, Any]]] = {}
        for key in keys:
            by_topic.setdefault(key.topic_id, []).append(dict(partition=key.partition))
        response = await self._ask(
            node, ApiKey.DELETE_SHARE_GROUP_STATE, 0, group_id=group_id,
            topics=[dict(topic_id=t, partitions=ps) for t, ps in by_topic.items()],
        )
        for key in keys:
            _result(response, key)


def _topic(topic_id: uuid.UUID, partition: dict[str, Any]) -> dict[str, Any]:
    return dict(topic_id=topic_id, partitions=[partition])


def _result(response: Any, key: SharePartitionKey) -> Any:
    """The response's result for ``key``; ShareStateError with its error code if it has one
    (UNKNOWN_SERVER_ERROR if the response has none for it)."""
    for topic in response.results:
        if topic.topic_id != key.topic_id:
            continue
        for p in topic.partitions:
            if int(p.partition) == key.partition:
                if p.error_code:
                    raise ShareStateError(int(p.error_code), p.error_message or "")
                return p
    raise ShareStateError(
        ErrorCode.unknown_server_error, f"no answer for {key.coordinator_key()}"
    )
