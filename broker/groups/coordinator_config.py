"""The group coordinator's settings (:class:`coordinator.config.GroupConfig`) taken from the
broker's configuration: the one place a broker setting becomes a coordinator field (an
assignment interval outside its bounds is brought within them, as Kafka clamps it)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kcoord.coordinator.config import GroupConfig

if TYPE_CHECKING:
    from ..config import Config


def coordinator_config(config: Config) -> GroupConfig:
    return GroupConfig(
        initial_rebalance_delay_ms=config["group.initial.rebalance.delay.ms"],
        min_session_timeout_ms=config["group.min.session.timeout.ms"],
        max_session_timeout_ms=config["group.max.session.timeout.ms"],
        max_size=config["group.max.size"],
        offsets_topic_num_partitions=config["offsets.topic.num.partitions"],
        offsets_retention_ms=config["offsets.retention.minutes"] * 60_000,
        offsets_retention_check_interval_ms=config["offsets.retention.check.interval.ms"],
        offset_metadata_max_bytes=config["offset.metadata.max.bytes"],
        max_batch_bytes=config["message.max.bytes"],
        consumer_heartbeat_interval_ms=config["group.consumer.heartbeat.interval.ms"],
        consumer_session_timeout_ms=config["group.consumer.session.timeout.ms"],
        consumer_max_size=config["group.consumer.max.size"],
        consumer_assignors=config.consumer_assignors,
        consumer_assignment_interval_ms=min(
            max(
                config["group.consumer.assignment.interval.ms"],
                config["group.consumer.min.assignment.interval.ms"],
            ),
            config["group.consumer.max.assignment.interval.ms"],
        ),
        consumer_assignor_offload=config["group.consumer.assignor.offload.enable"],
        consumer_migration_policy=config["group.consumer.migration.policy"].lower(),
        share_heartbeat_interval_ms=config["group.share.heartbeat.interval.ms"],
        share_session_timeout_ms=config["group.share.session.timeout.ms"],
        share_max_size=config["group.share.max.size"],
    )
