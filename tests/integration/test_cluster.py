"""Cluster mode: three kcoord nodes over the PostgreSQL the test run starts (issue 28).

Each test starts its nodes on one fresh database with short heartbeats and sessions
(``broker.heartbeat.interval.ms`` 200, ``broker.session.timeout.ms`` 3000), drives them with
confluent-kafka and raw requests, and injects faults: SIGKILL and SIGSTOP of a node.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from kcoord.protocol.apis import ApiKey
from kcoord.protocol.errors import ErrorCode
from kcoord.protocol.javahash import partition_for

from .harness import BrokerProcess, free_port, wait_for
from .rawclient import RawClient
from .test_admin_cli import kcoord_json
from .test_metrics import scrape, value

HEARTBEAT_MS = 200
SESSION_MS = 3000
NODES = (1, 2, 3)


class Cluster:
    def __init__(self, root: Path, url: str, settings: dict[str, Any] | None = None) -> None:
        """``settings``: more of every node's settings (beside and over the defaults here)."""
        self.root = root
        self.url = url
        self.settings = settings or {}
        self.nodes: dict[int, BrokerProcess] = {}
        self.paused: set[int] = set()

    def serving(self) -> list[BrokerProcess]:
        """The nodes running and not stopped (SIGSTOP)."""
        return [b for n, b in self.nodes.items() if b.alive() and n not in self.paused]

    def start(self, node_id: int) -> BrokerProcess:
        b = self.nodes.get(node_id)
        if b is None:
            b = self.nodes[node_id] = BrokerProcess(
                self.root / f"node{node_id}",
                {
                    "node.id": node_id,
                    "storage.url": self.url,
                    "broker.heartbeat.interval.ms": HEARTBEAT_MS,
                    "broker.session.timeout.ms": SESSION_MS,
                    "group.initial.rebalance.delay.ms": 0,
                    "group.min.session.timeout.ms": 1000,
                    "offsets.topic.num.partitions": 6,
                    "transaction.state.log.num.partitions": 3,
                    "group.consumer.heartbeat.interval.ms": 500,
                    "group.consumer.min.heartbeat.interval.ms": 100,
                    "group.consumer.session.timeout.ms": 6000,
                    "group.consumer.min.session.timeout.ms": 1000,
                    **self.settings,
                },
                metrics_port=free_port(),
            )
        return b.start()

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.serving())

    def by_port(self, port: int) -> BrokerProcess:
        return next(b for b in self.nodes.values() if b.port == port)

    def metadata(self, node: BrokerProcess) -> Any:
        return AdminClient({"bootstrap.servers": node.bootstrap}).list_topics(timeout=10)

    def leaders(self, node: BrokerProcess, topic: str) -> dict[int, int]:
        md = self.metadata(node).topics.get(topic)
        if md is None or md.error is not None:
            return {}
        return {p: pm.leader for p, pm in md.partitions.items()}

    def settled(self, topic: str, partitions: int, live: int) -> dict[int, int] | None:
        """The leaders of ``topic`` once every live node reports the same ones, each partition
        led, and ``live`` brokers listed by each."""
        seen = []
        for b in self.serving():
            md = self.metadata(b)
            if len(md.brokers) != live:
                return None
            seen.append(self.leaders(b, topic))
        first = seen[0]
        if len(first) != partitions or any(v < 0 for v in first.values()):
            return None
        return first if all(s == first for s in seen) else None

    def stop(self) -> None:
        for b in self.nodes.values():
            if b.alive():
                with_cont(b)
                b.stop()


def with_cont(b: BrokerProcess) -> None:
    """SIGCONT (a no-op unless the node was stopped)."""
    if b.alive():
        os.kill(b.pid, signal.SIGCONT)


@pytest.fixture
def cluster(tmp_path: Path, postgres_url: str) -> Iterator[Cluster]:
    c = Cluster(tmp_path, postgres_url)
    try:
        yield c
    finally:
        c.stop()


def started(cluster: Cluster) -> Cluster:
    for n in NODES:
        cluster.start(n)
    return cluster


def with_topic(cluster: Cluster, topic: str, partitions: int) -> dict[int, int]:
    """Start the three nodes, create ``topic``; its leaders once every node agrees on them."""
    return create_topic(started(cluster), topic, partitions)


def create_topic(cluster: Cluster, topic: str, partitions: int) -> dict[int, int]:
    """Create ``topic``; its leaders once every serving node agrees on them."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for f in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        f.result(10)
    leaders = wait_for(lambda: cluster.settled(topic, partitions, 3), 30, 0.1, "settled leaders")
    assert isinstance(leaders, dict)
    return leaders


def coordinator_of(cluster: Cluster, group: str, other_than: int | None = None) -> int:
    """The node id the serving nodes agree on as the group's coordinator (once it is not
    ``other_than``)."""

    def agreed() -> int | None:
        answers = set()
        for b in cluster.serving():
            with RawClient(b.port) as rc:
                r = rc.request(ApiKey.FIND_COORDINATOR, 3, key=group, key_type=0)
            if r.error_code:
                return None
            answers.add(r.node_id)
        if len(answers) != 1 or other_than in answers:
            return None
        return answers.pop()

    return int(wait_for(agreed, 30, 0.1, f"one coordinator for {group}"))  # type: ignore[arg-type]


def test_three_nodes_agree_on_leaders_and_spread_partitions_and_coordinators(
    cluster: Cluster,
) -> None:
    leaders = with_topic(cluster, "spread", 6)
    assert sorted(leaders.values()) == [1, 1, 2, 2, 3, 3], leaders
    # The group coordinators are spread too: 6 shards, two per node.
    offsets = wait_for(lambda: cluster.settled("__consumer_offsets", 6, 3), 30, 0.1, "shards")
    assert isinstance(offsets, dict)
    assert sorted(offsets.values()) == [1, 1, 2, 2, 3, 3], offsets
    for group in ("g-a", "g-b", "g-c", "g-d"):
        assert coordinator_of(cluster, group) == offsets[partition_for(group, 6)]
    # Every node names the topic by the same id: OffsetCommit v10 finds it by that id at the
    # group's coordinator, and the offset is the topic name's (OffsetFetch v9).
    ids = set()
    for b in cluster.nodes.values():
        with RawClient(b.port) as rc:
            md = rc.request(ApiKey.METADATA, 12, topics=[dict(name="spread", topic_id=None)],
                            allow_auto_topic_creation=False,
                            include_topic_authorized_operations=False)
        ids.add(md.topics[0].topic_id)
    (topic_id,) = ids
    with RawClient(cluster.nodes[coordinator_of(cluster, "g-a")].port) as rc:
        r = rc.request(ApiKey.OFFSET_COMMIT, 10, group_id="g-a", member_id="", topics=[dict(
            topic_id=topic_id, partitions=[dict(partition_index=5, committed_offset=3,
                                                committed_metadata=None)])])
        assert (r.topics[0].topic_id, r.topics[0].partitions[0].error_code) == (topic_id, 0)
        f = rc.request(ApiKey.OFFSET_FETCH, 9, require_stable=False, groups=[dict(
            group_id="g-a", member_id=None, topics=[dict(name="spread", partition_indexes=[5])])])
        assert f.groups[0].topics[0].partitions[0].committed_offset == 3
    # What an operator sees: kcoord cluster describe and each node's metrics.
    described = kcoord_json(cluster.nodes[2], "cluster", "describe")
    assert [(n["node"], n["group_coordinator_shards"]) for n in described["nodes"]] == [
        (1, 2), (2, 2), (3, 2)
    ]
    for n, b in cluster.nodes.items():
        samples = scrape(b)
        assert value(samples, "kcoord_cluster_nodes") == 3
        led = next(d["partitions"] for d in described["nodes"] if d["node"] == n)
        assert value(samples, "kcoord_cluster_partitions_led") == led
    # Produce through the leaders and read back through any node.
    p = Producer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True})
    for i in range(60):
        p.produce("spread", str(i).encode(), partition=i % 6)
    assert p.flush(15) == 0
    for b in cluster.nodes.values():
        with RawClient(b.port) as rc:
            r = rc.request(
                ApiKey.LIST_OFFSETS, 5, replica_id=-1, isolation_level=0,
                topics=[dict(name="spread", partitions=[
                    dict(partition_index=i, current_leader_epoch=-1, timestamp=-1)
                    for i in range(6)])],
            )
        for part in r.topics[0].partitions:
            led_here = leaders[part.partition_index] == int(b.settings["node.id"])
            if led_here:
                assert part.error_code == 0 and part.offset == 10, part
                assert part.leader_epoch >= 1
                check_epochs(b, part.partition_index, part.leader_epoch)
            else:
                assert part.error_code == ErrorCode.not_leader_or_follower, part
    # kafka_exporter's series: each partition from its leader only, the cluster-wide ones alike
    reported: dict[int, list[int]] = {}
    for n, b in cluster.nodes.items():
        samples = scrape(b)
        assert value(samples, "kafka_brokers") == 3
        assert value(samples, "kafka_topic_partitions", topic="spread") == 6
        for i in range(6):
            offset = value(samples, "kafka_topic_partition_current_offset", topic="spread", partition=str(i))
            if offset is not None:
                assert offset == 10
                assert value(samples, "kafka_topic_partition_leader", topic="spread", partition=str(i)) == n
                reported.setdefault(i, []).append(n)
    assert reported == {i: [leaders[i]] for i in range(6)}


def check_epochs(b: BrokerProcess, partition: int, epoch: int) -> None:
    """KIP-320 at the leader: the current epoch passes, an older one is fenced, a newer one
    unknown; for ListOffsets and Fetch alike."""
    expected = {epoch: 0, epoch - 1: ErrorCode.fenced_leader_epoch,
                epoch + 1: ErrorCode.unknown_leader_epoch}
    with RawClient(b.port) as rc:
        for sent, code in expected.items():
            r = rc.request(
                ApiKey.LIST_OFFSETS, 5, replica_id=-1, isolation_level=0,
                topics=[dict(name="spread", partitions=[dict(
                    partition_index=partition, current_leader_epoch=sent, timestamp=-1)])],
            )
            assert r.topics[0].partitions[0].error_code == code, (sent, r)
            f = rc.request(
                ApiKey.FETCH, 12, replica_id=-1, max_wait=0, min_bytes=0, max_bytes=1 << 20,
                isolation_level=0, session_id=0, session_epoch=-1, rack_id="",
                forgotten_topics_data=[],
                topics=[dict(topic="spread", partitions=[dict(
                    partition=partition, current_leader_epoch=sent, fetch_offset=0,
                    last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=1 << 16)])],
            )
            assert f.responses[0].partitions[0].error_code == code, (sent, f)


def _committer(cluster: Cluster, group: str, topic: str, protocol: str = "classic") -> Consumer:
    conf: dict[str, Any] = {
        "bootstrap.servers": cluster.bootstrap,
        "group.id": group,
        "group.protocol": protocol,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
    }
    if protocol == "classic":
        conf.update({"session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
    c = Consumer(conf)
    c.subscribe([topic])
    return c


def _commit_until(
    consumer: Consumer, acked: dict[int, int], topic: str, done: Callable[[], bool], timeout: float
) -> None:
    """Consume and commit each message synchronously; ``acked``: the last acknowledged offset
    per partition. Until ``done()`` (after at least one commit) or ``timeout``."""
    deadline = time.monotonic() + timeout
    committed_once = False
    while time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is not None and msg.error() is None:
            tp = TopicPartition(topic, msg.partition(), msg.offset() + 1)
            try:
                consumer.commit(offsets=[tp], asynchronous=False)
            except KafkaException:
                continue  # retried by the next message; a failover is under way
            acked[msg.partition()] = max(acked.get(msg.partition(), 0), msg.offset() + 1)
            committed_once = True
        if committed_once and done():
            return
    raise AssertionError(f"no commit within {timeout} s (acknowledged: {acked})")


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_sigkill_of_a_group_coordinator_moves_the_group_and_loses_no_commit(
    cluster: Cluster, protocol: str
) -> None:
    """For a classic and a KIP-848 group: the coordinator's node is SIGKILLed; the group
    commits again through another node within the session timeout + 5 s, and the committed
    offsets are at least every acknowledged one."""
    with_topic(cluster, "work", 3)
    group = "failover-" + uuid.uuid4().hex[:6]
    victim_id = coordinator_of(cluster, group)
    victim = cluster.nodes[victim_id]
    p = Producer({"bootstrap.servers": cluster.bootstrap})
    for i in range(3000):
        p.produce("work", str(i).encode(), partition=i % 3)
    assert p.flush(15) == 0
    consumer = _committer(cluster, group, "work", protocol)
    acked: dict[int, int] = {}
    try:
        _commit_until(consumer, acked, "work", lambda: len(acked) >= 1, 30)
        before = dict(acked)
        victim.kill()
        # The group commits again on another node within the session timeout + 5 s.
        _commit_until(
            consumer,
            acked,
            "work",
            lambda: any(acked.get(k, 0) > v for k, v in before.items()) or len(acked) > len(before),
            SESSION_MS / 1000 + 5,
        )
        coordinator_of(cluster, group, other_than=victim_id)
        # Nothing acknowledged is lost: the committed offsets are at least the acknowledged ones.
        parts = [TopicPartition("work", k) for k in acked]
        committed = {tp.partition: tp.offset for tp in consumer.committed(parts, timeout=10)}
        for k, v in acked.items():
            assert committed[k] >= v, (k, committed, acked)
    finally:
        consumer.close()


def commit_request(group: str, offset: int) -> dict[str, Any]:
    """A simple (memberless) OffsetCommit v8 of ``paused``-0 at ``offset``."""
    return dict(
        api_key=ApiKey.OFFSET_COMMIT, version=8, group_id=group,
        generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
        retention_time_ms=-1,
        topics=[dict(name="paused", partitions=[dict(
            partition_index=0, committed_offset=offset, committed_leader_epoch=-1,
            committed_metadata="")])],
    )


def test_a_paused_coordinator_never_writes_after_its_successor_took_over(
    cluster: Cluster,
) -> None:
    """SIGSTOP the coordinator of a group past its session; a commit sent to it before the
    pause is delivered after it resumes and must be refused, the newer commit made on the
    successor meanwhile must stay."""
    with_topic(cluster, "paused", 1)
    group = "fenced-" + uuid.uuid4().hex[:6]
    old_id = coordinator_of(cluster, group)
    old = cluster.nodes[old_id]

    def commit(rc: RawClient, offset: int) -> int:
        r = rc.request(**commit_request(group, offset))
        return int(r.topics[0].partitions[0].error_code)

    with RawClient(old.port) as rc:
        assert commit(rc, 5) == 0
    stale = RawClient(old.port, timeout=60)
    try:
        os.kill(old.pid, signal.SIGSTOP)
        cluster.paused.add(old_id)
        try:
            sent = stale.send_request(**commit_request(group, 1))  # read once the node resumes
            new_id = coordinator_of(cluster, group, other_than=old_id)
            with RawClient(cluster.nodes[new_id].port) as rc:
                assert wait_for(lambda: commit(rc, 9) == 0, 30, 0.1, "commit on the successor")
        finally:
            os.kill(old.pid, signal.SIGCONT)
            cluster.paused.discard(old_id)
        answer = stale.response(ApiKey.OFFSET_COMMIT, 8, sent)
    finally:
        stale.close()
    assert answer.topics[0].partitions[0].error_code == ErrorCode.not_coordinator
    # The offset stays the successor's. (The resumed node rejoins and may take the group
    # back meanwhile: asked of whichever node coordinates it once one answers.)
    def fetched() -> Any:
        with RawClient(cluster.nodes[coordinator_of(cluster, group)].port) as rc:
            r = rc.request(ApiKey.OFFSET_FETCH, 7, group_id=group, require_stable=False,
                           topics=[dict(name="paused", partition_indexes=[0])])
        return r if r.error_code == 0 else None

    r = wait_for(fetched, 30, 0.1, "the committed offset")
    assert r.topics[0].partitions[0].committed_offset == 9  # type: ignore[attr-defined]


def test_a_rolling_restart_of_every_node_loses_no_acknowledged_record_or_commit(
    cluster: Cluster,
) -> None:
    """Each node in turn is stopped (SIGTERM: it hands its partitions over first) and started
    again while a producer writes and a group consumes and commits; every acknowledged record
    is there at the end, and no committed offset moved backwards."""
    with_topic(cluster, "rolling", 3)
    acked: set[bytes] = set()

    def delivered(err: Any, msg: Any) -> None:
        if err is None:
            acked.add(msg.value())

    producer = Producer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True,
                         "message.timeout.ms": 60000})
    group = "rolling-" + uuid.uuid4().hex[:6]
    consumer = _committer(cluster, group, "rolling")
    commits: dict[int, int] = {}
    sent = 0

    def work(seconds: float) -> None:
        nonlocal sent
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            producer.produce("rolling", f"r{sent}".encode(), partition=sent % 3,
                             on_delivery=delivered)
            sent += 1
            producer.poll(0)
            msg = consumer.poll(0.05)
            if msg is not None and msg.error() is None:
                try:
                    done = consumer.commit(message=msg, asynchronous=False)
                except KafkaException:
                    continue
                for tp in done or []:
                    assert tp.offset >= commits.get(tp.partition, 0), (tp, commits)
                    commits[tp.partition] = tp.offset

    try:
        work(2)
        for n in NODES:
            cluster.nodes[n].stop()
            work(1)
            cluster.start(n)
            wait_for(lambda: cluster.settled("rolling", 3, 3), 60, 0.1, "settled after restart")
            work(1)
        assert producer.flush(60) == 0
    finally:
        consumer.close()
    assert len(acked) > 100 and commits
    reader = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "reader",
                       "auto.offset.reset": "earliest", "enable.auto.commit": False})
    reader.assign([TopicPartition("rolling", p, 0) for p in range(3)])
    seen: set[bytes] = set()
    try:
        wait_for(lambda: _read_into(reader, seen) or acked <= seen, 60, 0,
                 "every acknowledged record")
    finally:
        reader.close()


def _read_into(consumer: Consumer, seen: set[bytes]) -> bool:
    for msg in consumer.consume(500, 0.2):
        if msg.error() is None:
            seen.add(msg.value())
    return False


def test_a_topic_config_changed_on_one_node_holds_on_every_node(cluster: Cluster) -> None:
    """Topic configs (like ACLs and SCRAM users) are documents every node reads again at each
    heartbeat: a change through node 1 is what nodes 2 and 3 describe, and use."""
    started(cluster)
    first = AdminClient({"bootstrap.servers": cluster.nodes[1].bootstrap})
    for f in first.create_topics([NewTopic("configured", 1, 1)]).values():
        f.result(10)
    resource = ConfigResource(ResourceType.TOPIC, "configured", incremental_configs=[
        ConfigEntry("retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET)])
    first.incremental_alter_configs([resource])[resource].result(10)

    def described(b: BrokerProcess) -> str | None:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        asked = ConfigResource(ResourceType.TOPIC, "configured")
        entries = admin.describe_configs([asked])[asked].result(10)
        return str(entries["retention.ms"].value)

    for n in (2, 3):
        wait_for(lambda n=n: described(cluster.nodes[n]) == "3600000", 30, 0.2,
                 f"the change seen by node {n}")


def test_a_second_live_node_with_the_same_id_or_data_directory_refuses_to_start(
    cluster: Cluster,
) -> None:
    """One line and exit status 2: for a node.id a live node holds (after watching its session
    being renewed), and for a data directory another process runs on."""
    first = cluster.start(1)
    twin = BrokerProcess(cluster.root / "twin", dict(first.settings))
    assert twin.launch().wait(60) == 2
    assert "node.id 1 is in use by a live node" in twin.log()
    assert "Traceback" not in twin.log()
    same_dir = BrokerProcess(first.data_dir, dict(first.settings, **{"node.id": 2}))
    assert same_dir.launch().wait(60) == 2
    assert "another kcoord process uses the data directory" in same_dir.log()
    assert first.alive()
