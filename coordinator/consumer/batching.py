"""When and where a consumer group's target assignment is computed: Kafka 4.3's assignment
batching and offload (KIP-1263).

- **Batching.** When the group epoch has moved ahead of the target assignment epoch, the new
  target is computed only once ``consumer.assignment.interval.ms`` (the group's, else the
  broker's ``group.consumer.assignment.interval.ms``) has passed since the last computation
  finished (the timestamp kept in record 6). Until then every heartbeat reconciles towards the
  last target at its epoch (Kafka's "from last target assignment"), so joins, leaves and
  subscription changes within one interval cost one computation. A target never computed, or
  loaded from a record without a timestamp (0), does not wait: a new group's first member is
  assigned at once. 0 turns batching off. Kafka then waits for the next heartbeat; here a
  timer (:data:`ASSIGNMENT_TIMER`) also computes it when the interval ends, so the target is
  ready at the members' next heartbeats.
- **Offload.** With ``consumer.assignor.offload.enable`` (the group's, else the broker's), the
  assignor runs in the broker's worker thread: the coordinator queues an
  :class:`AssignmentRequest` holding a snapshot of the input (``coordinator.consumer.target``),
  marks the group (``assigning_epoch``) and answers from the last target; the runtime hands
  the result back to :meth:`TargetBatching.computed` (``GroupShard.assignment_computed``).
  While one run is out no other starts. When it lands it becomes the target at the epoch it
  was computed for, even if the group has moved on since (the members that left are left out,
  those that joined get an empty target), and the next computation follows per the interval.
  A result for a group that is gone (or deleted and created again), was reloaded, or whose
  write failed since is dropped.
  A group starts at epoch 1 with an empty target (KAFKA-20268,
  :data:`coordinator.consumer.group.INITIAL_EPOCH`), so a new group's members have an epoch
  to reconcile to while its first run is out. Unlike Kafka, which decides by the config alone,
  a group whose input is small (fewer than :data:`OFFLOAD_MIN_SIZE` members plus partitions)
  computes inline: handing it to a thread would cost more than running it.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Protocol

from kcoord.coordinator.config import GroupConfig, GroupOverrides
from kcoord.coordinator.consumer.change import Change
from kcoord.coordinator.consumer.group import ConsumerGroup
from kcoord.coordinator.consumer.target import (
    AssignmentJob,
    AssignmentResult,
    assignment_job,
    install_target,
    run_job,
)
from kcoord.coordinator.output import Operation
from kcoord.coordinator.timers import TimerEntry, TimerKind, Timers

log = logging.getLogger(__name__)

ASSIGNMENT_TIMER = 7
OFFLOAD_MIN_SIZE = 1_000
"""Members plus subscribed partitions from which an offloaded group's assignor runs in a
worker thread (below, a run takes well under a millisecond or two)."""


@dataclass(frozen=True, slots=True)
class AssignmentRequest:
    """Compute ``job`` (group ``job.group_id`` at epoch ``job.epoch``) off the coordinator."""

    job: AssignmentJob


class Groups(Protocol):
    """What batching needs of the consumer groups' manager."""

    groups: dict[str, ConsumerGroup]
    op: Operation
    config: GroupConfig
    overrides: GroupOverrides

    def finish(self, change: Change, handle: Hashable | None) -> None: ...


class TargetBatching:
    """The target computations of one shard's consumer groups (module docstring)."""

    def __init__(self, manager: Groups, timers: Timers) -> None:
        self._manager = manager
        self._timers = timers
        self.requests: list[AssignmentRequest] = []
        """Offloaded runs asked for and not yet taken by the runtime."""
        self._runs = itertools.count(1)
        timers.register(ASSIGNMENT_TIMER, TimerKind(live=self._timer_live, fire=self._timer_fired))

    def interval_ms(self, group_id: str) -> int:
        own = self._manager.overrides(group_id).get("consumer.assignment.interval.ms")
        return self._manager.config.consumer_assignment_interval_ms if own is None else int(own)

    def offload(self, group_id: str) -> bool:
        own = self._manager.overrides(group_id).get("consumer.assignor.offload.enable")
        return self._manager.config.consumer_assignor_offload if own is None else own == "true"

    def maybe_update(self, change: Change, now_ms: int) -> None:
        """The group epoch is ahead of the target: compute the target now (inline or
        offloaded), or leave the last one standing until the interval has passed or the run
        out lands."""
        group = change.group
        if group.assigning_epoch:
            return
        interval = self.interval_ms(group.group_id)
        due = group.assignment_timestamp + interval
        if interval > 0 and group.assignment_timestamp > 0 and now_ms < due:
            if not group.assignment_timer:
                group.assignment_timer = self._timers.push(due, ASSIGNMENT_TIMER, group.group_id, "")
            return
        group.assignment_timer = 0
        manager = self._manager
        job = assignment_job(group, manager.config.consumer_assignors[0])
        if job.size >= OFFLOAD_MIN_SIZE and self.offload(group.group_id):
            job = dataclasses.replace(job, run=next(self._runs))
            group.assigning_epoch, group.assigning_run = job.epoch, job.run
            self.requests.append(AssignmentRequest(job))
            return
        result = run_job(job)
        if result.target is not None:
            change.touch()
            install_target(group, result.epoch, result.target, now_ms, lambda r: manager.op.emit(*r))

    def computed(self, result: AssignmentResult, now_ms: int) -> None:
        """An offloaded run landed (module docstring)."""
        manager = self._manager
        group = manager.groups.get(result.group_id)
        if group is None or group.dead or group.assigning_run != result.run:
            log.debug("group %s: the target of epoch %d is stale, dropped", result.group_id, result.epoch)
            return
        # Before the change's copy: a failed write must not keep the run out.
        group.assigning_epoch = group.assigning_run = 0
        if result.target is None:
            return  # logged; the next heartbeat asks again
        change = Change(group, created=False)
        if result.epoch > group.assignment_epoch:
            change.touch()
            install_target(group, result.epoch, result.target, now_ms, lambda r: manager.op.emit(*r))
        if group.group_epoch > group.assignment_epoch and group.members:
            self.maybe_update(change, now_ms)
        manager.finish(change, None)

    def take(self) -> list[AssignmentRequest]:
        requests = self.requests
        if requests:
            self.requests = []
        return requests

    def _timer_live(self, entry: TimerEntry) -> bool:
        group = self._manager.groups.get(entry[3])
        return group is not None and group.assignment_timer == entry[1]

    def _timer_fired(self, entry: TimerEntry, now_ms: int) -> None:
        group = self._manager.groups[entry[3]]
        group.assignment_timer = 0
        if group.group_epoch <= group.assignment_epoch or not group.members:
            return
        change = Change(group, created=False)
        self.maybe_update(change, now_ms)
        self._manager.finish(change, None)
