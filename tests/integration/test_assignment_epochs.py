"""KIP-1251 (Kafka 4.3) assignment epochs against a real broker process: a consumer-protocol
member may commit with an epoch older than its member epoch for the partitions it got at or
before that epoch (the commit raced a heartbeat that moved its epoch on), and is refused
(STALE_MEMBER_EPOCH) for those it got later. The raw-wire test drives the epochs exactly; the
confluent-kafka test counts STALE_MEMBER_EPOCH commit failures while a third member joins."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kcoord.protocol.apis import ApiKey

from .clients import create_topic
from .harness import BrokerProcess, wait_for
from .rawclient import RawClient

SETTINGS = {
    "group.initial.rebalance.delay.ms": 0,
    "group.consumer.heartbeat.interval.ms": 500,
    "group.consumer.min.heartbeat.interval.ms": 100,
    "group.consumer.session.timeout.ms": 6000,
    "group.consumer.min.session.timeout.ms": 1000,
}
STALE_MEMBER_EPOCH = 113


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(Path(tmp_path_factory.mktemp("epochs")) / "data", SETTINGS).start()
    try:
        yield b
    finally:
        b.stop()


# ---- the raw wire: exact epochs ----------------------------------------------------------------


def heartbeat(c: RawClient, member: str, epoch: int, owned: Any = None, **fields: Any) -> Any:
    request: dict[str, Any] = dict(
        group_id="raw", member_id=member, member_epoch=epoch, instance_id=None, rack_id=None,
        rebalance_timeout=-1, subscribed_topic_names=None, subscribed_topic_regex=None,
        server_assignor="uniform", topic_partitions=owned,
    )  # fmt: skip
    request.update(fields)
    r = c.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, **request)
    assert r.error_code == 0, r
    return r


def join(c: RawClient, member: str) -> Any:
    return heartbeat(
        c, member, 0, [], rebalance_timeout=30000, subscribed_topic_names=["raw-t"]
    )


def owned(r: Any, before: Any) -> Any:
    """What the member holds after a heartbeat answer: the new assignment if it sent one."""
    if r.assignment is None:
        return before
    return [dict(topic_id=t.topic_id, partitions=list(t.partitions)) for t in r.assignment.topic_partitions]


def parts(holding: Any) -> set[int]:
    return {p for t in holding for p in t["partitions"]}


def commit(c: RawClient, member: str, epoch: int, partitions: list[int]) -> dict[int, int]:
    r = c.request(
        ApiKey.OFFSET_COMMIT, 9, group_id="raw", generation_id_or_member_epoch=epoch,
        member_id=member, group_instance_id=None,
        topics=[dict(name="raw-t", partitions=[
            dict(partition_index=p, committed_offset=1, committed_leader_epoch=-1, committed_metadata="")
            for p in partitions
        ])],
    )  # fmt: skip
    return {p.partition_index: p.error_code for p in r.topics[0].partitions}


def test_kip_1251_a_commit_with_an_older_epoch_is_accepted_for_partitions_assigned_by_then(
    broker: BrokerProcess,
) -> None:
    """a (epoch 2, all 4 partitions: a new group is at epoch 1, KAFKA-20268) gives 2 to b and
    moves to epoch 3: its commit at epoch 2 for the 2 it kept is accepted (STALE_MEMBER_EPOCH
    before KIP-1251). b leaves, a takes b's 2 at epoch 4: a commit at epoch 3 is refused for
    those and accepted for the others."""
    create_topic(broker.bootstrap, "raw-t", 4)
    with RawClient(broker.port) as c:
        r = join(c, "a")
        assert r.member_epoch == 2
        a_has = owned(r, [])
        assert parts(a_has) == {0, 1, 2, 3}
        assert join(c, "b").member_epoch == 3
        r = heartbeat(c, "a", 2, a_has)  # told to revoke two
        assert r.member_epoch == 2
        kept = sorted(parts(owned(r, a_has)))
        assert len(kept) == 2
        a_has = owned(r, a_has)
        r = heartbeat(c, "a", 2, a_has)  # revoked: on to epoch 3
        assert r.member_epoch == 3
        assert commit(c, "a", 2, kept) == dict.fromkeys(kept, 0)
        assert commit(c, "a", 3, kept) == dict.fromkeys(kept, 0)
        assert commit(c, "a", 4, kept) == dict.fromkeys(kept, STALE_MEMBER_EPOCH)
        others = sorted({0, 1, 2, 3} - set(kept))
        assert commit(c, "a", 2, others) == dict.fromkeys(others, STALE_MEMBER_EPOCH)
        heartbeat(c, "b", -1)
        r = heartbeat(c, "a", 3, a_has)
        assert r.member_epoch == 4 and parts(owned(r, a_has)) == {0, 1, 2, 3}
        got = commit(c, "a", 3, [0, 1, 2, 3])
        assert got == {**dict.fromkeys(others, STALE_MEMBER_EPOCH), **dict.fromkeys(kept, 0)}
        heartbeat(c, "a", -1)


# ---- confluent-kafka: members committing while partitions move ----------------------------------


class Committer:
    """A confluent-kafka consumer (group.protocol=consumer) that commits its whole assignment
    synchronously, again and again, counting the commits refused with STALE_MEMBER_EPOCH."""

    def __init__(self, bootstrap: str, name: str) -> None:
        self.name = name
        self.commits = 0
        self.stale = 0
        self.other_errors: list[str] = []
        self.assignment: frozenset[int] = frozenset()
        self._conf = {
            "bootstrap.servers": bootstrap,
            "group.id": "churn",
            "client.id": name,
            "group.protocol": "consumer",
            "group.remote.assignor": "uniform",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        from confluent_kafka import Consumer, KafkaException, TopicPartition

        consumer = Consumer(self._conf)
        consumer.subscribe(["churn"])
        try:
            while not self._stop.is_set():
                consumer.poll(0.01)
                mine = consumer.assignment()
                self.assignment = frozenset(tp.partition for tp in mine)
                if not mine:
                    continue
                offsets = [TopicPartition("churn", tp.partition, 0) for tp in mine]
                try:
                    result = consumer.commit(offsets=offsets, asynchronous=False)
                    codes = [tp.error.code() for tp in result or () if tp.error is not None]
                except KafkaException as e:
                    codes = [e.args[0].code()]
                self.commits += 1
                for code in codes:
                    if code == STALE_MEMBER_EPOCH:
                        self.stale += 1
                    else:
                        self.other_errors.append(str(code))
        finally:
            consumer.close()

    def stop(self) -> None:
        self._stop.set()
        self.thread.join(timeout=30)
        assert not self.thread.is_alive(), f"{self.name} did not stop"


def test_kip_1251_members_committing_through_a_rebalance_are_not_fenced(
    broker: BrokerProcess,
) -> None:
    """Two members commit synchronously without pause while a third joins and partitions
    move: librdkafka commits with the epoch it last heard, which the coordinator may have
    moved on by a heartbeat in flight. With assignment epochs no such commit is refused with
    STALE_MEMBER_EPOCH."""
    create_topic(broker.bootstrap, "churn", 6)
    members = [Committer(broker.bootstrap, f"c{i}") for i in range(2)]
    try:
        wait_for(
            lambda: sorted(len(m.assignment) for m in members) == [3, 3]
            and all(m.commits > 0 for m in members),
            20,
            what="two committing members with 3 partitions each",
        )
        members.append(Committer(broker.bootstrap, "c2"))
        wait_for(
            lambda: sorted(len(m.assignment) for m in members) == [2, 2, 2]
            and all(m.commits > 0 for m in members),
            20,
            what="three committing members with 2 partitions each",
        )
        marks = [m.commits for m in members]
        wait_for(
            lambda: all(m.commits > k + 20 for m, k in zip(members, marks, strict=True)),
            10,
            what="more commits once settled",
        )
    finally:
        for m in members:
            m.stop()
    stale = {m.name: m.stale for m in members}
    total = sum(m.commits for m in members)
    print(f"commits {total}, refused STALE_MEMBER_EPOCH {stale}")
    assert sum(stale.values()) == 0, stale
    assert all(not m.other_errors for m in members), {m.name: m.other_errors for m in members}
