"""The server-side assignors of KIP-848 consumer groups: ``uniform`` (the default) and ``range``.

Pure functions of the group (sans-IO): the coordinator hands an assignor the members
(:class:`AssignmentMember`: subscriptions and current target assignment) and the partition
count of every subscribed topic, and stores what it returns as the new target assignment.

``spec`` (the interface and shared input checks), ``uniform`` (:class:`UniformAssignor`),
``range`` (:class:`RangeAssignor`). :data:`ASSIGNORS` maps the names a client may ask for
(ConsumerGroupHeartbeat's ServerAssignor) to the assignor; the first one is the default.
"""

from __future__ import annotations

from kcoord.coordinator.consumer.assignors.range import RangeAssignor
from kcoord.coordinator.consumer.assignors.spec import (
    Assignment,
    AssignmentMember,
    PartitionAssignor,
    TopicId,
)
from kcoord.coordinator.consumer.assignors.uniform import UniformAssignor

__all__ = [
    "ASSIGNORS",
    "DEFAULT_ASSIGNOR",
    "Assignment",
    "AssignmentMember",
    "PartitionAssignor",
    "RangeAssignor",
    "TopicId",
    "UniformAssignor",
]

# Keyed by the instances' names: compiled (mypyc), the classes' ``name`` is a descriptor.
ASSIGNORS: dict[str, PartitionAssignor] = {
    assignor.name: assignor for assignor in (UniformAssignor(), RangeAssignor())
}
"""Assignor name -> assignor; ``uniform`` (the first) is the default, as in Kafka."""

DEFAULT_ASSIGNOR = next(iter(ASSIGNORS))
