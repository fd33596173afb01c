"""Share groups in a cluster: three kcoord nodes over the test PostgreSQL, where the data
partitions' leaders (which serve ShareFetch and ShareAcknowledge), the share group's
coordinator and its share coordinator (the leader of the keys' ``__share_group_state``
partitions) are different nodes, so that every state call goes from one node to another
(broker/share/remote_persister.py). confluent-kafka ShareConsumers get every record once; the
share coordinator's node SIGKILLed, another takes its partitions over and the consumers go on
without any acknowledged record coming back."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from kcoord.protocol.apis import ApiKey
from kcoord.protocol.javahash import partition_for
from kcoord.share.model import SharePartitionKey

from .harness import wait_for
from .rawclient import RawClient
from .shares import ShareMember
from .test_cluster import SESSION_MS, Cluster, with_topic
from .test_share_groups import ACCEPT, SETTINGS, set_group_config

STATE_PARTITIONS = 6
OFFSETS_PARTITIONS = 6  # test_cluster's
GROUP_CONFIG = 32  # DescribeConfigs' resource type of a group
TOPIC = "q"


@pytest.fixture
def cluster(tmp_path: Path, postgres_url: str) -> Iterator[Cluster]:
    c = Cluster(tmp_path, postgres_url, {
        **SETTINGS,
        "share.coordinator.state.topic.num.partitions": STATE_PARTITIONS,
    })
    try:
        yield c
    finally:
        c.stop()


def topic_id(port: int, topic: str) -> uuid.UUID:
    with RawClient(port) as rc:
        r = rc.request(ApiKey.METADATA, 12, topics=[dict(name=topic, topic_id=None)],
                       allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    assert r.topics[0].error_code == 0
    return uuid.UUID(str(r.topics[0].topic_id))


def share_offsets(port: int, group: str, partitions: int) -> list[int]:
    """The share-partition start offsets DescribeShareGroupOffsets reports, asked at ``port``."""
    with RawClient(port) as rc:
        r = rc.request(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, 0, groups=[dict(
            group_id=group, topics=[dict(topic_name=TOPIC, partitions=list(range(partitions)))]
        )])
    return [int(p.start_offset) for p in r.groups[0].topics[0].partitions]


def group_reset(port: int, group: str) -> str | None:
    """``share.auto.offset.reset`` of ``group`` as the node at ``port`` knows it."""
    with RawClient(port) as rc:
        r = rc.request(ApiKey.DESCRIBE_CONFIGS, 4, resources=[dict(
            resource_type=GROUP_CONFIG, resource_name=group,
            configuration_keys=["share.auto.offset.reset"],
        )], include_synonyms=False, include_documentation=False)
    return next((c.value for c in r.results[0].configs), None)


def produce(bootstrap: str, count: int, start: int) -> list[bytes]:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    values = [f"v{i}".encode() for i in range(start, start + count)]
    for i, v in enumerate(values):
        p.produce(TOPIC, value=v, partition=i % 2)
    assert p.flush(30) == 0
    return values


class Journal:
    """Receptions and confirmed acknowledgements of every member, in the order they happened."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.events: list[tuple[str, int, int]] = []
        self.values: list[bytes | None] = []

    def received(self, record: tuple[str, int, int, bytes | None]) -> int:
        with self.lock:
            self.events.append(("got", record[1], record[2]))
            self.values.append(record[3])
        return ACCEPT

    def acknowledged(self, offsets: list[tuple[int, int]]) -> None:
        with self.lock:
            self.events.extend(("acked", p, o) for p, o in offsets)

    def acked(self) -> set[tuple[int, int]]:
        with self.lock:
            return {(p, o) for kind, p, o in self.events if kind == "acked"}

    def redelivered_after_ack(self) -> list[tuple[int, int]]:
        done: set[tuple[int, int]] = set()
        again = []
        with self.lock:
            for kind, p, o in self.events:
                if kind == "acked":
                    done.add((p, o))
                elif (p, o) in done:
                    again.append((p, o))
        return again


def test_share_state_on_another_node_and_its_takeover_redeliver_no_acknowledged_record(
    cluster: Cluster,
) -> None:
    leaders = with_topic(cluster, TOPIC, 2)
    victim = next(n for n in cluster.nodes if n not in leaders.values())
    first = cluster.nodes[leaders[0]]
    # The first state call creates __share_group_state; then every node agrees on its leaders.
    assert share_offsets(first.port, "probe", 2) == [-1, -1]
    state = wait_for(lambda: cluster.settled("__share_group_state", STATE_PARTITIONS, 3), 30, 0.1,
                     "settled share-state leaders")
    offsets = wait_for(lambda: cluster.settled("__consumer_offsets", OFFSETS_PARTITIONS, 3), 30,
                       0.1, "settled offsets leaders")
    assert isinstance(state, dict) and isinstance(offsets, dict)
    # A group whose share partitions' state is kept by another node than their data's: the
    # node leading no data partition for partition 0 (the node killed below). Its group
    # coordinator is another one. (The keys of partitions 0 and 1 route to neighbouring
    # state partitions, which one node seldom leads both of.)
    tid = topic_id(first.port, TOPIC)

    def coordinator(group: str, p: int) -> int:
        return state[SharePartitionKey(group, tid, p).state_partition(STATE_PARTITIONS)]

    def fits(group: str) -> bool:
        return (
            coordinator(group, 0) == victim
            and coordinator(group, 1) != leaders[1]
            and offsets[partition_for(group, OFFSETS_PARTITIONS)] != victim
        )

    group = next(g for g in (f"sg-{i}" for i in range(10_000)) if fits(g))
    set_group_config(first, group, share_auto_offset_reset="earliest")
    wait_for(lambda: all(group_reset(b.port, group) == "earliest" for b in cluster.serving()),
             30, 0.1, "the group config on every node")

    journal = Journal()
    values = produce(cluster.bootstrap, 200, 0)
    members = [
        ShareMember(cluster.bootstrap, group, [TOPIC], f"m{i}", decide=journal.received,
                    on_acknowledged=journal.acknowledged)
        for i in range(2)
    ]
    try:
        wait_for(lambda: len(journal.acked()) >= 200, 60, 0.1, "200 records acknowledged")
        with journal.lock:
            assert sorted(journal.values) == sorted(values), "each record delivered once"
        assert not any(m.errors for m in members), [m.errors for m in members]
        # The share coordinator's node holds the state: every node reports it
        # (ReadShareGroupStateSummary from the others).
        for b in cluster.serving():
            assert share_offsets(b.port, group, 2) == [100, 100]

        cluster.nodes[victim].kill()
        survivors = cluster.bootstrap
        values += produce(survivors, 100, 200)
        wait_for(lambda: len(journal.acked()) >= 300, SESSION_MS / 1000 + 40, 0.1,
                 "300 records acknowledged after the takeover")
    finally:
        for m in members:
            m.stop()
    assert not journal.redelivered_after_ack(), journal.redelivered_after_ack()[:5]
    with journal.lock:
        got = set(journal.values)
    assert got == set(values)
    moved = wait_for(lambda: cluster.settled("__share_group_state", STATE_PARTITIONS, 2), 30,
                     0.1, "share-state leaders after the takeover")
    assert isinstance(moved, dict) and victim not in moved.values(), moved
    assert share_offsets(cluster.nodes[leaders[1]].port, group, 2) == [150, 150]
