"""Each real client produces to and consumes from a 3-partition topic, with every compression
codec, and reads everything back after the broker is killed with SIGKILL and restarted."""

from __future__ import annotations

import pytest

from .clients import CONSUMERS, PRODUCERS, Consumed, Message, create_topic
from .harness import BrokerProcess

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
PARTITIONS = 3
PER_TOPIC = 150


def _messages(tag: str) -> list[Message]:
    return [
        (i % PARTITIONS, f"{tag}-key-{i}".encode(), (f"{tag} value {i} " * 12).encode())
        for i in range(PER_TOPIC)
    ]


def _check(consumed: list[Consumed], produced: list[Message]) -> None:
    assert len(consumed) == len(produced), (len(consumed), len(produced))
    for p in range(PARTITIONS):
        got = sorted((o, k, v) for part, o, k, v in consumed if part == p)
        want = [(k, v) for part, k, v in produced if part == p]
        assert [o for o, _, _ in got] == list(range(len(want))), f"offsets of partition {p}"
        assert [(k, v) for _, k, v in got] == want, f"content of partition {p}"


@pytest.mark.parametrize("client", ["confluent", "kafka-python", "aiokafka"])
def test_produce_consume_every_codec_survives_sigkill(
    broker: BrokerProcess, client: str
) -> None:
    produce, consume = PRODUCERS[client], CONSUMERS[client]
    produced: dict[str, list[Message]] = {}
    for codec in CODECS:
        topic = f"{client}-{codec}"
        create_topic(broker.bootstrap, topic, PARTITIONS)
        produced[topic] = _messages(f"{client}/{codec}")
        produce(broker.bootstrap, topic, produced[topic], codec)
        _check(consume(broker.bootstrap, topic, PARTITIONS, PER_TOPIC), produced[topic])

    broker.kill()
    broker.restart()
    for topic, messages in produced.items():
        _check(consume(broker.bootstrap, topic, PARTITIONS, PER_TOPIC), messages)


def test_without_fsync_produced_records_are_readable_at_once(broker_factory: object) -> None:
    """log.flush.interval.messages > 1 leaves flushing to the OS; records must still become
    readable (the high watermark moved only with an fsync before, so Fetch saw nothing)."""
    b: BrokerProcess = broker_factory({"log.flush.interval.messages": 10000})  # type: ignore[operator]
    create_topic(b.bootstrap, "no-fsync", PARTITIONS)
    messages = _messages("no-fsync")
    PRODUCERS["confluent"](b.bootstrap, "no-fsync", messages, "none")
    _check(CONSUMERS["confluent"](b.bootstrap, "no-fsync", PARTITIONS, PER_TOPIC), messages)
