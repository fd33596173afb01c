"""What this node knows of the cluster: the live nodes and who leads each partition.

Metadata and FindCoordinator answer from a :class:`ClusterView`. A node without a cluster (the
files engine) has a *single* view: itself, leading every partition in epoch 0. In cluster mode
the member loop (``broker.cluster.member``) replaces the view's contents with each snapshot of
the database; between snapshots it may be a heartbeat old, which clients absorb by retrying
(NOT_LEADER_OR_FOLLOWER, NOT_COORDINATOR), as they do with Kafka's metadata.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from kcoord.protocol.errors import ErrorCode
from kcoord.storage.engine import LeaderFence

Endpoints = tuple[tuple[str, str, int], ...]
"""A node's advertised listeners: (listener name, host, port)."""


@dataclass(frozen=True, slots=True)
class NodeInfo:
    node_id: int
    endpoints: Endpoints
    rack: str | None
    console: str | None = None
    """The URL of the node's console (None: not served, or not advertised)."""
    heartbeat_age_ms: int | None = None
    """How long before the snapshot its session was renewed, by the database's clock."""

    def address(self, listener: str) -> tuple[str, int] | None:
        """The node's address on the listener named ``listener`` (clients are told the address
        on the listener they came in on, as Kafka does), or None if it has no such listener."""
        for name, host, port in self.endpoints:
            if name == listener:
                return host, port
        return None


@dataclass(frozen=True, slots=True)
class MemberFigures:
    """This node's part in the cluster, for ``/metrics`` and ``kcoord cluster describe``."""

    live_nodes: int
    led: int
    taken: int
    handed_over: int
    fenced: int


class ClusterView:
    """The nodes and leaders as this node last saw them (module docstring)."""

    def __init__(self, node_id: int, endpoints: Endpoints, rack: str | None, clustered: bool) -> None:
        self.node_id = node_id
        self.clustered = clustered
        self.nodes: dict[int, NodeInfo] = {node_id: NodeInfo(node_id, endpoints, rack)}
        self.dead: list[NodeInfo] = []
        """Nodes whose session expired without a clean leave (the console lists them)."""
        self.seen_at = time.monotonic()
        """When the last snapshot was taken (the heartbeat ages are as of then)."""
        self._leaders: dict[tuple[str, int], LeaderFence] = {}

    def set_own_endpoints(self, endpoints: Endpoints) -> None:
        """This node's advertised listeners once bound (``--port 0``)."""
        me = self.nodes.get(self.node_id)
        self.nodes[self.node_id] = (
            NodeInfo(self.node_id, endpoints, None) if me is None else replace(me, endpoints=endpoints)
        )

    def update(
        self,
        nodes: Sequence[NodeInfo],
        leaders: Iterable[tuple[tuple[str, int], LeaderFence]],
        dead: Sequence[NodeInfo] = (),
    ) -> None:
        """A new snapshot: the live nodes, each led partition's leader and epoch, and the
        nodes found dead."""
        self.nodes = {n.node_id: n for n in nodes}
        self._leaders = dict(leaders)
        self.dead = list(dead)
        self.seen_at = time.monotonic()

    def leader(self, topic: str, partition: int) -> LeaderFence | None:
        """Who leads the partition and in which epoch (None: nobody, or a node not alive)."""
        if not self.clustered:
            return LeaderFence(self.node_id, 0)
        found = self._leaders.get((topic, partition))
        if found is None or found.node_id not in self.nodes:
            return None
        return found

    def epoch_error(self, topic: str, partition: int, requested: int) -> tuple[int, int]:
        """(error, epoch) for a client's ``current_leader_epoch`` on a partition led here
        (KIP-320, Fetch v9+ and ListOffsets v4+): FENCED_LEADER_EPOCH when the client's is older
        than the leader's (it refreshes its metadata), UNKNOWN_LEADER_EPOCH when newer (this
        node has not seen that epoch yet); -1 asks for no check."""
        leader = self.leader(topic, partition)
        epoch = leader.epoch if leader is not None else -1
        if requested < 0 or leader is None or requested == epoch:
            return 0, epoch
        if requested < epoch:
            return ErrorCode.fenced_leader_epoch, epoch
        return ErrorCode.unknown_leader_epoch, epoch

    def live_nodes(self) -> list[NodeInfo]:
        return sorted(self.nodes.values(), key=lambda n: n.node_id)

    @property
    def controller_id(self) -> int:
        """The lowest live node id (Kafka names one controller; kcoord's is PostgreSQL)."""
        return min(self.nodes, default=self.node_id)
