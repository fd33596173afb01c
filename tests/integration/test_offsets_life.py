"""How committed offsets end, with real clients: an OffsetCommit v2-v4 retention time expires
them (kafka-python's own request codec), and deleting a topic removes every group's offsets of
it, so that a topic created again under the same name starts without them (confluent-kafka,
the ``kcoord groups`` command), across a restart too. One broker for the module."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions
from confluent_kafka.admin import AdminClient

from kcoord.protocol.apis import ApiKey

from .clients import create_topic
from .harness import ROOT, BrokerProcess, wait_for
from .rawclient import RawClient
from .test_admin_cli import commit
from .test_offsets import _by_kafka_python

SETTINGS: dict[str, object] = {
    "group.initial.rebalance.delay.ms": 0,
    "offsets.topic.num.partitions": 4,
    "offsets.retention.check.interval.ms": 200,  # the retention check, five times a second
}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("offsets-life") / "data", SETTINGS).start()
    yield b
    b.stop()


def _fetch(broker: BrokerProcess, group: str, topic: str, partitions: int) -> dict[int, int]:
    """OffsetFetch v8 of ``group``'s offsets on ``topic`` (-1: none)."""
    with RawClient(broker.port) as c:
        r = c.request(
            ApiKey.OFFSET_FETCH, 8, require_stable=False,
            groups=[dict(group_id=group, topics=[dict(name=topic,
                                                      partition_indexes=list(range(partitions)))])],
        )  # fmt: skip
    (g,) = r.groups
    assert g.error_code == 0
    return {p.partition_index: p.committed_offset for t in g.topics for p in t.partitions}


def _commit_v(broker: BrokerProcess, version: int, group: str, topic: str,
              offsets: dict[int, int], retention_ms: int) -> dict[int, int]:  # fmt: skip
    """OffsetCommit of ``version`` (2-4: they carry RetentionTimeMs), as kafka-python encodes
    it; the error of each partition."""
    from kafka.protocol.consumer import OffsetCommitRequest, OffsetCommitResponse

    req_topic = OffsetCommitRequest.OffsetCommitRequestTopic
    req_partition = req_topic.OffsetCommitRequestPartition
    request = OffsetCommitRequest(
        group_id=group, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
        retention_time_ms=retention_ms,
        topics=[req_topic(name=topic, partitions=[
            req_partition(partition_index=p, committed_offset=o, committed_leader_epoch=-1,
                          committed_metadata="")
            for p, o in offsets.items()])],
    )  # fmt: skip
    with RawClient(broker.port) as c:
        answer = _by_kafka_python(c, request, OffsetCommitResponse, version)
    return {p.partition_index: p.error_code for t in answer.topics for p in t.partitions}


@pytest.mark.parametrize("version", [2, 4])
def test_commit_retention_time_expires_the_offset(broker: BrokerProcess, version: int) -> None:
    """RetentionTimeMs (v2-v4): the offset expires at its commit time plus it (Kafka's
    expire timestamp), while one committed with -1 follows offsets.retention.minutes."""
    topic, group = f"ret-v{version}", f"ret-g{version}"
    create_topic(broker.bootstrap, topic, 2)
    assert _commit_v(broker, version, group, topic, {1: 9}, -1) == {1: 0}
    started = time.monotonic()
    assert _commit_v(broker, version, group, topic, {0: 5}, 1_500) == {0: 0}
    fetched = _fetch(broker, group, topic, 2)
    if time.monotonic() - started < 1.0:  # well before its expiry (a loaded machine may be slow)
        assert fetched == {0: 5, 1: 9}
    wait_for(lambda: _fetch(broker, group, topic, 2) == {0: -1, 1: 9}, 20,
             what="the offset with a retention time expired")  # fmt: skip
    assert time.monotonic() - started >= 1.5


def _listed(broker: BrokerProcess, group: str) -> dict[tuple[str, int], int]:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    got = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(20)
    return {(tp.topic, tp.partition): tp.offset for tp in got.topic_partitions if tp.offset >= 0}


def _describe_offsets(broker: BrokerProcess, group: str) -> list[list[str]]:
    """``kcoord groups --describe --offsets`` as a user runs it: its rows, split."""
    r = subprocess.run(
        [sys.executable, "-m", "kcoord", "groups", "--describe", "--group", group, "--offsets",
         "--bootstrap-server", broker.bootstrap],
        capture_output=True, text=True, cwd=ROOT, timeout=60,
    )  # fmt: skip
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stdout + r.stderr
    return [line.split() for line in r.stdout.splitlines()[1:] if line.strip()]


def _create_again(broker: BrokerProcess, topic: str, partitions: int) -> None:
    """Create ``topic`` once its deletion has finished (the name stays taken until then)."""

    def created() -> bool:
        try:
            create_topic(broker.bootstrap, topic, partitions)
        except Exception as e:  # TOPIC_ALREADY_EXISTS while the deletion completes
            if "already exists" not in str(e).lower() and "TOPIC_ALREADY_EXISTS" not in str(e):
                raise
            return False
        return True

    wait_for(created, 20, what=f"{topic} created again")


def test_deleting_a_topic_removes_every_groups_offsets_of_it(broker: BrokerProcess) -> None:
    """Kafka's onPartitionsDeleted: each group's offsets of the deleted topic get a tombstone;
    the topic created again under its name starts without them, also after a restart."""
    create_topic(broker.bootstrap, "doomed", 3)
    create_topic(broker.bootstrap, "kept", 1)
    groups = [f"life-{i}" for i in range(3)]
    for i, group in enumerate(groups):
        commit(broker.bootstrap, group, {("doomed", 0): 10 + i, ("doomed", 2): 20 + i,
                                         ("kept", 0): 30 + i})  # fmt: skip
    assert _listed(broker, "life-1") == {("doomed", 0): 11, ("doomed", 2): 21, ("kept", 0): 31}
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.delete_topics(["doomed"], operation_timeout=20)["doomed"].result(40)
    for group in groups:
        wait_for(lambda g=group: _fetch(broker, g, "doomed", 3) == {0: -1, 1: -1, 2: -1}, 20,
                 what=f"{group}'s offsets of the deleted topic gone")  # fmt: skip
    _create_again(broker, "doomed", 3)
    for i, group in enumerate(groups):
        assert _fetch(broker, group, "doomed", 3) == {0: -1, 1: -1, 2: -1}
        assert _listed(broker, group) == {("kept", 0): 30 + i}
    rows = _describe_offsets(broker, "life-0")
    assert {row[1] for row in rows} == {"kept"}
    # The new topic's own offsets are kept, and the tombstones are durable.
    commit(broker.bootstrap, "life-0", {("doomed", 1): 7})
    broker.stop()
    broker.restart()
    assert _fetch(broker, "life-0", "doomed", 3) == {0: -1, 1: 7, 2: -1}
    assert _listed(broker, "life-2") == {("kept", 0): 32}
