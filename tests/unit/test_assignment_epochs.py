"""KIP-1251 (Kafka 4.3), assignment epochs: every partition a consumer-group member holds keeps
the member epoch at which it was assigned; an OffsetCommit or TxnOffsetCommit of a
consumer-protocol member is accepted for a partition when
assignment epoch <= commit epoch <= member epoch. The record carries the epochs (tagged field 0
of each topic entry of the current-assignment value) and replay restores them; a record
without them reads as assigned at its member epoch. Each test names the rule it checks."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from kcoord.coordinator.consumer.member import MemberState
from kcoord.coordinator.consumer.persistence import current_assignment_record
from kcoord.coordinator.consumer.records import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    decode_consumer_value,
    encode_consumer_key,
    encode_consumer_value,
)
from kcoord.coordinator.messages import OffsetCommitRequest, TxnOffsetCommitRequest
from kcoord.coordinator.shard import GroupShard
from kcoord.protocol.errors import ErrorCode

from .test_consumer_group import Group, _owned, _random_activity, _state

E = ErrorCode


def commit(
    g: Group, member: str, epoch: int, parts: list[int], topic: str = "t", shard: Any = None
) -> dict[int, int]:
    """An OffsetCommit v9 to ``shard`` (the group's own by default): each partition's error."""
    req = OffsetCommitRequest("g", epoch, member, None, ((topic, tuple((p, 5, -1, "") for p in parts)),), 9)
    reply = (shard or g.shard).offset_commit("c", req, g.now).reply_for("c")
    return dict(reply.topics[0][1])  # type: ignore[union-attr]


def txn_commit(g: Group, member: str, epoch: int, parts: list[int]) -> dict[int, int]:
    req = TxnOffsetCommitRequest(
        "g", "tx", 7, 0, epoch, member, None, (("t", tuple((p, 5, -1, "") for p in parts)),), 3
    )
    reply = g.shard.txn_offset_commit("c", req, g.now).reply_for("c")
    return dict(reply.topics[0][1])  # type: ignore[union-attr]


def mine(g: Group, member: str) -> set[int]:
    return set().union(*g.group().members[member].assigned.values())


def two_members() -> Group:
    """a joins (epoch 2, all 6 partitions: a new group is at epoch 1, KAFKA-20268), b joins
    (epoch 3); a revokes half and reaches epoch 3 keeping 3 partitions assigned at epoch 2; b
    gets the other 3 at epoch 3."""
    g = Group()
    g.hb("a", 0)
    g.hb("b", 0)
    g.hb("a", 2, topic_partitions=_owned(g, "a"))  # told to revoke
    g.hb("a", 2, topic_partitions=_owned(g, "a"))  # revoked: epoch 3
    g.hb("b", 3, topic_partitions=_owned(g, "b"))
    group = g.group()
    assert group.members["a"].member_epoch == 3 and group.members["a"].state is MemberState.STABLE
    assert group.members["b"].member_epoch == 3 and len(mine(g, "b")) == 3
    return g


def test_kip_1251_a_partition_gets_the_epoch_it_was_assigned_at_and_keeps_it() -> None:
    g = two_members()
    a, b = g.group().members["a"], g.group().members["b"]
    tid = g.id_of("t")
    assert {a.assignment_epoch(tid, p) for p in mine(g, "a")} == {2}
    assert {b.assignment_epoch(tid, p) for p in mine(g, "b")} == {3}
    assert a.assignment_epoch(tid, min(mine(g, "b"))) is None  # not a's


def test_kip_1251_older_epoch_accepted_for_a_partition_assigned_at_or_before_it() -> None:
    g = two_members()
    kept = sorted(mine(g, "a"))
    assert commit(g, "a", 2, kept) == dict.fromkeys(kept, E.none)
    assert commit(g, "a", 3, kept) == dict.fromkeys(kept, E.none)


def test_kip_1251_older_epoch_refused_for_a_partition_assigned_after_it() -> None:
    g = two_members()
    g.hb("b", -1)  # b leaves: epoch 4, a gets b's partitions at epoch 4
    g.hb("a", 3, topic_partitions=_owned(g, "a"))
    a = g.group().members["a"]
    assert a.member_epoch == 4 and len(mine(g, "a")) == 6
    tid = g.id_of("t")
    new = sorted(p for p in mine(g, "a") if a.assignment_epoch(tid, p) == 4)
    old = sorted(p for p in mine(g, "a") if a.assignment_epoch(tid, p) == 2)
    assert len(new) == 3 and len(old) == 3
    got = commit(g, "a", 3, new + old)
    assert got == {**dict.fromkeys(new, E.stale_member_epoch), **dict.fromkeys(old, E.none)}
    assert commit(g, "a", 4, new + old) == dict.fromkeys(new + old, E.none)


def test_kip_1251_older_epoch_refused_for_a_partition_the_member_does_not_hold() -> None:
    g = two_members()
    theirs = sorted(mine(g, "b"))
    assert commit(g, "a", 2, theirs) == dict.fromkeys(theirs, E.stale_member_epoch)
    assert commit(g, "a", 2, [0], topic="nope") == {0: E.stale_member_epoch}


def test_kip_1251_the_member_epoch_itself_accepts_any_partition_as_before() -> None:
    g = two_members()
    theirs = sorted(mine(g, "b"))
    assert commit(g, "a", 3, theirs) == dict.fromkeys(theirs, E.none)


def test_kip_1251_epoch_newer_than_the_member_epoch_is_stale() -> None:
    g = two_members()
    kept = sorted(mine(g, "a"))
    assert commit(g, "a", 4, kept) == dict.fromkeys(kept, E.stale_member_epoch)


def test_kip_1251_partitions_pending_revocation_keep_their_epoch_until_revoked() -> None:
    g = Group()
    g.hb("a", 0)
    g.hb("b", 0)
    g.hb("a", 2, topic_partitions=_owned(g, "a"))  # a: epoch 2, half pending revocation
    a = g.group().members["a"]
    assert a.state is MemberState.UNREVOKED_PARTITIONS
    pending = sorted(set().union(*a.pending_revocation.values()))
    assert commit(g, "a", 2, pending) == dict.fromkeys(pending, E.none)
    assert commit(g, "a", 1, pending) == dict.fromkeys(pending, E.stale_member_epoch)


def test_kip_1251_txn_offset_commit_uses_the_same_window_with_illegal_generation() -> None:
    g = two_members()
    g.hb("b", -1)
    g.hb("a", 3, topic_partitions=_owned(g, "a"))
    a, tid = g.group().members["a"], g.id_of("t")
    new = sorted(p for p in mine(g, "a") if a.assignment_epoch(tid, p) == 4)
    old = sorted(p for p in mine(g, "a") if a.assignment_epoch(tid, p) == 2)
    got = txn_commit(g, "a", 3, new + old)
    assert got == {**dict.fromkeys(new, E.illegal_generation), **dict.fromkeys(old, E.none)}
    assert txn_commit(g, "a", 5, old) == dict.fromkeys(old, E.illegal_generation)


# ---- the record --------------------------------------------------------------------------------

T1, T2 = uuid.UUID(int=1), uuid.UUID(int=2)


def test_kip_1251_record_epochs_are_tagged_field_0_of_each_topic_entry() -> None:
    value = ConsumerGroupCurrentMemberAssignmentValue(
        5, 4, 0, ((T1, (0, 2)),), ((T2, (1,)),), ((3, 5),), ((4,),)
    )
    data = encode_consumer_value(value)
    topic_entry = (
        T1.bytes
        + b"\x03" + (0).to_bytes(4, "big") + (2).to_bytes(4, "big")
        # one tagged field: tag 0, 9 bytes: a compact array of two int32
        + b"\x01\x00\x09\x03" + (3).to_bytes(4, "big") + (5).to_bytes(4, "big")
    )
    assert topic_entry in data
    key = ConsumerGroupCurrentMemberAssignmentKey("g", "m")
    assert decode_consumer_value(key, data) == value


def test_kip_1251_record_without_epochs_reads_as_none_and_older_bytes_are_unchanged() -> None:
    value = ConsumerGroupCurrentMemberAssignmentValue(5, 4, 0, ((T1, (0, 2)),), ())
    data = encode_consumer_value(value)
    assert T1.bytes + b"\x03" + (0).to_bytes(4, "big") + (2).to_bytes(4, "big") + b"\x00" in data
    decoded = decode_consumer_value(ConsumerGroupCurrentMemberAssignmentKey("g", "m"), data)
    assert decoded == value and decoded.assigned_epochs == ()


def test_kip_1251_record_written_for_a_member_carries_its_epochs() -> None:
    g = two_members()
    key, data = current_assignment_record("g", g.group().members["a"])
    assert data is not None
    decoded = decode_consumer_value(ConsumerGroupCurrentMemberAssignmentKey("g", "a"), data)
    assert decoded.assigned_epochs == ((2, 2, 2),)


def test_kip_1251_replayed_record_without_epochs_counts_as_assigned_at_its_member_epoch() -> None:
    """Kafka's fallback for records from before KIP-1251: the record's member epoch (at least
    0), so a commit with an older epoch is refused as before."""
    g = two_members()
    fresh = GroupShard(0, g.config, topics=g.topics)
    for key, value in g.log:
        fresh.replay(key, value, g.now)
    # a's current assignment rewritten as an older coordinator wrote it: no epochs
    a = g.group().members["a"]
    _, data = current_assignment_record("g", a)
    assert data is not None
    old = decode_consumer_value(ConsumerGroupCurrentMemberAssignmentKey("g", "a"), data)
    stripped = ConsumerGroupCurrentMemberAssignmentValue(
        old.member_epoch, old.previous_member_epoch, old.state, old.assigned_partitions, ()
    )
    fresh.replay(
        encode_consumer_key(ConsumerGroupCurrentMemberAssignmentKey("g", "a")),
        encode_consumer_value(stripped),
        g.now,
    )
    fresh.finish_loading(g.now)
    loaded = fresh.consumer_group("g")
    assert loaded is not None
    tid = g.id_of("t")
    assert {loaded.members["a"].assignment_epoch(tid, p) for p in mine(g, "a")} == {3}
    g.shard = fresh
    kept = sorted(mine(g, "a"))
    assert commit(g, "a", 2, kept) == dict.fromkeys(kept, E.stale_member_epoch)
    assert commit(g, "a", 3, kept) == dict.fromkeys(kept, E.none)


@pytest.mark.parametrize("seed", range(8))
def test_kip_1251_live_equals_replayed_covers_assignment_epochs(seed: int) -> None:
    """The replay property (test_consumer_group) compares whole members, the assignment
    epochs included; here also that the activity reaches epochs older than member epochs and
    that the replayed group answers an older-epoch commit as the live one does."""
    g = _random_activity(seed)
    fresh = GroupShard(0, g.config, topics=g.topics)
    for key, value in g.log:
        fresh.replay(key, value, g.now)
    fresh.finish_loading(g.now)
    assert _state(fresh) == _state(g.shard)
    live = g.shard.consumer_group("g")
    if live is None:
        return
    for m in live.members.values():
        if m.member_epoch <= 1:
            continue
        parts = sorted(p for t, ps in m.assigned.items() for p in ps if t == g.id_of("t"))
        if not parts:
            continue
        before = commit(g, m.member_id, m.member_epoch - 1, parts)
        assert commit(g, m.member_id, m.member_epoch - 1, parts, shard=fresh) == before


def test_kip_1251_random_activity_reaches_epochs_older_than_the_member_epoch() -> None:
    older = 0
    for seed in range(8):
        group = _random_activity(seed).shard.consumer_group("g")
        for m in [] if group is None else group.members.values():
            for epochs in m.assignment_epochs.values():
                older += sum(1 for e in epochs.values() if e < m.member_epoch)
    assert older > 0
