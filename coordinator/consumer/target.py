"""The target assignment of a consumer group: which assignor, over which members and
topics, and which records a new target writes.

A computation has three steps, so that the middle one can run off the coordinator
(:mod:`coordinator.consumer.batching` decides when and where, KIP-1263):

- :func:`assignment_job` takes, on the coordinator, a snapshot of what the assignor reads: the
  members, their current targets, the regexes' topics and the subscribed topics, in objects
  the group never changes afterwards (members and targets are replaced, never mutated), so a
  worker thread may read them while the group moves on;
- :func:`run_job` chooses the assignor the members ask for most and runs it over that
  snapshot (pure; any thread);
- :func:`install_target` applies a result at the epoch it was computed for: a target record
  (7) for each current member whose target changed (a member that joined since gets an empty
  one), then the target epoch and its timestamp (6).

:func:`update_target` does the three at once.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from kcoord.coordinator.consumer.assignors import ASSIGNORS, AssignmentMember, PartitionAssignor
from kcoord.coordinator.consumer.assignors.spec import Assignment as GroupAssignment
from kcoord.coordinator.consumer.group import ConsumerGroup
from kcoord.coordinator.consumer.member import Assignment, ConsumerMember
from kcoord.coordinator.consumer.persistence import assignment_epoch_record, target_record
from kcoord.coordinator.consumer.topics import TopicId, TopicInfo
from kcoord.coordinator.output import Record

log = logging.getLogger(__name__)


def preferred_assignor(members: Iterable[ConsumerMember], default: str) -> PartitionAssignor:
    """The assignor most members ask for (ties: the first in name order), else ``default``."""
    votes = Counter(m.server_assignor for m in members if m.server_assignor)
    if votes:
        best = max(votes.values())
        name = min(n for n, c in votes.items() if c == best)
        if name in ASSIGNORS:
            return ASSIGNORS[name]
    return ASSIGNORS[default]


@dataclass(frozen=True, slots=True)
class AssignmentJob:
    """What one assignor run reads, taken at group epoch ``epoch`` (module docstring): the
    members (immutable), a copy of the targets, of the regexes' topics and of the subscribed
    topics. Taking it costs the coordinator a few C-level copies; building the assignor's view
    of the members is the run's work."""

    group_id: str
    epoch: int
    default_assignor: str
    members: tuple[ConsumerMember, ...]
    targets: dict[str, Assignment]
    regex_topics: dict[str, tuple[str, ...]]
    subscribed: dict[str, TopicInfo]
    run: int = 0
    """Which offloaded run this is (coordinator.consumer.batching), 0 inline."""

    @property
    def size(self) -> int:
        """Members plus subscribed partitions: what an assignor's run grows with."""
        return len(self.members) + sum(info.partitions for info in self.subscribed.values())


@dataclass(frozen=True, slots=True)
class AssignmentResult:
    """The target :func:`run_job` computed for group ``group_id`` at group epoch ``epoch``
    (member id -> partitions), or None if the assignor failed; how long it took; the job's
    ``run``."""

    group_id: str
    epoch: int
    target: GroupAssignment | None
    took_ms: float
    run: int = 0


def assignment_job(group: ConsumerGroup, default_assignor: str, run: int = 0) -> AssignmentJob:
    """The snapshot an assignor run reads, at the group's epoch now."""
    return AssignmentJob(
        group.group_id,
        group.group_epoch,
        default_assignor,
        tuple(group.members.values()),
        dict(group.target),
        {regex: resolved.topics for regex, resolved in group.regexes.items()},
        dict(group.subscribed),
        run,
    )


def _assignment_members(job: AssignmentJob) -> list[AssignmentMember]:
    subscribed = job.subscribed
    # Members mostly share a few subscriptions: each one's topic ids are looked up once, and
    # equal subscriptions share one frozenset (the assignors compare them cheaply then). A
    # tuple of names is hashed (every name) once per distinct tuple object: members whose
    # subscription did not change since they sent it, or that sent it together, share one.
    ids_of: dict[tuple[tuple[str, ...], str | None], frozenset[TopicId]] = {}
    by_tuple: dict[tuple[int, str | None], frozenset[TopicId]] = {}  # (id(names), regex)
    members = []
    for m in job.members:
        names_key = (id(m.subscribed_topic_names), m.subscribed_topic_regex)
        ids = by_tuple.get(names_key)
        if ids is None:
            key = (m.subscribed_topic_names, m.subscribed_topic_regex)
            ids = ids_of.get(key)
            if ids is None:
                names = set(m.subscribed_topic_names)
                if m.subscribed_topic_regex is not None:
                    names.update(job.regex_topics.get(m.subscribed_topic_regex, ()))
                ids = ids_of[key] = frozenset(
                    subscribed[n].topic_id for n in names if n in subscribed
                )
            by_tuple[names_key] = ids
        members.append(
            AssignmentMember(m.member_id, m.instance_id, m.rack_id, ids, job.targets.get(m.member_id, {}))
        )
    return members


def run_job(job: AssignmentJob) -> AssignmentResult:
    """Run the group's assignor over the job (pure: safe in a worker thread). A failing
    assignor gives a result without a target, logged."""
    started = time.perf_counter()
    assignor = preferred_assignor(job.members, job.default_assignor)
    target: GroupAssignment | None
    try:
        members = _assignment_members(job)
        partitions = {info.topic_id: info.partitions for info in job.subscribed.values()}
        target = assignor.assign(members, partitions)
    except Exception:  # a name of its own: the group must not wait for it forever
        log.exception("group %s: assignor %s failed at epoch %d", job.group_id, assignor.name, job.epoch)
        target = None
    took_ms = (time.perf_counter() - started) * 1000
    log.debug(
        "group %s: target assignment of epoch %d by %s over %d members in %.1f ms",
        job.group_id,
        job.epoch,
        assignor.name,
        len(job.members),
        took_ms,
    )
    return AssignmentResult(job.group_id, job.epoch, target, took_ms, job.run)


def install_target(
    group: ConsumerGroup,
    epoch: int,
    target: GroupAssignment,
    now_ms: int,
    emit: Callable[[Record], None],
) -> None:
    """Make ``target`` the group's target assignment at ``epoch``, computed at ``now_ms``
    (module docstring)."""
    gid = group.group_id
    for member_id in group.members:
        new = target.get(member_id, {})
        old = group.target.get(member_id)
        if old is None or new != old:  # a new member always gets its record
            group.target[member_id] = new
            emit(target_record(gid, member_id, new))
    group.assignment_epoch = epoch
    group.assignment_timestamp = now_ms
    emit(assignment_epoch_record(group))


def update_target(
    group: ConsumerGroup, default_assignor: str, emit: Callable[[Record], None], now_ms: int
) -> bool:
    """Recompute the target assignment at the group epoch, here and now; False (nothing
    changed) if the assignor failed."""
    result = run_job(assignment_job(group, default_assignor))
    if result.target is None:
        return False
    install_target(group, result.epoch, result.target, now_ms, emit)
    return True
