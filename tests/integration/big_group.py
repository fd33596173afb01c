"""A data directory holding one big KIP-848 consumer group, written straight in Kafka's format.

For restart tests and bench/loop_stalls.py --restart (issue 34, finding 10): topic ``big`` of
``partitions`` partitions (created empty, as topic creation leaves them) and, in the
``__consumer_offsets`` partition of the group, the history a coordinator leaves when
``members`` members join ``per_epoch`` at a time: per epoch the new members' records (5), the
group epoch (3), the target of every member whose target changed (7), the target epoch (6) and
the current assignment (8) of those members, reconciled at once. The targets are sticky: a new
member takes partitions from the members holding more than their share, as the uniform assignor
moves them. The group ends Stable at the last epoch, every member owning its target.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from kcoord.coordinator.consumer.group import ConsumerGroup
from kcoord.coordinator.consumer.member import ConsumerMember
from kcoord.coordinator.consumer.persistence import (
    assignment_epoch_record,
    current_assignment_record,
    epoch_record,
    member_record,
    target_record,
)
from kcoord.coordinator.consumer.topics import TopicInfo, metadata_hash
from kcoord.protocol.javahash import partition_for
from kcoord.protocol.record_encoding import build_batch
from kcoord.storage.creation import create_partitions
from kcoord.storage.log import PartitionLog

OFFSETS_PARTITIONS = 50  # the broker's default offsets.topic.num.partitions


@dataclass(frozen=True)
class BigGroup:
    """What was written: enough to heartbeat as one of the members."""

    group_id: str
    topic: str
    topic_id: uuid.UUID
    member_ids: tuple[str, ...]
    epoch: int
    records: int
    offsets_partition: int


def member_id(i: int) -> str:
    return f"member-{i:05d}-{'x' * 10}"


def _sticky(owners: list[int], counts: list[int], joined: int) -> set[int]:
    """Give the ``joined`` newest of ``len(counts)`` members their share of the partitions,
    taken from members above theirs; the members whose partitions changed."""
    n, total = len(counts), len(owners)
    share = [total // n + (1 if i < total % n else 0) for i in range(n)]
    freed: list[int] = []
    changed: set[int] = set()
    for p, m in enumerate(owners):
        if m >= 0 and counts[m] > share[m]:
            counts[m] -= 1
            changed.add(m)
            freed.append(p)
        elif m < 0:
            freed.append(p)
    for m in range(n):
        while counts[m] < share[m] and freed:
            owners[freed.pop()] = m
            counts[m] += 1
            changed.add(m)
    assert not freed, "every partition has an owner"
    return changed | set(range(n - joined, n))


def write_big_group(
    data_dir: Path,
    *,
    members: int = 1_000,
    partitions: int = 10_000,
    per_epoch: int = 20,
    group_id: str = "big-group",
    topic: str = "big",
    create_topic: bool = True,
) -> BigGroup:
    """Write the topic (unless not ``create_topic``: the group then finds it gone and
    rebalances on its first heartbeat) and the group's history into ``data_dir`` (see the
    module docstring)."""
    topic_id = uuid.UUID(int=0xB16_6A0B)
    if create_topic:
        create_partitions(data_dir, topic, topic_id, range(partitions), fsync=False)
    digest = metadata_hash({topic: TopicInfo(topic_id, topic, partitions)})
    offsets_partition = partition_for(group_id, OFFSETS_PARTITIONS)
    plog = PartitionLog.open(
        data_dir / f"__consumer_offsets-{offsets_partition}", segment_bytes=100 << 20, fsync=False
    )
    owners = [-1] * partitions
    counts: list[int] = []
    ids: list[str] = []
    now = int(time.time() * 1000) - 3_600_000
    epoch = records = 0
    try:
        while len(ids) < members:
            epoch += 1
            now += 1_000
            joined = min(per_epoch, members - len(ids))
            batch = []
            for _ in range(joined):
                ids.append(member_id(len(ids)))
                counts.append(0)
                batch.append(member_record(group_id, _member(ids[-1], topic)))
            group = ConsumerGroup(group_id, group_epoch=epoch, assignment_epoch=epoch, metadata_hash=digest)
            batch.append(epoch_record(group))
            changed = sorted(_sticky(owners, counts, joined))
            held: dict[int, list[int]] = {m: [] for m in changed}
            for p, o in enumerate(owners):
                if o in held:
                    held[o].append(p)
            targets = {m: frozenset(held[m]) for m in changed}
            batch += [target_record(group_id, ids[m], {topic_id: targets[m]}) for m in changed]
            batch.append(assignment_epoch_record(group))
            for m in changed:
                current = _member(ids[m], topic, epoch=epoch, assigned={topic_id: targets[m]})
                batch.append(current_assignment_record(group_id, current))
            plog.append(build_batch([(k, v, (), now) for k, v in batch]))
            records += len(batch)
    finally:
        plog.close()
    return BigGroup(group_id, topic, topic_id, tuple(ids), epoch, records, offsets_partition)


def _member(mid: str, topic: str, epoch: int = 0, assigned: dict | None = None) -> ConsumerMember:
    return ConsumerMember(
        member_id=mid,
        client_id="big-client",
        client_host="/127.0.0.1",
        subscribed_topic_names=(topic,),
        rebalance_timeout_ms=60_000,
        server_assignor="uniform",
        member_epoch=epoch,
        previous_member_epoch=max(epoch - 1, 0),
        assigned=assigned if assigned is not None else {},
    )
