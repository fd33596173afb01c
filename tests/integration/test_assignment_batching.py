"""KIP-1263 (Kafka 4.3) against a real broker process: with the target assignment batched over
an interval and computed off the event loop, a consumer group of confluent-kafka consumers
(group.protocol=consumer) still converges to a full, disjoint, balanced assignment, and a raw
member that joins is first answered from the last target (its epoch behind the group's, no
partitions) and gets its share a few heartbeats later."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from kcoord.coordinator.consumer.batching import OFFLOAD_MIN_SIZE
from kcoord.protocol.apis import ApiKey

from .clients import create_topic
from .harness import BrokerProcess, wait_for
from .rawclient import RawClient

TOPIC = "batched"
PARTITIONS = OFFLOAD_MIN_SIZE  # enough for every computation after the first to be offloaded
SETTINGS = {
    "group.initial.rebalance.delay.ms": 0,
    "group.consumer.heartbeat.interval.ms": 300,
    "group.consumer.min.heartbeat.interval.ms": 100,
    "group.consumer.session.timeout.ms": 6000,
    "group.consumer.min.session.timeout.ms": 1000,
    "group.consumer.assignment.interval.ms": 500,
    "group.consumer.assignor.offload.enable": "true",
}


class Member:
    """A confluent-kafka consumer in its own thread, polling; its assignment as last seen."""

    def __init__(self, bootstrap: str, name: str) -> None:
        self.assignment: frozenset[int] = frozenset()
        self.errors: list[str] = []
        self._conf = {
            "bootstrap.servers": bootstrap,
            "group.id": "batched",
            "client.id": name,
            "group.protocol": "consumer",
            "auto.offset.reset": "earliest",
            "error_cb": lambda e: self.errors.append(str(e)),
        }
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        from confluent_kafka import Consumer

        consumer = Consumer(self._conf)
        consumer.subscribe([TOPIC])
        try:
            while not self._stop.is_set():
                consumer.poll(0.05)
                self.assignment = frozenset(tp.partition for tp in consumer.assignment())
        finally:
            consumer.close()

    def stop(self) -> None:
        self._stop.set()
        self.thread.join(timeout=30)
        assert not self.thread.is_alive()


def heartbeat(c: RawClient, epoch: int, owned: Any, **fields: Any) -> Any:
    request: dict[str, Any] = dict(
        group_id="batched", member_id="raw-member-0000000000", member_epoch=epoch,
        instance_id=None, rack_id=None, rebalance_timeout=-1, subscribed_topic_names=None,
        subscribed_topic_regex=None, server_assignor=None, topic_partitions=owned,
    )  # fmt: skip
    request.update(fields)
    r = c.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, **request)
    assert r.error_code == 0, r
    return r


def balanced(sizes: list[int]) -> bool:
    return sum(sizes) == PARTITIONS and max(sizes) - min(sizes) <= 1


def test_kip_1263_a_group_converges_with_batched_offloaded_assignment(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data", SETTINGS).start()
    members: list[Member] = []
    try:
        create_topic(broker.bootstrap, TOPIC, PARTITIONS, timeout=120)
        members = [Member(broker.bootstrap, f"m{i}") for i in range(2)]
        wait_for(
            lambda: balanced([len(m.assignment) for m in members])
            and not (members[0].assignment & members[1].assignment),
            30,
            what="two consumers sharing every partition",
        )
        with RawClient(broker.port) as c:
            first = heartbeat(c, 0, [], rebalance_timeout=30000, subscribed_topic_names=[TOPIC])
            # From the last target: the group epoch moved on, the new target is not there yet.
            assert first.assignment is None or not first.assignment.topic_partitions
            epoch, held = first.member_epoch, []
            state: dict[str, Any] = {"epoch": epoch, "held": held}

            def raw_converged() -> bool:
                r = heartbeat(c, state["epoch"], state["held"])
                state["epoch"] = r.member_epoch
                if r.assignment is not None:
                    state["held"] = [
                        dict(topic_id=t.topic_id, partitions=list(t.partitions))
                        for t in r.assignment.topic_partitions
                    ]
                raw = {p for t in state["held"] for p in t["partitions"]}
                sizes = [len(raw), *(len(m.assignment) for m in members)]
                union = raw | members[0].assignment | members[1].assignment
                return balanced(sizes) and len(union) == PARTITIONS

            wait_for(raw_converged, 30, interval=0.2, what="three members sharing every partition")
            assert state["epoch"] > first.member_epoch
            heartbeat(c, -1, None)
        wait_for(lambda: balanced([len(m.assignment) for m in members]), 30, what="back to two")
        assert not any(m.errors for m in members), [m.errors for m in members]
        assert "Traceback" not in broker.log()
    finally:
        for m in members:
            m.stop()
        broker.stop()


@pytest.mark.parametrize("value", ["yes", "-1"])
def test_kip_1263_a_bad_assignment_setting_is_refused_at_start(tmp_path: Path, value: str) -> None:
    name = "group.consumer.assignor.offload.enable" if value == "yes" else "group.consumer.assignment.interval.ms"
    broker = BrokerProcess(tmp_path / "data", {name: value})
    proc = broker.launch()
    assert proc.wait(timeout=60) != 0
    assert name in broker.log()
