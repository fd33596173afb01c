"""Metadata, topic administration, ListOffsets, Fetch long polling and request ordering."""

from __future__ import annotations

import struct
import threading
import time
from concurrent.futures import Future

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from kio.serial import entity_reader

from kcoord.protocol.apis import ApiKey
from kcoord.protocol.codec import response_type
from kcoord.protocol.errors import ErrorCode
from kcoord.protocol.record_encoding import build_batch
from kcoord.protocol.records import decode_batches

from .clients import create_topic
from .harness import BrokerProcess, wait_for
from .rawclient import RawClient


def _error_of(future: Future[object]) -> int:
    """The Kafka error code an admin future failed with."""
    try:
        future.result(10)
    except KafkaException as e:
        return int(e.args[0].code())
    raise AssertionError("the request should have failed")


def test_topic_admin_and_metadata(broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    fs = admin.create_topics([NewTopic("adm", 2, 1), NewTopic("bad/name", 1, 1), NewTopic("rf3", 1, 3)])
    fs["adm"].result(10)
    assert _error_of(fs["bad/name"]) == ErrorCode.invalid_topic_exception
    assert _error_of(fs["rf3"]) == ErrorCode.invalid_replication_factor
    assert _error_of(admin.create_topics([NewTopic("adm", 2, 1)])["adm"]) == ErrorCode.topic_already_exists

    md = admin.list_topics(timeout=10)
    assert md.controller_id == 0 and list(md.brokers) == [0]
    assert md.brokers[0].port == broker.port
    assert len(md.topics["adm"].partitions) == 2
    assert all(p.leader == 0 and p.replicas == [0] for p in md.topics["adm"].partitions.values())

    admin.create_partitions([NewPartitions("adm", 5)])["adm"].result(10)
    wait_for(lambda: len(admin.list_topics(timeout=10).topics["adm"].partitions) == 5, 10)
    shrink = admin.create_partitions([NewPartitions("adm", 3)])["adm"]
    assert _error_of(shrink) == ErrorCode.invalid_partitions

    admin.delete_topics(["adm"])["adm"].result(10)
    wait_for(lambda: "adm" not in admin.list_topics(timeout=10).topics, 10)
    assert not (broker.data_dir / "adm-0").exists()

    # Partitions survive a restart, with the same topic id.
    create_topic(broker.bootstrap, "kept", 3)
    with RawClient(broker.port) as c:
        before = c.request(ApiKey.METADATA, 12, topics=[dict(name="kept", topic_id=None)],
                           allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    broker.kill()
    broker.restart()
    with RawClient(broker.port) as c:  # v13 (KIP-1102): the same answer, a top-level error code
        after = c.request(ApiKey.METADATA, 13, topics=[dict(name="kept", topic_id=None)],
                          allow_auto_topic_creation=False, include_topic_authorized_operations=False)
        missing = c.request(ApiKey.METADATA, 13, topics=[dict(name="nope", topic_id=None)],
                            allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    assert after.error_code == missing.error_code == ErrorCode.none
    assert after.topics[0].topic_id == before.topics[0].topic_id
    assert len(after.topics[0].partitions) == 3
    assert after.cluster_id == before.cluster_id
    assert missing.topics[0].error_code == ErrorCode.unknown_topic_or_partition


def test_offsets_topic_is_internal_once_it_exists(broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    assert "__consumer_offsets" not in admin.list_topics(timeout=10).topics
    with RawClient(broker.port) as c:
        r = c.request_coordinated(ApiKey.FIND_COORDINATOR, 3, key="some-group", key_type=0)
        assert r.error_code == 0 and r.node_id == 0 and r.port == broker.port
        md = c.request(ApiKey.METADATA, 12, topics=None, allow_auto_topic_creation=False,
                       include_topic_authorized_operations=False)
    internal = [t for t in md.topics if t.name == "__consumer_offsets"]
    assert internal and internal[0].is_internal and len(internal[0].partitions) == 50


def test_auto_create_on_produce_and_list_offsets(broker: BrokerProcess) -> None:
    p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
    base = 1_700_000_000_000
    for i in range(10):
        p.produce("auto", value=b"x%d" % i, timestamp=base + i * 1000)
    assert p.flush(20) == 0
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "lo"})
    try:
        assert c.get_watermark_offsets(TopicPartition("auto", 0), timeout=10) == (0, 10)
        found = c.offsets_for_times([TopicPartition("auto", 0, base + 4500)], timeout=10)
        assert found[0].offset == 5  # the first record at or after the time, to the record
        late = c.offsets_for_times([TopicPartition("auto", 0, base + 10**9)], timeout=10)
        assert late[0].offset in (-1, 10)
    finally:
        c.close()


def _fetch(c: RawClient, topic: str, offset: int, max_wait_ms: int, min_bytes: int) -> int:
    body_fields = dict(
        replica_id=-1,
        max_wait=max_wait_ms,
        min_bytes=min_bytes,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=[
            dict(
                topic=topic,
                partitions=[
                    dict(partition=0, current_leader_epoch=-1, fetch_offset=offset,
                         last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=1 << 20)
                ],
            )
        ],
        forgotten_topics_data=[],
        rack_id="",
    )
    return c.send(ApiKey.FETCH, 12, _encode(ApiKey.FETCH, 12, body_fields))


def _encode(api_key: int, version: int, fields: dict[str, object]) -> bytes:
    from kcoord.protocol.codec import encode_body, request_type
    from kcoord.protocol.responses import build

    return encode_body(build(request_type(api_key, version), **fields))


def test_fetch_long_poll_wakes_on_produce_and_keeps_response_order(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "lp", 1)
    with RawClient(broker.port, timeout=30) as c, RawClient(broker.port) as other:
        fetch_id = _fetch(c, "lp", 0, max_wait_ms=20000, min_bytes=1)
        # Pipelined behind the parked fetch on the same connection.
        versions_id = c.send(ApiKey.API_VERSIONS, 3, _encode(ApiKey.API_VERSIONS, 3, dict(
            client_software_name="t", client_software_version="1")))
        # Another connection is not held up by the parked fetch.
        assert other.request(ApiKey.API_VERSIONS, 3, client_software_name="t",
                             client_software_version="1").error_code == 0
        produced = threading.Event()

        def produce() -> None:
            with RawClient(broker.port) as pc:
                r = pc.request(ApiKey.PRODUCE, 9, transactional_id=None, acks=-1, timeout=5000,
                               topic_data=[dict(name="lp", partition_data=[dict(
                                   index=0, records=build_batch([(b"k", b"v", (), int(time.time() * 1000))]))])])
                assert r.responses[0].partition_responses[0].error_code == 0
            produced.set()

        t = threading.Thread(target=produce)
        t.start()
        first = c.recv_frame()
        second = c.recv_frame()
        t.join(10)
        assert produced.is_set()
        assert struct.unpack_from(">i", first)[0] == fetch_id
        assert struct.unpack_from(">i", second)[0] == versions_id
        # The fetch answered with the produced batch, long before its 20 s max wait.
        body, _ = entity_reader(response_type(ApiKey.FETCH, 12))(first, 5)
        records = body.responses[0].partitions[0].records
        assert [r.value for b in decode_batches(records) for r in b.records] == [b"v"]


def test_fetch_with_nothing_to_read_returns_after_max_wait(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "idle", 1)
    with RawClient(broker.port) as c:
        fetch_id = _fetch(c, "idle", 0, max_wait_ms=300, min_bytes=1)
        frame = c.recv_frame()
        assert struct.unpack_from(">i", frame)[0] == fetch_id
        # Fetching past the end is OFFSET_OUT_OF_RANGE.
        _fetch(c, "idle", 5, max_wait_ms=300, min_bytes=1)
        body, _ = entity_reader(response_type(ApiKey.FETCH, 12))(c.recv_frame(), 5)
        assert body.responses[0].partitions[0].error_code == ErrorCode.offset_out_of_range
