"""What one operation changes in a consumer group, and how a failed write puts it back.

:class:`Change` takes the group's copy before the operation's first change (steady heartbeats
change nothing and copy nothing); :class:`ConsumerWriteFailed` is the failure action attached
to an operation that wrote records: if they cannot be appended, the manager puts the copy back,
provided nothing changed the group since.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

from kcoord.coordinator.consumer.group import ConsumerGroup


@dataclass(frozen=True, slots=True)
class ConsumerWriteFailed:
    """The records of a consumer-group operation failed: put the group back as ``before``
    (None: it did not exist) if its change count is still ``changes``, and answer the
    heartbeat (if any) with the mapped error."""

    handle: Hashable | None
    group_id: str
    before: ConsumerGroup | None
    changes: int

    @property
    def handles(self) -> tuple[Hashable, ...]:
        return () if self.handle is None else (self.handle,)


class Change:
    """The group an operation changes, and its state before the first change."""

    __slots__ = ("before", "created", "group", "touched")

    def __init__(self, group: ConsumerGroup, created: bool) -> None:
        self.group = group
        self.created = created
        self.touched = False
        self.before: ConsumerGroup | None = None

    def touch(self) -> None:
        if not self.touched:
            self.touched = True
            self.before = None if self.created else self.group.copy()
