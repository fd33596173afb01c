"""Offset retention with a fake clock (BEHAVIOR.md J2/J3/J4, I6, behaviour #10): which offsets
expire, from which base time, and what happens to groups left without offsets."""

from __future__ import annotations

from kcoord.coordinator.classic.group import GroupState
from kcoord.coordinator.config import GroupConfig
from kcoord.coordinator.schemas import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    decode_key,
    decode_offset_commit_value,
    encode_group_metadata_value,
    encode_key,
    encode_offset_commit_value,
)
from kcoord.coordinator.shard import GroupShard
from tests.unit.test_group_harness import E, Harness, subscription

S = GroupState
RETENTION = 100_000
INTERVAL = 10_000
CFG = GroupConfig(offsets_retention_ms=RETENTION, offsets_retention_check_interval_ms=INTERVAL)


def _h(*, load: bool = True) -> Harness:
    return Harness(CFG, load=load)


def _tombstones(h: Harness, since: int) -> list[object]:
    return [decode_key(k) for k, v in h.records[since:] if v is None]


def _at(h: Harness, t: int) -> None:
    """Advance the fake clock to absolute time ``t``, firing timers on the way."""
    assert t >= h.now
    h.tick(t - h.now)


def _sessionless_consumer_group(h: Harness, *topics: str) -> str:
    """A Stable consumer group with one member subscribed to ``topics`` whose session is long
    enough never to expire in these tests."""
    (a,) = h.stable_group(
        1,
        protocols=[("range", subscription(*topics))],
        session=1_800_000,
        rebalance=60_000,
    )
    return a


# ---- the timer ------------------------------------------------------------------------------------


def test_J2_first_check_is_one_interval_after_loading_then_recurring() -> None:
    h = _h(load=False)
    h.now = 5_000
    h.absorb(h.shard.finish_loading(h.now))
    assert h.shard.next_deadline() == 5_000 + INTERVAL
    h.tick(INTERVAL)
    assert h.shard.next_deadline() == 5_000 + 2 * INTERVAL
    assert GroupConfig().offsets_retention_check_interval_ms == 600_000
    assert GroupConfig().offsets_retention_ms == 10080 * 60_000


def test_J2_unloaded_shard_has_no_retention_timer() -> None:
    h = _h()
    h.absorb(h.shard.unload(h.now))
    assert h.shard.next_deadline() is None


# ---- standalone groups: base = commit time -----------------------------------------------------------


def test_J4_standalone_offsets_expire_retention_after_their_own_commit() -> None:
    h = _h()
    h.now = 1_000
    h.commit({("t", 0): 1}, group="s")
    _at(h, 50_000)
    h.commit({("t", 1): 2}, group="s")
    _at(h, 100_000)
    assert h.offsets("s") == {("t", 0): 1, ("t", 1): 2}  # t-0 is 99 s old
    n = len(h.records)
    _at(h, 110_000)  # check at 110 s: t-0 is 109 s old, t-1 60 s
    assert h.offsets("s") == {("t", 1): 2}
    assert _tombstones(h, n) == [OffsetCommitKey("s", "t", 0)]
    n = len(h.records)
    _at(h, 150_000)  # t-1: 100 s old -> expires; the group has no offsets left: Dead
    assert h.offsets("s") == {}
    # generation 0: never had a group record, so no group tombstone (Kafka)
    assert _tombstones(h, n) == [OffsetCommitKey("s", "t", 1)]
    assert h.group("s") is None


def test_J4_recommitting_renews_a_standalone_offset() -> None:
    h = _h()
    h.commit({("t", 0): 1}, group="s")
    _at(h, 90_000)
    h.commit({("t", 0): 2}, group="s")
    _at(h, 180_000)
    assert h.offsets("s") == {("t", 0): 2}
    _at(h, 190_000)
    assert h.offsets("s") == {}


# ---- Empty groups with a protocol type: base = time the group became Empty (#10) ----------------------


def test_J3_10_empty_group_offsets_expire_retention_after_it_became_empty() -> None:
    h = _h()
    (a,) = h.stable_group(1, session=1_800_000)
    h.commit({("t", 0): 1}, generation=1, member=a)  # committed at ~3 s
    _at(h, 200_000)  # long past the commit time: a Stable member's offsets stay...
    assert h.offsets() == {("t", 0): 1}
    h.leave(a)  # ...and the group becomes Empty at 200 s
    became_empty = h.now
    assert h.group().state is S.EMPTY and h.group().state_timestamp_ms == became_empty
    _at(h, became_empty + RETENTION - 1)
    assert h.offsets() == {("t", 0): 1}  # 297 s after the commit, not yet after Empty
    n = len(h.records)
    _at(h, 310_000)  # first check at or after became_empty + RETENTION
    assert h.offsets() == {}
    # I6: the Empty group has no offsets left: Dead, and its record is tombstoned
    assert _tombstones(h, n) == [OffsetCommitKey("g", "t", 0), GroupMetadataKey("g")]
    assert h.group() is None


def test_10_commit_to_empty_group_does_not_renew_the_base() -> None:
    # Kafka: for an Empty group every offset shares the "became Empty" base, even one
    # committed later by a standalone (generation -1) commit.
    h = _h()
    (a,) = h.stable_group(1, session=1_800_000)
    h.commit({("t", 0): 1}, generation=1, member=a)
    h.leave(a)
    became_empty = h.now
    _at(h, became_empty + RETENTION - 5_000)
    h.commit({("t", 1): 2})
    assert h.offsets() == {("t", 0): 1, ("t", 1): 2}
    _at(h, became_empty + RETENTION + INTERVAL)
    assert h.offsets() == {} and h.group() is None


def test_I6_empty_group_without_offsets_becomes_dead_with_group_tombstone() -> None:
    h = _h()
    (a,) = h.stable_group(1, session=1_800_000)
    h.leave(a)
    assert h.group().generation == 2
    n = len(h.records)
    h.tick(INTERVAL)  # no retention wait: nothing to expire, no offsets at all
    assert h.group() is None
    assert _tombstones(h, n) == [GroupMetadataKey("g")]
    assert h.describe("g")[0].state == "Dead"


def test_J3_loaded_empty_group_uses_its_records_state_timestamp() -> None:
    h = _h(load=False)
    value = GroupMetadataValue("consumer", 4, None, None, 50_000, ())
    h.shard.replay(encode_key(GroupMetadataKey("g")), encode_group_metadata_value(value), 0)
    commit = OffsetCommitValue(1, "", 500_000, -1)  # a commit "after" it became Empty
    h.shard.replay(encode_key(OffsetCommitKey("g", "t", 0)), encode_offset_commit_value(commit), 0)
    h.now = 140_000
    h.absorb(h.shard.finish_loading(h.now))
    assert h.group().state_timestamp_ms == 50_000
    h.tick(INTERVAL)  # 150 s: 100 s since the group became Empty
    assert h.offsets() == {} and h.group() is None


def test_J3_loaded_group_without_state_timestamp_falls_back_to_commit_time() -> None:
    h = _h(load=False)
    value = GroupMetadataValue("consumer", 4, None, None, -1, ())  # v0/v1 record
    h.shard.replay(encode_key(GroupMetadataKey("g")), encode_group_metadata_value(value), 0)
    for p, ts in ((0, 10_000), (1, 60_000)):
        v = encode_offset_commit_value(OffsetCommitValue(p, "", ts, -1))
        h.shard.replay(encode_key(OffsetCommitKey("g", "t", p)), v, 0)
    h.absorb(h.shard.finish_loading(0))
    _at(h, 110_000)
    assert h.offsets() == {("t", 1): 1}
    _at(h, 160_000)
    assert h.offsets() == {} and h.group() is None


def test_J2_v1_value_with_expire_timestamp_expires_at_that_time() -> None:
    h = _h(load=False)
    # OffsetCommitValue v1: offset, metadata, commit timestamp, expire timestamp
    v1 = (
        b"\x00\x01"
        + (7).to_bytes(8, "big")
        + b"\x00\x00"
        + (0).to_bytes(8, "big")
        + (25_000).to_bytes(8, "big")
    )
    h.shard.replay(encode_key(OffsetCommitKey("s", "t", 0)), v1, 0)
    h.absorb(h.shard.finish_loading(0))
    _at(h, 20_000)
    assert h.offsets("s") == {("t", 0): 7}
    _at(h, 30_000)
    assert h.offsets("s") == {}


# ---- groups with members -----------------------------------------------------------------------------


def test_J2_subscribed_topics_never_expire_unsubscribed_ones_do_by_commit_time() -> None:
    h = _h()
    a = _sessionless_consumer_group(h, "t1")
    h.commit({("t1", 0): 1, ("old", 0): 2}, generation=1, member=a)
    committed_at = h.now
    _at(h, committed_at + RETENTION - 1)
    assert h.offsets() == {("t1", 0): 1, ("old", 0): 2}
    n = len(h.records)
    _at(h, committed_at + RETENTION + INTERVAL)
    assert h.offsets() == {("t1", 0): 1}
    assert _tombstones(h, n) == [OffsetCommitKey("g", "old", 0)]
    _at(h, committed_at + 15 * RETENTION)  # < the 1800 s session
    assert h.offsets() == {("t1", 0): 1} and h.group().state is S.STABLE


def test_J2_nothing_expires_while_subscriptions_are_unknown_or_rebalancing() -> None:
    h = _h()
    # unparseable metadata: subscriptions unknown
    (a,) = h.stable_group(1, group="u", session=1_800_000)
    h.commit({("t", 0): 1}, group="u", generation=1, member=a)
    # a group stuck in PreparingRebalance (its other member never rejoins within the test)
    b, c = h.stable_group(
        2,
        group="p",
        protocols=[("range", subscription("t1"))],
        session=1_800_000,
        rebalance=900_000,
    )
    h.commit({("zz", 0): 1}, group="p", generation=1, member=b)
    h.join(
        b,
        group="p",
        protocols=[("range", subscription("t1"))],
        session=1_800_000,
        rebalance=900_000,
    )
    assert h.group("p").state is S.PREPARING_REBALANCE
    # another protocol type
    (d,) = h.stable_group(1, group="c", protocol_type="connect", session=1_800_000)
    h.commit({("t", 0): 1}, group="c", generation=1, member=d)
    h.tick(3 * RETENTION)
    assert h.offsets("u") == {("t", 0): 1}
    assert h.offsets("p") == {("zz", 0): 1}
    assert h.offsets("c") == {("t", 0): 1}
    del c


def test_J2_retention_tombstones_replay_to_the_same_state() -> None:
    h = _h()
    a = _sessionless_consumer_group(h, "t1")
    h.commit({("t1", 0): 1, ("old", 0): 2}, generation=1, member=a)
    h.commit({("t", 0): 1}, group="s")
    (b,) = h.stable_group(1, group="e", session=1_800_000)
    h.commit({("t", 0): 5}, group="e", generation=1, member=b)
    h.leave(b, group="e")
    h.tick(RETENTION + INTERVAL)
    assert h.group("s") is None and h.group("e") is None
    fresh = GroupShard(0, CFG)
    for k, v in h.records:
        fresh.replay(k, v, h.now)
    fresh.finish_loading(h.now)
    assert {g.group_id for g in fresh.groups()} == {"g"}
    assert fresh.committed_offsets("g") == h.shard.committed_offsets("g") != {}


def test_J2_retention_removes_pending_member_only_groups() -> None:
    # An Empty group whose only trace is a pending member id (D3) has no offsets: it goes
    # Dead at the check and the late JoinGroup with that id is told UNKNOWN_MEMBER_ID.
    h = _h()
    j = h.join(require_known=True)
    pending = h.join_response(j).member_id
    assert h.join_response(j).error == E.member_id_required
    h.tick(INTERVAL)
    assert h.group() is None
    assert h.join_response(h.join(pending, require_known=True)).error == E.unknown_member_id


def test_J2_member_metadata_record_roundtrip_keeps_subscriptions() -> None:
    h = _h(load=False)
    mm = MemberMetadata("a", None, "c", "h", 60_000, 1_800_000, subscription("t1"), b"")
    value = GroupMetadataValue("consumer", 3, "range", "a", 0, (mm,))
    h.shard.replay(encode_key(GroupMetadataKey("g")), encode_group_metadata_value(value), 0)
    for topic in ("t1", "t2"):
        v = encode_offset_commit_value(OffsetCommitValue(1, "", 0, -1))
        h.shard.replay(encode_key(OffsetCommitKey("g", topic, 0)), v, 0)
    h.absorb(h.shard.finish_loading(0))
    assert h.group().subscribed_topics == frozenset({"t1"})
    h.heartbeat("a", 3)
    _at(h, RETENTION)
    assert h.offsets() == {("t1", 0): 1}


# ---- OffsetCommit v2-v4 RetentionTimeMs (Kafka's OffsetMetadataManager.expireTimestampMs) -----


def _offset_values(h: Harness, since: int = 0) -> list[bytes]:
    return [
        v
        for k, v in h.records[since:]
        if v is not None and isinstance(decode_key(k), OffsetCommitKey)
    ]


def test_retention_time_gives_commit_time_plus_retention_written_as_value_v1() -> None:
    """expireTimestampMs = commit time + RetentionTimeMs; offsetCommitValueVersion(true) = 1."""
    h = _h()
    n = len(h.records)
    assert h.commit({("t", 0): (7, "m")}, group="s", retention_ms=5_000) == {("t", 0): 0}
    (raw,) = _offset_values(h, n)
    assert raw[:2] == b"\x00\x01"
    decoded = decode_offset_commit_value(raw)
    assert decoded == OffsetCommitValue(7, "m", h.now, -1, h.now + 5_000)
    assert h.shard.committed_offsets("s")[("t", 0)] == decoded
    assert encode_offset_commit_value(decoded) == raw


def test_retention_time_minus_one_gives_no_expire_timestamp_and_value_v4() -> None:
    """DEFAULT_RETENTION_TIME (-1): no expire timestamp, offsetCommitValueVersion(false) = 4."""
    h = _h()
    n = len(h.records)
    h.commit({("t", 0): 7}, group="s", retention_ms=-1, leader_epoch=3)
    (raw,) = _offset_values(h, n)
    assert raw[:2] == b"\x00\x04"
    assert decode_offset_commit_value(raw) == OffsetCommitValue(7, "", h.now, 3)


def test_J2_explicit_expire_timestamp_replaces_the_retention_rule_shorter() -> None:
    """OffsetExpirationConditionImpl: an offset with an expire timestamp expires once now >=
    it, whatever offsets.retention.ms says."""
    h = _h()
    h.commit({("t", 0): 1}, group="s", retention_ms=15_000)
    h.commit({("t", 1): 2}, group="s")
    committed_at = h.now
    _at(h, committed_at + 10_000)  # the first check: not yet
    assert h.offsets("s") == {("t", 0): 1, ("t", 1): 2}
    n = len(h.records)
    _at(h, committed_at + 20_000)  # the second check, past commit + 15 s
    assert h.offsets("s") == {("t", 1): 2}
    assert _tombstones(h, n) == [OffsetCommitKey("s", "t", 0)]


def test_J2_explicit_expire_timestamp_replaces_the_retention_rule_longer() -> None:
    """An expire timestamp past offsets.retention.ms keeps the offset until that time."""
    h = _h()
    h.commit({("t", 0): 1}, group="s", retention_ms=3 * RETENTION)
    committed_at = h.now
    _at(h, committed_at + 2 * RETENTION)
    assert h.offsets("s") == {("t", 0): 1}
    _at(h, committed_at + 3 * RETENTION + INTERVAL)
    assert h.offsets("s") == {} and h.group("s") is None


def test_J2_subscribed_topic_keeps_its_offset_past_an_expire_timestamp() -> None:
    """cleanupExpiredOffsets asks isOffsetExpired only for topics the group is not subscribed to."""
    h = _h()
    a = _sessionless_consumer_group(h, "t1")
    h.commit({("t1", 0): 1, ("old", 0): 2}, generation=1, member=a, retention_ms=1_000)
    _at(h, h.now + 2 * INTERVAL)
    assert h.offsets() == {("t1", 0): 1}


def test_J2_expire_timestamps_replay_to_the_same_state_and_expire_alike() -> None:
    h = _h()
    h.commit({("t", 0): 1, ("t", 1): 2}, group="s", retention_ms=25_000)
    h.commit({("u", 0): 3}, group="s")
    committed_at = h.now
    fresh = Harness(CFG, load=False)
    fresh.now = h.now
    for k, v in h.records:
        fresh.shard.replay(k, v, h.now)
    fresh.absorb(fresh.shard.finish_loading(h.now))
    assert fresh.shard.committed_offsets("s") == h.shard.committed_offsets("s")
    _at(fresh, committed_at + 30_000)
    assert fresh.offsets("s") == {("u", 0): 3}
