"""Transactional offsets in the shard (Kafka's OffsetMetadataManager with KIP-98/447):
TxnOffsetCommit validation and fencing, pending offsets invisible until the COMMIT marker and
dropped on ABORT, RequireStable, the newest-write rule, expiry, OffsetDelete and DeleteGroups
with pending offsets, and undoing failed writes."""

from __future__ import annotations

from typing import Any

from kcoord.coordinator.classic.group import GroupState
from kcoord.coordinator.config import GroupConfig
from kcoord.coordinator.consumer.messages import ConsumerGroupHeartbeatRequest
from kcoord.coordinator.consumer.topics import StaticTopics
from kcoord.coordinator.messages import (
    OffsetCommitPartition,
    OffsetCommitResponse,
    TxnMarkerRequest,
    TxnMarkerResponse,
    TxnOffsetCommitRequest,
)
from kcoord.coordinator.schemas import OffsetCommitKey, decode_key, decode_offset_commit_value
from kcoord.coordinator.shard import GroupShard
from tests.unit.test_group_harness import E, Harness

PID = 4000


def txn_commit(
    h: Harness,
    offsets: dict[tuple[str, int], int],
    *,
    group: str = "g",
    pid: int = PID,
    epoch: int = 0,
    generation: int = -1,
    member: str = "",
    instance: str | None = None,
    api_version: int = 3,
) -> dict[tuple[str, int], int]:
    by_topic: dict[str, list[OffsetCommitPartition]] = {}
    for (topic, p), offset in offsets.items():
        by_topic.setdefault(topic, []).append(OffsetCommitPartition(p, offset, -1, None))
    req = TxnOffsetCommitRequest(
        group,
        f"tx-{pid}",
        pid,
        epoch,
        generation,
        member,
        instance,
        tuple((t, tuple(ps)) for t, ps in by_topic.items()),
        api_version,
    )
    handle = h.handle("txn")
    h.absorb(h.shard.txn_offset_commit(handle, req, h.now))
    resp = h.replies[handle]
    assert isinstance(resp, OffsetCommitResponse)
    return {(t, p): err for t, parts in resp.topics for p, err in parts}


def marker(
    h: Harness, commit: bool, *, pid: int = PID, epoch: int = 0, coordinator_epoch: int = 0
) -> int:
    handle = h.handle("marker")
    h.absorb(h.shard.txn_marker(handle, TxnMarkerRequest(pid, epoch, commit, coordinator_epoch), h.now))
    resp = h.replies[handle]
    assert isinstance(resp, TxnMarkerResponse)
    return int(resp.error)


def fetched(h: Harness, topics: dict[str, list[int]] | None, *, stable: bool = False) -> dict[Any, Any]:
    r = h.fetch(topics, require_stable=stable)
    assert r.error == E.none
    return {(t, f.partition): (f.offset, f.error) for t, parts in r.topics for f in parts}


# ---- pending until the marker ----------------------------------------------------------------


def test_txn_commit_is_a_transactional_batch_invisible_until_commit() -> None:
    h = Harness()
    assert txn_commit(h, {("t", 0): 5, ("t", 1): 6}, epoch=3) == {("t", 0): E.none, ("t", 1): E.none}
    out = h.last
    assert (out.producer_id, out.producer_epoch, out.marker) == (PID, 3, None)
    keys = [decode_key(k) for k, _ in out.records]
    assert keys == [OffsetCommitKey("g", "t", 0), OffsetCommitKey("g", "t", 1)]
    assert decode_offset_commit_value(out.records[0][1] or b"").offset == 5
    assert h.offsets() == {}
    assert fetched(h, {"t": [0, 1]}) == {("t", 0): (-1, E.none), ("t", 1): (-1, E.none)}
    g = h.group()
    assert g is not None and g.state is GroupState.EMPTY  # a standalone group, as Kafka creates

    assert marker(h, True, epoch=3) == E.none
    out = h.last
    assert out.records == [] and out.marker == TxnMarkerRequest(PID, 3, True, 0)
    assert h.offsets() == {("t", 0): 5, ("t", 1): 6}


def test_abort_drops_the_pending_offsets_and_keeps_the_committed_ones() -> None:
    h = Harness()
    h.commit({("t", 0): 1})
    txn_commit(h, {("t", 0): 50, ("t", 1): 60})
    assert marker(h, False) == E.none
    assert h.offsets() == {("t", 0): 1}
    assert marker(h, True) == E.none  # nothing pending any more: a no-op that is still written
    assert h.offsets() == {("t", 0): 1}
    assert h.last.marker is not None


def test_marker_applies_to_every_group_of_the_producer_in_the_partition() -> None:
    h = Harness()
    txn_commit(h, {("t", 0): 5}, group="a")
    txn_commit(h, {("t", 0): 7}, group="b")
    txn_commit(h, {("t", 0): 9}, group="a", pid=PID + 1)
    assert marker(h, True) == E.none
    assert h.offsets("a") == {("t", 0): 5} and h.offsets("b") == {("t", 0): 7}
    assert fetched(h, {"t": [0]}, stable=True) == {("t", 0): (-1, E.none)}  # group "g": nothing
    assert marker(h, False, pid=PID + 1) == E.none
    assert h.offsets("a") == {("t", 0): 5}


def test_a_later_commit_of_the_same_producer_replaces_its_pending_offset() -> None:
    h = Harness()
    txn_commit(h, {("t", 0): 5})
    txn_commit(h, {("t", 0): 8})
    marker(h, True)
    assert h.offsets() == {("t", 0): 8}


# ---- the newest write wins (recordOffset comparison) -----------------------------------------


def test_a_plain_commit_after_the_txn_commit_wins_over_it() -> None:
    h = Harness()
    txn_commit(h, {("t", 0): 5})
    h.commit({("t", 0): 3})
    marker(h, True)
    assert h.offsets() == {("t", 0): 3}


def test_a_txn_commit_after_a_plain_commit_wins_at_commit() -> None:
    h = Harness()
    h.commit({("t", 0): 3})
    txn_commit(h, {("t", 0): 5})
    assert h.offsets() == {("t", 0): 3}
    marker(h, True)
    assert h.offsets() == {("t", 0): 5}


def test_between_two_transactions_the_one_written_last_wins_whatever_the_commit_order() -> None:
    h = Harness()
    txn_commit(h, {("t", 0): 1}, pid=1)
    txn_commit(h, {("t", 0): 2}, pid=2)
    marker(h, True, pid=2)
    marker(h, True, pid=1)  # written earlier: it loses
    assert h.offsets() == {("t", 0): 2}
    txn_commit(h, {("t", 0): 3}, pid=1)
    txn_commit(h, {("t", 0): 4}, pid=2)
    marker(h, True, pid=1)
    assert h.offsets() == {("t", 0): 3}
    marker(h, True, pid=2)
    assert h.offsets() == {("t", 0): 4}


# ---- RequireStable (OffsetFetch v7+) ------------------------------------------------------------


def test_require_stable_answers_unstable_offset_commit_for_pending_partitions_only() -> None:
    h = Harness()
    h.commit({("t", 0): 1, ("t", 1): 2})
    txn_commit(h, {("t", 1): 20, ("t", 2): 30})
    asked = {"t": [0, 1, 2]}
    assert fetched(h, asked) == {
        ("t", 0): (1, E.none),
        ("t", 1): (2, E.none),
        ("t", 2): (-1, E.none),
    }
    assert fetched(h, asked, stable=True) == {
        ("t", 0): (1, E.none),
        ("t", 1): (-1, E.unstable_offset_commit),
        ("t", 2): (-1, E.unstable_offset_commit),
    }
    # every offset of the group: the committed ones, the pending among them unstable
    assert fetched(h, None, stable=True) == {
        ("t", 0): (1, E.none),
        ("t", 1): (-1, E.unstable_offset_commit),
    }
    marker(h, True)
    assert fetched(h, asked, stable=True) == {
        ("t", 0): (1, E.none),
        ("t", 1): (20, E.none),
        ("t", 2): (30, E.none),
    }


# ---- validation (KIP-447) and fencing -------------------------------------------------------------


def test_unknown_group_with_a_generation_is_illegal_generation() -> None:
    h = Harness()
    assert txn_commit(h, {("t", 0): 1}, generation=2, member="m") == {("t", 0): E.illegal_generation}
    assert h.group() is None and h.records == []


def test_classic_member_checks_and_the_transactional_relaxations() -> None:
    h = Harness()
    a, b = h.stable_group(2)
    gen = h.group().generation
    assert txn_commit(h, {("t", 0): 1}, generation=gen, member=a) == {("t", 0): E.none}
    assert txn_commit(h, {("t", 0): 1}, generation=gen - 1, member=a) == {
        ("t", 0): E.illegal_generation
    }
    assert txn_commit(h, {("t", 0): 1}, generation=gen, member="ghost") == {
        ("t", 0): E.unknown_member_id
    }
    # v0-v2 carry no member: accepted while the group has members (a plain commit is not)
    assert txn_commit(h, {("t", 0): 2}, api_version=2) == {("t", 0): E.none}
    assert h.commit({("t", 0): 2}) == {("t", 0): E.unknown_member_id}
    # CompletingRebalance does not refuse a member's transactional commit
    h.join(a)
    h.join(b)
    h.run_until(lambda: h.group().state is GroupState.COMPLETING_REBALANCE)
    gen = h.group().generation
    assert txn_commit(h, {("t", 0): 3}, generation=gen, member=a) == {("t", 0): E.none}
    assert h.commit({("t", 0): 3}, generation=gen, member=a) == {("t", 0): E.rebalance_in_progress}


def test_consumer_group_member_epoch_is_checked_stale_is_illegal_generation() -> None:
    shard = GroupShard(0, GroupConfig(), topics=StaticTopics({"t": 2}))
    shard.finish_loading(0)
    hb = ConsumerGroupHeartbeatRequest(
        group_id="g",
        member_id="m1",
        member_epoch=0,
        rebalance_timeout_ms=5000,
        subscribed_topic_names=("t",),
        topic_partitions=(),
    )
    shard.consumer_group_heartbeat("hb", hb, 0)
    epoch = shard.consumer_group("g").members["m1"].member_epoch  # type: ignore[union-attr]

    def commit(generation: int, member: str) -> int:
        req = TxnOffsetCommitRequest(
            "g", "tx", PID, 0, generation, member, None, (("t", (OffsetCommitPartition(0, 5, -1, None),)),), 3
        )
        reply = shard.txn_offset_commit("c", req, 0).reply_for("c")
        assert isinstance(reply, OffsetCommitResponse)
        return reply.topics[0][1][0][1]

    assert commit(epoch, "m1") == E.none  # v3 is fine for a consumer-protocol member (no v9 rule)
    assert commit(epoch + 1, "m1") == E.illegal_generation  # STALE_MEMBER_EPOCH becomes this
    assert commit(epoch, "nobody") == E.unknown_member_id


def test_an_older_producer_epoch_is_fenced_for_commits_and_markers() -> None:
    h = Harness()
    assert txn_commit(h, {("t", 0): 1}, epoch=5) == {("t", 0): E.none}
    assert txn_commit(h, {("t", 0): 2}, epoch=4) == {("t", 0): E.invalid_producer_epoch}
    assert marker(h, False, epoch=4) == E.invalid_producer_epoch
    # the coordinator aborts with a bumped epoch: the zombie stays fenced
    assert marker(h, False, epoch=6, coordinator_epoch=2) == E.none
    assert txn_commit(h, {("t", 0): 3}, epoch=5) == {("t", 0): E.invalid_producer_epoch}
    assert marker(h, True, epoch=6, coordinator_epoch=1) == E.transaction_coordinator_fenced
    assert txn_commit(h, {("t", 0): 4}, epoch=6) == {("t", 0): E.none}
    assert marker(h, True, epoch=6, coordinator_epoch=2) == E.none
    assert h.offsets() == {("t", 0): 4}


def test_marker_while_loading_or_unloaded() -> None:
    shard = GroupShard(0)
    out = shard.txn_marker("m", TxnMarkerRequest(1, 0, True, 0), 0)
    assert out.replies == [("m", TxnMarkerResponse(E.coordinator_load_in_progress))]
    assert out.marker is None
    shard.finish_loading(0)
    shard.unload(0)
    out = shard.txn_marker("m", TxnMarkerRequest(1, 0, True, 0), 0)
    assert out.replies == [("m", TxnMarkerResponse(E.not_coordinator))]


# ---- expiry, OffsetDelete, DeleteGroups -----------------------------------------------------------


def test_offsets_with_a_pending_txn_do_not_expire_and_the_group_stays() -> None:
    config = GroupConfig(offsets_retention_ms=1000, offsets_retention_check_interval_ms=500)
    h = Harness(config)
    h.commit({("t", 0): 1, ("t", 1): 1})
    txn_commit(h, {("t", 1): 9, ("t", 2): 9})
    h.tick(5000)
    assert h.offsets() == {("t", 1): 1}  # t-0 expired; t-1 waits for its transaction
    g = h.group()
    assert g is not None and g.state is GroupState.EMPTY
    marker(h, False)
    h.tick(5000)
    assert h.offsets() == {} and h.group() is None  # now it goes


def test_a_group_with_only_pending_offsets_is_not_removed_by_expiry() -> None:
    config = GroupConfig(offsets_retention_ms=1000, offsets_retention_check_interval_ms=500)
    h = Harness(config)
    txn_commit(h, {("t", 0): 7})
    h.tick(5000)
    assert h.group() is not None
    marker(h, True)
    assert h.offsets() == {("t", 0): 7}


def test_offset_delete_writes_tombstones_for_pending_partitions_and_drops_them() -> None:
    h = Harness()
    txn_commit(h, {("t", 0): 7})
    r = h.offset_delete({"t": [0]})
    assert r.error == E.none
    assert [(decode_key(k), v) for k, v in h.last.records] == [(OffsetCommitKey("g", "t", 0), None)]
    assert fetched(h, {"t": [0]}, stable=True) == {("t", 0): (-1, E.none)}
    marker(h, True)
    assert h.offsets() == {}


def test_delete_groups_tombstones_pending_offsets_and_a_later_commit_brings_nothing_back() -> None:
    h = Harness()
    h.commit({("t", 0): 1})
    txn_commit(h, {("t", 0): 5, ("t", 1): 6})
    assert h.delete("g") == {"g": E.none}
    keys = [decode_key(k) for k, v in h.last.records if v is None]
    assert OffsetCommitKey("g", "t", 0) in keys and OffsetCommitKey("g", "t", 1) in keys
    assert h.group() is None
    marker(h, True)
    assert h.offsets() == {}


# ---- failed writes ---------------------------------------------------------------------------------


def test_failed_txn_commit_write_is_undone_and_answered_with_the_mapped_error() -> None:
    h = Harness()
    txn_commit(h, {("t", 0): 5}, epoch=1)
    txn_commit(h, {("t", 0): 6, ("t", 1): 7}, epoch=2)
    failed = h.last
    out = h.shard.append_failed(failed, E.kafka_storage_error, h.now)
    ((handle, _),) = failed.replies
    assert out.replies == [
        (handle, OffsetCommitResponse((("t", ((0, E.not_coordinator), (1, E.not_coordinator))),)))
    ]
    assert h.shard.offsets.pending.epochs[PID] == (1, -1)
    assert fetched(h, {"t": [0, 1]}, stable=True) == {
        ("t", 0): (-1, E.unstable_offset_commit),
        ("t", 1): (-1, E.none),
    }
    marker(h, True, epoch=1)
    assert h.offsets() == {("t", 0): 5}


def test_failed_marker_write_puts_the_pending_offsets_back() -> None:
    h = Harness()
    h.commit({("t", 0): 1})
    txn_commit(h, {("t", 0): 5})
    marker(h, True)
    failed = h.last
    assert h.offsets() == {("t", 0): 5}
    out = h.shard.append_failed(failed, E.kafka_storage_error, h.now)
    ((handle, _),) = failed.replies
    assert out.replies == [(handle, TxnMarkerResponse(E.not_coordinator))]
    assert h.offsets() == {("t", 0): 1}
    assert fetched(h, {"t": [0]}, stable=True) == {("t", 0): (-1, E.unstable_offset_commit)}
    marker(h, False)  # retried by the coordinator, say as an abort after a timeout
    assert h.offsets() == {("t", 0): 1}


def test_failed_delete_groups_puts_the_pending_offsets_back() -> None:
    h = Harness()
    h.commit({("t", 0): 1})
    txn_commit(h, {("t", 0): 5, ("t", 1): 6})
    h.delete("g")
    failed = h.last
    h.shard.append_failed(failed, E.kafka_storage_error, h.now)
    assert h.group() is not None and h.offsets() == {("t", 0): 1}
    assert fetched(h, {"t": [0, 1]}, stable=True) == {
        ("t", 0): (-1, E.unstable_offset_commit),
        ("t", 1): (-1, E.unstable_offset_commit),
    }
    marker(h, True)
    assert h.offsets() == {("t", 0): 5, ("t", 1): 6}
