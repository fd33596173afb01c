"""Share groups (KIP-932) with the real client: confluent-kafka's ``ShareConsumer``
(librdkafka's share consumer) against a real broker process."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from .clients import create_topic
from .harness import BrokerProcess, wait_for
from .shares import ShareMember, ShareMemberProcess

LOCK_MS = 2000
SETTINGS = {
    "group.share.min.heartbeat.interval.ms": 200,
    "group.share.heartbeat.interval.ms": 300,
    "group.share.min.session.timeout.ms": 3000,
    "group.share.session.timeout.ms": 3000,
    "group.share.min.record.lock.duration.ms": 1000,
    "group.share.record.lock.duration.ms": LOCK_MS,
}
ACCEPT, RELEASE, REJECT = 1, 2, 3


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path / "data", SETTINGS).start()
    try:
        yield b
    finally:
        b.stop()


def produce(broker: BrokerProcess, topic: str, count: int, partitions: int, start: int = 0) -> list[bytes]:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 5})
    values = [f"v{i}".encode() for i in range(start, start + count)]
    for i, v in enumerate(values):
        p.produce(topic, value=v, partition=i % partitions)
    assert p.flush(30) == 0
    return values


def set_group_config(broker: BrokerProcess, group: str, **configs: str) -> None:
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    entries = [
        ConfigEntry(name.replace("_", "."), value, incremental_operation=AlterConfigOpType.SET)
        for name, value in configs.items()
    ]
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=entries)
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)


def earliest(broker: BrokerProcess, group: str) -> None:
    set_group_config(broker, group, share_auto_offset_reset="earliest")


def values_of(members: list[ShareMember]) -> Counter[bytes | None]:
    return Counter(v for m in members for _, _, _, v in m.received)


def test_three_consumers_on_four_partitions_each_get_records_delivered_once(
    broker: BrokerProcess,
) -> None:
    create_topic(broker.bootstrap, "t", 4)
    earliest(broker, "g")
    members = [ShareMember(broker.bootstrap, "g", ["t"], f"m{i}") for i in range(3)]
    try:
        # Records produced while the members join and after: each delivered to one of them.
        values = produce(broker, "t", 400, 4)
        wait_for(lambda: sum(values_of(members).values()) >= 400, 60, what="400 records delivered")
        values += produce(broker, "t", 400, 4, start=400)
        wait_for(lambda: sum(values_of(members).values()) >= 800, 60, what="800 records delivered")
        got = values_of(members)
        assert set(got) == set(values) and all(n == 1 for n in got.values()), got.most_common(3)
        assert all(m.received for m in members), [len(m.received) for m in members]
        assert not any(m.errors for m in members), [m.errors for m in members]
    finally:
        for m in members:
            m.stop()


def test_explicit_acknowledgement_release_comes_back_accept_and_reject_never(
    broker: BrokerProcess,
) -> None:
    create_topic(broker.bootstrap, "t", 1)
    earliest(broker, "g")
    produce(broker, "t", 30, 1)
    seen: Counter[int] = Counter()

    def decide(record: tuple[str, int, int, bytes | None]) -> int:
        offset = record[2]
        seen[offset] += 1
        if offset >= 30:
            return ACCEPT  # the markers
        if offset % 3 == 0 and seen[offset] == 1:
            return RELEASE  # once: it comes back, and is accepted the second time
        return REJECT if offset % 3 == 1 else ACCEPT

    m = ShareMember(broker.bootstrap, "g", ["t"], "m", decide=decide)
    try:
        wait_for(lambda: sum(seen.values()) >= 40, 60, what="30 records and 10 redeliveries")
        produce(broker, "t", 3, 1, start=30)  # a marker: every earlier redelivery came first
        wait_for(lambda: seen[32] >= 1, 60, what="the marker records")
    finally:
        m.stop()
    assert all(seen[o] == 2 for o in range(0, 30, 3)), seen
    assert all(seen[o] == 1 for o in range(33) if o % 3 or o >= 30), seen


def test_implicit_acknowledgement_delivers_each_record_once(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "t", 2)
    earliest(broker, "g")
    produce(broker, "t", 100, 2)
    m = ShareMember(broker.bootstrap, "g", ["t"], "m")
    try:
        wait_for(lambda: len(m.received) >= 100, 60, what="100 records")
        produce(broker, "t", 2, 2, start=100)
        wait_for(lambda: len(m.received) >= 102, 60, what="the marker records")
    finally:
        m.stop()
    assert sorted(Counter(m.offsets()).values()) == [1] * 102


def test_a_record_released_past_the_delivery_limit_is_archived(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "t", 1)
    earliest(broker, "g")
    produce(broker, "t", 1, 1)
    seen: Counter[int] = Counter()

    def decide(record: tuple[str, int, int, bytes | None]) -> int:
        seen[record[2]] += 1
        return RELEASE

    m = ShareMember(broker.bootstrap, "g", ["t"], "m", decide=decide)
    try:
        wait_for(lambda: seen[0] >= 5, 60, what="5 deliveries of offset 0")
        produce(broker, "t", 1, 1, start=1)
        wait_for(lambda: seen[1] >= 1, 60, what="the next record")
    finally:
        m.stop()
    assert seen[0] == 5, seen  # group.share.delivery.count.limit: archived after 5


def test_records_held_by_a_killed_consumer_reach_another_one(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    create_topic(broker.bootstrap, "t", 1)
    earliest(broker, "g")
    produce(broker, "t", 20, 1)
    holder = ShareMemberProcess(broker.bootstrap, "g", "t", tmp_path / "holder.jsonl", hold=True)
    try:
        wait_for(lambda: holder.received(), 60, what="the holder's records")
    finally:
        holder.kill()
    held = set(holder.received())
    other = ShareMember(broker.bootstrap, "g", ["t"], "other")
    try:
        wait_for(lambda: held <= set(other.offsets()), 60, what=f"the held records {sorted(held)}")
    finally:
        other.stop()


def test_auto_offset_reset_earliest_delivers_records_produced_before_the_group(
    broker: BrokerProcess,
) -> None:
    create_topic(broker.bootstrap, "t", 1)
    produce(broker, "t", 10, 1)
    earliest(broker, "early")
    early = ShareMember(broker.bootstrap, "early", ["t"], "e")
    late = ShareMember(broker.bootstrap, "late", ["t"], "l")  # latest: the default
    try:
        wait_for(lambda: len(early.received) >= 10, 60, what="the 10 earlier records")

        def late_got_a_new_record() -> bool:
            # The late group starts at the end once its member fetches: a record produced
            # before that is not its; keep producing until one produced after reaches it.
            produce(broker, "t", 1, 1, start=100)
            return bool(late.received)

        wait_for(late_got_a_new_record, 60, interval=0.5, what="a new record in 'late'")
    finally:
        early.stop()
        late.stop()
    assert all(o >= 10 for _, o in late.offsets()), late.offsets()


def test_read_committed_skips_an_aborted_transaction(broker: BrokerProcess) -> None:
    from confluent_kafka import Producer

    create_topic(broker.bootstrap, "t", 1)
    set_group_config(broker, "g", share_auto_offset_reset="earliest", share_isolation_level="read_committed")
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "tx"})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce("t", value=b"aborted", partition=0)
    p.flush(30)
    p.abort_transaction(30)
    p.begin_transaction()
    p.produce("t", value=b"committed", partition=0)
    p.commit_transaction(30)
    m = ShareMember(broker.bootstrap, "g", ["t"], "m")
    try:
        wait_for(lambda: len(m.received) >= 1, 60, what="the committed record")
        produce(broker, "t", 1, 1, start=0)
        wait_for(lambda: len(m.received) >= 2, 60, what="the next record")
    finally:
        m.stop()
    assert [v for *_, v in m.received] == [b"committed", b"v0"]


def test_a_broker_killed_and_restarted_redelivers_no_acknowledged_record(
    broker: BrokerProcess,
) -> None:
    create_topic(broker.bootstrap, "t", 2)
    earliest(broker, "g")
    produce(broker, "t", 200, 2)
    accepted: list[tuple[int, int]] = []

    def decide(record: tuple[str, int, int, bytes | None]) -> int:
        accepted.append((record[1], record[2]))
        return ACCEPT

    m = ShareMember(broker.bootstrap, "g", ["t"], "m", decide=decide)
    wait_for(lambda: len(accepted) >= 200, 60, what="200 records")
    m.stop()  # commit_sync after each batch: all 200 acknowledged and answered
    broker.kill()
    broker.restart()
    produce(broker, "t", 20, 2, start=200)
    again = ShareMember(broker.bootstrap, "g", ["t"], "again")
    try:
        wait_for(lambda: len(again.received) >= 20, 60, what="the 20 new records")
    finally:
        again.stop()
    assert not set(again.offsets()) & set(accepted), sorted(set(again.offsets()) & set(accepted))[:5]
