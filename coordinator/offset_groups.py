"""The groups of a shard, of every type, as its offsets see them."""

from __future__ import annotations

from kcoord.coordinator.classic.manager import ClassicGroupManager
from kcoord.coordinator.consumer.manager import ConsumerGroupManager
from kcoord.coordinator.offset_interface import OffsetGroup, PartitionCheck
from kcoord.coordinator.share.manager import ShareGroupManager


class ShardOffsetGroups:
    """The shard's groups of every type as its offsets see them
    (:class:`coordinator.offset_interface.OffsetGroups`); a standalone committer's group is
    classic. A share group takes no commits (its offsets are the share coordinator's) and has
    no committed offsets to expire."""

    def __init__(
        self, classic: ClassicGroupManager, consumer: ConsumerGroupManager, share: ShareGroupManager
    ) -> None:
        self._classic = classic
        self._consumer = consumer
        self._share = share

    def offset_group(self, group_id: str) -> OffsetGroup | None:
        group: OffsetGroup | None = self._consumer.groups.get(group_id)
        if group is None:
            group = self._share.groups.get(group_id)
        return group if group is not None else self._classic.groups.get(group_id)

    def create_standalone(self, group_id: str, now_ms: int) -> OffsetGroup:
        return self._classic.create_standalone(group_id, now_ms)

    def forget(self, group_id: str) -> None:
        self._classic.forget(group_id)

    def commit_partition_check(
        self, group_id: str, member_id: str, generation: int
    ) -> PartitionCheck | None:
        group = self._consumer.groups.get(group_id)
        if group is None:
            return None
        return group.commit_partition_check(member_id, generation, self._consumer.topics)

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
