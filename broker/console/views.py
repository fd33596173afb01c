"""What the console's JSON says: groups, one group, topics, read from the broker's own state.

Everything comes from the running broker, never through the Kafka protocol: the shards' groups
and committed offsets, the partition logs' offsets and sizes, and the runtime's rebalance
history. Big reads (every group, every topic) pause for the event loop every
``offload.SLICE`` items, as a ``/metrics`` scrape does, and every answer is bounded (``limit``).

Lag is the partition's high watermark (what Fetch reports) minus the committed offset, counted
from the log start offset when the commit is below it (as ``/metrics`` counts it); lag in time
is the age of the oldest unconsumed record: now minus the timestamp of the record at the
committed offset. Both are computed as ``/metrics`` computes them (broker/metrics/lag.py).

Share groups (KIP-932) are listed beside the others with type ``share``; their rows and page
come from broker/console/share_views.py.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kcoord.coordinator.classic.group import ClassicGroup, GroupState
from kcoord.coordinator.consumer.group import ASSIGNING, RECONCILING, ConsumerGroup
from kcoord.coordinator.consumer.target import preferred_assignor
from kcoord.coordinator.rebalances import as_json, decode_assignment
from kcoord.coordinator.share.group import ShareGroup
from kcoord.storage.engine import Log

from ..metrics.lag import RecordTimes, partition_lag
from ..net.offload import SLICE, pause
from .history import LagHistory
from .share_views import describe_share_group, share_summary

if TYPE_CHECKING:
    from ..cluster.peers import Peers
    from ..cluster.view import ClusterView, MemberFigures
    from ..data.topics import TopicStore
    from ..groups.runtime import GroupRuntime
    from ..share.partitions import SharePartitionManager
    from .login import Viewer

HOUR_MS = 3_600_000
REBALANCING = frozenset(
    {
        GroupState.PREPARING_REBALANCE.value,
        GroupState.COMPLETING_REBALANCE.value,
        ASSIGNING,
        RECONCILING,
    }
)
MAX_GROUPS = 10_000
"""The most groups (topics' partitions) one answer lists; ``limit`` asks for fewer."""
GROUPS_PER_PARTITION = 20
"""Groups named per partition on the topics page (the count is always given)."""


@dataclass(slots=True)
class ConsoleState:
    """What the console reads: the group runtime (shards and rebalance history), the topics,
    and the clock."""

    runtime: GroupRuntime
    topics: TopicStore
    clock: Callable[[], int]
    """Wall-clock milliseconds (the coordinator's clock)."""
    times: RecordTimes = field(default_factory=RecordTimes)
    shares: SharePartitionManager | None = None
    """The share partitions held here (share groups' pages); None: share groups show no
    share partition."""
    lag_history: LagHistory = field(default_factory=LagHistory)
    """Each group's recent lag (the sparklines), sampled as it is computed here."""
    view: ClusterView | None = None
    """The nodes and who leads what (the cluster page); None: this node alone."""
    peers: Peers | None = None
    """Requests to the other nodes (cluster mode: their groups, for the cluster page)."""
    figures: Callable[[], MemberFigures] | None = None
    """This node's part in the cluster (``ClusterMember.figures``)."""


def _partition_lag(
    state: ConsoleState, topic: str, partition: int, offset: int, now: int, budget: list[int]
) -> tuple[Log | None, int | None, float | None]:
    """(log, lag in messages, lag in seconds) of a committed offset (broker/metrics/lag.py)."""
    return partition_lag(state.topics, state.times, topic, partition, offset, now, budget)


def _kind(group: ClassicGroup | ConsumerGroup) -> str:
    return "consumer" if isinstance(group, ConsumerGroup) else "classic"


def _state(group: ClassicGroup | ConsumerGroup) -> str:
    return group.state if isinstance(group, ConsumerGroup) else group.state.value


def _protocol(state: ConsoleState, group: ClassicGroup | ConsumerGroup) -> str | None:
    if isinstance(group, ConsumerGroup):
        return preferred_assignor(group, state.runtime.group_config.consumer_assignors[0]).name
    return group.protocol_name


def _summary(
    state: ConsoleState,
    shard: Any,
    group: ClassicGroup | ConsumerGroup,
    now: int,
    stuck_ms: int,
    budget: list[int],
) -> dict[str, Any]:
    gid = group.group_id
    history = state.runtime.rebalances
    lag = 0
    lag_seconds: float | None = 0.0
    for (topic, partition), value in shard.committed_offsets(gid).items():
        _, behind, seconds = _partition_lag(state, topic, partition, value.offset, now, budget)
        if behind is None:
            continue
        lag += behind
        if lag_seconds is not None:
            lag_seconds = None if seconds is None else max(lag_seconds, seconds)
    state.lag_history.sample(gid, now, lag)
    group_state = _state(group)
    under_way = shard.rebalance_under_way(gid) if group_state in REBALANCING else None
    since = under_way.started_ms if under_way is not None else None
    last = history.last(gid)
    last_end = last.started_ms + last.duration_ms if last is not None else None
    return {
        "group": gid,
        "type": _kind(group),
        "state": group_state,
        "protocol": _protocol(state, group),
        "members": len(group.members),
        "lag": lag,
        "lag_seconds": lag_seconds,
        "last_rebalance_ms": last_end,
        "since_rebalance_ms": None if last_end is None else max(now - last_end, 0),
        "rebalances_last_hour": history.count_since(gid, now - HOUR_MS),
        "rebalancing_since_ms": since,
        "stuck": since is not None and now - since > stuck_ms,
    }


async def list_groups(
    state: ConsoleState, *, limit: int, match: str, stuck_ms: int, viewer: Viewer | None = None
) -> dict[str, Any]:
    """Every group (up to ``limit``, by group id) whose id contains ``match`` (and that the
    viewer may describe)."""
    now = state.clock()
    budget = [1000]
    found: list[tuple[Any, ClassicGroup | ConsumerGroup | ShareGroup]] = []
    total = 0
    for sr in state.runtime.shards:
        shard = sr.shard
        groups: list[ClassicGroup | ConsumerGroup | ShareGroup] = [
            *shard.groups(), *shard.consumer_groups(), *shard.share_groups()
        ]
        for group in groups:
            if match in group.group_id and (viewer is None or viewer.group(group.group_id)):
                total += 1
                found.append((shard, group))
        if len(groups) >= SLICE:
            await pause()
    found.sort(key=lambda pair: pair[1].group_id)
    rows = []
    work = 0
    for shard, group in found[:limit]:
        if isinstance(group, ShareGroup):
            rows.append(share_summary(state.shares, group, now))
        else:
            rows.append(_summary(state, shard, group, now, stuck_ms, budget))
        work += 1 + len(group.members)
        if work >= SLICE:
            work = 0
            await pause()
    return {
        "now_ms": now,
        "stuck_ms": stuck_ms,
        "total": total,
        "truncated": total > len(rows),
        "groups": rows,
    }


def _classic_members(group: ClassicGroup) -> list[dict[str, Any]]:
    out = []
    for m in group.members.values():
        parts = decode_assignment(m.assignment)
        out.append(
            {
                "member_id": m.member_id,
                "instance_id": m.group_instance_id,
                "client_id": m.client_id,
                "host": m.client_host,
                "generation": group.generation,
                "assignment": _by_topic(parts),
                "last_heartbeat_ms": (m.heartbeat_deadline - m.session_timeout_ms)
                if m.heartbeat_deadline
                else None,
                "leader": m.member_id == group.leader_id,
            }
        )
    return out


def _consumer_members(state: ConsoleState, group: ConsumerGroup) -> list[dict[str, Any]]:
    session = state.runtime.group_config.consumer_session_timeout_ms
    by_id = state.topics.by_id
    out = []
    for m in group.members.values():
        parts: list[tuple[str, int]] = []
        for topic_id, partitions in m.assigned.items():
            topic = by_id.get(topic_id)
            name = topic.name if topic is not None else str(topic_id)
            parts.extend((name, p) for p in partitions)
        timers = group.timers.get(m.member_id)
        deadline = timers.session_deadline if timers is not None else 0
        out.append(
            {
                "member_id": m.member_id,
                "instance_id": m.instance_id,
                "client_id": m.client_id,
                "host": m.client_host,
                "epoch": m.member_epoch,
                "member_state": m.state.name,
                "assignment": _by_topic(parts),
                "last_heartbeat_ms": deadline - session if deadline else None,
            }
        )
    return out


def _by_topic(parts: list[tuple[str, int]]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for topic, p in sorted(parts):
        out.setdefault(topic, []).append(p)
    return out


def describe_group(
    state: ConsoleState, group_id: str, *, stuck_ms: int, viewer: Viewer | None = None
) -> dict[str, Any] | None:
    """One group: its summary, members, partitions (of the topics the viewer may describe)
    and rebalance timeline; None if unknown or not the viewer's to describe."""
    if viewer is not None and not viewer.group(group_id):
        return None
    runtime = state.runtime
    shard = runtime.shards[runtime.partition_of(group_id)].shard
    now = state.clock()
    share = shard.share_group(group_id)
    if share is not None:
        return describe_share_group(state.topics, state.shares, shard, share, now, viewer)
    group: ClassicGroup | ConsumerGroup | None = shard.consumer_group(group_id) or shard.group(
        group_id
    )
    if group is None:
        return None
    budget = [1000]
    summary = _summary(state, shard, group, now, stuck_ms, budget)
    if isinstance(group, ConsumerGroup):
        members = _consumer_members(state, group)
        summary["epoch"] = group.group_epoch
    else:
        members = _classic_members(group)
        summary["generation"] = group.generation
    owner = {
        (t, p): m["member_id"] for m in members for t, ps in m["assignment"].items() for p in ps
    }
    committed = shard.committed_offsets(group_id)
    partitions = []
    for topic, partition in sorted(committed.keys() | owner.keys()):
        if viewer is not None and not viewer.topic(topic):
            continue
        value = committed.get((topic, partition))
        offset = value.offset if value is not None else None
        plog = state.topics.partition(topic, partition)
        behind = seconds = None
        if offset is not None:
            plog, behind, seconds = _partition_lag(state, topic, partition, offset, now, budget)
        partitions.append(
            {
                "topic": topic,
                "partition": partition,
                "member_id": owner.get((topic, partition)),
                "committed": offset,
                "log_start": plog.log_start_offset if plog is not None else None,
                "log_end": plog.flushed_offset if plog is not None else None,
                "lag": behind,
                "lag_seconds": seconds,
            }
        )
    under_way = shard.rebalance_under_way(group_id)
    return {
        "now_ms": now,
        **summary,
        "members_detail": members,
        "partitions": partitions,
        "lag_history": state.lag_history.of(group_id),
        "rebalances": [as_json(e) for e in runtime.rebalances.events(group_id)],
        "rebalance_under_way": None
        if under_way is None
        else {"start_ms": under_way.started_ms, "reason": under_way.reason},
    }


async def list_topics(
    state: ConsoleState, *, limit: int, match: str, viewer: Viewer | None = None
) -> dict[str, Any]:
    """Topics whose name contains ``match``, with their partitions (at most ``limit`` in all)
    and the groups that commit offsets on each (those the viewer may describe)."""
    readers: dict[tuple[str, int], list[str]] = {}
    work = 0
    for sr in state.runtime.shards:
        shard = sr.shard
        groups: list[ClassicGroup | ConsumerGroup] = [*shard.groups(), *shard.consumer_groups()]
        for group in groups:
            if viewer is not None and not viewer.group(group.group_id):
                continue
            for key in shard.committed_offsets(group.group_id):
                if match in key[0]:
                    readers.setdefault(key, []).append(group.group_id)
                work += 1
            if work >= SLICE:
                work = 0
                await pause()
    topics = []
    listed = 0
    names = sorted(
        n for n in state.topics.topics if match in n and (viewer is None or viewer.topic(n))
    )
    for name in names:
        topic = state.topics.topics[name]
        parts: list[dict[str, Any]] = []
        for index, plog in enumerate(topic.partitions[: max(limit - listed, 0)]):
            names_of = sorted(readers.get((name, index), ()))
            parts.append(
                {
                    "partition": index,
                    "log_start": plog.log_start_offset,
                    "log_end": plog.flushed_offset,
                    "size_bytes": plog.size_bytes,
                    "groups": names_of[:GROUPS_PER_PARTITION],
                    "group_count": len(names_of),
                }
            )
        listed += len(parts)
        topics.append(
            {
                "topic": name,
                "internal": topic.internal,
                "partition_count": len(topic.partitions),
                "size_bytes": sum(p.size_bytes for p in topic.partitions),
                "partitions": parts,
            }
        )
    return {
        "total": len(names),
        "truncated": listed < sum(len(state.topics.topics[n].partitions) for n in names),
        "topics": topics,
    }
