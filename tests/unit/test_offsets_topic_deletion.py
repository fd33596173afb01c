"""Offsets of deleted topics (Kafka's GroupCoordinatorShard/OffsetMetadataManager
.onPartitionsDeleted): a tombstone per group and partition, pending transactional offsets too,
in slices, and the same state after a replay."""

from __future__ import annotations

import uuid

from kcoord.coordinator.config import GroupConfig
from kcoord.coordinator.messages import (
    DeletedTopic,
    TopicsDeletedRequest,
    TopicsDeletedResponse,
)
from kcoord.coordinator.schemas import OffsetCommitKey, decode_key
from kcoord.coordinator.shard import GroupShard
from tests.unit.test_group_harness import E, Harness, subscription
from tests.unit.test_txn_offsets import fetched, marker, txn_commit

T_ID = uuid.uuid5(uuid.NAMESPACE_URL, "t")
T = DeletedTopic("t", T_ID, 2, 1 << 62)  # deleted after every commit of these tests


def _deleted(
    h: Harness, *topics: DeletedTopic, budget: int = 2_000
) -> list[TopicsDeletedResponse]:
    """Run the deletion over every group of the shard, slice by slice, as the runtime does;
    the answers of the slices."""
    ids = tuple(h.shard.offset_holders())
    start, answers = 0, []
    while True:
        req = TopicsDeletedRequest(topics, ids, start, budget)
        handle = h.handle("deleted")
        h.absorb(h.shard.topics_deleted(handle, req, h.now))
        answer = h.replies[handle]
        assert isinstance(answer, TopicsDeletedResponse)
        answers.append(answer)
        if answer.error != E.none or answer.next >= len(ids):
            return answers
        start = answer.next


def _tombstones(h: Harness, since: int) -> list[object]:
    return [decode_key(k) for k, v in h.records[since:] if v is None]


def test_onPartitionsDeleted_tombstones_every_groups_offsets_of_the_deleted_partitions() -> None:
    h = Harness()
    (a,) = h.stable_group(1, group="m", protocols=[("range", subscription("t"))], session=600_000)
    h.commit({("t", 0): 1, ("t", 1): 2, ("u", 0): 3}, group="m", generation=1, member=a)
    h.commit({("t", 0): 4}, group="s1")
    h.commit({("u", 0): 5}, group="s2")
    n = len(h.records)
    (answer,) = _deleted(h, T)
    assert answer == TopicsDeletedResponse(E.none, 3, 3)
    assert sorted(_tombstones(h, n), key=repr) == sorted(
        [OffsetCommitKey("m", "t", 0), OffsetCommitKey("m", "t", 1), OffsetCommitKey("s1", "t", 0)],
        key=repr,
    )
    assert h.offsets("m") == {("u", 0): 3}
    assert h.offsets("s1") == {} and h.offsets("s2") == {("u", 0): 5}
    r = h.fetch({"t": [0, 1]}, group="m")
    assert [(f.partition, f.offset) for _, parts in r.topics for f in parts] == [(0, -1), (1, -1)]


def test_onPartitionsDeleted_only_the_deleted_partitions_go() -> None:
    """Kafka passes the deleted topic's partitions; an offset past them is not one of them."""
    h = Harness()
    h.commit({("t", 0): 1, ("t", 5): 2}, group="s")
    _deleted(h, T)
    assert h.offsets("s") == {("t", 5): 2}


def test_onPartitionsDeleted_leaves_the_group_to_the_next_retention_check() -> None:
    """The deletion writes offset tombstones only; the group left without offsets goes at
    the next cleanupGroupMetadata, as Kafka's does."""
    cfg = GroupConfig(offsets_retention_check_interval_ms=10_000)
    h = Harness(cfg)
    h.commit({("t", 0): 1}, group="s")
    _deleted(h, T)
    assert h.group("s") is not None
    h.tick(10_000)
    assert h.group("s") is None


def test_onPartitionsDeleted_tombstones_pending_transactional_offsets_too() -> None:
    """Kafka deletes the partitions from pendingTransactionalOffsets as well: the
    transaction's COMMIT then brings nothing back."""
    h = Harness()
    txn_commit(h, {("t", 0): 7, ("u", 0): 8})
    n = len(h.records)
    (answer,) = _deleted(h, T)
    assert answer.tombstones == 1
    assert _tombstones(h, n) == [OffsetCommitKey("g", "t", 0)]
    assert fetched(h, {"t": [0], "u": [0]}, stable=True) == {
        ("t", 0): (-1, E.none),
        ("u", 0): (-1, E.unstable_offset_commit),
    }
    assert marker(h, True) == E.none
    assert h.offsets() == {("u", 0): 8}


def test_offsets_committed_after_the_deletion_belong_to_the_new_topic() -> None:
    """The runtime may reach a group after the topic was created again: what was committed
    since the deletion, or named by another topic id, stays."""
    h = Harness()
    h.commit({("t", 0): 1}, group="old")
    deleted_at = h.now
    h.tick(5)
    h.commit({("t", 0): 2}, group="new")
    other = uuid.uuid5(uuid.NAMESPACE_URL, "t again")
    h.commit({("t", 1): 3}, group="byid", topic_ids={"t": other})
    h.commit({("t", 1): 4}, group="sameid", topic_ids={"t": T_ID})
    _deleted(h, DeletedTopic("t", T_ID, 2, h.now))
    assert h.offsets("new") == {} and h.offsets("sameid") == {}
    assert h.offsets("byid") == {("t", 1): 3}  # another topic's id
    h.commit({("t", 0): 2}, group="new")
    _deleted(h, DeletedTopic("t", T_ID, 2, deleted_at))
    assert h.offsets("new") == {("t", 0): 2}


def test_slices_stop_after_their_budget_and_resume_where_they_stopped() -> None:
    h = Harness()
    for i in range(10):
        h.commit({("t", 0): i, ("t", 1): i, ("u", 0): i}, group=f"s{i}")
    # Each group costs 3: its two candidate partitions of t (fewer than its offsets) + 1.
    answers = _deleted(h, T, budget=8)
    assert [a.next for a in answers] == [3, 6, 9, 10]
    assert sum(a.tombstones for a in answers) == 20
    assert all(h.offsets(f"s{i}") == {("u", 0): i} for i in range(10))


def test_a_shard_not_serving_answers_an_error_and_does_nothing() -> None:
    h = Harness(load=False)
    req = TopicsDeletedRequest((T,), ("g",))
    out = h.shard.topics_deleted("x", req, 0)
    assert out.records == []
    assert out.replies == [("x", TopicsDeletedResponse(E.coordinator_load_in_progress, 0, 0))]
    h.absorb(h.shard.finish_loading(0))
    h.absorb(h.shard.unload(0))
    out = h.shard.topics_deleted("y", req, 0)
    assert out.replies == [("y", TopicsDeletedResponse(E.not_coordinator, 0, 0))]


def test_deletion_tombstones_replay_to_the_same_offsets() -> None:
    h = Harness()
    h.commit({("t", 0): 1, ("t", 1): 2, ("u", 0): 3}, group="a")
    h.commit({("t", 1): 4}, group="b", retention_ms=60_000)
    _deleted(h, T)
    fresh = GroupShard(0, h.shard.config, now_ms=h.now)
    for k, v in h.records:
        fresh.replay(k, v, h.now)
    fresh.finish_loading(h.now)
    for group in ("a", "b"):
        assert fresh.committed_offsets(group) == h.shard.committed_offsets(group)
    assert fresh.committed_offsets("a") != {}
