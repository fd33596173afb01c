"""Consumer-group members for integration tests, one thread (or process) per member.

A ``ConfluentMember`` polls its confluent-kafka consumer in its own thread and records every
assignment it goes through, so tests can wait on conditions ("all 12 partitions assigned,
disjointly") and check histories ("member 1 never lost partition 3").
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterable
from typing import Any

from .clients import KAFKA_PYTHON_POLL_MS
from .harness import wait_for


class Member:
    name: str
    assignment: frozenset[int]
    history: list[frozenset[int]]
    errors: list[str]

    def stop(self) -> None:
        raise NotImplementedError


class ConfluentMember(Member):
    def __init__(
        self,
        bootstrap: str,
        group: str,
        topic: str,
        name: str,
        assignor: str = "range",
        instance_id: str | None = None,
        session_timeout_ms: int = 6000,
        extra: dict[str, Any] | None = None,
        protocol: str = "classic",
    ) -> None:
        """``protocol`` "consumer": the KIP-848 protocol, ``assignor`` then names the server
        assignor (uniform or range) and the session and heartbeat are the broker's."""
        self.name = name
        self.assignment = frozenset()
        self.history = []
        self.errors = []
        self.assigns = 0
        self.revokes = 0
        self.lock = threading.Lock()
        conf: dict[str, Any] = {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "client.id": name,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "error_cb": self._on_error,
        }
        if protocol == "consumer":
            conf.update({"group.protocol": "consumer", "group.remote.assignor": assignor})
        else:
            conf.update(
                {
                    "partition.assignment.strategy": assignor,
                    "session.timeout.ms": session_timeout_ms,
                    "heartbeat.interval.ms": 300,
                }
            )
        if instance_id is not None:
            conf["group.instance.id"] = instance_id
        conf.update(extra or {})
        self._conf = conf
        self._topic = topic
        self._stop = threading.Event()
        self._close = True
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    def _on_error(self, err: Any) -> None:
        with self.lock:
            self.errors.append(str(err))

    def _run(self) -> None:
        from confluent_kafka import Consumer

        consumer = Consumer(self._conf)

        def on_assign(c: Any, partitions: list[Any]) -> None:
            self.assigns += 1

        def on_revoke(c: Any, partitions: list[Any]) -> None:
            self.revokes += 1

        consumer.subscribe([self._topic], on_assign=on_assign, on_revoke=on_revoke)
        try:
            while not self._stop.is_set():
                msg = consumer.poll(0.05)
                if msg is not None and msg.error():
                    with self.lock:
                        self.errors.append(str(msg.error()))
                current = frozenset(tp.partition for tp in consumer.assignment())
                with self.lock:
                    if current != self.assignment:
                        self.assignment = current
                        self.history.append(current)
        finally:
            if self._close:
                consumer.close()

    def stop(self, close: bool = True) -> None:
        self._close = close
        self._stop.set()
        self.thread.join(timeout=30)
        assert not self.thread.is_alive(), f"{self.name} did not stop"


class KafkaPythonMember(Member):
    def __init__(self, bootstrap: str, group: str, topic: str, name: str, assignor: str = "range") -> None:
        from kafka.coordinator.assignors.range import RangePartitionAssignor
        from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

        self.name = name
        self.assignment = frozenset()
        self.history = []
        self.errors = []
        assignors = {"range": RangePartitionAssignor, "roundrobin": RoundRobinPartitionAssignor}
        self._kwargs = dict(
            bootstrap_servers=bootstrap,
            group_id=group,
            client_id=name,
            partition_assignment_strategy=[assignors[assignor]],
            session_timeout_ms=6000,
            heartbeat_interval_ms=300,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
        )
        self._topic = topic
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        from kafka import KafkaConsumer

        consumer = KafkaConsumer(**self._kwargs)
        # Learn the topic's partitions before joining: kafka-python 3.0.12 otherwise assigns
        # nothing, rejoins at once, and now and then hangs in that rejoin (a client race).
        consumer.partitions_for_topic(self._topic)
        consumer.subscribe([self._topic])
        try:
            while not self._stop.is_set():
                try:
                    consumer.poll(timeout_ms=KAFKA_PYTHON_POLL_MS)
                except Exception as e:  # recorded for the test to inspect
                    self.errors.append(repr(e))
                current = frozenset(tp.partition for tp in consumer.assignment())
                if current != self.assignment:
                    self.assignment = current
                    self.history.append(current)
        finally:
            consumer.close()

    def stop(self) -> None:
        self._stop.set()
        self.thread.join(timeout=30)
        assert not self.thread.is_alive(), f"{self.name} did not stop"


class AiokafkaMember(Member):
    def __init__(self, bootstrap: str, group: str, topic: str, name: str, assignor: str = "range") -> None:
        self.name = name
        self.assignment = frozenset()
        self.history = []
        self.errors = []
        self._bootstrap = bootstrap
        self._group = group
        self._topic = topic
        self._assignor = assignor
        self._stop = threading.Event()
        self.thread = threading.Thread(target=lambda: asyncio.run(self._run()), name=name, daemon=True)
        self.thread.start()

    async def _run(self) -> None:
        from aiokafka import AIOKafkaConsumer
        from aiokafka.coordinator.assignors.range import RangePartitionAssignor
        from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

        assignors = {"range": RangePartitionAssignor, "roundrobin": RoundRobinPartitionAssignor}
        consumer = AIOKafkaConsumer(
            self._topic,
            bootstrap_servers=self._bootstrap,
            group_id=self._group,
            client_id=self.name,
            partition_assignment_strategy=(assignors[self._assignor],),
            session_timeout_ms=6000,
            heartbeat_interval_ms=300,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
        )
        await consumer.start()
        try:
            while not self._stop.is_set():
                try:
                    await consumer.getmany(timeout_ms=50)
                except Exception as e:  # recorded for the test to inspect
                    self.errors.append(repr(e))
                current = frozenset(tp.partition for tp in consumer.assignment())
                if current != self.assignment:
                    self.assignment = current
                    self.history.append(current)
        finally:
            await consumer.stop()

    def stop(self) -> None:
        self._stop.set()
        self.thread.join(timeout=30)
        assert not self.thread.is_alive(), f"{self.name} did not stop"


def balanced(members: Iterable[Member], partitions: int) -> bool:
    """Every partition owned by exactly one member, and every member owns some (if possible)."""
    members = list(members)
    owned = [p for m in members for p in m.assignment]
    if sorted(owned) != list(range(partitions)):
        return False
    return all(m.assignment for m in members) or len(members) > partitions


def wait_balanced(members: Iterable[Member], partitions: int, timeout: float = 60.0) -> None:
    members = list(members)
    wait_for(
        lambda: balanced(members, partitions),
        timeout,
        what=f"complete disjoint assignment over {[m.name for m in members]}: "
        + repr({m.name: sorted(m.assignment) for m in members}),
    )


def settle(members: Iterable[Member], seconds: float = 1.5) -> None:
    """Wait until no member's assignment changed for ``seconds`` (bounded by 60 s)."""
    members = list(members)
    deadline = time.monotonic() + 60
    last = [len(m.history) for m in members]
    stable_since = time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.1)
        now = [len(m.history) for m in members]
        if now != last:
            last = now
            stable_since = time.monotonic()
        elif time.monotonic() - stable_since >= seconds:
            return
    raise AssertionError("assignments kept changing for 60 s")
