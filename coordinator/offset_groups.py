"""The groups of a shard, of both types, as its offsets see them."""

from __future__ import annotations

from kcoord.coordinator.classic.manager import ClassicGroupManager
from kcoord.coordinator.consumer.manager import ConsumerGroupManager
from kcoord.coordinator.offset_interface import OffsetGroup


class ShardOffsetGroups:
    """The shard's groups of both types as its offsets see them
    (:class:`coordinator.offset_interface.OffsetGroups`); a standalone committer's group is
    classic."""

    def __init__(self, classic: ClassicGroupManager, consumer: ConsumerGroupManager) -> None:
        self._classic = classic
        self._consumer = consumer

    def offset_group(self, group_id: str) -> OffsetGroup | None:
        group = self._consumer.groups.get(group_id)
        return group if group is not None else self._classic.groups.get(group_id)

    def create_standalone(self, group_id: str, now_ms: int) -> OffsetGroup:
        return self._classic.create_standalone(group_id, now_ms)

    def forget(self, group_id: str) -> None:
        self._classic.forget(group_id)

    def commit_accepted(self, group_id: str, member_id: str, now_ms: int) -> None:
        if group_id in self._classic.groups:
            self._classic.commit_accepted(group_id, member_id, now_ms)

    def offset_group_ids(self) -> list[str]:
        return self._classic.offset_group_ids() + list(self._consumer.groups)

    def offsets_gone(self, group_id: str, now_ms: int) -> None:
        if group_id in self._consumer.groups:
            self._consumer.offsets_gone(group_id)
        else:
            self._classic.offsets_gone(group_id, now_ms)
