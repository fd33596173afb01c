"""Configuration of the classic group coordinator (Kafka's names in each field's docstring)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class GroupConfig:
    """Settings a :class:`coordinator.shard.GroupShard` reads. Defaults are Kafka's."""

    initial_rebalance_delay_ms: int = 3000
    """group.initial.rebalance.delay.ms: how long a new (Empty) group waits for more members
    before its first rebalance completes, re-armed while members keep arriving (E3)."""

    min_session_timeout_ms: int = 6000
    """group.min.session.timeout.ms: smallest session timeout a JoinGroup may ask for (D1)."""

    max_session_timeout_ms: int = 1800000
    """group.max.session.timeout.ms: largest session timeout a JoinGroup may ask for (D1)."""

    max_size: int = 2**31 - 1
    """group.max.size: most members a group may hold (D1, D2)."""

    new_member_join_timeout_ms: int = 300000
    """GroupCoordinator.NewMemberJoinTimeoutMs (not configurable in Kafka): a new member whose
    first JoinGroup has not completed within this time is removed (D10)."""

    offsets_topic_num_partitions: int = 50
    """offsets.topic.num.partitions: partitions of __consumer_offsets, i.e. shards (A2)."""

    def __post_init__(self) -> None:
        if self.initial_rebalance_delay_ms < 0:
            raise ValueError("initial_rebalance_delay_ms must be >= 0")
        if self.min_session_timeout_ms > self.max_session_timeout_ms:
            raise ValueError("min_session_timeout_ms must be <= max_session_timeout_ms")
        if self.max_size < 1:
            raise ValueError("max_size must be >= 1")
        if self.new_member_join_timeout_ms <= 0:
            raise ValueError("new_member_join_timeout_ms must be > 0")
        if self.offsets_topic_num_partitions < 1:
            raise ValueError("offsets_topic_num_partitions must be >= 1")
