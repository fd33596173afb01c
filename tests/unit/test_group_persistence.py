"""Records, loading and unloading, admin APIs and timers
(BEHAVIOR.md A, I1/I2/I5/I6, J, K3, ListGroups/DescribeGroups/DeleteGroups)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kcoord.coordinator.classic.group import GroupState
from kcoord.coordinator.config import GroupConfig
from kcoord.coordinator.consumer.member import ConsumerMember
from kcoord.coordinator.consumer.persistence import member_record
from kcoord.coordinator.messages import (
    DeletedTopic,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribedGroup,
    DescribedMember,
    HeartbeatRequest,
    HeartbeatResponse,
    ListedGroup,
    TopicsDeletedRequest,
)
from kcoord.coordinator.schemas import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    decode_key,
    encode_group_metadata_value,
    encode_key,
    encode_offset_commit_value,
)
from kcoord.coordinator.shard import GroupShard
from kcoord.coordinator.shard_views import ShardMode
from kcoord.protocol.javahash import partition_for
from tests.unit.test_group_harness import E, Harness, subscription

S = GroupState


def gm_record(group: str, value: GroupMetadataValue | None) -> tuple[bytes, bytes | None]:
    return encode_key(GroupMetadataKey(group)), (
        None if value is None else encode_group_metadata_value(value)
    )


def oc_record(group: str, topic: str, p: int, offset: int | None) -> tuple[bytes, bytes | None]:
    key = encode_key(OffsetCommitKey(group, topic, p))
    if offset is None:
        return key, None
    return key, encode_offset_commit_value(OffsetCommitValue(offset, "", 1000, 3))


def mm(mid: str, instance: str | None = None, session: int = 10_000) -> MemberMetadata:
    return MemberMetadata(
        mid, instance, "cli", "/h", 20_000, session, b"sub-" + mid.encode(), b"asg-" + mid.encode()
    )


# ---- A: ownership --------------------------------------------------------------------------


def test_A_groups_of_other_partitions_are_not_coordinator() -> None:
    part = partition_for("test-group")
    assert part == 12  # A2 vector, via protocol.javahash
    h = Harness(partition_for=lambda g: partition_for(g, 50))
    h.shard.partition = part
    assert h.join_response(h.join(group="group1")).error == E.not_coordinator  # partition 40
    assert h.heartbeat("m", 1, group="group1") == E.not_coordinator
    assert h.describe("group1")[0].error == E.not_coordinator
    assert h.delete("group1") == {"group1": E.not_coordinator}
    j = h.join(group="my-group")  # also partition 12
    assert not h.answered(j)


# ---- K3 loading -------------------------------------------------------------------------------


def test_K3_requests_while_loading() -> None:
    h = Harness(load=False)
    assert h.shard.loading
    assert h.join_response(h.join()).error == E.coordinator_load_in_progress
    assert h.heartbeat("m", 1) == E.none
    assert h.sync_response(h.sync("m", 1)).error == E.rebalance_in_progress
    assert h.leave("m").error == E.coordinator_load_in_progress
    assert h.list_groups().error == E.coordinator_load_in_progress
    d = h.describe("g")[0]
    assert (d.error, d.state) == (E.coordinator_load_in_progress, "")
    assert h.delete("g") == {"g": E.coordinator_load_in_progress}


def test_K3_I5_loading_builds_stable_and_empty_groups_newest_wins() -> None:
    shard = GroupShard(3, GroupConfig(), now_ms=0, new_member_id=lambda p: f"{p}-new")
    stable = GroupMetadataValue("consumer", 5, "range", "a", 777, (mm("a", "ia"), mm("b")))
    records = [
        gm_record("s", GroupMetadataValue("consumer", 4, "range", "x", 1, (mm("x"),))),
        gm_record("s", stable),  # newer wins
        gm_record("e", GroupMetadataValue("consumer", 2, None, None, 500, ())),
        gm_record("gone", GroupMetadataValue("consumer", 1, None, None, 1, ())),
        gm_record("gone", None),
        oc_record("e", "t", 0, 10),
        oc_record("e", "t", 0, 11),
        oc_record("e", "t", 1, 5),
        oc_record("e", "t", 1, None),
        oc_record("standalone", "t", 0, 42),
        # A KIP-848 member record without its group's epoch record: no group comes of it.
        member_record("g", ConsumerMember("m", subscribed_topic_names=("t",))),
        (b"\x00\x2a\x00\x01g", b"\x00\x00whatever"),  # unknown key version: skipped
    ]
    for k, v in records:
        shard.replay(k, v, 0)
    out = shard.finish_loading(100_000)
    assert out.records == [] and out.replies == []
    assert shard.mode is ShardMode.ACTIVE and shard.skipped_records == 1
    assert shard.consumer_group("g") is None
    s = shard.group("s")
    assert s is not None and s.state is S.STABLE
    assert (s.generation, s.protocol_type, s.protocol_name, s.leader_id) == (
        5,
        "consumer",
        "range",
        "a",
    )
    assert list(s.members) == ["a", "b"] and s.static_members == {"ia": "a"}
    assert s.get("a").protocols == (("range", b"sub-a"),) and s.get("a").assignment == b"asg-a"
    assert s.state_timestamp_ms == 777
    e = shard.group("e")
    assert e is not None and (e.state, e.generation, e.protocol_type) == (S.EMPTY, 2, "consumer")
    assert shard.group("gone") is None
    assert shard.committed_offsets("e") == {("t", 0): OffsetCommitValue(11, "", 1000, 3)}
    sa = shard.group("standalone")
    assert sa is not None and sa.state is S.EMPTY and sa.protocol_type is None
    # K3: heartbeats scheduled from load time
    assert shard.next_deadline() == 110_000


def test_K3_loaded_group_serves_members_and_expires_silent_ones() -> None:
    h = Harness(load=False)
    value = GroupMetadataValue("consumer", 5, "range", "a", 1, (mm("a"), mm("b")))
    h.shard.replay(*gm_record("g", value), 0)
    h.absorb(h.shard.finish_loading(0))
    assert h.heartbeat("a", 5) == E.none
    assert h.sync_response(h.sync("b", 5)).assignment == b"asg-b"
    h.tick(9_000)
    assert h.heartbeat("a", 5) == E.none
    h.tick(1_000)  # b's sync re-armed it at 0 -> expires at 10 s
    assert not h.group().has("b") and h.group().state is S.PREPARING_REBALANCE


def test_K3_loaded_v0_record_uses_session_timeout_as_rebalance_timeout() -> None:
    raw_v0 = (
        b"\x00\x00"
        + b"\x00\x08consumer"
        + b"\x00\x00\x00\x02"
        + b"\x00\x05range"
        + b"\x00\x01a"
        + b"\x00\x00\x00\x01"
        + b"\x00\x01a\x00\x01c\x00\x01h"
        + b"\x00\x00\x1b\x58"  # session 7000
        + b"\x00\x00\x00\x00"
        + b"\x00\x00\x00\x00"
    )
    shard = GroupShard(0)
    shard.replay(encode_key(GroupMetadataKey("g")), raw_v0, 0)
    shard.finish_loading(0)
    g = shard.group("g")
    assert (
        g is not None and g.get("a").rebalance_timeout_ms == 7000 and g.state_timestamp_ms is None
    )


def test_K3_over_capacity_loaded_group_rebalances() -> None:
    shard = GroupShard(0, GroupConfig(max_size=1))
    shard.replay(
        *gm_record("g", GroupMetadataValue("consumer", 1, "range", "a", 1, (mm("a"), mm("b")))), 0
    )
    shard.finish_loading(0)
    g = shard.group("g")
    assert g is not None and g.state is S.PREPARING_REBALANCE


def test_K3_replay_after_loading_is_rejected() -> None:
    h = Harness()
    with pytest.raises(RuntimeError):
        h.shard.replay(*gm_record("g", None), 0)


def test_K3_unload_answers_parked_requests_not_coordinator() -> None:
    h = Harness()
    x, y = h.stable_group(2, group="c")
    ja = h.join(group="p")  # parked in a new group
    jx = h.join(x, group="c")  # leader rejoin -> Preparing, x parked
    h.absorb(h.shard.unload(h.now))
    ra, rx = h.join_response(ja), h.join_response(jx)
    assert (ra.error, ra.member_id) == (E.not_coordinator, "c-3")
    assert (rx.error, rx.member_id) == (E.not_coordinator, x)
    assert h.shard.mode is ShardMode.UNLOADED and h.shard.next_deadline() is None
    assert h.join_response(h.join(group="p")).error == E.not_coordinator
    assert h.heartbeat(y, 1, group="c") == E.not_coordinator
    assert h.sync_response(h.sync(y, 1, group="c")).error == E.not_coordinator
    assert h.list_groups().groups == ()


# ---- ListGroups / DescribeGroups / DeleteGroups ------------------------------------------------


def test_list_groups_filters_case_insensitively() -> None:
    h = Harness()
    h.stable_group(1, group="s")
    h.join(group="p")
    h.join(group="e", protocol_type="")  # stays Empty, no protocol type
    all_groups = set(h.list_groups().groups)
    assert all_groups == {
        ListedGroup("s", "consumer", "Stable"),
        ListedGroup("p", "consumer", "PreparingRebalance"),
        ListedGroup("e", "", "Empty"),
    }
    assert h.list_groups(states=["STABLE", "empty"]).groups == (
        ListedGroup("s", "consumer", "Stable"),
        ListedGroup("e", "", "Empty"),
    )
    assert h.list_groups(types=["Classic"]).error == E.none
    assert len(h.list_groups(types=["Classic"]).groups) == 3
    assert h.list_groups(types=["consumer"]).groups == ()


def test_describe_groups() -> None:
    h = Harness()
    a, b = h.stable_group(2, instances=["ia", None])
    h.join(group="p")
    d = h.describe("g", "p", "unknown", "")
    assert d[0] == DescribedGroup(
        E.none,
        "g",
        "Stable",
        "consumer",
        "range",
        (
            DescribedMember(a, "ia", "c0", "/127.0.0.1", b"sub", f"assign-{a}".encode()),
            DescribedMember(b, None, "c1", "/127.0.0.1", b"sub", f"assign-{b}".encode()),
        ),
    )
    # not Stable: no protocol, no metadata/assignment
    assert d[1] == DescribedGroup(
        E.none,
        "p",
        "PreparingRebalance",
        "consumer",
        "",
        (DescribedMember("c-3", None, "c", "/127.0.0.1", b"", b""),),
    )
    # unknown (the empty id too): Dead, GROUP_ID_NOT_FOUND with Kafka's message (v6, KIP-1043)
    assert d[2] == DescribedGroup(
        E.group_id_not_found, "unknown", "Dead", "", "", (), "Group unknown not found."
    )
    assert d[3] == DescribedGroup(E.group_id_not_found, "", "Dead", "", "", (), "Group  not found.")


def test_delete_groups() -> None:
    h = Harness(load=False)
    h.shard.replay(*oc_record("e", "t", 0, 1), 0)
    h.shard.replay(*oc_record("e", "t", 1, 2), 0)
    h.absorb(h.shard.finish_loading(0))
    h.stable_group(1, group="s")
    n = len(h.records)
    res = h.delete("e", "s", "nope", "e")
    assert res == {"e": E.none, "s": E.non_empty_group, "nope": E.group_id_not_found}
    new = h.records[n:]
    keys = [decode_key(k) for k, _ in new]
    assert keys == [
        OffsetCommitKey("e", "t", 0),
        OffsetCommitKey("e", "t", 1),
        GroupMetadataKey("e"),
    ]
    assert all(v is None for _, v in new)
    assert h.shard.group("e") is None and h.shard.committed_offsets("e") == {}
    assert h.delete("e") == {"e": E.group_id_not_found}
    assert h.describe("e")[0].state == "Dead"


def test_delete_group_write_failure_reports_error() -> None:
    h = Harness()
    (a,) = h.stable_group(1)
    h.leave(a)
    out = h.shard.delete_groups("d", DeleteGroupsRequest(("g", "x")), h.now)
    again = h.shard.append_failed(out, E.not_leader_or_follower, h.now)
    resp = again.reply_for("d")
    assert isinstance(resp, DeleteGroupsResponse)
    assert dict(resp.results) == {"g": E.not_coordinator, "x": E.group_id_not_found}


def test_delete_group_write_failure_restores_the_group_and_its_offsets() -> None:
    """Issue 19: a DeleteGroups whose tombstones are not written leaves the group as it was,
    not half-gone (as Kafka's coordinator reverts its in-memory state on a failed write)."""
    h = Harness()
    (a,) = h.stable_group(1)
    assert h.commit({("t", 0): 5, ("t", 1): 7}, generation=1, member=a) == {
        ("t", 0): E.none,
        ("t", 1): E.none,
    }
    h.leave(a)
    g = h.group()
    generation, since = g.generation, g.state_timestamp_ms
    h.now += 100
    out = h.shard.delete_groups("d", DeleteGroupsRequest(("g",)), h.now)
    assert h.shard.group("g") is None
    h.absorb(h.shard.append_failed(out, E.kafka_storage_error, h.now))
    resp = h.reply("d")
    assert isinstance(resp, DeleteGroupsResponse)
    assert dict(resp.results) == {"g": E.not_coordinator}  # the mapped storage error
    g = h.group()
    assert g is not None and g.state is S.EMPTY
    assert (g.generation, g.state_timestamp_ms) == (generation, since)
    assert h.offsets() == {("t", 0): 5, ("t", 1): 7}
    assert h.describe("g")[0].state == "Empty"
    assert [lg.group_id for lg in h.list_groups().groups] == ["g"]
    # it can be deleted again, and this time it goes
    assert h.delete("g") == {"g": E.none}
    assert h.shard.group("g") is None and h.offsets() == {}


def test_delete_group_write_failure_keeps_a_group_created_since() -> None:
    h = Harness()
    h.commit({("t", 0): 5})  # a standalone consumer's group
    out = h.shard.delete_groups("d", DeleteGroupsRequest(("g",)), h.now)
    h.commit({("u", 0): 9})  # the id is used again before the failure is known
    h.absorb(h.shard.append_failed(out, E.kafka_storage_error, h.now))
    assert h.offsets() == {("u", 0): 9}  # the newer state wins; its records are later


# ---- I1/I2/I6 and the replay property ------------------------------------------------------------


def test_I1_group_record_written_only_at_leader_sync() -> None:
    h = Harness()
    ja, jb = h.join(), h.join()
    h.run_until(lambda: h.answered(ja))
    assert h.records == []
    a, b = h.join_response(ja).member_id, h.join_response(jb).member_id
    h.sync(b, 1)
    assert h.records == []
    h.sync(a, 1, [(a, b"x")])
    assert [decode_key(k) for k, _ in h.records] == [GroupMetadataKey("g")]


def _view(shard: GroupShard) -> dict[str, Any]:
    """The persisted part of every Stable group and every Empty group past generation 0."""
    out: dict[str, Any] = {}
    for g in shard.groups():
        if g.state is S.STABLE or (g.state is S.EMPTY and g.generation > 0):
            out[g.group_id] = (
                g.state,
                g.generation,
                g.protocol_type,
                g.protocol_name,
                g.leader_id,
                tuple(
                    (
                        m.member_id,
                        m.group_instance_id,
                        m.client_id,
                        m.client_host,
                        m.rebalance_timeout_ms,
                        m.session_timeout_ms,
                        m.metadata(g.protocol_name),
                        m.assignment,
                    )
                    for m in g.members.values()
                ),
                dict(g.static_members),
            )
    return out


_GROUPS = ["g1", "g2"]
_COMMIT_GROUPS = [*_GROUPS, "s1"]  # s1 only ever sees standalone commits
_TOPICS = ["t1", "t2", "t3"]
_TOPIC_IDS = {t: uuid.uuid5(uuid.NAMESPACE_URL, t) for t in _TOPICS}
# Member metadata: real consumer subscriptions (so retention and OffsetDelete see topics)
# and one that does not parse (subscriptions unknown).
_METAS = [subscription("t1"), subscription("t1", "t2"), b"junk"]
_PROPERTY_CONFIG = GroupConfig(
    initial_rebalance_delay_ms=3000,
    offsets_retention_ms=30_000,
    offsets_retention_check_interval_ms=10_000,
)
_op = st.one_of(
    st.tuples(
        st.just("join"),
        st.sampled_from(_GROUPS),
        st.sampled_from([None, None, "i1", "i2"]),
        st.sampled_from(_METAS),
        st.booleans(),
        st.sampled_from([6000, 9000]),
    ),
    st.tuples(
        st.just("rejoin"),
        st.sampled_from(_GROUPS),
        st.integers(0, 5),
        st.sampled_from(_METAS),
    ),
    st.tuples(st.just("join_pending"), st.sampled_from(_GROUPS), st.integers(0, 3)),
    st.tuples(st.just("sync"), st.sampled_from(_GROUPS), st.integers(0, 5)),
    st.tuples(st.just("heartbeat"), st.sampled_from(_GROUPS), st.integers(0, 5)),
    st.tuples(st.just("leave"), st.sampled_from(_GROUPS), st.integers(0, 5)),
    st.tuples(st.just("tick"), st.integers(0, 12_000)),
    st.tuples(st.just("delete"), st.sampled_from(_COMMIT_GROUPS)),
    st.tuples(
        st.just("commit"),
        st.sampled_from(_COMMIT_GROUPS),
        st.integers(0, 5),
        st.lists(st.tuples(st.sampled_from(_TOPICS), st.integers(0, 1)), min_size=1, max_size=3),
        st.integers(0, 1000),
        st.sampled_from(["member", "stale", "anonymous"]),
    ),
    st.tuples(st.just("topic_deleted"), st.sampled_from(_TOPICS), st.integers(1, 6)),
    st.tuples(
        st.just("offset_delete"),
        st.sampled_from(_COMMIT_GROUPS),
        st.lists(st.tuples(st.sampled_from(_TOPICS), st.integers(0, 1)), min_size=1, max_size=3),
    ),
)


def _pick(h: Harness, group: str, i: int) -> Any:
    g = h.group(group)
    if g is None or not g.members:
        return None
    return list(g.members.values())[i % len(g.members)]


def _apply(h: Harness, op: tuple[Any, ...]) -> None:
    kind = op[0]
    if kind == "join":
        _, group, inst, meta, req_known, session = op
        h.join(
            group=group,
            instance=inst,
            protocols=[("range", meta)],
            require_known=req_known,
            session=session,
            rebalance=8000,
            client_id=f"c{len(h.replies)}",
        )
    elif kind == "rejoin":
        m = _pick(h, op[1], op[2])
        if m is not None:
            h.join(
                m.member_id,
                group=op[1],
                instance=m.group_instance_id,
                protocols=[("range", op[3])],
                session=m.session_timeout_ms,
                rebalance=8000,
            )
    elif kind == "join_pending":
        g = h.group(op[1])
        if g is not None and g.pending_members:
            pid = list(g.pending_members)[op[2] % len(g.pending_members)]
            h.join(pid, group=op[1], require_known=True, rebalance=8000)
    elif kind == "sync":
        m = _pick(h, op[1], op[2])
        if m is not None:
            g = h.group(op[1])
            assignments = (
                [(x, f"{x}@{g.generation}".encode()) for x in g.members]
                if g.is_leader(m.member_id)
                else []
            )
            h.sync(
                m.member_id, g.generation, assignments, group=op[1], instance=m.group_instance_id
            )
    elif kind == "heartbeat":
        m = _pick(h, op[1], op[2])
        if m is not None:
            h.heartbeat(
                m.member_id, h.group(op[1]).generation, group=op[1], instance=m.group_instance_id
            )
    elif kind == "leave":
        m = _pick(h, op[1], op[2])
        if m is not None:
            h.leave(m.member_id, group=op[1])
    elif kind == "tick":
        h.tick(op[1])
    elif kind == "commit":
        _, group, i, tps, offset, mode = op
        offsets: dict[tuple[str, int], int | tuple[int, str | None]] = {tp: offset for tp in tps}
        m = _pick(h, group, i)
        g = h.group(group)
        if mode == "anonymous" or m is None:
            # odd offsets named by id (OffsetCommit v10): their records carry the topic ids;
            # even multiples of 3 come with a retention time (v2-v4: value v1, its expiry)
            h.commit(
                offsets,
                group=group,
                topic_ids=_TOPIC_IDS if offset % 2 else None,
                retention_ms=offset * 40 if offset % 6 == 0 else -1,
            )
        else:
            gen = g.generation if mode == "member" else g.generation - 1
            h.commit(
                offsets,
                group=group,
                generation=gen,
                member=m.member_id,
                instance=m.group_instance_id,
            )
    elif kind == "offset_delete":
        topics: dict[str, list[int]] = {}
        for topic, p in op[2]:
            topics.setdefault(topic, []).append(p)
        h.offset_delete(topics, group=op[1])
    elif kind == "topic_deleted":  # the runtime's slices of at most op[2] offsets each
        _, topic, budget = op
        ids, start = tuple(h.shard.offset_holders()), 0
        deleted = (DeletedTopic(topic, _TOPIC_IDS[topic], 2, h.now),)
        while start < len(ids):
            handle = h.handle("deleted")
            req = TopicsDeletedRequest(deleted, ids, start, budget)
            h.absorb(h.shard.topics_deleted(handle, req, h.now))
            start = h.replies[handle].next
    else:
        h.delete(op[1])


def _all_offsets(shard: GroupShard) -> dict[str, dict[tuple[str, int], OffsetCommitValue]]:
    out = {}
    for g in shard.groups():
        offsets = shard.committed_offsets(g.group_id)
        if offsets:
            out[g.group_id] = offsets
    return out


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_op, max_size=40))
def test_I1_I5_I6_J_replaying_emitted_records_rebuilds_the_persisted_state(
    ops: list[tuple[Any, ...]],
) -> None:
    """State is a function of the log: after joins, syncs, expiries, commits (some with a
    retention time), offset deletes, group deletes, deleted topics and offset retention,
    replaying every emitted record into a fresh
    shard yields the same persisted groups and the same committed offsets."""
    h = Harness(_PROPERTY_CONFIG)
    for op in ops:
        _apply(h, op)
    fresh = GroupShard(0, _PROPERTY_CONFIG, now_ms=h.now)
    for key, value in h.records:
        fresh.replay(key, value, h.now)
    fresh.finish_loading(h.now)
    live_view, fresh_view = _view(h.shard), _view(fresh)
    for gid, view in live_view.items():
        assert fresh_view.get(gid) == view, gid
    live_offsets = _all_offsets(h.shard)
    assert _all_offsets(fresh) == live_offsets
    for gid in live_offsets:
        assert fresh.group(gid) is not None, f"group {gid} with offsets was not rebuilt"
    for g in fresh.groups():
        live = h.shard.group(g.group_id)
        assert live is not None, f"deleted group {g.group_id} came back"
        assert g.generation <= live.generation
    # a loaded Stable group accepts its members' heartbeats at the loaded generation
    for gid, view in fresh_view.items():
        g = fresh.group(gid)
        assert g is not None
        for m in g.members.values():
            out = fresh.heartbeat(
                "hb", HeartbeatRequest(gid, g.generation, m.member_id, m.group_instance_id), h.now
            )
            assert out.replies == [("hb", HeartbeatResponse(E.none))]
        del view
    # liveness: every parked request is eventually answered (joins complete or expire, parked
    # syncs are released when the silent leader's session ends)
    h.tick(GroupConfig().new_member_join_timeout_ms + 60_000)
    assert h.unanswered() == []


# ---- timers ---------------------------------------------------------------------------------------


def test_timer_heap_stays_bounded_with_many_members_heartbeating() -> None:
    h = Harness()
    n = 10_000
    handles = [h.join(session=30_000, rebalance=60_000, client_id="c") for _ in range(n)]
    h.run_until(lambda: h.answered(handles[0]))
    ids = [h.join_response(x).member_id for x in handles]
    leader = ids[0]
    h.sync(leader, 1, [(m, b"") for m in ids])
    g = h.group()
    assert g.state is S.STABLE and len(g.members) == n
    for _ in range(5):
        h.tick(3_000)
        for i, m in enumerate(ids):
            out = h.shard.heartbeat(f"hb-{h.now}-{i}", _hb(m), h.now)
            assert out.replies[0][1].error == E.none  # type: ignore[union-attr]
    assert len(g.members) == n
    # stale entries are compacted away: the heap is a small multiple of the live timers
    assert h.shard.pending_timer_count() <= 3 * n + 1024
    last_round = h.now
    assert h.shard.next_deadline() == last_round + 30_000
    h.tick(30_000)  # nobody heartbeats any more: everyone expires, the group empties
    assert g.state is S.EMPTY and not g.members


def _hb(member_id: str) -> Any:
    return HeartbeatRequest("g", 1, member_id, None)


def test_next_deadline_skips_cancelled_timers() -> None:
    h = Harness()
    (a,) = h.stable_group(1, session=10_000)
    first = h.shard.next_deadline()
    h.tick(5_000)
    h.heartbeat(a, 1)
    assert first is not None and h.shard.next_deadline() == first + 5_000
    assert h.tick(5_000).replies == []  # the cancelled deadline fires nothing
    assert h.group().has(a)


def test_G3_timer_compaction_never_drops_a_live_session_timer() -> None:
    """Heartbeats only move a member's deadline; its queued entry re-queues itself there when
    it comes up, and compacting the heap while timers are queued never drops a live one.
    (Regression: compacting while arming used to discard the very timer being armed.)"""
    h = Harness()
    n = 1100  # above the heap size that triggers compaction
    handles = [h.join(session=30_000, rebalance=60_000) for _ in range(n)]
    h.run_until(lambda: h.answered(handles[0]))
    ids = [h.join_response(x).member_id for x in handles]
    h.sync(ids[0], 1, [(m, b"") for m in ids])
    g = h.group()
    timers = h.shard.timers
    compactions = timers.compactions
    timers._compact_at = len(timers.entries) // 2  # the first re-queue compacts
    for r in range(40):  # past the first deadlines: every entry re-queues itself once
        h.tick(1_000)
        for i, m in enumerate(ids):
            out = h.shard.heartbeat(f"hb-{r}-{i}", _hb(m), h.now)
            assert out.replies[0][1].error == E.none  # type: ignore[union-attr]
        tokens = {entry[1] for entry in timers.entries}
        assert all(g.members[m].heartbeat_token in tokens for m in ids)
    assert timers.compactions > compactions
    assert len(g.members) == n
    last_round = h.now
    assert h.shard.next_deadline() == last_round + 30_000
    h.tick(29_999)
    assert len(g.members) == n
    h.tick(1)
    assert g.state is S.EMPTY and not g.members
