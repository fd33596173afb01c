"""A client polling its committed offsets with OffsetFetch v7 (kafka-python told the broker is
Kafka 2.5, the version a lag exporter of that era sends; the broker answers it on the direct path
and gives a remembered answer again while nothing changed) sees every change at once: a commit,
OffsetDelete, DeleteGroups, and an offset's expiry. One broker for the module."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from confluent_kafka.admin import AdminClient
from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaTopicPartition

from kcoord.protocol.apis import ApiKey

from .clients import create_topic
from .harness import BrokerProcess, wait_for
from .rawclient import RawClient
from .test_admin_cli import commit
from .test_offsets_life import _commit_v

SETTINGS: dict[str, object] = {
    "group.initial.rebalance.delay.ms": 0,
    "offsets.topic.num.partitions": 4,
    "offsets.retention.check.interval.ms": 200,
}
TOPIC = "watched"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("fetch-answers") / "data", SETTINGS).start()
    create_topic(b.bootstrap, TOPIC, 2)
    yield b
    b.stop()


class Poller:
    """kafka-python's ``committed()`` of one group, by OffsetFetch v7."""

    def __init__(self, broker: BrokerProcess, group: str) -> None:
        self.consumer = KafkaConsumer(
            bootstrap_servers=broker.bootstrap, group_id=group, enable_auto_commit=False,
            api_version=(2, 5),
        )  # fmt: skip

    def __call__(self, partition: int) -> int | None:
        return self.consumer.committed(KafkaTopicPartition(TOPIC, partition))

    def close(self) -> None:
        self.consumer.close()


def _fetch_v6(broker: BrokerProcess, group: str) -> bytes:
    """The whole answer to an OffsetFetch v6 of partitions 0 and 1, the connection's first."""
    with RawClient(broker.port) as c:
        c.send_request(
            ApiKey.OFFSET_FETCH,
            6,
            group_id=group,
            topics=[dict(name=TOPIC, partition_indexes=[0, 1])],
        )
        return c.recv_frame()


def test_commits_and_deletions_are_seen_at_once(broker: BrokerProcess) -> None:
    group = "polled"
    poll = Poller(broker, group)
    try:
        assert poll(0) is None
        commit(broker.bootstrap, group, {(TOPIC, 0): 10, (TOPIC, 1): 20})
        assert [poll(0), poll(0), poll(1)] == [10, 10, 20]
        assert _fetch_v6(broker, group) == _fetch_v6(broker, group)
        commit(broker.bootstrap, group, {(TOPIC, 0): 11})
        assert [poll(0), poll(1)] == [11, 20]  # the next poll, without waiting
        with RawClient(broker.port) as c:
            r = c.request(ApiKey.OFFSET_DELETE, 0, group_id=group,
                          topics=[dict(name=TOPIC, partitions=[dict(partition_index=0)])])  # fmt: skip
        assert r.error_code == 0 and r.topics[0].partitions[0].error_code == 0
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        assert [poll(0), poll(1)] == [None, 20]
        admin.delete_consumer_groups([group])[group].result(20)  # DeleteGroups
        assert [poll(0), poll(1)] == [None, None]
        commit(broker.bootstrap, group, {(TOPIC, 1): 21})
        assert [poll(0), poll(1)] == [None, 21]
    finally:
        poll.close()


def test_an_expired_offset_is_seen_gone(broker: BrokerProcess) -> None:
    group = "expiring"
    poll = Poller(broker, group)
    try:
        assert _commit_v(broker, 2, group, TOPIC, {1: 9}, -1) == {1: 0}
        started = time.monotonic()
        assert _commit_v(broker, 2, group, TOPIC, {0: 5}, 1_500) == {0: 0}  # expires in 1.5 s
        fetched = poll(0)
        if time.monotonic() - started < 1.0:  # well before its expiry (a loaded machine is slow)
            assert fetched == 5
        assert poll(1) == 9
        wait_for(lambda: poll(0) is None, 20, what="the offset with a retention time expired")
        assert poll(1) == 9
    finally:
        poll.close()
