"""Topic administration that used to break the broker, under the default limits.

Findings 1 and 3 of the storage part of the hardening issue: a CreateTopics or
CreatePartitions asking for 12,000 partitions exhausted file descriptors and blocked the event
loop (now refused with POLICY_VIOLATION by max.partitions.per.request, before anything is
created); Metadata v10/v11 naming an unknown topic by id, and a CreateTopics with a
32,767-character name, failed while their answers were encoded (now answered).

Finding 17 of the hardening issue: concurrent creations (80 topics in one CreateTopics, several
CreateTopics at once) logged "could not remove finished creation ...: No such file or
directory", one creation having removed the staging root another was about to fsync.
"""

from __future__ import annotations

import threading
import uuid
from pathlib import Path

from kcoord.protocol.apis import ApiKey
from kcoord.protocol.errors import ErrorCode
from tests.integration.harness import BrokerProcess
from tests.integration.rawclient import RawClient

from .conftest import assert_survived
from .healthy import HealthyGroup


def _create(c: RawClient, version: int, name: str, partitions: int) -> tuple[int, str | None]:
    r = c.request(
        ApiKey.CREATE_TOPICS,
        version,
        topics=[dict(name=name, num_partitions=partitions, replication_factor=1, assignments=[],
                     configs=[])],
        timeout=60000,
        validate_only=False,
    )
    return r.topics[0].error_code, r.topics[0].error_message


def _dirs(data: Path, topic: str) -> list[str]:
    return [p.name for p in data.iterdir() if p.name.rpartition("-")[0] == topic]


def test_12000_partitions_are_refused_with_policy_violation(
    abuse_broker: BrokerProcess, healthy: HealthyGroup
) -> None:
    with RawClient(abuse_broker.port, timeout=60) as c:
        code, message = _create(c, 7, "huge", 12_000)
        assert code == ErrorCode.policy_violation
        assert message is not None and "max.partitions.per.request" in message
        assert _create(c, 7, "grows", 1)[0] == 0
        r = c.request(ApiKey.CREATE_PARTITIONS, 3, topics=[dict(name="grows", count=12_000,
                      assignments=None)], timeout=60000, validate_only=False)
        assert r.results[0].error_code == ErrorCode.policy_violation
        assert "max.partitions.per.request" in r.results[0].error_message
    assert _dirs(abuse_broker.data_dir, "huge") == []
    assert _dirs(abuse_broker.data_dir, "grows") == ["grows-0"]
    assert not (abuse_broker.data_dir / ".staging").exists()
    assert_survived(abuse_broker, healthy, "12,000-partition CreateTopics/CreatePartitions")


def test_metadata_v10_v11_by_unknown_topic_id_is_answered(
    abuse_broker: BrokerProcess, healthy: HealthyGroup
) -> None:
    with RawClient(abuse_broker.port) as c:
        for version in (10, 11):
            extra = {"include_cluster_authorized_operations": False} if version == 10 else {}
            r = c.request(ApiKey.METADATA, version,
                          topics=[dict(name=None, topic_id=uuid.uuid4())],
                          allow_auto_topic_creation=False,
                          include_topic_authorized_operations=False, **extra)
            assert [(t.name, t.error_code) for t in r.topics] == [("", ErrorCode.invalid_request)]
        r = c.request(ApiKey.METADATA, 12, topics=[dict(name=None, topic_id=uuid.uuid4())],
                      allow_auto_topic_creation=False, include_topic_authorized_operations=False)
        assert r.topics[0].error_code == ErrorCode.unknown_topic_id
    assert_survived(abuse_broker, healthy, "Metadata v10/v11 by topic id")


def test_a_32767_character_topic_name_is_answered_with_a_short_message(
    abuse_broker: BrokerProcess, healthy: HealthyGroup
) -> None:
    with RawClient(abuse_broker.port) as c:
        for name in ("n" * 32_767, "#" * 32_767):  # too long; too long and illegal
            for version in (4, 7):  # a non-flexible (int16 string lengths) and a flexible one
                code, message = _create(c, version, name, 1)
                assert code == ErrorCode.invalid_topic_exception
                assert message is not None and len(message) < 200
            r = c.request(ApiKey.CREATE_PARTITIONS, 1, topics=[dict(name=name, count=2,
                          assignments=None)], timeout=10000, validate_only=False)
            assert r.results[0].error_code == ErrorCode.unknown_topic_or_partition
            assert len(r.results[0].error_message) < 200
            r = c.request(ApiKey.DELETE_TOPICS, 5, topic_names=[name], timeout=10000)
            assert r.responses[0].error_code == ErrorCode.unknown_topic_or_partition
            assert len(r.responses[0].error_message) < 200
    assert_survived(abuse_broker, healthy, "a 32,767-character topic name")


def test_concurrent_creations_complete_and_log_no_warning(
    abuse_broker: BrokerProcess, healthy: HealthyGroup
) -> None:
    failures: list[str] = []

    def create_many(prefix: str, count: int, start: threading.Barrier) -> None:
        with RawClient(abuse_broker.port, timeout=60) as c:
            start.wait(timeout=30)
            r = c.request(
                ApiKey.CREATE_TOPICS, 7,
                topics=[dict(name=f"{prefix}-{i}", num_partitions=2, replication_factor=1,
                             assignments=[], configs=[]) for i in range(count)],
                timeout=60000, validate_only=False,
            )  # fmt: skip
            failures.extend(f"{t.name}: {t.error_code}" for t in r.topics if t.error_code)

    log_before = abuse_broker.log_path.stat().st_size
    for round_ in range(3):
        # one CreateTopics of 80 topics beside six of one topic each, all at once
        jobs = [(f"many{round_}", 80)] + [(f"one{round_}x{i}", 1) for i in range(6)]
        start = threading.Barrier(len(jobs))
        threads = [threading.Thread(target=create_many, args=(*job, start)) for job in jobs]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
            assert not t.is_alive()
    assert failures == []
    with abuse_broker.log_path.open("rb") as f:
        f.seek(log_before)
        logged = f.read().decode(errors="replace")
    assert "could not remove finished creation" not in logged, logged[-3000:]
    assert " WARNING kcoord.storage " not in logged, logged[-3000:]
    for round_ in range(3):
        for i in range(80):
            assert sorted(_dirs(abuse_broker.data_dir, f"many{round_}-{i}")) == [
                f"many{round_}-{i}-0",
                f"many{round_}-{i}-1",
            ]
        for i in range(6):
            assert len(_dirs(abuse_broker.data_dir, f"one{round_}x{i}-0")) == 2
    assert not (abuse_broker.data_dir / ".staging").exists()
    assert_survived(abuse_broker, healthy, "concurrent CreateTopics")
