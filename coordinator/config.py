"""Configuration of the group coordinator (Kafka's names in each field's docstring)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
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

    offsets_retention_ms: int = 10080 * 60_000
    """offsets.retention.minutes (here in ms): how long committed offsets are kept once
    they are eligible to expire (J2-J4)."""

    offsets_retention_check_interval_ms: int = 600_000
    """offsets.retention.check.interval.ms: how often each shard looks for expired offsets
    and for Empty groups without offsets (J2-J4, I6)."""

    offset_metadata_max_bytes: int = 4096
    """offset.metadata.max.bytes: longest metadata string an OffsetCommit may store per
    partition, counted in UTF-8 bytes (J6)."""

    max_batch_bytes: int = 1048588
    """message.max.bytes (which the __consumer_offsets topic's max.message.bytes defaults
    to): the largest record batch one write of a shard may append. A write whose records do
    not fit in one such batch fails as a whole, as Kafka's coordinator runtime fails it
    (RecordTooLargeException, answered UNKNOWN_SERVER_ERROR)."""

    consumer_heartbeat_interval_ms: int = 5000
    """group.consumer.heartbeat.interval.ms: the interval a consumer-protocol (KIP-848)
    member is told to heartbeat at."""

    consumer_session_timeout_ms: int = 45000
    """group.consumer.session.timeout.ms: a consumer-protocol member without a heartbeat for
    this long is fenced."""

    consumer_max_size: int = 2**31 - 1
    """group.consumer.max.size: most members a consumer group may hold."""

    consumer_assignors: tuple[str, ...] = ("uniform", "range")
    """group.consumer.assignors: the server assignors offered; the first is the default."""

    consumer_assignment_interval_ms: int = 0
    """group.consumer.assignment.interval.ms (KIP-1263): a consumer group's target assignment
    is computed at most once per interval; until it has passed since the last computation,
    heartbeats get the last target. 0: at once. The broker setting has Kafka's default, 1000;
    this field's default is 0, so a coordinator built without settings assigns at once."""

    consumer_assignor_offload: bool = True
    """group.consumer.assignor.offload.enable (KIP-1263): compute a large group's target off
    the coordinator (coordinator.consumer.batching), in the broker's worker thread."""

    consumer_migration_policy: str = "bidirectional"
    """group.consumer.migration.policy: bidirectional, upgrade, downgrade or disabled: which
    online conversions between classic and consumer groups with members are allowed."""

    share_heartbeat_interval_ms: int = 5000
    """group.share.heartbeat.interval.ms: the interval a share-group member is told to
    heartbeat at (a group's ``share.heartbeat.interval.ms`` overrides it)."""

    share_session_timeout_ms: int = 45000
    """group.share.session.timeout.ms: a share-group member without a heartbeat for this long
    is fenced (a group's ``share.session.timeout.ms`` overrides it)."""

    share_max_size: int = 200
    """group.share.max.size: most members a share group may hold."""

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
        if self.offsets_retention_ms < 1:
            raise ValueError("offsets_retention_ms must be >= 1")
        if self.offsets_retention_check_interval_ms < 1:
            raise ValueError("offsets_retention_check_interval_ms must be >= 1")
        if self.offset_metadata_max_bytes < 0:
            raise ValueError("offset_metadata_max_bytes must be >= 0")
        if self.max_batch_bytes < 0:
            raise ValueError("max_batch_bytes must be >= 0")
        if self.consumer_heartbeat_interval_ms < 1 or self.consumer_session_timeout_ms < 1:
            raise ValueError("consumer heartbeat interval and session timeout must be >= 1")
        if self.consumer_assignment_interval_ms < 0:
            raise ValueError("consumer_assignment_interval_ms must be >= 0")
        if self.consumer_max_size < 1:
            raise ValueError("consumer_max_size must be >= 1")
        if self.share_heartbeat_interval_ms < 1 or self.share_session_timeout_ms < 1:
            raise ValueError("share heartbeat interval and session timeout must be >= 1")
        if self.share_max_size < 1:
            raise ValueError("share_max_size must be >= 1")
        if not self.consumer_assignors:
            raise ValueError("consumer_assignors must name at least one assignor")


GroupOverrides = Callable[[str], Mapping[str, str]]
"""The dynamic configs set on one group (Kafka's GROUP config resource, by IncrementalAlterConfigs):
``share.session.timeout.ms``, ``share.heartbeat.interval.ms``, ``share.record.lock.duration.ms``,
``share.auto.offset.reset``, ``share.isolation.level``, ``consumer.session.timeout.ms``,
``consumer.heartbeat.interval.ms``, ``consumer.assignment.interval.ms``,
``consumer.assignor.offload.enable`` (``true``/``false``), as validated strings by Kafka
name; a name not set is absent.
Kept by broker/groups/group_configs.py; the coordinator and the share partitions read them."""


def no_overrides(group_id: str) -> Mapping[str, str]:
    """The :data:`GroupOverrides` of a broker (or a test) where no group has a config set."""
    return {}
