"""Offset commits with real clients: durable across SIGKILL, visible to admin APIs, every version."""

from __future__ import annotations

import random
import struct
import threading
import time
import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient

from kcoord.protocol.apis import ApiKey
from kcoord.protocol.errors import ErrorCode

from .clients import KAFKA_PYTHON_POLL_MS, create_topic, produce_confluent
from .harness import BrokerProcess, stored_batches, wait_for
from .rawclient import RawClient

FAST = {"group.initial.rebalance.delay.ms": 0, "group.min.session.timeout.ms": 1000}


def _committer(bootstrap: str, group: str) -> Consumer:
    return Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False}
    )


def test_acknowledged_commits_of_64_partitions_survive_sigkill(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "p64", 64)
    groups = [f"committer-{i}" for i in range(3)]
    expected: dict[str, dict[int, int]] = {}
    for n, group in enumerate(groups):
        c = _committer(broker.bootstrap, group)
        offsets = {p: 1000 * (n + 1) + p for p in range(64)}
        done = c.commit(
            offsets=[TopicPartition("p64", p, o) for p, o in offsets.items()], asynchronous=False
        )
        assert all(tp.error is None for tp in done)
        expected[group] = offsets
        c.close()
    broker.kill()  # right after the acknowledgements
    broker.restart()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for group, offsets in expected.items():
        c = _committer(broker.bootstrap, group)
        got = c.committed([TopicPartition("p64", p) for p in range(64)], timeout=20)
        assert {tp.partition: tp.offset for tp in got} == offsets
        c.close()
        listed = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(20)
        assert {tp.partition: tp.offset for tp in listed.topic_partitions} == offsets


def test_concurrent_committers_lose_no_acknowledged_commit_across_sigkill(
    broker: BrokerProcess,
) -> None:
    create_topic(broker.bootstrap, "crash", 8)
    acked: dict[tuple[str, int], int] = {}
    sent: dict[tuple[str, int], int] = {}
    lock = threading.Lock()
    stop = threading.Event()

    def commit_loop(i: int) -> None:
        group = f"crash-{i}"
        try:
            with RawClient(broker.port, timeout=5) as c:
                offset = 0
                while not stop.is_set():
                    offset += 1
                    with lock:
                        for p in range(8):
                            sent[(group, p)] = offset
                    r = c.request(
                        ApiKey.OFFSET_COMMIT,
                        8,
                        group_id=group,
                        generation_id_or_member_epoch=-1,
                        member_id="",
                        group_instance_id=None,
                        topics=[dict(name="crash", partitions=[
                            dict(partition_index=p, committed_offset=offset,
                                 committed_leader_epoch=-1, committed_metadata=None)
                            for p in range(8)])],
                    )
                    assert all(p.error_code == 0 for t in r.topics for p in t.partitions)
                    with lock:
                        for p in range(8):
                            acked[(group, p)] = offset
        except (OSError, ConnectionError):
            return  # the broker died under us

    threads = [threading.Thread(target=commit_loop, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    wait_for(lambda: len(acked) == 48 and min(acked.values()) >= 5, 30, what="commits flowing")
    time.sleep(random.uniform(0.0, 0.3))  # a random moment in the stream of commits
    broker.kill()
    stop.set()
    for t in threads:
        t.join(20)
    broker.restart()
    with RawClient(broker.port) as c:
        for i in range(6):
            group = f"crash-{i}"
            r = c.request(
                ApiKey.OFFSET_FETCH, 7, group_id=group,
                topics=[dict(name="crash", partition_indexes=list(range(8)))], require_stable=True,
            )
            for part in r.topics[0].partitions:
                key = (group, part.partition_index)
                assert acked[key] <= part.committed_offset <= sent[key], (key, part.committed_offset)


def _committed_total(bootstrap: str, group: str, topic: str, partitions: int) -> int:
    c = _committer(bootstrap, group)
    try:
        got = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
        return sum(max(tp.offset, 0) for tp in got)
    finally:
        c.close()


def test_kafka_python_commits_fetches_and_auto_commits_across_rebalance(
    broker_factory: object,
) -> None:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP
    from kafka.structs import OffsetAndMetadata

    broker: BrokerProcess = broker_factory(FAST)  # type: ignore[operator]
    create_topic(broker.bootstrap, "kp", 2)
    produce_confluent(broker.bootstrap, "kp", [(i % 2, b"k", b"v%d" % i) for i in range(100)], "none")

    explicit = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id="kp-explicit",
                             enable_auto_commit=False)
    explicit.commit({KTP("kp", 0): OffsetAndMetadata(7, "meta", -1)})
    assert explicit.committed(KTP("kp", 0)) == 7
    explicit.close()

    def consumer() -> KafkaConsumer:
        c = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id="kp-auto",
                          enable_auto_commit=True, auto_commit_interval_ms=200,
                          auto_offset_reset="earliest", session_timeout_ms=6000,
                          heartbeat_interval_ms=300)
        # Learn the topic's partitions before joining: kafka-python 3.0.12 otherwise assigns
        # nothing, rejoins at once, and now and then hangs in that rejoin (a client race).
        c.partitions_for_topic("kp")
        c.subscribe(["kp"])
        return c

    first = consumer()
    seen = 0
    deadline = time.monotonic() + 30
    while seen < 100 and time.monotonic() < deadline:
        seen += sum(len(v) for v in first.poll(timeout_ms=200).values())
    assert seen == 100
    second = consumer()  # joining forces a rebalance; the first commits before rejoining (N9)
    stop = threading.Event()

    def keep_polling(c: KafkaConsumer) -> None:
        while not stop.is_set():
            c.poll(timeout_ms=KAFKA_PYTHON_POLL_MS)

    pollers = [threading.Thread(target=keep_polling, args=(c,)) for c in (first, second)]
    for t in pollers:
        t.start()
    try:
        wait_for(lambda: bool(first.assignment()) and bool(second.assignment()), 30, what="rebalance")
        wait_for(lambda: _committed_total(broker.bootstrap, "kp-auto", "kp", 2) == 100, 30,
                 what="every consumed offset auto-committed")
    finally:
        stop.set()
        for t in pollers:
            t.join(10)
        first.close()
        second.close()


def test_aiokafka_commits_fetches_and_auto_commits_across_rebalance(broker_factory: object) -> None:
    import asyncio

    from aiokafka import AIOKafkaConsumer
    from aiokafka import TopicPartition as ATP
    from aiokafka.structs import OffsetAndMetadata

    broker: BrokerProcess = broker_factory(FAST)  # type: ignore[operator]
    create_topic(broker.bootstrap, "aio", 2)
    produce_confluent(broker.bootstrap, "aio", [(i % 2, b"k", b"v%d" % i) for i in range(100)], "none")

    async def run() -> None:
        explicit = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, group_id="aio-explicit",
                                    enable_auto_commit=False)
        await explicit.start()
        explicit.assign([ATP("aio", 1)])
        await explicit.commit({ATP("aio", 1): OffsetAndMetadata(9, "m")})
        assert await explicit.committed(ATP("aio", 1)) == 9
        await explicit.stop()

        def consumer() -> AIOKafkaConsumer:
            return AIOKafkaConsumer("aio", bootstrap_servers=broker.bootstrap, group_id="aio-auto",
                                    enable_auto_commit=True, auto_commit_interval_ms=200,
                                    auto_offset_reset="earliest", session_timeout_ms=6000,
                                    heartbeat_interval_ms=300)

        first = consumer()
        await first.start()
        seen = 0
        deadline = time.monotonic() + 30
        while seen < 100 and time.monotonic() < deadline:
            seen += sum(len(v) for v in (await first.getmany(timeout_ms=200)).values())
        assert seen == 100
        second = consumer()
        await second.start()
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                await asyncio.gather(first.getmany(timeout_ms=100), second.getmany(timeout_ms=100))
                if first.assignment() and second.assignment():
                    total = await asyncio.to_thread(_committed_total, broker.bootstrap, "aio-auto", "aio", 2)
                    if total == 100:
                        return
            raise AssertionError("auto-commit across the rebalance did not cover every offset")
        finally:
            await first.stop()
            await second.stop()

    asyncio.run(run())


def _legacy_commit(c: RawClient, version: int, group: str, offset: int, metadata: str) -> int:
    topic = b"legacy"
    body = struct.pack(">h", len(group)) + group.encode()
    if version == 1:
        body += struct.pack(">ih", -1, 0)
    body += struct.pack(">ih", 1, len(topic)) + topic + struct.pack(">iiq", 1, 0, offset)
    if version == 1:
        body += struct.pack(">q", -1)
    body += struct.pack(">h", len(metadata)) + metadata.encode()
    correlation = c.send(ApiKey.OFFSET_COMMIT, version, body)
    frame = c.recv_frame()
    assert struct.unpack_from(">i", frame)[0] == correlation
    # [topics: 1][name][partitions: 1][partition][error]
    pos = 4 + 4 + 2 + len(topic) + 4 + 4
    return int(struct.unpack_from(">h", frame, pos)[0])


def test_offset_commit_v0_v1_and_fetch_v0(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "legacy", 1)
    with RawClient(broker.port) as c:
        assert _legacy_commit(c, 0, "old0", 11, "zero") == 0
        assert _legacy_commit(c, 1, "old1", 22, "one") == 0
        for group, offset, metadata in (("old0", 11, "zero"), ("old1", 22, "one")):
            r = c.request(ApiKey.OFFSET_FETCH, 0, group_id=group,
                          topics=[dict(name="legacy", partition_indexes=[0])])
            part = r.topics[0].partitions[0]
            assert (part.committed_offset, part.metadata, part.error_code) == (offset, metadata, 0)


@pytest.mark.parametrize("version", [2, 9])
def test_commit_errors_per_partition(broker: BrokerProcess, version: int) -> None:
    create_topic(broker.bootstrap, "errs", 1)
    with RawClient(broker.port) as c:
        r = c.request(
            ApiKey.OFFSET_COMMIT, version, group_id="errs", generation_id_or_member_epoch=-1,
            member_id="", group_instance_id=None, retention_time=-1,
            topics=[
                dict(name="errs", partitions=[
                    dict(partition_index=0, committed_offset=5, committed_leader_epoch=-1,
                         committed_metadata="x" * 5000),
                    dict(partition_index=7, committed_offset=5, committed_leader_epoch=-1,
                         committed_metadata=None)]),
                dict(name="no-such-topic", partitions=[
                    dict(partition_index=0, committed_offset=5, committed_leader_epoch=-1,
                         committed_metadata=None)]),
            ],
        )
        codes = {(t.name, p.partition_index): p.error_code for t in r.topics for p in t.partitions}
        assert codes == {
            ("errs", 0): ErrorCode.offset_metadata_too_large,
            ("errs", 7): ErrorCode.unknown_topic_or_partition,
            ("no-such-topic", 0): ErrorCode.unknown_topic_or_partition,
        }


def test_admin_alter_list_and_delete_offsets(broker_factory: object) -> None:
    from confluent_kafka.admin import AdminClient as Admin

    from .groups import ConfluentMember

    broker: BrokerProcess = broker_factory(FAST)  # type: ignore[operator]
    create_topic(broker.bootstrap, "adm", 2)
    create_topic(broker.bootstrap, "other", 1)
    admin = Admin({"bootstrap.servers": broker.bootstrap})
    req = ConsumerGroupTopicPartitions(
        "adm-group", [TopicPartition("adm", 0, 3), TopicPartition("adm", 1, 4), TopicPartition("other", 0, 5)]
    )
    admin.alter_consumer_group_offsets([req])["adm-group"].result(20)
    listed = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions("adm-group")])["adm-group"].result(20)
    assert {(tp.topic, tp.partition): tp.offset for tp in listed.topic_partitions} == {
        ("adm", 0): 3, ("adm", 1): 4, ("other", 0): 5,
    }
    # A member subscribed to "adm" makes its offsets undeletable; "other" can go.
    member = ConfluentMember(broker.bootstrap, "adm-group", "adm", "m1")
    try:
        wait_for(lambda: len(member.assignment) == 2, 30, what="member assigned")
        with RawClient(broker.port) as c:
            r = c.request(ApiKey.OFFSET_DELETE, 0, group_id="adm-group", topics=[
                dict(name="adm", partitions=[dict(partition_index=0)]),
                dict(name="other", partitions=[dict(partition_index=0)]),
            ])
        codes = {(t.name, p.partition_index): p.error_code for t in r.topics for p in t.partitions}
        assert r.error_code == 0
        assert codes == {("adm", 0): ErrorCode.group_subscribed_to_topic, ("other", 0): 0}
    finally:
        member.stop()
    listed = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions("adm-group")])["adm-group"].result(20)
    assert {(tp.topic, tp.partition) for tp in listed.topic_partitions if tp.offset >= 0} == {("adm", 0), ("adm", 1)}


def _by_kafka_python(c: RawClient, request: Any, response_class: Any, version: int) -> Any:
    """``request`` encoded by kafka-python (its codecs are generated from Kafka's own message
    schemas, so they check kcoord's v10 independently of kio), its answer decoded by it too."""
    c.correlation += 1
    request.with_header(correlation_id=c.correlation, client_id="by-id")
    c.send_raw(bytes(request.encode(version=version, header=True, framed=True)))
    answer = response_class.decode(c.recv_frame(), version=version, header=True)
    assert answer.header.correlation_id == c.correlation
    return answer


def test_offsets_committed_and_fetched_by_topic_id_v10(broker: BrokerProcess) -> None:
    """OffsetCommit and OffsetFetch v10 name topics by id (KIP-848): the offsets are those of the
    topic's name in v9; an id no topic has is UNKNOWN_TOPIC_ID on each of its partitions."""
    from kafka.protocol.consumer import (
        OffsetCommitRequest,
        OffsetCommitResponse,
        OffsetFetchRequest,
        OffsetFetchResponse,
    )

    commit_topic = OffsetCommitRequest.OffsetCommitRequestTopic
    commit_partition = commit_topic.OffsetCommitRequestPartition
    fetch_group = OffsetFetchRequest.OffsetFetchRequestGroup
    fetch_topic = fetch_group.OffsetFetchRequestTopics
    create_topic(broker.bootstrap, "by-id", 2)
    nowhere = uuid.uuid4()
    with RawClient(broker.port) as c:
        metadata = c.request(ApiKey.METADATA, 12, topics=[dict(name="by-id", topic_id=None)],
                             allow_auto_topic_creation=False,
                             include_topic_authorized_operations=False)
        topic_id = metadata.topics[0].topic_id
        assert topic_id is not None

        def commit(tid: uuid.UUID, offsets: dict[int, int]) -> dict[tuple[uuid.UUID, int], int]:
            answer = _by_kafka_python(c, OffsetCommitRequest(
                group_id="ids", generation_id_or_member_epoch=-1, member_id="",
                group_instance_id=None,
                topics=[commit_topic(topic_id=tid, partitions=[
                    commit_partition(partition_index=p, committed_offset=o,
                                     committed_leader_epoch=3, committed_metadata=f"m{p}")
                    for p, o in offsets.items()])]), OffsetCommitResponse, 10)
            return {(t.topic_id, p.partition_index): p.error_code
                    for t in answer.topics for p in t.partitions}

        assert commit(topic_id, {0: 7, 1: 9}) == {(topic_id, 0): 0, (topic_id, 1): 0}
        assert commit(topic_id, {5: 1}) == {(topic_id, 5): ErrorCode.unknown_topic_or_partition}
        assert commit(nowhere, {0: 1, 1: 2}) == {
            (nowhere, 0): ErrorCode.unknown_topic_id, (nowhere, 1): ErrorCode.unknown_topic_id,
        }

        def fetch(topics: list[Any] | None) -> dict[tuple[uuid.UUID, int], tuple[int, int, str, int]]:
            answer = _by_kafka_python(c, OffsetFetchRequest(
                groups=[fetch_group(group_id="ids", member_id=None, member_epoch=-1, topics=topics)],
                require_stable=False), OffsetFetchResponse, 10)
            (group,) = answer.groups
            assert group.group_id == "ids" and group.error_code == 0
            return {(t.topic_id, p.partition_index):
                    (p.committed_offset, p.committed_leader_epoch, p.metadata, p.error_code)
                    for t in group.topics for p in t.partitions}

        stored = {(topic_id, 0): (7, 3, "m0", 0), (topic_id, 1): (9, 3, "m1", 0)}
        asked = fetch([fetch_topic(topic_id=topic_id, partition_indexes=[0, 1]),
                       fetch_topic(topic_id=nowhere, partition_indexes=[4])])
        assert asked == {**stored, (nowhere, 4): (-1, -1, "", ErrorCode.unknown_topic_id)}
        assert fetch(None) == stored  # all of the group's, named by id

        by_name = c.request(ApiKey.OFFSET_FETCH, 9, groups=[dict(
            group_id="ids", member_id=None, member_epoch=-1,
            topics=[dict(name="by-id", partition_indexes=[0, 1])])], require_stable=False)
        assert {(p.partition_index, p.committed_offset, p.metadata)
                for t in by_name.groups[0].topics for p in t.partitions} == {(0, 7, "m0"), (1, 9, "m1")}
    # The records are OffsetCommitValue v4 with the topic id, as Kafka 4.2 writes a v10 commit:
    # read back with a codec of Kafka's schema.
    from kcoord.coordinator.schemas import OffsetCommitKey, decode_key
    from kcoord.protocol.records import decode_batches
    from tests.unit.test_record_versions import OffsetCommitValueK, kafka_decode

    stored_ids = {}
    for partition in range(50):  # __consumer_offsets' partitions, on either storage engine
        for batch in decode_batches(stored_batches(broker.data_dir, "__consumer_offsets", partition)):
            for r in batch.records:
                assert r.key is not None
                key = decode_key(r.key)
                if isinstance(key, OffsetCommitKey) and key.group == "ids" and r.value is not None:
                    assert r.value[:2] == b"\x00\x04"
                    value = kafka_decode(OffsetCommitValueK, r.value)
                    stored_ids[key.partition] = (value.offset, value.topic_id)
    assert stored_ids == {0: (7, topic_id), 1: (9, topic_id)}
