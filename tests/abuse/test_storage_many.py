"""12,000 partitions with the limits raised: created off the event loop, within
log.max.open.files descriptors.

Finding 1 of the storage part of the hardening issue: every partition kept its segment's
``.log`` and ``.index`` open, so 12,000 partitions exhausted the process's descriptors (and the
creation blocked the event loop for 21 s). Segment files now open lazily from a bounded pool,
and a new partition holds no descriptor until it is used.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from kcoord.protocol.apis import ApiKey
from tests.integration.clients import consume_confluent
from tests.integration.harness import BrokerProcess
from tests.integration.rawclient import RawClient

from .conftest import assert_survived
from .healthy import HealthyGroup

OPEN_FILES = 1000  # log.max.open.files (its default)
BROKER_SETTINGS = {
    "max.broker.partitions": 30_000,
    "max.partitions.per.request": 20_000,
    "log.max.open.files": OPEN_FILES,
}


class _FdSampler:
    """The largest number of descriptors a process held while this ran."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak = self.count()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def count(self) -> int:
        return len(os.listdir(f"/proc/{self.pid}/fd"))

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, self.count())

    def __enter__(self) -> _FdSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.count())


def _in_thread(fn: Any) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []
    t = threading.Thread(target=lambda: out.append(fn()))
    t.start()
    return t, out


def test_12000_partitions_are_created_within_bounded_descriptors(
    abuse_broker: BrokerProcess, healthy: HealthyGroup
) -> None:
    # The pool's files, plus the broker's other descriptors: sockets, the event loop, pipes
    # (about 15 when idle, and one per client connection).
    bound = OPEN_FILES + 150

    def create() -> int:
        with RawClient(abuse_broker.port, timeout=300) as c:
            r = c.request(ApiKey.CREATE_TOPICS, 7, topics=[dict(
                name="many", num_partitions=12_000, replication_factor=1, assignments=[],
                configs=[])], timeout=240_000, validate_only=False)
            return int(r.topics[0].error_code)

    def grow() -> int:
        with RawClient(abuse_broker.port, timeout=300) as c:
            r = c.request(ApiKey.CREATE_TOPICS, 7, topics=[dict(
                name="grown", num_partitions=1, replication_factor=1, assignments=[],
                configs=[])], timeout=60_000, validate_only=False)
            assert r.topics[0].error_code == 0
            r = c.request(ApiKey.CREATE_PARTITIONS, 3, topics=[dict(
                name="grown", count=12_000, assignments=None)], timeout=240_000,
                validate_only=False)
            return int(r.results[0].error_code)

    with _FdSampler(abuse_broker.pid) as fds:
        for change in (create, grow):
            thread, result = _in_thread(change)
            healthy.wait_progress(what="a 12,000-partition change under way", timeout=120)
            thread.join(300)
            assert result == [0]
    assert fds.peak <= bound, f"{fds.peak} descriptors"

    admin = AdminClient({"bootstrap.servers": abuse_broker.bootstrap})
    md = admin.list_topics(timeout=60)
    assert len(md.topics["many"].partitions) == 12_000
    assert len(md.topics["grown"].partitions) == 12_000

    # Writing to 3,000 partitions opens their segments: the pool closes the least recently used.
    with _FdSampler(abuse_broker.pid) as fds:
        p = Producer({"bootstrap.servers": abuse_broker.bootstrap, "acks": "all",
                      "linger.ms": 50})
        for i in range(3_000):
            p.produce("many", key=b"k", value=b"v%d" % i, partition=i * 4)
            p.poll(0)
        assert p.flush(120) == 0
    assert fds.peak <= bound, f"{fds.peak} descriptors"
    assert fds.peak > OPEN_FILES // 2  # the pool did fill up: the bound was put to the test
    got = consume_confluent(abuse_broker.bootstrap, "grown", 1, 0, timeout=5)
    assert got == []  # partition 0 of "grown" is empty, and readable
    assert_survived(abuse_broker, healthy, "12,000-partition creations")
