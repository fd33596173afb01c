"""Clients cannot make or write the internal topics, and a Produce creates no topic at all.

Once, one Produce to ``__consumer_offsets`` on a fresh broker (or to ``__transaction_state`` on
one that never ran a transaction) created it with ``num.partitions`` (one) partition: then
FindCoordinator failed, a real group rebalanced without end, and every transactional
InitProducerId failed, until a restart. As in Kafka, a Produce never creates a topic (clients
ask Metadata, which creates one when ``auto.create.topics.enable`` and the CREATE ACL allow),
clients never write the internal topics, and only their coordinators create them, with their own
partition counts.
"""

from __future__ import annotations

from confluent_kafka import Producer

from kcoord.protocol.apis import ApiKey
from kcoord.protocol.errors import ErrorCode
from kcoord.protocol.record_encoding import build_batch
from tests.integration.harness import BrokerProcess
from tests.integration.rawclient import RawClient

from .conftest import assert_survived
from .healthy import HealthyGroup

INTERNAL = ("__consumer_offsets", "__transaction_state")
T0 = 1_700_000_000_000


def _produce(c: RawClient, topic: str, partition: int = 0) -> int:
    batch = build_batch([(b"k", b"v", (), T0)])
    resp = c.request(
        ApiKey.PRODUCE, 9, transactional_id=None, acks=-1, timeout=5000,
        topic_data=[dict(name=topic, partition_data=[dict(index=partition, records=batch)])],
    )
    return int(resp.responses[0].partition_responses[0].error_code)


def _partitions(c: RawClient, topic: str, auto_create: bool = False) -> tuple[int, int]:
    """(Metadata's error for ``topic``, its number of partitions)."""
    resp = c.request(
        ApiKey.METADATA, 12, topics=[dict(name=topic, topic_id=None)],
        allow_auto_topic_creation=auto_create, include_topic_authorized_operations=False,
    )
    t = resp.topics[0]
    return int(t.error_code), len(t.partitions)


def test_clients_neither_create_nor_write_the_internal_topics(abuse_broker: BrokerProcess) -> None:
    with RawClient(abuse_broker.port) as c:
        # On a fresh broker: no Produce creates them, nor Metadata's auto-creation.
        for topic in INTERNAL:
            assert _produce(c, topic) == ErrorCode.unknown_topic_or_partition
            assert _produce(c, topic, partition=7) == ErrorCode.unknown_topic_or_partition
            assert _partitions(c, topic, auto_create=True) == (
                ErrorCode.unknown_topic_or_partition, 0
            )
            r = c.request(ApiKey.CREATE_TOPICS, 7, timeout=10000, validate_only=False, topics=[
                dict(name=topic, num_partitions=1, replication_factor=1, assignments=[],
                     configs=[])])
            assert r.topics[0].error_code == ErrorCode.invalid_request
        assert not [p for p in abuse_broker.data_dir.iterdir() if p.name.startswith(INTERNAL)]
        # A Produce creates no ordinary topic either: Metadata does, for the clients that ask.
        assert _produce(c, "made-by-produce") == ErrorCode.unknown_topic_or_partition
        assert _partitions(c, "made-by-produce") == (ErrorCode.unknown_topic_or_partition, 0)
        assert _partitions(c, "made-by-metadata", auto_create=True) == (0, 1)

    # Their coordinators create them whole, and a group and a transaction work.
    group = HealthyGroup(abuse_broker.bootstrap)
    group.start()
    try:
        p = Producer({"bootstrap.servers": abuse_broker.bootstrap, "transactional.id": "t1"})
        p.init_transactions(30)
        p.begin_transaction()
        p.produce("healthy", value=b"in a transaction")
        p.commit_transaction(30)
        with RawClient(abuse_broker.port) as c:
            for topic in INTERNAL:
                assert _partitions(c, topic) == (0, 50)
                # ...and are not the clients' to write.
                assert _produce(c, topic) == ErrorCode.invalid_topic_exception
            r = c.request(ApiKey.FIND_COORDINATOR, 4, key_type=0, coordinator_keys=["any-group"])
            assert r.coordinators[0].error_code == 0
        assert_survived(abuse_broker, group, "produces to the internal topics")
    finally:
        group.stop()
