"""KIP-848 consumer groups with real clients: confluent-kafka (librdkafka) consumers with
``group.protocol=consumer`` against a real broker process."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kcoord.protocol.apis import ApiKey

from .clients import create_topic
from .groups import ConfluentMember, balanced
from .harness import BrokerProcess, wait_for
from .rawclient import RawClient
from .test_client_matrix import MemberProc

SESSION_MS = 4000
SETTINGS = {
    "group.initial.rebalance.delay.ms": 0,
    "group.min.session.timeout.ms": 1000,
    "group.consumer.heartbeat.interval.ms": 500,
    "group.consumer.min.heartbeat.interval.ms": 100,
    "group.consumer.session.timeout.ms": SESSION_MS,
    "group.consumer.min.session.timeout.ms": 1000,
}
PARTITIONS = 12


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path / "data", SETTINGS).start()
    try:
        yield b
    finally:
        b.stop()


def member(broker: BrokerProcess, name: str, topic: str = "t", group: str = "g", **kw: Any) -> ConfluentMember:
    kw.setdefault("assignor", "uniform")
    return ConfluentMember(broker.bootstrap, group, topic, name, protocol="consumer", **kw)


def describe(broker: BrokerProcess, group: str) -> Any:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    return admin.describe_consumer_groups([group])[group].result(20)


def wait_even(
    members: list[ConfluentMember], each: int, partitions: int = PARTITIONS, timeout: float = 30
) -> None:
    """Until the assignment is complete, disjoint and ``each`` partitions apiece: the end of
    the rebalance (a complete assignment alone can be a step of it, before the last
    revocation and the matching assignment)."""
    wait_for(
        lambda: balanced(members, partitions) and all(len(m.assignment) == each for m in members),
        timeout,
        what=f"{each} partitions each: " + repr({m.name: sorted(m.assignment) for m in members}),
    )


def test_three_members_then_a_leave_and_a_join_rebalance_incrementally(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "t", PARTITIONS)
    ms = [member(broker, f"m{i}") for i in range(3)]
    try:
        wait_even(ms, 4)
        # A leave: the two others keep what they had and take the leaver's partitions.
        before = {m.name: m.assignment for m in ms[:2]}
        marks = {m.name: len(m.history) for m in ms[:2]}
        ms[2].stop()
        wait_even(ms[:2], 6)
        for m in ms[:2]:
            assert all(before[m.name] <= step for step in m.history[marks[m.name] - 1 :]), m.history
        # A join: the two give up partitions but never one they keep.
        marks = {m.name: len(m.history) for m in ms[:2]}
        ms.append(member(broker, "m3"))
        wait_even([ms[0], ms[1], ms[3]], 4)
        for m in ms[:2]:
            final = m.assignment
            assert all(final <= step for step in m.history[marks[m.name] - 1 :]), m.history
        assert all(not m.errors for m in ms), [m.errors for m in ms]
    finally:
        for m in ms:
            if m.thread.is_alive():
                m.stop()


def test_range_assignor_co_partitions_topics(broker: BrokerProcess) -> None:
    """Two topics of 6 partitions, three members on both: each member gets the same
    partition numbers of both topics, so the numbers owned are 0-5 exactly once overall."""
    create_topic(broker.bootstrap, "t", 6)
    create_topic(broker.bootstrap, "u", 6)
    ms = [member(broker, f"r{i}", topic="^[tu]$", assignor="range") for i in range(3)]
    try:
        wait_even(ms, 2, partitions=6)
        group = describe(broker, "g")
        assert group.partition_assignor == "range"
        for d in group.members:
            by_topic: dict[str, set[int]] = {}
            for tp in d.assignment.topic_partitions:
                by_topic.setdefault(tp.topic, set()).add(tp.partition)
            assert by_topic["t"] == by_topic["u"] and len(by_topic["t"]) == 2
    finally:
        for m in ms:
            m.stop()


def test_a_killed_member_is_fenced_after_its_session_and_its_partitions_move(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    create_topic(broker.bootstrap, "t", PARTITIONS)
    procs = [
        MemberProc("confluent", broker, "g", "t", "consumer:uniform", tmp_path / f"p{i}.out")
        for i in range(2)
    ]
    try:
        wait_for(lambda: sorted(p for m in procs for p in m.partitions) == list(range(PARTITIONS))
                 and all(m.partitions for m in procs), 30, what="two processes balanced")
        killed_at = time.monotonic()
        procs[1].kill()
        wait_for(lambda: procs[0].partitions == frozenset(range(PARTITIONS)), 30,
                 what="the survivor owns everything")
        # Fenced by the session timeout, not before.
        assert time.monotonic() - killed_at >= SESSION_MS / 1000 - 0.5
    finally:
        for m in procs:
            m.terminate()


def test_a_restarted_static_member_gets_its_partitions_back_and_the_others_keep_theirs(
    broker: BrokerProcess,
) -> None:
    create_topic(broker.bootstrap, "t", PARTITIONS)
    ms = [member(broker, f"s{i}", instance_id=f"inst-{i}") for i in range(3)]
    try:
        wait_even(ms, 4)
        before = {m.name: m.assignment for m in ms}
        epoch = describe(broker, "g")
        ms[1].stop()  # a static member's close steps out with epoch -2
        marks = {m.name: len(m.history) for m in (ms[0], ms[2])}
        ms[1] = member(broker, "s1-again", instance_id="inst-1")
        wait_even(ms, 4)
        assert ms[1].assignment == before["s1"]
        for m in (ms[0], ms[2]):
            assert m.assignment == before[m.name] and len(m.history) == marks[m.name]
        assert describe(broker, "g").state == epoch.state
    finally:
        for m in ms:
            m.stop()


def test_a_regex_subscription_picks_up_a_topic_created_later(broker: BrokerProcess) -> None:
    from confluent_kafka import Consumer

    create_topic(broker.bootstrap, "orders-1", 2)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g", "group.protocol": "consumer"})
    c.subscribe(["^orders-.*"])  # sent to the broker as SubscribedTopicRegex

    def assigned() -> set[tuple[str, int]]:
        c.poll(0.05)
        return {(tp.topic, tp.partition) for tp in c.assignment()}

    try:
        wait_for(lambda: assigned() == {("orders-1", 0), ("orders-1", 1)}, 30, what="orders-1")
        create_topic(broker.bootstrap, "orders-2", 3)
        create_topic(broker.bootstrap, "other", 3)
        want = {("orders-1", 0), ("orders-1", 1), ("orders-2", 0), ("orders-2", 1), ("orders-2", 2)}
        wait_for(lambda: assigned() == want, 30, what="orders-2 too, and not other")
    finally:
        c.close()


def test_commits_with_member_epochs_are_read_back_by_the_next_member(broker: BrokerProcess) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    create_topic(broker.bootstrap, "t", 1)
    p = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(10):
        p.produce("t", value=b"v%d" % i, partition=0)
    assert p.flush(30) == 0
    conf = {
        "bootstrap.servers": broker.bootstrap,
        "group.id": "committer",
        "group.protocol": "consumer",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
    }
    first = Consumer(conf)
    first.subscribe(["t"])
    got = 0
    deadline = time.monotonic() + 30
    while got < 6 and time.monotonic() < deadline:
        msg = first.poll(0.2)
        if msg is not None and not msg.error():
            got += 1
            if got == 6:
                first.commit(message=msg, asynchronous=False)
    first.close()
    second = Consumer(conf)
    try:
        second.subscribe(["t"])
        deadline = time.monotonic() + 30
        msg = None
        while time.monotonic() < deadline:
            msg = second.poll(0.2)
            if msg is not None and not msg.error():
                break
        assert msg is not None and msg.offset() == 6
        committed = second.committed([TopicPartition("t", 0)], timeout=10)
        assert committed[0].offset == 6
    finally:
        second.close()


def test_admin_client_lists_and_describes_consumer_groups(broker: BrokerProcess) -> None:
    from confluent_kafka import ConsumerGroupType
    from confluent_kafka.admin import AdminClient

    create_topic(broker.bootstrap, "t", PARTITIONS)
    ms = [member(broker, f"d{i}") for i in range(2)]
    try:
        wait_even(ms, 6)
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        listed = admin.list_consumer_groups(types={ConsumerGroupType.CONSUMER}).result(20)
        assert [(g.group_id, g.type) for g in listed.valid] == [("g", ConsumerGroupType.CONSUMER)]
        classic = admin.list_consumer_groups(types={ConsumerGroupType.CLASSIC}).result(20)
        assert classic.valid == []
        group = describe(broker, "g")
        assert group.type == ConsumerGroupType.CONSUMER
        assert str(group.state).endswith("STABLE")
        owned = {m.client_id: {tp.partition for tp in m.assignment.topic_partitions} for m in group.members}
        assert owned == {m.name: set(m.assignment) for m in ms}
    finally:
        for m in ms:
            m.stop()


def test_a_broker_restart_resumes_the_group_without_a_rebalance(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "t", PARTITIONS)
    ms = [member(broker, f"k{i}") for i in range(2)]
    try:
        wait_even(ms, 6)
        before = _epochs(broker)
        assert before[0] >= 2 and before[1] == before[0]
        marks = {m.name: len(m.history) for m in ms}
        broker.kill()
        broker.start()
        wait_for(lambda: _epochs(broker)[2] == "Stable", 30, what="the group loaded, Stable")
        # Two heartbeat intervals: both members have heartbeated to the new process by then.
        time.sleep(2 * SETTINGS["group.consumer.heartbeat.interval.ms"] / 1000)
        assert _epochs(broker) == before
        assert all(len(m.history) == marks[m.name] for m in ms), [m.history for m in ms]
        assert all(m.assignment for m in ms)
    finally:
        for m in ms:
            m.stop()


def _epochs(broker: BrokerProcess, group: str = "g") -> tuple[int, int, str]:
    """(group epoch, assignment epoch, state) of ``group``, from ConsumerGroupDescribe."""
    with RawClient(broker.port) as c:
        r = c.request(ApiKey.CONSUMER_GROUP_DESCRIBE, 0, group_ids=[group], include_authorized_operations=False)
    g = r.groups[0]
    return (g.group_epoch, g.assignment_epoch, g.group_state) if g.error_code == 0 else (-1, -1, "")


def test_kcoord_groups_shows_type_epochs_and_targets(broker: BrokerProcess) -> None:
    import json

    from .test_admin_cli import kcoord

    create_topic(broker.bootstrap, "t", PARTITIONS)
    ms = [member(broker, f"cli{i}") for i in range(2)]
    try:
        wait_even(ms, 6)
        listed = kcoord(broker, "groups", "list", "--type", "--json")
        assert listed.returncode == 0, listed.stderr
        assert json.loads(listed.stdout) == [{"group": "g", "state": "Stable", "type": "consumer"}]
        table = kcoord(broker, "groups", "list", "--type", "consumer", "--state")
        assert table.stdout.split() == ["GROUP", "TYPE", "STATE", "g", "consumer", "Stable"]
        state = json.loads(kcoord(broker, "groups", "describe", "g", "--state", "--json").stdout)[0]
        assert (state["type"], state["state"], state["assignment_strategy"]) == ("consumer", "Stable", "uniform")
        assert state["group_epoch"] == state["assignment_epoch"] >= 2
        rows = json.loads(kcoord(broker, "groups", "describe", "g", "--members", "--json").stdout)
        by_client = {r["client_id"]: r for r in rows}
        for m in ms:
            r = by_client[m.name]
            assert r["epoch"] == state["group_epoch"]
            assert {a["partition"] for a in r["assignment"]} == set(m.assignment)
            assert r["target_assignment"] == r["assignment"]
        text = kcoord(broker, "groups", "describe", "g", "--members").stdout
        assert "TARGET-ASSIGNMENT" in text and "EPOCH" in text
    finally:
        for m in ms:
            m.stop()


def test_a_classic_cooperative_group_upgraded_online_and_back(broker: BrokerProcess) -> None:
    from confluent_kafka import ConsumerGroupType

    create_topic(broker.bootstrap, "t", PARTITIONS)
    classic = [
        ConfluentMember(broker.bootstrap, "g", "t", f"classic{i}", "cooperative-sticky")
        for i in range(2)
    ]
    everyone: list[ConfluentMember] = list(classic)
    overlaps: list[dict[str, list[int]]] = []

    def settled(members: list[ConfluentMember]) -> bool:
        owners = [p for m in members for p in m.assignment]
        if len(owners) != len(set(owners)):
            overlaps.append({m.name: sorted(m.assignment) for m in members})
        return balanced(members, PARTITIONS)

    try:
        wait_for(lambda: settled(classic), 30, what="the classic group balanced")
        assert describe(broker, "g").type == ConsumerGroupType.CLASSIC
        upgrader = member(broker, "kip848")
        everyone.append(upgrade_member := upgrader)
        wait_for(lambda: settled(everyone), 60, what="three members balanced after the upgrade")
        assert describe(broker, "g").type == ConsumerGroupType.CONSUMER
        assert not overlaps, overlaps
        with RawClient(broker.port) as c:  # v1 (KIP-1099): the members' types, classic 0
            r = c.request(ApiKey.CONSUMER_GROUP_DESCRIBE, 1, group_ids=["g"],
                          include_authorized_operations=False)
        assert {m.client_id: m.member_type for m in r.groups[0].members} == {
            "classic0": 0, "classic1": 0, "kip848": 1}
        upgrade_member.stop()
        everyone.remove(upgrade_member)
        wait_for(lambda: describe(broker, "g").type == ConsumerGroupType.CLASSIC, 30, what="classic again")
        wait_for(lambda: settled(classic), 60, what="the classic members own everything again")
        assert not overlaps, overlaps
    finally:
        for m in everyone:
            if m.thread.is_alive():
                m.stop()


def test_an_assign_only_consumer_commits_reads_back_and_auto_commits(broker: BrokerProcess) -> None:
    """librdkafka's tests 0026/0030/0051/0099/0130/0140 (issue 32): with group.protocol=consumer
    a consumer that only assign()s commits with the member id it made at start-up and epoch -1,
    to a group that does not exist yet. Kafka takes it (a simple group is created for it), so
    the synchronous commit, committed() and the auto-commits succeed and a second consumer of
    the group goes on from the commit with no duplicate."""
    import uuid

    from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

    create_topic(broker.bootstrap, "a", 2)
    p = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(200):
        p.produce("a", value=b"%d" % i, partition=i % 2)
    assert p.flush(30) == 0
    group = f"assign-only-{uuid.uuid4()}"
    parts = [TopicPartition("a", 0), TopicPartition("a", 1)]
    commit_errors: list[object] = []
    auto_committed: dict[int, int] = {}  # partition -> the newest offset an auto-commit stored

    def on_commit(err: KafkaError | None, offsets: list[TopicPartition]) -> None:
        if err is not None and err.code() != KafkaError._NO_OFFSET:
            commit_errors.append(err)
        commit_errors.extend(tp.error for tp in offsets if tp.error is not None)
        if err is None:  # a partition with nothing new to commit comes back as -1001
            auto_committed.update({tp.partition: tp.offset for tp in offsets if tp.offset >= 0})

    conf = {
        "bootstrap.servers": broker.bootstrap,
        "group.id": group,
        "group.protocol": "consumer",
        "auto.offset.reset": "earliest",
        "on_commit": on_commit,
    }
    seen: list[bytes] = []

    def consume(c: Any, until: int) -> None:
        deadline = time.monotonic() + 30
        while len(seen) < until and time.monotonic() < deadline:
            msg = c.poll(0.2)
            if msg is not None and not msg.error():
                seen.append(msg.value())
        assert len(seen) >= until, len(seen)

    first = Consumer({**conf, "enable.auto.commit": False})
    try:
        first.assign(parts)
        consume(first, 120)
        positions = {tp.partition: tp.offset for tp in first.position(parts)}
        done = first.commit(asynchronous=False)
        assert done is not None and all(tp.error is None for tp in done), done
        committed = first.committed(parts, timeout=10)
        assert {tp.partition: tp.offset for tp in committed} == positions
        assert all(tp.error is None for tp in committed)
    finally:
        first.close()
    second = Consumer({**conf, "enable.auto.commit": True, "auto.commit.interval.ms": 200})
    try:
        second.assign(parts)  # from the committed offsets, then auto-committing
        consume(second, 200)
        end = {0: 100, 1: 100}

        def auto_committed_to_the_end() -> bool:
            second.poll(0.1)
            # what the first consumer committed, then what the auto-commits moved on
            return bool(auto_committed) and {**positions, **auto_committed} == end

        wait_for(auto_committed_to_the_end, 30, what="auto-commits up to the end")
        assert {tp.partition: tp.offset for tp in second.committed(parts, timeout=10)} == end
    finally:
        second.close()
    assert not commit_errors, commit_errors
    assert len(seen) == 200 and len(set(seen)) == 200  # no duplicate, nothing missed


def test_a_regex_and_a_literal_topic_the_literal_first_then_the_regex_at_a_later_epoch(
    broker: BrokerProcess,
) -> None:
    """librdkafka's test 0045 (issue 32): subscribed to a topic and a regex together, Kafka's
    first heartbeat answer assigns the topic, and the regex's topics come with a later epoch
    (Kafka resolves regexes asynchronously); kcoord used to assign everything at once."""
    from confluent_kafka import Consumer

    create_topic(broker.bootstrap, "lit", 2)
    create_topic(broker.bootstrap, "rx-a", 2)
    create_topic(broker.bootstrap, "rx-b", 1)
    steps: list[set[tuple[str, int]]] = []  # what each assignment callback added
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g45", "group.protocol": "consumer"})
    c.subscribe(
        ["lit", "^rx-.*"],  # SubscribedTopicNames ["lit"] and SubscribedTopicRegex "^rx-.*"
        on_assign=lambda _c, parts: steps.append({(tp.topic, tp.partition) for tp in parts}),
    )
    everything = {("lit", 0), ("lit", 1), ("rx-a", 0), ("rx-a", 1), ("rx-b", 0)}

    def assigned() -> set[tuple[str, int]]:
        c.poll(0.05)
        return {(tp.topic, tp.partition) for tp in c.assignment()}

    try:
        wait_for(lambda: assigned() == everything, 30, what="lit and the regex's topics")
        non_empty = [s for s in steps if s]
        assert non_empty[0] == {("lit", 0), ("lit", 1)}, steps
        assert set().union(*non_empty[1:]) == everything - non_empty[0], steps
        group_epoch, assignment_epoch, _ = _epochs(broker, "g45")
        assert group_epoch == assignment_epoch >= 2  # the join's epoch, then the regex's
    finally:
        c.close()


def test_an_assign_only_consumer_s_offsets_go_into_a_transaction(broker: BrokerProcess) -> None:
    """TxnOffsetCommit with the group metadata of an assign-only consumer-protocol consumer
    (its own member id, epoch -1) to a group that does not exist yet: taken, as Kafka takes it
    (issue 32), and visible once the transaction commits."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    create_topic(broker.bootstrap, "tx-in", 1)
    conf = {"bootstrap.servers": broker.bootstrap, "group.id": "tx-assign-only", "group.protocol": "consumer"}
    c = Consumer({**conf, "enable.auto.commit": False})
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "tx-assign-only"})
    try:
        c.assign([TopicPartition("tx-in", 0)])
        p.init_transactions(30)
        p.begin_transaction()
        p.send_offsets_to_transaction([TopicPartition("tx-in", 0, 7)], c.consumer_group_metadata(), 30)
        p.commit_transaction(30)
        (committed,) = c.committed([TopicPartition("tx-in", 0)], timeout=10)
        assert (committed.offset, committed.error) == (7, None)
    finally:
        c.close()


def test_partitions_added_to_a_subscribed_topic_rebalance_the_group(broker: BrokerProcess) -> None:
    """KIP-1101: the group's metadata hash covers each subscribed topic's partition count, so
    CreatePartitions on it moves the group epoch and the new partitions are assigned."""
    from confluent_kafka.admin import AdminClient, NewPartitions

    create_topic(broker.bootstrap, "t", 4)
    m = member(broker, "k0")
    try:
        wait_for(lambda: m.assignment == frozenset(range(4)), 20, what="the 4 partitions assigned")
        before = _epochs(broker)[0]
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_partitions([NewPartitions("t", 6)])["t"].result(20)
        wait_for(
            lambda: m.assignment == frozenset(range(6)), 20, what=f"6 partitions: {m.history}"
        )
        assert _epochs(broker)[0] > before
    finally:
        m.stop()
