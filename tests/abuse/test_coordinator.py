"""Probes against the group coordinator's writes: requests whose records could never fit in one
batch of ``message.max.bytes`` (1,048,588 bytes by default), as Kafka's coordinator bounds them.

- an OffsetCommit of 99,999 partition entries (the most a request may carry): refused whole, UNKNOWN_SERVER_ERROR on every
  partition (Kafka's answer to a RecordTooLargeException), nothing written, and the loop is
  not held long enough to starve the healthy group;
- OffsetCommits on either side of the bound: the largest that fits is stored, one more
  partition is refused;
- a JoinGroup carrying 94 MiB of protocol metadata: refused at once (UNKNOWN_SERVER_ERROR,
  what Kafka's SyncGroup would end up answering), no group holds it, nothing persisted, and
  the broker's resident memory stays under RSS_BOUND.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kcoord.coordinator.messages import OffsetCommitPartition
from kcoord.coordinator.write_size import offset_commit_floor
from kcoord.protocol.errors import ErrorCode
from kcoord.protocol.javahash import partition_for
from tests.integration.clients import create_topic
from tests.integration.harness import BrokerProcess
from tests.integration.rawclient import RawClient

from .conftest import RSS_BOUND, assert_survived, peak_rss
from .healthy import GROUP as HEALTHY_GROUP
from .healthy import HealthyGroup

TOPIC = "wide"
PARTITIONS = 16
MESSAGE_MAX_BYTES = 1_048_588  # the broker's default message.max.bytes
USE = ErrorCode.unknown_server_error


@pytest.fixture(scope="module")
def topic(abuse_broker: BrokerProcess) -> str:
    create_topic(abuse_broker.bootstrap, TOPIC, PARTITIONS)
    return TOPIC


def offsets_partition_bytes(broker: BrokerProcess, group: str) -> int:
    """Bytes of segment files in the __consumer_offsets partition of ``group`` (A2). The
    probes' groups are chosen so that no other group of the module writes there."""
    assert partition_for(group, 50) != partition_for(HEALTHY_GROUP, 50)
    d = Path(broker.data_dir) / f"__consumer_offsets-{partition_for(group, 50)}"
    return sum(f.stat().st_size for f in d.glob("*.log")) if d.is_dir() else 0


def commit(client: RawClient, group: str, entries: int, metadata: str | None = None) -> list[int]:
    """A standalone OffsetCommit v8 of ``entries`` partition entries cycling over the topic's
    partitions; the error code of every entry, in order."""
    r = client.request(
        8, 8, group_id=group, generation_id_or_member_epoch=-1, member_id="",
        group_instance_id=None,
        topics=[dict(name=TOPIC, partitions=[
            dict(partition_index=i % PARTITIONS, committed_offset=i, committed_leader_epoch=-1,
                 committed_metadata=metadata) for i in range(entries)])],
    )  # fmt: skip
    return [int(p.error_code) for t in r.topics for p in t.partitions]


def fetch(client: RawClient, group: str) -> list[int]:
    r = client.request(
        9, 6, group_id=group, topics=[dict(name=TOPIC, partition_indexes=list(range(PARTITIONS)))]
    )
    return [int(p.committed_offset) for t in r.topics for p in t.partitions]


def largest_fitting(group: str, metadata: str) -> int:
    """The most partition entries whose commit batch fits in message.max.bytes (the floor
    is exact for ASCII metadata: tests/unit/test_write_size.py)."""

    def size(n: int) -> int:
        parts = tuple(OffsetCommitPartition(i % PARTITIONS, i, -1, metadata) for i in range(n))
        return offset_commit_floor(group, ((TOPIC, parts),), 4096)

    lo, hi = 1, 100_000
    while lo < hi:  # the largest n with size(n) <= limit
        mid = (lo + hi + 1) // 2
        if size(mid) <= MESSAGE_MAX_BYTES:
            lo = mid
        else:
            hi = mid - 1
    return lo


def test_offset_commit_of_100000_partitions_is_refused_whole(
    abuse_broker: BrokerProcess, healthy: HealthyGroup, topic: str
) -> None:
    group = "abuse-100k"
    # The most partition entries a request may carry: with its topic, 100,000 array entries
    # (socket.request.max.elements; one more closes the connection, tests/abuse/test_requests.py).
    entries = 99_999
    with RawClient(abuse_broker.port, timeout=60) as client:
        before = offsets_partition_bytes(abuse_broker, group)
        for _ in range(3):  # again and again: the healthy group must keep going meanwhile
            errors = commit(client, group, entries)
            assert errors == [USE] * entries
        assert fetch(client, group) == [-1] * PARTITIONS
        assert offsets_partition_bytes(abuse_broker, group) == before
    assert_survived(abuse_broker, healthy, "three OffsetCommits of 100,000 partitions")


def test_offset_commit_one_partition_over_the_batch_bound_is_refused(
    abuse_broker: BrokerProcess, healthy: HealthyGroup, topic: str
) -> None:
    metadata = "m" * 20
    with RawClient(abuse_broker.port, timeout=60) as client:
        over_group, fit_group = "abuse-edge-over", "abuse-edge-fit"
        over = largest_fitting(over_group, metadata) + 1
        before = offsets_partition_bytes(abuse_broker, over_group)
        assert commit(client, over_group, over, metadata) == [USE] * over
        assert offsets_partition_bytes(abuse_broker, over_group) == before
        assert fetch(client, over_group) == [-1] * PARTITIONS

        fits = largest_fitting(fit_group, metadata)
        before = offsets_partition_bytes(abuse_broker, fit_group)
        assert commit(client, fit_group, fits, metadata) == [0] * fits
        grown = offsets_partition_bytes(abuse_broker, fit_group) - before
        assert MESSAGE_MAX_BYTES - 200 < grown <= MESSAGE_MAX_BYTES  # one batch, at the bound
        # The last entry of each partition wins (I5).
        last = {i % PARTITIONS: i for i in range(fits)}
        assert fetch(client, fit_group) == [last[p] for p in range(PARTITIONS)]
    assert_survived(abuse_broker, healthy, "OffsetCommits at the batch bound")


def join(client: RawClient, group: str, metadata: bytes) -> Any:
    return client.request(
        11, 5, group_id=group, session_timeout=10_000, rebalance_timeout=10_000, member_id="",
        group_instance_id=None, protocol_type="consumer",
        protocols=[dict(name="range", metadata=metadata)],
    )  # fmt: skip


def test_join_group_with_94_mib_of_metadata_is_refused(
    abuse_broker: BrokerProcess, healthy: HealthyGroup
) -> None:
    group = "abuse-big-join"
    metadata = b"\x00" * (94 << 20)
    with RawClient(abuse_broker.port, timeout=120) as client:
        before = offsets_partition_bytes(abuse_broker, group)
        for _ in range(2):
            r = join(client, group, metadata)
            # D13: the error, the member id as sent, generation -1, no leader, no members;
            # no MEMBER_ID_REQUIRED first: nothing is held for this member, not even an id.
            assert int(r.error_code) == USE
            assert (r.member_id, int(r.generation_id), r.leader, list(r.members)) == ("", -1, "", [])
        del metadata
        described = client.request(15, 5, groups=[group], include_authorized_operations=False)
        (g,) = described.groups
        assert (int(g.error_code), g.group_state, list(g.members)) == (0, "Dead", [])  # no group
        assert offsets_partition_bytes(abuse_broker, group) == before
        assert offsets_partition_bytes(abuse_broker, group) < 1 << 20  # no 99 MB record
        # A member with metadata that fits still joins the same group.
        r = join(client, group, b"\x00\x00\x00\x00\x00\x00\xff\xff\xff\xff")
        assert int(r.error_code) == ErrorCode.member_id_required
    assert peak_rss(abuse_broker.pid) < RSS_BOUND
    assert_survived(abuse_broker, healthy, "JoinGroups with 94 MiB of metadata")
