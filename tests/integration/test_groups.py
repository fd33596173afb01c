"""Consumer groups with real clients against a real broker (BEHAVIOR.md sections C–H, L, M)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import pytest

from kcoord.coordinator.schemas import GroupMetadataKey, decode_group_metadata_value, decode_key
from kcoord.protocol.records import decode_batches

from .clients import create_topic
from .groups import (
    AiokafkaMember,
    ConfluentMember,
    KafkaPythonMember,
    Member,
    balanced,
    wait_balanced,
)
from .harness import ROOT, BrokerProcess, stored_batches, wait_for

PARTITIONS = 12
FAST = {
    "group.initial.rebalance.delay.ms": 0,
    "group.min.session.timeout.ms": 1000,
}


@pytest.fixture
def fast_broker(broker_factory: object) -> BrokerProcess:
    return broker_factory(FAST)  # type: ignore[operator, no-any-return]


def _stop_all(members: list[Member]) -> None:
    for m in members:
        m.stop()


@pytest.mark.parametrize("assignor", ["range", "roundrobin"])
def test_eager_group_1_to_3_to_2_members_complete_disjoint(
    fast_broker: BrokerProcess, assignor: str
) -> None:
    create_topic(fast_broker.bootstrap, "t12", PARTITIONS)
    b = fast_broker.bootstrap
    members: list[Member] = [ConfluentMember(b, "g-" + assignor, "t12", "c1", assignor)]
    try:
        wait_balanced(members, PARTITIONS)
        assert members[0].assignment == frozenset(range(PARTITIONS))
        members += [ConfluentMember(b, "g-" + assignor, "t12", f"c{i}", assignor) for i in (2, 3)]
        wait_balanced(members, PARTITIONS)
        assert sorted(len(m.assignment) for m in members) == [4, 4, 4]
        members.pop(0).stop()  # a clean close sends LeaveGroup (H3)
        wait_balanced(members, PARTITIONS)
        assert sorted(len(m.assignment) for m in members) == [6, 6]
    finally:
        _stop_all(members)


def test_cooperative_sticky_third_member_takes_only_revoked_partitions(
    fast_broker: BrokerProcess,
) -> None:
    create_topic(fast_broker.bootstrap, "t12", PARTITIONS)
    b = fast_broker.bootstrap
    members: list[Member] = [
        ConfluentMember(b, "coop", "t12", f"c{i}", "cooperative-sticky") for i in (1, 2)
    ]
    try:
        wait_balanced(members, PARTITIONS)
        before = {m.name: len(m.history) for m in members}
        members.append(ConfluentMember(b, "coop", "t12", "c3", "cooperative-sticky"))
        wait_balanced(members, PARTITIONS)
        wait_for(lambda: len(members[2].assignment) == 4, 30, what="c3 gets its share")
        assert balanced(members, PARTITIONS)
        for m in members[:2]:
            final = m.assignment
            assert len(final) == 4
            # M1/M2, O4: what a member keeps at the end, it held at every step since the join.
            for snapshot in m.history[before[m.name] - 1 :]:
                assert final <= snapshot, (m.name, m.history)
    finally:
        _stop_all(members)


def test_static_member_restart_within_session_timeout_causes_no_rebalance(
    fast_broker: BrokerProcess,
) -> None:
    create_topic(fast_broker.bootstrap, "t12", PARTITIONS)
    b = fast_broker.bootstrap

    def member(i: int) -> ConfluentMember:
        return ConfluentMember(b, "static", "t12", f"s{i}", instance_id=f"inst-{i}", session_timeout_ms=10000)

    members: list[ConfluentMember] = [member(i) for i in (1, 2, 3)]
    try:
        wait_balanced(members, PARTITIONS)  # all three in one generation: 4 partitions each
        counts = {m.name: (m.assigns, m.revokes) for m in members[1:]}
        held = {m.name: m.assignment for m in members[1:]}
        old = members[0].assignment
        members[0].stop()  # a static member's close does not leave the group (L5)
        members[0] = member(1)
        wait_for(lambda: members[0].assignment == old, 30, what="s1 back with its partitions")
        for m in members[1:]:
            assert (m.assigns, m.revokes) == counts[m.name], m.name
            assert m.assignment == held[m.name]
    finally:
        _stop_all(members)


def test_restarted_static_member_that_dies_is_removed_after_session_timeout(
    fast_broker: BrokerProcess,
) -> None:
    """Issue 19 (aiokafka's test_kip_345_enabled): a static member replaced by its restart
    (L3) still expires when it dies, and its partitions go to the survivor."""
    create_topic(fast_broker.bootstrap, "t12", PARTITIONS)
    b = fast_broker.bootstrap

    def member(i: int) -> ConfluentMember:
        return ConfluentMember(b, "static-dies", "t12", f"s{i}", instance_id=f"inst-{i}", session_timeout_ms=3000)

    members: list[ConfluentMember] = [member(1), member(2)]
    try:
        wait_balanced(members, PARTITIONS)
        old = members[0].assignment
        members[0].stop()  # a static member's close sends no LeaveGroup (L5)
        members[0] = member(1)  # swapped in under a new member id, no rebalance (L3)
        wait_for(lambda: members[0].assignment == old, 30, what="s1 back with its partitions")
        members[0].stop()  # and now it is gone for good: only its session timeout removes it
        survivor = members[1]
        wait_for(
            lambda: survivor.assignment == frozenset(range(PARTITIONS)),
            30,
            what="the survivor takes over the dead static member's partitions",
        )
    finally:
        _stop_all(members)


_KILLED_MEMBER = textwrap.dedent(
    """
    import sys
    from confluent_kafka import Consumer
    c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2],
                  "session.timeout.ms": 2000, "heartbeat.interval.ms": 300,
                  "enable.auto.commit": False, "client.id": "doomed"})
    c.subscribe([sys.argv[3]])
    while True:
        c.poll(0.05)
        if c.assignment():
            print("assigned", flush=True)
    """
)


def test_member_killed_with_sigkill_is_removed_after_session_timeout(
    fast_broker: BrokerProcess,
) -> None:
    create_topic(fast_broker.bootstrap, "t12", PARTITIONS)
    b = fast_broker.bootstrap
    survivor = ConfluentMember(b, "killed", "t12", "survivor")
    proc = subprocess.Popen(
        [sys.executable, "-c", _KILLED_MEMBER, b, "killed", "t12"],
        stdout=subprocess.PIPE,
        cwd=ROOT,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == b"assigned"
        wait_for(lambda: len(survivor.assignment) == 6, 30, what="survivor holds half")
        proc.kill()  # SIGKILL: no LeaveGroup; only the session timeout removes it (G3/G4)
        proc.wait(10)
        wait_for(lambda: survivor.assignment == frozenset(range(PARTITIONS)), 30, what="takeover")
    finally:
        proc.kill()
        proc.wait(10)
        survivor.stop()


def test_group_max_size_rejects_the_extra_member(broker_factory: object) -> None:
    broker: BrokerProcess = broker_factory({**FAST, "group.max.size": 2})  # type: ignore[operator]
    create_topic(broker.bootstrap, "t12", PARTITIONS)
    b = broker.bootstrap
    members = [ConfluentMember(b, "small", "t12", f"c{i}") for i in (1, 2)]
    try:
        wait_balanced(members, PARTITIONS)
        extra = ConfluentMember(b, "small", "t12", "c3")
        members.append(extra)
        wait_for(
            lambda: any("max" in e.lower() and "size" in e.lower() for e in extra.errors),
            30,
            what=f"GROUP_MAX_SIZE_REACHED for c3: {extra.errors}",
        )
        assert extra.assignment == frozenset()
        assert balanced(members[:2], PARTITIONS)
    finally:
        _stop_all(members)


def test_stable_group_resumes_without_rebalance_after_broker_sigkill(
    fast_broker: BrokerProcess,
) -> None:
    create_topic(fast_broker.bootstrap, "t12", PARTITIONS)
    b = fast_broker.bootstrap
    members = [
        ConfluentMember(b, "survive", "t12", f"c{i}", session_timeout_ms=15000) for i in (1, 2, 3)
    ]
    try:
        wait_balanced(members, PARTITIONS)  # all three in one generation: 4 partitions each
        counts = [(m.assigns, m.revokes) for m in members]
        held = [m.assignment for m in members]
        fast_broker.kill()
        fast_broker.restart()
        # Members rediscover the coordinator and heartbeat on the reloaded generation (K3).
        log_seen = wait_for(lambda: "loaded __consumer_offsets" in fast_broker.log(), 30)
        assert log_seen
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:  # several heartbeat intervals on the new process
            assert [(m.assigns, m.revokes) for m in members] == counts
            assert [m.assignment for m in members] == held
            time.sleep(0.2)
    finally:
        _stop_all(members)


def test_kafka_python_and_aiokafka_groups_join_and_leave(fast_broker: BrokerProcess) -> None:
    create_topic(fast_broker.bootstrap, "t12", PARTITIONS)
    b = fast_broker.bootstrap
    for cls, group in ((KafkaPythonMember, "kp"), (AiokafkaMember, "aio")):
        members: list[Member] = [cls(b, group, "t12", f"{group}{i}") for i in (1, 2, 3)]
        try:
            wait_balanced(members, PARTITIONS)
            members.pop().stop()
            wait_balanced(members, PARTITIONS)
            assert sorted(len(m.assignment) for m in members) == [6, 6]
        finally:
            _stop_all(members)


def test_mixed_client_group_on_range(fast_broker: BrokerProcess) -> None:
    create_topic(fast_broker.bootstrap, "t12", PARTITIONS)
    b = fast_broker.bootstrap
    members: list[Member] = [
        ConfluentMember(b, "mixed", "t12", "confluent"),
        KafkaPythonMember(b, "mixed", "t12", "kafka-python"),
        AiokafkaMember(b, "mixed", "t12", "aiokafka"),
    ]
    try:
        wait_balanced(members, PARTITIONS)
        assert sorted(len(m.assignment) for m in members) == [4, 4, 4]
    finally:
        _stop_all(members)


@pytest.mark.parametrize("group, partition", [("polygenelubricants", 0), ("test-group", 12)])
def test_group_record_lands_in_its_partition_and_decodes(
    fast_broker: BrokerProcess, group: str, partition: int
) -> None:
    create_topic(fast_broker.bootstrap, "t12", PARTITIONS)
    member = ConfluentMember(fast_broker.bootstrap, group, "t12", "only")
    try:
        wait_balanced([member], PARTITIONS)
        def group_records() -> list[object]:
            out = []
            stored = stored_batches(fast_broker.data_dir, "__consumer_offsets", partition)
            for batch in decode_batches(stored):
                for r in batch.records:
                    assert r.key is not None
                    if isinstance(decode_key(r.key), GroupMetadataKey) and r.value is not None:
                        out.append(decode_group_metadata_value(r.value))
            return out

        values = wait_for(group_records, 10, what="group record on disk")
        last = values[-1]  # type: ignore[index]
        assert last.protocol_type == "consumer"
        assert last.protocol == "range"
        assert len(last.members) == 1 and last.members[0].client_id == "only"
        assert last.leader == last.members[0].member_id
    finally:
        member.stop()
