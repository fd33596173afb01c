"""This node's part in the cluster: its session, and the loop that takes, hands over and drops
partitions (``../shared/DESIGN.md``, "Cluster mode").

:meth:`ClusterMember.join` registers the node id (``storage.postgres.cluster``), waiting out
the session of a former holder that is dead and refusing one that is alive. Then every
``broker.heartbeat.interval.ms`` (sooner when a topic was created here) :meth:`ClusterMember.round`

1. renews the session and reads a snapshot of the live nodes and every partition (one
   transaction), which becomes the view Metadata and FindCoordinator answer from;
2. takes the topic configs, ACLs and SCRAM users other nodes changed
   (``broker.cluster.documents``), and registers topics other nodes created, grew or deleted
   (the topic registry holds every partition: a placeholder where this node does not lead);
3. **drops** each partition whose row no longer names this node in the epoch it took it in (a
   successor took it while this node was paused or cut off: its flushes are fenced already,
   and now it stops serving at once);
4. **hands over** each partition the placement (``broker.cluster.placement``) gives to another
   live node: stop accepting (a placeholder in its place), let the appends already made
   complete through the flusher, hand the coordinator's state over (its shard unloads), close,
   and only then release the row, in the epoch it was taken in;
5. **takes** the partitions the placement gives it whose leader is absent, released or dead
   (one statement raises their epochs: ``ClusterStore.take``), opens each with its leadership as
   the log's fence, and tells the partition's coordinator (``owners``) to load it.

Why each step is safe: no step relies on timing. A take succeeds only in a transaction that
sees the old leader gone and raises the epoch; every flush checks leader and epoch in its own
transaction; a release names the epoch it gives up. So however late this loop runs (a paused
process, a slow database), at most one node's writes to a partition can commit in one epoch,
and a node that lost a partition learns it from a failed flush or from the next snapshot.

The database calls run on a thread of their own, never queued behind the flusher's.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from kcoord.storage.engine import LeaderFence, Log
from kcoord.storage.postgres.cluster import (
    ClusterSnapshot,
    ClusterStore,
    NodeIdTaken,
    NodeRow,
    PartitionRow,
)

from ..data.topic_names import INTERNAL_TOPICS
from .documents import SharedDocuments
from .identity import NodeIdInUse
from .led_engine import LedEngine
from .placement import placement
from .view import ClusterView, Endpoints, MemberFigures, NodeInfo

if TYPE_CHECKING:
    from ..data.flusher import Flusher
    from ..data.topics import TopicStore

log = logging.getLogger("kcoord.cluster")

T = TypeVar("T")
Key = tuple[str, int]


class Owner(Protocol):
    """The coordinator of an internal topic, told when this node gains or loses a partition."""

    async def lead(self, partition: int, plog: Log) -> None:
        """Load the partition from ``plog`` (COORDINATOR_LOAD_IN_PROGRESS meanwhile)."""

    async def resign(self, partition: int, placeholder: Log) -> None:
        """Stop serving the partition: what is in flight completes first (or fails), then the
        state is dropped and its requests answered NOT_COORDINATOR."""


class ClusterMember:
    def __init__(
        self,
        store: ClusterStore,
        engine: LedEngine,
        topics: TopicStore,
        view: ClusterView,
        flusher: Flusher,
        owners: Mapping[str, Owner],
        interval_s: float,
        documents: SharedDocuments | None = None,
    ) -> None:
        self.store = store
        self.engine = engine
        self.topics = topics
        self.view = view
        self.flusher = flusher
        self.owners = owners
        self.interval_s = interval_s
        self.documents = documents
        self.node_id = store.node_id
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="kcoord-cluster")
        self._wake = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._row_ids: dict[Key, int] = {}  # the database rows of the partitions led here
        self._placed: tuple[tuple[frozenset[Key], tuple[int, ...]], dict[Key, int]] | None = None
        self.taken = 0
        self.handed_over = 0
        self.fenced = 0
        engine.on_created = self.nudge

    def figures(self) -> MemberFigures:
        return MemberFigures(
            live_nodes=len(self.view.nodes),
            led=len(self.engine.fences),
            taken=self.taken,
            handed_over=self.handed_over,
            fenced=self.fenced,
        )

    async def _db(self, fn: Callable[..., T], *args: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, functools.partial(fn, *args))

    def nudge(self) -> None:
        """Run a round soon (any thread): partitions were created here."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._wake.set)

    # joining ----------------------------------------------------------------------------------------
    async def join(
        self,
        endpoints: Endpoints,
        rack: str | None,
        previous: uuid.UUID | None,
        console: str | None = None,
    ) -> None:
        """Register the node id (with the URL of this node's console, if served), then take
        this node's share. A former holder's session is waited out when it is not renewed (a
        dead process on another data directory); one that is renewed meanwhile is a live
        node: NodeIdInUse."""
        self._loop = asyncio.get_running_loop()
        seen: Any = None
        while True:
            try:
                await self._db(self.store.register, endpoints, rack, previous, console)
                break
            except NodeIdTaken as e:
                if seen is not None and e.expires_at != seen:
                    raise NodeIdInUse(
                        f"node.id {self.node_id} is in use by a live node (its session was"
                        " renewed while this one waited): give each node its own node.id"
                    ) from None
                if seen is None:
                    log.warning(
                        "node.id %d is registered by another process (session until %s):"
                        " waiting to see whether it is alive",
                        self.node_id,
                        e.expires_at,
                    )
                seen = e.expires_at
                await asyncio.sleep(self.interval_s * 1.5)
        self.view.set_own_endpoints(endpoints)
        log.info("node %d joined the cluster (incarnation %s)", self.node_id, self.store.incarnation)
        await self.round()

    async def run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.interval_s)
            self._wake.clear()
            try:
                await self.round()
            except asyncio.CancelledError:
                raise
            except OSError as e:
                log.warning("cluster round failed (again in %.1f s): %s", self.interval_s, e)
            except Exception:
                log.exception("cluster round failed")

    # one round ------------------------------------------------------------------------------------
    async def round(self) -> None:
        """The steps of the module docstring."""
        version = self.topics.version
        if not await self._db(self.store.renew):
            log.error(
                "node.id %d was registered by another process: this node leads nothing more",
                self.node_id,
            )
            for key in list(self.engine.fences):
                await self._drop(key, release=False)
            self.view.update([], [])
            return
        snap = await self._db(self.store.snapshot)
        if self.documents is not None:
            changed = self.documents.apply(await self._db(self.documents.read))
            if changed:
                log.info("changed on another node: %s", ", ".join(changed))
        if self.topics.version == version:  # no topic changed here during the read
            await self._sync_topics(snap)
        rows = {(r.topic, r.partition): r for r in snap.partitions}
        for key, fence in list(self.engine.fences.items()):
            r = rows.get(key)
            if r is None or (r.leader, r.epoch) != (self.node_id, fence.epoch):
                self.fenced += 1
                log.warning(
                    "%s-%d is now led by node %s in epoch %s: this node (epoch %d) stops serving it",
                    key[0], key[1], r and r.leader, r and r.epoch, fence.epoch,
                )
                await self._drop(key, release=False)
        if snap.alive:
            live = [n.node_id for n in snap.nodes]
            wanted = self._placement(rows, live)
            for key in list(self.engine.fences):
                if wanted.get(key) != self.node_id:
                    await self._drop(key, release=True)
            # Rows naming this node that it does not serve (a release or a take whose answer
            # was lost): released when they are another's, so that no partition waits on it.
            orphans = {
                r.row_id: r.epoch
                for key, r in rows.items()
                if r.leader == self.node_id
                and key not in self.engine.fences
                and wanted.get(key) != self.node_id
            }
            await self._db(self.store.release, orphans)
            free = [
                r
                for key, r in rows.items()
                if wanted.get(key) == self.node_id
                and key not in self.engine.fences
                and (r.leader is None or r.leader == self.node_id or r.leader not in live)
            ]
            taken = await self._db(self.store.take, [r.row_id for r in free])
            await self._lead([(r, taken[r.row_id]) for r in free if r.row_id in taken])
        self._update_view(snap)

    def _placement(self, rows: Mapping[Key, PartitionRow], live: list[int]) -> dict[Key, int]:
        """The placement, computed again only when the partitions or the live nodes changed
        (it hashes every partition once per node)."""
        inputs = (frozenset(rows), tuple(live))
        if self._placed is None or self._placed[0] != inputs:
            self._placed = (inputs, placement(rows, live))
        return self._placed[1]

    def _update_view(self, snap: ClusterSnapshot) -> None:
        leaders = {
            (r.topic, r.partition): LeaderFence(r.leader, r.epoch)
            for r in snap.partitions
            if r.leader is not None
        }
        for key in [k for k, f in leaders.items() if f.node_id == self.node_id]:
            if key not in self.engine.fences:
                del leaders[key]  # released (or dropped) during this round
        leaders.update(self.engine.fences)
        self.view.update(
            [_info(n) for n in snap.nodes], leaders.items(), [_info(n) for n in snap.dead]
        )

    async def _sync_topics(self, snap: ClusterSnapshot) -> None:
        """Register what other nodes created, grew or deleted (placeholders: not led here)."""
        found: dict[str, tuple[uuid.UUID, int]] = {}
        for r in snap.partitions:
            topic_id, count = found.get(r.topic, (r.topic_id, 0))
            found[r.topic] = (topic_id, max(count, r.partition + 1))
        topics = self.topics
        for name in [n for n in topics.topics if n not in found and n not in INTERNAL_TOPICS]:
            if topics.pending(name) is None:
                await self._forget(name)
        for name, (topic_id, count) in found.items():
            topic = topics.get(name)
            if topic is not None and topic.topic_id != topic_id and name not in INTERNAL_TOPICS:
                await self._forget(name)  # deleted and created again elsewhere
                topic = None
            if topic is None and topics.pending(name) is None:
                topics.adopt(name, topic_id, count)
            elif topic is not None and len(topic.partitions) < count:
                topics.grow(name, count)

    def _again_once_registered(self, name: str) -> None:
        """A round as soon as the change of ``name`` under way here is registered: its rows
        are written (and the round nudged, :meth:`nudge`) from the worker thread before the
        event loop registers the topic, so that round may find it not registered yet."""
        res = self.topics.pending(name)
        if res is not None and res.done is not None and not res.done.done():
            res.done.add_done_callback(lambda _: self.nudge())

    async def _forget(self, name: str) -> None:
        for key in [k for k in self.engine.fences if k[0] == name]:
            await self._drop(key, release=False)
        self.topics.forget(name)

    # leading and dropping one partition -----------------------------------------------------------
    async def _lead(self, taken: list[tuple[PartitionRow, int]]) -> None:
        """Serve the partitions just taken: open their logs (in one worker thread), put each in
        its place and have its coordinator load it, all without awaiting in between, so that
        the coordinators load them together."""
        ready = []
        for r, epoch in taken:
            topic = self.topics.get(r.topic)
            if topic is None or topic.topic_id != r.topic_id or len(topic.partitions) <= r.partition:
                await self._db(self.store.release, {r.row_id: epoch})  # not registered here yet
                self._again_once_registered(r.topic)
                continue
            self.engine.fences[(r.topic, r.partition)] = LeaderFence(self.node_id, epoch)
            self._row_ids[(r.topic, r.partition)] = r.row_id
            ready.append((r, epoch, topic))
        opened = await asyncio.to_thread(
            lambda: [
                self.engine.open_log(r.topic, r.partition, r.topic_id, self.topics.spec_of(topic))
                for r, _, topic in ready
            ]
        )
        for (r, epoch, topic), plog in zip(ready, opened, strict=True):
            if not self.topics.replace_log(topic, r.partition, topic.partitions[r.partition], plog):
                plog.close()  # the topic was deleted meanwhile
                continue
            self.taken += 1
            log.info("leading %s-%d in epoch %d", r.topic, r.partition, epoch)
            owner = self.owners.get(r.topic)
            if owner is not None:
                await owner.lead(r.partition, plog)

    async def _drop(self, key: Key, release: bool) -> None:
        """Stop leading ``key``; with ``release``, a clean hand-over (module docstring, step 4)."""
        fence = self.engine.fences.pop(key)
        row_id = self._row_ids.pop(key)
        name, index = key
        topic = self.topics.get(name)
        old = self.topics.partition(name, index)
        if topic is not None and old is not None:
            placeholder = self.engine.placeholder(name, index)
            topic.partitions[index] = placeholder
            owner = self.owners.get(name)
            if owner is not None:
                await owner.resign(index, placeholder)
            if release:
                try:
                    await self.flusher.sync([old])
                except Exception as e:  # noqa: BLE001 - an offline log: its waiters were told
                    log.debug("%s: in-flight appends failed before the hand-over: %s", old.name, e)
            try:
                await asyncio.to_thread(old.close)
            except OSError as e:
                log.debug("closing %s: %s", old.name, e)
        if release:
            await self._db(self.store.release, {row_id: fence.epoch})
            self.handed_over += 1
            log.info("handed %s-%d over (epoch %d)", name, index, fence.epoch)

    async def leave(self) -> None:
        """A clean shutdown: hand every partition over, then end the session."""
        for key in list(self.engine.fences):
            try:
                await self._drop(key, release=True)
            except OSError as e:
                log.warning("handing %s-%d over failed: %s", key[0], key[1], e)
        try:
            await self._db(self.store.leave)
        except OSError as e:
            log.warning("ending this node's session failed: %s", e)
        self._executor.shutdown(wait=False)


def _info(n: NodeRow) -> NodeInfo:
    return NodeInfo(n.node_id, n.listeners, n.rack, n.console, n.heartbeat_age_ms)
