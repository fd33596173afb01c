"""The console's cluster page (``/api/cluster``): the nodes, who leads what, and every group of
the cluster with the node coordinating it.

The nodes and leaders come from the cluster view (``broker.cluster.view``) as of this node's
last heartbeat: the live nodes, and those whose session expired without a clean leave (dead, by
the database's clock), each with the URL of its console as it registered it and the age of its
last heartbeat. What each node leads is given per topic as a count and compact ranges
(``0-5,9``), with every partition's leader epoch for the page to expand; the internal topics'
partitions are the coordinators' shards (``__consumer_offsets`` for groups,
``__transaction_state`` for transactions), shown whatever topics the viewer may describe, as
FindCoordinator tells any client where they are.

The groups: this node's from its own shards (what ListGroups answers), every other live node's
by a ListGroups request to it (``broker.cluster.peers``), all at once, each bounded by
:data:`PEER_TIMEOUT_S`. A node that does not answer in time, or cannot be asked, is listed as
unreachable with the reason, and the page is answered without its groups; one whose shards are
partly still loading is listed under ``loading`` with the groups it could list. Each group is named
with the node that answered for it (its coordinator) and its ``__consumer_offsets`` shard.
Under an authorizer, a node lists to another only what the inter-node principal may describe
(``User:ANONYMOUS``, like every inter-node request: docs/cluster.md); the viewer's own rights
then filter every row, as on the groups page.

On one node (no cluster), the page shows this node alone, leading everything.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, NamedTuple

from kcoord.coordinator import messages as m
from kcoord.coordinator.classic.manager import listed_groups
from kcoord.coordinator.consumer.describe import listed_consumer_groups
from kcoord.coordinator.share.describe import listed_share_groups
from kcoord.protocol.apis import ApiKey
from kcoord.protocol.errors import ErrorCode

from ..cluster.peers import Peers, PeerUnavailable
from ..cluster.view import ClusterView, NodeInfo
from ..data.topic_names import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC
from ..net.offload import SLICE, pause

if TYPE_CHECKING:
    from .login import Viewer
    from .views import ConsoleState

PEER_TIMEOUT_S = 2.0
"""How long the page waits for another node's groups."""
_LIST_GROUPS_VERSION = 5  # with the group type (KIP-848)
_EVERY_GROUP = m.ListGroupsRequest(states_filter=frozenset(), types_filter=frozenset())


def ranges(numbers: Iterable[int]) -> str:
    """Integers as compact ranges, ascending: ``[0, 1, 2, 5, 7, 8]`` is ``0-2,5,7-8``."""
    out: list[str] = []
    run: list[int] = []
    for n in sorted(numbers):
        if run and n == run[-1] + 1:
            run.append(n)
            continue
        if run:
            out.append(_run(run))
        run = [n]
    if run:
        out.append(_run(run))
    return ",".join(out)


def _run(run: list[int]) -> str:
    return str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}"


async def describe_cluster(
    state: ConsoleState, *, limit: int, match: str, viewer: Viewer | None = None
) -> dict[str, Any]:
    """The cluster page's JSON (module docstring): up to ``limit`` groups whose id contains
    ``match`` (and that the viewer may describe)."""
    view = state.view or ClusterView(state.runtime.config["node.id"], (), None, False)
    others: list[int] = []
    asked = []
    if view.clustered and state.peers is not None:
        others = [n.node_id for n in view.live_nodes() if n.node_id != view.node_id]
        asked = [_peer_groups(state.peers, n) for n in others]
    answers = await asyncio.gather(_local_groups(state), *asked)
    groups: list[dict[str, Any]] = []
    unreachable: list[dict[str, Any]] = []
    incomplete: list[int] = []
    per_node: dict[int, int] = {}
    for node_id, answer in zip([view.node_id, *others], answers, strict=True):
        if answer.error is not None:
            unreachable.append({"node_id": node_id, "error": answer.error})
        if answer.loading:
            incomplete.append(node_id)
        for g in answer.groups:
            if viewer is not None and not viewer.group(g.group_id):
                continue
            per_node[node_id] = per_node.get(node_id, 0) + 1
            if match in g.group_id:
                groups.append(
                    {
                        "group": g.group_id,
                        "type": g.group_type,
                        "state": g.state,
                        "protocol_type": g.protocol_type,
                        "coordinator": node_id,
                        "shard": state.runtime.partition_of(g.group_id),
                    }
                )
    groups.sort(key=lambda g: (g["group"], g["coordinator"]))
    leadership = await _leadership(state, view, viewer)
    return {
        "now_ms": state.clock(),
        "clustered": view.clustered,
        "node_id": view.node_id,
        "controller_id": view.controller_id,
        "nodes": _nodes(state, view, leadership, per_node),
        "leadership": leadership,
        "groups_total": len(groups),
        "truncated": len(groups) > limit,
        "groups": groups[:limit],
        "unreachable": unreachable,
        "loading": incomplete,
    }


class Listed(NamedTuple):
    """One node's groups: all of them; those of its loaded shards while others are ``loading``
    (COORDINATOR_LOAD_IN_PROGRESS); or none, and the ``error`` that kept it from answering."""

    groups: list[m.ListedGroup]
    loading: bool = False
    error: str | None = None


async def _local_groups(state: ConsoleState) -> Listed:
    """This node's groups, as its ListGroups lists them (every type, every state)."""
    out: list[m.ListedGroup] = []
    loading = False
    for sr in state.runtime.shards:
        shard = sr.shard
        if shard.loading:
            loading = True
            continue
        out.extend(listed_groups(shard.groups(), _EVERY_GROUP))
        out.extend(listed_consumer_groups(shard.consumer_groups(), _EVERY_GROUP))
        out.extend(listed_share_groups(shard.share_groups(), _EVERY_GROUP))
        if len(out) >= SLICE:
            await pause()
    return Listed(out, loading)


async def _peer_groups(peers: Peers, node_id: int) -> Listed:
    """Node ``node_id``'s groups, by ListGroups (module docstring)."""
    try:
        r = await asyncio.wait_for(
            peers.request(
                node_id, ApiKey.LIST_GROUPS, _LIST_GROUPS_VERSION, states_filter=[], types_filter=[]
            ),
            PEER_TIMEOUT_S,
        )
    except TimeoutError:
        return Listed([], error=f"no answer within {PEER_TIMEOUT_S:.0f} s")
    except PeerUnavailable as e:
        return Listed([], error=str(e))
    listed = [
        m.ListedGroup(g.group_id, g.protocol_type, g.group_state, g.group_type) for g in r.groups
    ]
    return Listed(listed, loading=r.error_code == ErrorCode.coordinator_load_in_progress)


async def _leadership(
    state: ConsoleState, view: ClusterView, viewer: Viewer | None
) -> list[dict[str, Any]]:
    """Per topic and leading node (None: no live leader): the partitions, as a count, ranges,
    and (partition, leader epoch) pairs."""
    out: list[dict[str, Any]] = []
    work = 0
    topics = state.topics.topics
    for name in sorted(topics):
        topic = topics[name]
        if not topic.internal and viewer is not None and not viewer.topic(name):
            continue
        led: dict[int | None, list[tuple[int, int]]] = {}
        for index in range(len(topic.partitions)):
            fence = view.leader(name, index)
            if fence is None:
                led.setdefault(None, []).append((index, -1))
            else:
                led.setdefault(fence.node_id, []).append((index, fence.epoch))
        for node_id in sorted(led, key=lambda n: -1 if n is None else n):
            pairs = led[node_id]
            out.append(
                {
                    "topic": name,
                    "internal": topic.internal,
                    "node_id": node_id,
                    "count": len(pairs),
                    "ranges": ranges(p for p, _ in pairs),
                    "partitions": [list(pair) for pair in pairs],
                }
            )
        work += len(topic.partitions)
        if work >= SLICE:
            work = 0
            await pause()
    return out


def _nodes(
    state: ConsoleState, view: ClusterView, leadership: list[dict[str, Any]], groups: dict[int, int]
) -> list[dict[str, Any]]:
    """The live nodes, then the dead ones, each with what it leads."""
    since_ms = int((time.monotonic() - view.seen_at) * 1000)
    figures = state.figures() if state.figures is not None and view.clustered else None

    def row(n: NodeInfo, alive: bool) -> dict[str, Any]:
        mine = [e for e in leadership if e["node_id"] == n.node_id]
        first = n.endpoints[0] if n.endpoints else None
        this = n.node_id == view.node_id and alive
        return {
            "node_id": n.node_id,
            "host": first[1] if first else None,
            "port": first[2] if first else None,
            "listeners": [{"name": a, "host": h, "port": p} for a, h, p in n.endpoints],
            "rack": n.rack,
            "console": n.console,
            "alive": alive,
            "heartbeat_age_ms": None
            if n.heartbeat_age_ms is None
            else n.heartbeat_age_ms + since_ms,
            "this": this,
            "controller": alive and n.node_id == view.controller_id,
            "partitions": sum(e["count"] for e in mine),
            "group_shards": sum(e["count"] for e in mine if e["topic"] == OFFSETS_TOPIC),
            "transaction_shards": sum(
                e["count"] for e in mine if e["topic"] == TRANSACTION_STATE_TOPIC
            ),
            "groups": groups.get(n.node_id, 0) if alive else 0,
            "figures": None
            if not this or figures is None
            else {
                "led": figures.led,
                "taken": figures.taken,
                "handed_over": figures.handed_over,
                "fenced": figures.fenced,
            },
        }

    return [row(n, True) for n in view.live_nodes()] + [
        row(n, False) for n in sorted(view.dead, key=lambda n: n.node_id)
    ]
