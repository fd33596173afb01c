"""kill -9 in the middle of creating 3,000 partitions: the topic loads whole or not at all.

Finding 1 of the storage part of the hardening issue: a creation that failed or was cut short
left partition directories behind, and the next start loaded a half topic. Partitions are now
built in a staging directory and moved into place after a commit point; start-up rolls an
interrupted creation back (not committed) or forward (committed). The broker is killed at the
worst moments: while the partitions are being built, and right after the commit point while
they are being moved into place.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from kcoord.protocol.apis import ApiKey
from kcoord.storage.creation import COMMIT_MARKER, STAGING_DIR
from tests.integration.harness import BrokerProcess, wait_for
from tests.integration.rawclient import RawClient

from .conftest import _BASE_SETTINGS, _wrapper
from .healthy import HealthyGroup

N = 3_000


def _request_in_thread(port: int, send: Callable[[RawClient], object]) -> threading.Thread:
    """Send a request whose connection the kill will cut (its outcome is judged on disk)."""

    def run() -> None:
        try:
            with RawClient(port, timeout=120) as c:
                send(c)
        except (ConnectionError, OSError):
            pass

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def _create(name: str, partitions: int) -> Callable[[RawClient], object]:
    return lambda c: c.request(
        ApiKey.CREATE_TOPICS, 7, topics=[dict(name=name, num_partitions=partitions,
        replication_factor=1, assignments=[], configs=[])], timeout=120_000, validate_only=False)


def _grow(name: str, total: int) -> Callable[[RawClient], object]:
    return lambda c: c.request(
        ApiKey.CREATE_PARTITIONS, 3, topics=[dict(name=name, count=total, assignments=None)],
        timeout=120_000, validate_only=False)


def _creations(data: Path) -> list[Path]:
    root = data / STAGING_DIR
    return list(root.iterdir()) if root.exists() else []


def _building(data: Path, at_least: int) -> bool:
    time.sleep(0.005)  # listing a directory of thousands: not too often
    return any(len(os.listdir(p)) >= at_least for p in _creations(data))


def _committed(data: Path) -> bool:
    return any((p / COMMIT_MARKER).exists() for p in _creations(data))


def _kill_when(broker: BrokerProcess, moment: Callable[[], bool], timeout: float = 120) -> None:
    """SIGKILL the broker as soon as ``moment()`` holds (polled every half millisecond: the
    window after the commit point lasts as long as 3,000 renames)."""
    deadline = time.monotonic() + timeout
    while not moment():
        if time.monotonic() > deadline:
            raise AssertionError("the moment to kill the broker never came")
        time.sleep(0.0005)
    broker.kill()


def _partitions(broker: BrokerProcess, name: str) -> int:
    with RawClient(broker.port) as c:
        r = c.request(ApiKey.METADATA, 12, topics=[dict(name=name, topic_id=None)],
                      allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    topic = r.topics[0]
    if topic.error_code:
        return 0
    assert all(p.error_code == 0 for p in topic.partitions)
    return len(topic.partitions)


def _on_disk(data: Path, name: str) -> int:
    return sum(1 for p in data.iterdir() if p.name.rpartition("-")[0] == name)


@pytest.fixture
def crash_broker(tmp_path: Path) -> BrokerProcess:
    broker = BrokerProcess(tmp_path / "data", dict(_BASE_SETTINGS), wrapper=_wrapper())
    broker.start()
    yield broker  # type: ignore[misc]
    broker.stop()


def _delete(broker: BrokerProcess, name: str) -> None:
    """Delete a checked topic, so that the next restarts have less to load."""
    with RawClient(broker.port, timeout=60) as c:
        r = c.request(ApiKey.DELETE_TOPICS, 5, topic_names=[name], timeout=60_000)
        assert r.responses[0].error_code == 0


def test_kill_during_a_3000_partition_create_loads_all_or_nothing(
    crash_broker: BrokerProcess,
) -> None:
    broker, data = crash_broker, crash_broker.data_dir
    building = (lambda: _building(data, N // 2), "building")
    committed = (lambda: _committed(data), "committed")
    for (moment, when), allowed in ((building, {0}), (committed, {0, N})):
        t = _request_in_thread(broker.port, _create("t", N))
        _kill_when(broker, moment)
        t.join(30)
        broker.restart()
        count = _partitions(broker, "t")
        assert count in allowed, (when, count)
        assert _on_disk(data, "t") == count
        assert _creations(data) == []
        if count == 0:  # absent: creating it again works
            with RawClient(broker.port, timeout=120) as c:
                _create("t", N)(c)
            assert _partitions(broker, "t") == N
        _delete(broker, "t")
    assert "rolled back an interrupted creation" in broker.log()

    # Growing a topic: it keeps its old partition count or gets all the new ones.
    for (moment, when), allowed in ((building, {2}), (committed, {2, N})):
        with RawClient(broker.port, timeout=120) as c:
            _create("g", 2)(c)
        t = _request_in_thread(broker.port, _grow("g", N))
        _kill_when(broker, moment)
        t.join(30)
        broker.restart()
        count = _partitions(broker, "g")
        assert count in allowed, (when, count)
        assert _on_disk(data, "g") == count
        assert _creations(data) == []
        if count == 2:  # not grown: growing it again works
            with RawClient(broker.port, timeout=120) as c:
                _grow("g", N)(c)
            assert _partitions(broker, "g") == N
        _delete(broker, "g")

    # The broker serves: a consumer group produces and consumes on it.
    group = HealthyGroup(broker.bootstrap)
    group.start()
    try:
        group.wait_progress(what="restarts after kill -9 during creations")
    finally:
        group.stop()
    wait_for(broker.alive, 5, what="the broker to be alive")
