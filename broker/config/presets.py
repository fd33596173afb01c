"""Presets: named sets of setting values given as one flag.

``--dev`` (:data:`DEV_PRESET`) is for development and tests, where a consumer group should form
and recover in well under a second rather than the several seconds Kafka's production defaults
ask for. It is a layer of its own just above the defaults: a file, the environment or ``--set``
still override any of its values, and ``kcoord config --dev`` shows them with the source
``--dev``.
"""

from __future__ import annotations

DEV_PRESET: dict[str, object] = {
    # An empty group's first rebalance at once, not after 3 s of waiting for more members.
    "group.initial.rebalance.delay.ms": 0,
    # Classic members may ask for sessions as short as 1 s (Kafka: 6 s), so that a test of a
    # crashed member need not wait long.
    "group.min.session.timeout.ms": 1000,
    # KIP-848 members heartbeat every 500 ms (5 s) and are fenced after 6 s of silence (45 s).
    "group.consumer.min.heartbeat.interval.ms": 500,
    "group.consumer.heartbeat.interval.ms": 500,
    "group.consumer.min.session.timeout.ms": 6000,
    "group.consumer.session.timeout.ms": 6000,
    # Share-group members the same; records may be locked for as little as 1 s (Kafka: 15 s).
    "group.share.min.heartbeat.interval.ms": 500,
    "group.share.heartbeat.interval.ms": 500,
    "group.share.min.session.timeout.ms": 6000,
    "group.share.session.timeout.ms": 6000,
    "group.share.min.record.lock.duration.ms": 1000,
    # A KIP-848 group's target assignment at once, not batched over 1 s (KIP-1263).
    "group.consumer.assignment.interval.ms": 0,
    # A topic a client names is there, with partitions enough for a group to share.
    "auto.create.topics.enable": True,
    "num.partitions": 3,
}
"""The ``--dev`` preset's settings and values."""


def describe_preset(preset: dict[str, object]) -> str:
    """``name=value, ...`` in the preset's order (booleans as Kafka writes them)."""
    return ", ".join(
        f"{name}={str(value).lower() if isinstance(value, bool) else value}"
        for name, value in preset.items()
    )
