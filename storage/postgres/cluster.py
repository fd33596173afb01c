"""Cluster mode's state in the database: which nodes are alive, and who leads each partition.

Every statement a node makes about membership and leadership is one transaction here, judged
by the database's clock (``now()``), never by the node's:

* **Sessions.** A node registers its id with a new *incarnation* (a UUID per process) and
  renews ``expires_at = now() + session`` every heartbeat; a row whose ``expires_at`` has passed
  is a dead node. Registering is refused (:class:`NodeIdTaken`) while another incarnation's
  session for the id is alive, unless that incarnation is the one this node's data directory
  last ran (the same data directory, whose lock the new process holds: the old one is gone).
* **Taking a partition** (:meth:`ClusterStore.take`) raises its leader epoch and names this node
  in one ``UPDATE`` whose ``WHERE`` finds the current leader absent, released or dead, and this
  node's own session alive. Two nodes taking at once serialise on the row; the second finds a
  live leader and takes nothing.
* **Fencing.** Every flush checks the leader and epoch it writes under inside its own
  transaction, under the row lock (``storage.postgres.flush``), so a node that was paused past
  its session, or cut off, cannot write once a successor has taken the partition, whatever its
  clocks say: safety never depends on timing, only liveness does.
* **Releasing** (:meth:`ClusterStore.release`) clears the leader only if it is still this node
  in the epoch it took, after the node stopped writing and flushed (a clean hand-over).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

from .pool import ConnectionPool, database_errors


@dataclass(frozen=True, slots=True)
class NodeRow:
    """A node: its id, advertised listeners (name, host, port) and rack, its console's URL,
    and how long ago (by the database's clock) its session was last renewed."""

    node_id: int
    listeners: tuple[tuple[str, str, int], ...]
    rack: str | None
    console: str | None = None
    heartbeat_age_ms: int | None = None
    """None: not known (a row written before schema version 3)."""


@dataclass(frozen=True, slots=True)
class PartitionRow:
    """One partition's catalogue entry and leadership."""

    row_id: int
    topic: str
    partition: int
    topic_id: uuid.UUID
    leader: int | None
    epoch: int


@dataclass(frozen=True, slots=True)
class ClusterSnapshot:
    """What one read of the database saw: the live nodes and every partition."""

    nodes: tuple[NodeRow, ...]
    """The live nodes."""
    partitions: tuple[PartitionRow, ...]
    alive: bool
    """Whether this node's own session was alive (renewed within the session timeout)."""
    dead: tuple[NodeRow, ...] = ()
    """The nodes whose session expired without a clean leave (what the console shows)."""


class NodeIdTaken(RuntimeError):
    """Another live incarnation holds this node id."""

    def __init__(self, node_id: int, expires_at: datetime) -> None:
        super().__init__(f"node.id {node_id} is held by a live node (session until {expires_at})")
        self.node_id = node_id
        self.expires_at = expires_at


class ClusterStore:
    """The membership and leadership statements of node ``node_id`` (incarnation
    ``incarnation``); blocking, any thread; database errors raise ``DatabaseError``."""

    def __init__(
        self, pool: ConnectionPool, node_id: int, incarnation: uuid.UUID, session_ms: int
    ) -> None:
        self.pool = pool
        self.node_id = node_id
        self.incarnation = incarnation
        self.session_ms = session_ms

    def register(
        self,
        listeners: Iterable[tuple[str, str, int]],
        rack: str | None,
        previous: uuid.UUID | None,
        console: str | None = None,
    ) -> None:
        """Hold the node id with this incarnation (NodeIdTaken while another live one does,
        ``previous`` excepted). The partitions the id led are released in the same transaction:
        their epochs stay, so the old incarnation, should it still run, is fenced as soon as
        anyone takes them (this node included, with a higher epoch). ``console``: the URL of
        this node's console, shown by the other nodes' consoles."""
        listed = json.dumps([list(x) for x in listeners])
        with database_errors(), self.pool.connection() as conn, conn.transaction():
            row = conn.execute(
                "SELECT incarnation, expires_at, expires_at > now() FROM nodes"
                " WHERE node_id = %s FOR UPDATE",
                (self.node_id,),
            ).fetchone()
            if row is not None and row[2] and row[0] not in (self.incarnation, previous):
                raise NodeIdTaken(self.node_id, row[1])
            conn.execute(
                "INSERT INTO nodes (node_id, incarnation, listeners, rack, console, renewed_at,"
                " expires_at) VALUES (%s, %s, %s, %s, %s, now(),"
                " now() + %s * interval '1 millisecond')"
                " ON CONFLICT (node_id) DO UPDATE SET incarnation = EXCLUDED.incarnation,"
                " listeners = EXCLUDED.listeners, rack = EXCLUDED.rack,"
                " console = EXCLUDED.console, registered_at = now(), renewed_at = now(),"
                " expires_at = EXCLUDED.expires_at",
                (self.node_id, self.incarnation, listed, rack, console, self.session_ms),
            )
            conn.execute("UPDATE partitions SET leader = NULL WHERE leader = %s", (self.node_id,))

    def holder(self) -> tuple[uuid.UUID, datetime, bool] | None:
        """The node id's row: (incarnation, expires_at, alive), or None."""
        with database_errors(), self.pool.connection() as conn:
            row = conn.execute(
                "SELECT incarnation, expires_at, expires_at > now() FROM nodes WHERE node_id = %s",
                (self.node_id,),
            ).fetchone()
        return None if row is None else (row[0], row[1], row[2])

    def renew(self) -> bool:
        """Extend this incarnation's session; False if the id is no longer ours (another
        incarnation registered it: this node must stop serving)."""
        with database_errors(), self.pool.connection() as conn:
            cur = conn.execute(
                "UPDATE nodes SET expires_at = now() + %s * interval '1 millisecond',"
                " renewed_at = now()"
                " WHERE node_id = %s AND incarnation = %s",
                (self.session_ms, self.node_id, self.incarnation),
            )
        return cur.rowcount == 1

    def snapshot(self) -> ClusterSnapshot:
        """The nodes (live and dead) and every partition, read in one transaction (one
        consistent view)."""
        with database_errors(), self.pool.connection() as conn, conn.transaction():
            nodes = []
            dead = []
            alive = False
            for node_id, incarnation, listeners, rack, console, live, age in conn.execute(
                "SELECT node_id, incarnation, listeners, rack, console, expires_at > now(),"
                " (extract(epoch FROM now() - renewed_at) * 1000)::bigint"
                " FROM nodes ORDER BY node_id"
            ):
                if node_id == self.node_id and incarnation != self.incarnation:
                    continue
                endpoints = tuple((str(n), str(h), int(p)) for n, h, p in json.loads(listeners))
                row = NodeRow(node_id, endpoints, rack or None, console, age)
                if not live:
                    dead.append(row)
                    continue
                alive = alive or node_id == self.node_id
                nodes.append(row)
            partitions = tuple(
                PartitionRow(*row)
                for row in conn.execute(
                    "SELECT id, topic, partition, topic_id, leader, leader_epoch FROM partitions"
                    " WHERE NOT deleted ORDER BY topic, partition"
                )
            )
        return ClusterSnapshot(tuple(nodes), partitions, alive, tuple(dead))

    def take(self, row_ids: Iterable[int]) -> dict[int, int]:
        """Lead the listed partitions that have no live leader: their new epochs by row id.

        Safe because the test of the old leader and the epoch raise are one statement under
        the row locks: a leader that is alive keeps its partition, and once the epoch moved
        every flush of the old leader fails its own check (module docstring). This node's
        session must be alive too, or a node that does not know it was declared dead could
        take partitions back."""
        ids = list(row_ids)
        if not ids:
            return {}
        with database_errors(), self.pool.connection() as conn:
            rows = conn.execute(
                "UPDATE partitions p SET leader = %(me)s, leader_epoch = p.leader_epoch + 1"
                " WHERE p.id = ANY(%(ids)s) AND NOT p.deleted"
                " AND (p.leader IS NULL OR NOT EXISTS (SELECT 1 FROM nodes n"
                "      WHERE n.node_id = p.leader AND n.expires_at > now()))"
                " AND EXISTS (SELECT 1 FROM nodes n WHERE n.node_id = %(me)s"
                "      AND n.incarnation = %(inc)s AND n.expires_at > now())"
                " RETURNING p.id, p.leader_epoch",
                {"me": self.node_id, "ids": ids, "inc": self.incarnation},
            ).fetchall()
        return dict(rows)

    def release(self, epochs: Mapping[int, int]) -> None:
        """Give up the partitions (row id → the epoch this node took each in): only those it
        still leads in that epoch, so a release can never undo a successor's take."""
        if not epochs:
            return
        with database_errors(), self.pool.connection() as conn:
            conn.cursor().executemany(
                "UPDATE partitions SET leader = NULL"
                " WHERE id = %s AND leader = %s AND leader_epoch = %s",
                [(row_id, self.node_id, epoch) for row_id, epoch in epochs.items()],
            )

    def leave(self) -> None:
        """End this incarnation's session (a clean shutdown, after :meth:`release`): the others
        see the node gone at once instead of after the session timeout."""
        with database_errors(), self.pool.connection() as conn:
            conn.execute(
                "DELETE FROM nodes WHERE node_id = %s AND incarnation = %s",
                (self.node_id, self.incarnation),
            )
