"""The target assignment of a consumer group: which assignor, over which members and
topics, and which records a new target writes.

When the group epoch has moved ahead of the target assignment epoch (a member joined, left or
changed its subscription, or a subscribed topic changed), :func:`update_target` runs the
group's assignor over every member and the subscribed topics, writes a target record (7) for
each member whose target changed, then the new target assignment epoch (6), and applies both
to the group.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable

from kcoord.coordinator.consumer.assignors import ASSIGNORS, AssignmentMember, PartitionAssignor
from kcoord.coordinator.consumer.group import ConsumerGroup
from kcoord.coordinator.consumer.persistence import assignment_epoch_record, target_record
from kcoord.coordinator.consumer.topics import TopicId
from kcoord.coordinator.output import Record

log = logging.getLogger(__name__)


def preferred_assignor(group: ConsumerGroup, default: str) -> PartitionAssignor:
    """The assignor most members ask for (ties: the first in name order), else ``default``."""
    votes = Counter(m.server_assignor for m in group.members.values() if m.server_assignor)
    if votes:
        best = max(votes.values())
        name = min(n for n, c in votes.items() if c == best)
        if name in ASSIGNORS:
            return ASSIGNORS[name]
    return ASSIGNORS[default]


def update_target(
    group: ConsumerGroup, default_assignor: str, emit: Callable[[Record], None]
) -> None:
    """Recompute the target assignment at the group epoch (module docstring)."""
    subscribed = group.subscribed
    assignor = preferred_assignor(group, default_assignor)
    # Members mostly share a few subscriptions: each one's topic ids are looked up once, and
    # equal subscriptions share one frozenset (the assignors compare them cheaply then).
    ids_of: dict[tuple[tuple[str, ...], str | None], frozenset[TopicId]] = {}
    members = []
    for m in group.members.values():
        key = (m.subscribed_topic_names, m.subscribed_topic_regex)
        ids = ids_of.get(key)
        if ids is None:
            ids = ids_of[key] = frozenset(
                subscribed[n].topic_id for n in group.topics_of(m) if n in subscribed
            )
        members.append(
            AssignmentMember(
                m.member_id, m.instance_id, m.rack_id, ids, group.target.get(m.member_id, {})
            )
        )
    partitions = {info.topic_id: info.partitions for info in subscribed.values()}
    started = time.perf_counter()
    result = assignor.assign(members, partitions)
    took_ms = (time.perf_counter() - started) * 1000
    gid = group.group_id
    for member_id in group.members:
        new = result.get(member_id, {})
        old = group.target.get(member_id)
        if old is None or new != old:  # a new member always gets its record
            group.target[member_id] = new
            emit(target_record(gid, member_id, new))
    group.assignment_epoch = group.group_epoch
    emit(assignment_epoch_record(group))
    log.debug(
        "group %s: target assignment of epoch %d by %s over %d members in %.1f ms",
        gid,
        group.group_epoch,
        assignor.name,
        len(members),
        took_ms,
    )
