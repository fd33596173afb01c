"""What the console's JSON says of a share group (KIP-932): its row in the group list and its
page, read from the coordinator's shard (the group, its members and their assignments) and
from the share partitions held here (broker/share/partitions.py).

Per share partition: the start offset (SPSO) and end offset, the records in flight, acquired
and archived, lag as KIP-1226 counts it (the records from the start offset up to the high
watermark not yet acknowledged or archived: those past the end offset and those in flight),
the acknowledgements per second over the last ten seconds (broker/share/counters.py), and the
first :data:`MAX_RUNS` runs of in-flight records (first and last offset, state, delivery count,
the member holding them and when their lock runs out). A partition assigned to a member but not
fetched yet has no share partition here: its figures are null.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kcoord.coordinator.share.describe import ASSIGNOR_NAME
from kcoord.coordinator.share.group import ShareGroup
from kcoord.share.model import RecordState

if TYPE_CHECKING:
    from ..data.topics import TopicStore
    from ..share.partitions import LoadedSharePartition, SharePartitionManager
    from .login import Viewer

MAX_RUNS = 50
"""Runs of in-flight records listed per share partition (the count is always given)."""


def _loaded(shares: SharePartitionManager | None, group_id: str) -> list[LoadedSharePartition]:
    return shares.loaded_partitions(group_id) if shares is not None else []


def _lag(held: LoadedSharePartition) -> int:
    sp = held.partition
    return max(held.log.flushed_offset - sp.end_offset, 0) + sp.in_flight()


def share_summary(
    shares: SharePartitionManager | None, group: ShareGroup, now: int
) -> dict[str, Any]:
    """The group's row in the group list (the same keys as the other types')."""
    loaded = _loaded(shares, group.group_id)
    return {
        "group": group.group_id,
        "type": "share",
        "state": group.state,
        "protocol": ASSIGNOR_NAME,
        "members": len(group.members),
        "lag": sum(_lag(h) for h in loaded) if loaded else None,
        "lag_seconds": None,
        "acks_per_second": sum(h.counters.rate.per_second(now) for h in loaded),
        "last_rebalance_ms": None,
        "since_rebalance_ms": None,
        "rebalances_last_hour": 0,
        "rebalancing_since_ms": None,
        "stuck": False,
    }


def _members(topics: TopicStore, shard: Any, group: ShareGroup) -> list[dict[str, Any]]:
    by_id = topics.by_id
    session_ms = shard.share.session_timeout_ms(group.group_id)
    out = []
    for m in group.members.values():
        assignment: dict[str, list[int]] = {}
        for topic_id, partitions in m.assigned.items():
            topic = by_id.get(topic_id)
            name = topic.name if topic is not None else str(topic_id)
            assignment[name] = sorted(partitions)
        timer = group.sessions.get(m.member_id)
        deadline = timer.deadline if timer is not None else 0
        out.append(
            {
                "member_id": m.member_id,
                "client_id": m.client_id,
                "host": m.client_host,
                "rack": m.rack_id,
                "epoch": m.member_epoch,
                "assignment": dict(sorted(assignment.items())),
                "last_heartbeat_ms": deadline - session_ms if deadline else None,
            }
        )
    return out


def _runs(held: LoadedSharePartition) -> tuple[list[dict[str, Any]], int]:
    runs = held.partition.in_flight_runs()
    rows = [
        {
            "first_offset": r.first_offset,
            "last_offset": r.last_offset,
            "state": RecordState(r.state).name,
            "delivery_count": r.delivery_count,
            "member_id": r.member_id,
            "lock_deadline_ms": r.lock_deadline_ms,
        }
        for r in runs[:MAX_RUNS]
    ]
    return rows, len(runs)


def _partition(
    topic: str, partition: int, members: list[str], held: LoadedSharePartition | None, now: int
) -> dict[str, Any]:
    row: dict[str, Any] = {"topic": topic, "partition": partition, "members": members}
    if held is None:
        row.update(
            loaded=False, start_offset=None, end_offset=None, log_start=None, log_end=None,
            in_flight=None, acquired=None, archived=None, lag=None, acknowledged=None,
            acks_per_second=None, runs=[], runs_total=0,
        )
        return row
    sp = held.partition
    runs, total = _runs(held)
    row.update(
        loaded=True,
        start_offset=sp.start_offset,
        end_offset=sp.end_offset,
        log_start=held.log.log_start_offset,
        log_end=held.log.flushed_offset,
        in_flight=sp.in_flight(),
        acquired=sp.acquired(),
        archived=sp.archived_count(),
        lag=_lag(held),
        acknowledged=held.counters.acknowledged,
        acks_per_second=held.counters.rate.per_second(now),
        runs=runs,
        runs_total=total,
    )
    return row


def describe_share_group(
    topics: TopicStore,
    shares: SharePartitionManager | None,
    shard: Any,
    group: ShareGroup,
    now: int,
    viewer: Viewer | None,
) -> dict[str, Any]:
    """A share group's page: its summary, members and share partitions (of the topics the
    viewer may describe)."""
    members = _members(topics, shard, group)
    assigned: dict[tuple[str, int], list[str]] = {}
    for m in members:
        for topic, partitions in m["assignment"].items():
            for p in partitions:
                assigned.setdefault((topic, p), []).append(m["member_id"])
    held = {(h.topic, h.key.partition): h for h in _loaded(shares, group.group_id)}
    partitions = [
        _partition(topic, p, sorted(assigned.get((topic, p), [])), held.get((topic, p)), now)
        for topic, p in sorted(assigned.keys() | held.keys())
        if viewer is None or viewer.topic(topic)
    ]
    return {
        "now_ms": now,
        **share_summary(shares, group, now),
        "epoch": group.group_epoch,
        "assignment_epoch": group.assignment_epoch,
        "members_detail": members,
        "partitions": partitions,
        "rebalances": [],
        "rebalance_under_way": None,
    }
