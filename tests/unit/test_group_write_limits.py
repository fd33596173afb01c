"""Writes bounded by message.max.bytes (GroupConfig.max_batch_bytes), as in Kafka's coordinator:
a write that cannot fit in one batch fails whole, before anything changes, and the request is
answered with the error Kafka's group coordinator would give (UNKNOWN_SERVER_ERROR for commits,
group records and deletions). The shard turns such requests away from their sizes alone,
without building their records (J6, D1/D13, F3/C5, I1, I6)."""

from __future__ import annotations

import uuid

from kcoord.coordinator.classic.group import GroupState
from kcoord.coordinator.config import GroupConfig
from kcoord.coordinator.messages import (
    JoinGroupRequest,
    OffsetCommitPartition,
    OffsetCommitRequest,
    SyncGroupRequest,
    SyncGroupResponse,
)
from kcoord.coordinator.schemas import decode_group_metadata_value
from kcoord.coordinator.shard import GroupShard
from kcoord.coordinator.write_size import offset_commit_floor
from kcoord.protocol.record_encoding import encode_kv_batch
from tests.unit.test_group_harness import E, Harness
from tests.unit.test_group_sync_heartbeat import completing

S = GroupState
LIMIT = 2_000


def limited(limit: int = LIMIT, **kw: int) -> Harness:
    return Harness(GroupConfig(max_batch_bytes=limit, **kw))


def many(n: int, topic: str = "t", offset: int = 1, first: int = 0) -> dict[tuple[str, int], int]:
    return {(topic, p): offset for p in range(first, first + n)}


def commit_60(h: Harness, group: str, topic: str = "t") -> None:
    """60 offsets (~20 bytes of tombstone each), committed 30 at a time (~45 bytes a record)."""
    for first in (0, 30):
        assert set(h.commit(many(30, topic, first=first), group=group).values()) == {E.none}


# ---- J6: OffsetCommit ---------------------------------------------------------------------------


def test_J6_commit_that_cannot_fit_is_refused_on_every_partition_and_stores_nothing() -> None:
    h = limited()
    errors = h.commit(many(100), group="s")  # ~45 bytes a record: 4.5 KB > 2 KB
    assert set(errors.values()) == {E.unknown_server_error} and len(errors) == 100
    assert not h.last.records and not h.last.on_failure
    assert h.offsets("s") == {}
    assert h.group("s") is None  # the standalone group it would have created is not left behind
    assert h.shard.offsets_committed == 0


def test_J6_commit_exactly_at_the_limit_is_stored_one_byte_over_is_refused() -> None:
    req_topics = (("t", tuple(OffsetCommitPartition(p, 5, -1, "md") for p in range(30))),)
    floor = offset_commit_floor("s", req_topics, 4096)
    fits = Harness(GroupConfig(max_batch_bytes=floor))
    h_id = fits.handle("commit")
    out = fits.absorb(
        fits.shard.offset_commit(h_id, OffsetCommitRequest("s", -1, "", None, req_topics), 0)
    )
    assert len(out.records) == 30 and len(encode_kv_batch(out.records, 0)) == floor
    over = Harness(GroupConfig(max_batch_bytes=floor - 1))
    errors = over.commit({("t", p): (5, "md") for p in range(30)}, group="s")
    assert set(errors.values()) == {E.unknown_server_error}
    assert not over.last.records


def test_J6_oversized_commit_of_a_member_keeps_its_earlier_offsets_and_the_group() -> None:
    h = limited()
    a, _b = h.stable_group(2)
    assert h.commit({("t", 0): 7}, generation=1, member=a) == {("t", 0): E.none}
    errors = h.commit(many(100, offset=9), generation=1, member=a)
    assert set(errors.values()) == {E.unknown_server_error}
    assert h.offsets() == {("t", 0): 7}
    assert h.group().state is S.STABLE and h.group().generation == 1


def test_J6_validation_comes_before_the_size_check() -> None:
    h = limited()
    h.stable_group(2)
    errors = h.commit(many(100), generation=7, member="c0-1")
    assert set(errors.values()) == {E.illegal_generation}


def test_J6_partitions_with_metadata_too_large_count_for_nothing() -> None:
    # 100 partitions whose metadata is refused (OFFSET_METADATA_TOO_LARGE) write no record:
    # the commit's two good partitions fit.
    h = limited(offset_metadata_max_bytes=10)
    offsets: dict[tuple[str, int], int | tuple[int, str | None]] = {
        ("t", p): (1, "m" * 50) for p in range(100)
    }
    offsets[("u", 0)] = 3
    offsets[("u", 1)] = 4
    errors = h.commit(offsets, group="s")
    assert errors[("u", 0)] == errors[("u", 1)] == E.none
    assert {errors[("t", p)] for p in range(100)} == {E.offset_metadata_too_large}
    assert h.offsets("s") == {("u", 0): 3, ("u", 1): 4}


# ---- D1/D13: JoinGroup ---------------------------------------------------------------------------


def test_D13_join_whose_metadata_cannot_fit_in_a_group_record_is_refused_at_once() -> None:
    h = limited()
    timers = h.shard.pending_timer_count()
    for require_known in (False, True):  # refused before MEMBER_ID_REQUIRED too (D3/D4)
        j = h.join(protocols=[("range", b"x" * LIMIT)], require_known=require_known)
        r = h.join_response(j)
        assert (r.error, r.member_id, r.generation_id, r.leader, r.members) == (
            E.unknown_server_error,
            "",
            -1,
            "",
            (),
        )
        assert r.protocol_type is None and r.protocol_name is None
    assert h.group() is None  # nothing held: no group, no pending member, no timer
    assert h.shard.pending_timer_count() == timers
    assert not h.records


def test_D13_join_offering_one_protocol_that_fits_is_accepted() -> None:
    h = limited()
    j = h.join(protocols=[("huge", b"x" * 100_000), ("range", b"small")])
    h.run_until(lambda: h.answered(j))
    assert h.join_response(j).error == E.none


def test_D8_rejoin_with_metadata_that_cannot_fit_leaves_the_member_as_it_was() -> None:
    h = limited()
    a, b = h.stable_group(2)
    before = h.group().get(b).protocols
    j = h.join(b, protocols=[("range", b"y" * LIMIT)])
    assert h.join_response(j).error == E.unknown_server_error
    assert h.join_response(j).member_id == b
    g = h.group()
    assert g.state is S.STABLE and g.generation == 1 and g.get(b).protocols == before
    assert not g.get(b).awaiting_join


# ---- F3/C5/I1: the leader's SyncGroup -------------------------------------------------------------


def test_F3_C5_leader_assignment_that_cannot_fit_fails_every_parked_sync_and_rebalances() -> None:
    h = limited()
    a, b = completing(h, 2)
    sb = h.sync(b, 1)  # the follower is parked first (F4)
    sa = h.sync(a, 1, [(a, b"A"), (b, b"B" * LIMIT)])
    error = SyncGroupResponse(E.unknown_server_error, None, None, b"")
    assert h.sync_response(sa) == error and h.sync_response(sb) == error
    assert not h.last.records and not h.group_records()  # nothing built, nothing written
    g = h.group()
    assert g.state is S.PREPARING_REBALANCE and g.generation == 1
    assert all(m.assignment == b"" and not m.awaiting_sync for m in g.members.values())
    # Both rejoin, the next generation's assignment fits: Stable, and its record is written.
    ja, jb = h.join(a), h.join(b)
    assert h.join_response(ja).generation_id == h.join_response(jb).generation_id == 2
    h.sync(a, 2, [(a, b"A"), (b, b"B")])
    assert h.group().state is S.STABLE
    (record,) = h.group_records()
    assert record is not None and record.generation == 2


def test_F3_subscriptions_that_fit_alone_but_not_together_fail_the_sync() -> None:
    # Each member's 800-byte subscription fits a record of its own; three do not.
    h = limited()
    handles = [h.join(client_id=f"m{i}", protocols=[("range", b"s" * 800)]) for i in range(3)]
    h.run_until(lambda: all(h.answered(x) for x in handles))
    ids = [h.join_response(x).member_id for x in handles]
    leader = h.join_response(handles[0]).leader
    followers = [h.sync(m, 1) for m in ids if m != leader]
    sa = h.sync(leader, 1, [(m, b"") for m in ids])
    assert {h.sync_response(x).error for x in [sa, *followers]} == {E.unknown_server_error}
    assert h.group().state is S.PREPARING_REBALANCE
    assert not h.group_records()


# ---- I6: deletions are refused before anything is forgotten ----------------------------------------


def test_delete_groups_whose_tombstones_cannot_fit_deletes_nothing() -> None:
    h = limited()
    commit_60(h, "s1")
    commit_60(h, "s2")
    h.stable_group(1, group="busy")
    before = len(h.records)
    results = h.delete("s1", "s2", "busy", "unknown")
    # One atomic write for this shard's part of the request: it fails as a whole.
    assert results == dict.fromkeys(["s1", "s2", "busy", "unknown"], E.unknown_server_error)
    assert len(h.records) == before
    assert len(h.offsets("s1")) == len(h.offsets("s2")) == 60
    assert h.group("s1").state is S.EMPTY and h.group("s2").state is S.EMPTY
    assert h.delete("s1") == {"s1": E.none}  # one alone fits
    assert h.group("s1") is None and h.offsets("s1") == {}


def test_offset_delete_whose_tombstones_cannot_fit_deletes_nothing() -> None:
    h = limited()
    commit_60(h, "s")
    commit_60(h, "s", topic="u")
    before = len(h.records)
    r = h.offset_delete({"t": range(60), "u": range(60)}, group="s")
    assert r.error == E.unknown_server_error and r.topics == ()
    assert len(h.records) == before and len(h.offsets("s")) == 120
    r = h.offset_delete({"t": range(60)}, group="s")
    assert r.error == E.none and set(h.offsets("s")) == {("u", p) for p in range(60)}


# ---- B3: a member id always fits in a record ------------------------------------------------------


def test_B3_member_id_of_a_client_id_too_long_for_a_record_is_cut_short() -> None:
    shard = GroupShard(0, GroupConfig(initial_rebalance_delay_ms=0))
    shard.finish_loading(0)
    client_id = "é" * 16_383  # 32,766 UTF-8 bytes: the longest a request header carries
    req = JoinGroupRequest(
        "g", "", None, 10_000, 30_000, "consumer", (("range", b"m"),), client_id, "/h", False
    )
    shard.join_group("j", req, 0)
    reply = shard.advance(1).reply_for("j")
    assert reply is not None and reply.error == E.none
    member_id = reply.member_id
    assert 0x7FFF - 3 <= len(member_id.encode()) <= 0x7FFF
    assert client_id.startswith(member_id[:-37]) and member_id[-37] == "-"
    uuid.UUID(member_id[-36:])
    sync = SyncGroupRequest("g", 1, member_id, None, None, None, ((member_id, b"a"),))
    out = shard.sync_group("s", sync, 2)
    ((_key, value),) = out.records
    assert value is not None
    assert decode_group_metadata_value(value).members[0].member_id == member_id
