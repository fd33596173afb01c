"""KIP-932 share groups driven through GroupShard with a fake clock: joining, heartbeats,
leaving, session expiry, the share assignor with 1, 3 and 5 members on 4 partitions, group-type
conflicts in the one group-id space, max size, per-group overrides, and the records replayed into
a fresh shard. Each test is named after the rule it checks (Kafka 4.2's GroupMetadataManager
share-group behaviour)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from kcoord.coordinator.config import GroupConfig
from kcoord.coordinator.consumer.messages import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)
from kcoord.coordinator.consumer.topics import StaticTopics
from kcoord.coordinator.messages import (
    DeleteGroupsRequest,
    DescribeGroupsRequest,
    JoinGroupRequest,
    ListGroupsRequest,
    OffsetCommitRequest,
)
from kcoord.coordinator.schemas import decode_key
from kcoord.coordinator.shard import GroupShard
from kcoord.coordinator.share.assignor import ShareAssignmentMember, assign
from kcoord.coordinator.share.messages import (
    ShareGroupDescribeRequest,
    ShareGroupHeartbeatRequest,
    ShareGroupHeartbeatResponse,
)
from kcoord.coordinator.share.records import SHARE_KEY_TYPES
from kcoord.protocol.errors import ErrorCode

E = ErrorCode
SESSION = 6000


class Group:
    """A shard with share group "g" under test and a log of what it wrote."""

    def __init__(self, partitions: int = 4, overrides: Any = None, **config: Any) -> None:
        self.topics = StaticTopics({"t": partitions})
        self.config = GroupConfig(share_session_timeout_ms=SESSION, share_heartbeat_interval_ms=500, **config)
        kw = {} if overrides is None else {"overrides": overrides}
        self.shard = GroupShard(0, self.config, topics=self.topics, **kw)
        self.shard.finish_loading(0)
        self.now = 0
        self.log: list[tuple[bytes, bytes | None]] = []
        self.last: list[tuple[bytes, bytes | None]] = []

    def hb(self, member: str, epoch: int, **kw: Any) -> ShareGroupHeartbeatResponse:
        kw.setdefault("group_id", "g")
        if epoch == 0:
            kw.setdefault("subscribed_topic_names", ("t",))
        out = self.shard.share_group_heartbeat("h", ShareGroupHeartbeatRequest(member_id=member, member_epoch=epoch, **kw), self.now)
        self.last = out.records
        self.log += out.records
        reply = out.reply_for("h")
        assert isinstance(reply, ShareGroupHeartbeatResponse)
        return reply

    def beat_all(self) -> dict[str, set[int]]:
        """Every member heartbeats at its epoch; what each holds then."""
        out = {}
        for member_id, member in list(self.group().members.items()):
            assert self.hb(member_id, member.member_epoch).error == E.none
            out[member_id] = {p for ps in self.group().members[member_id].assigned.values() for p in ps}
        return out

    def advance(self, ms: int) -> None:
        self.now += ms
        out = self.shard.advance(self.now)
        self.last = out.records
        self.log += out.records

    def group(self) -> Any:
        group = self.shard.share_group("g")
        assert group is not None
        return group

    def kinds(self) -> list[tuple[int, bool]]:
        """(record type, tombstone?) of the last operation's records."""
        out = []
        for key, value in self.last:
            assert isinstance(decode_key(key), SHARE_KEY_TYPES)
            out.append((int.from_bytes(key[:2], "big"), value is None))
        return out


def parts(reply: ShareGroupHeartbeatResponse) -> set[int]:
    assert reply.assignment is not None
    return {p for _, ps in reply.assignment for p in ps}


# ---- joining, heartbeats, the write order --------------------------------------------------


def test_join_writes_10_11_15_13_12_14_and_gets_every_partition() -> None:
    g = Group()
    r = g.hb("a", 0)
    assert (r.error, r.member_id, r.member_epoch, r.heartbeat_interval_ms) == (E.none, "a", 1, 500)
    assert parts(r) == {0, 1, 2, 3}
    assert g.kinds() == [(10, False), (11, False), (15, False), (13, False), (12, False), (14, False)]
    assert (g.group().group_epoch, g.group().assignment_epoch, g.group().state) == (1, 1, "Stable")
    tid = g.topics.topic("t").topic_id  # type: ignore[union-attr]
    assert g.group().initialized[tid][1] == frozenset(range(4))


def test_steady_heartbeat_writes_nothing_and_sends_no_assignment() -> None:
    g = Group()
    g.hb("a", 0)
    r = g.hb("a", 1)
    assert (r.error, r.member_epoch, r.assignment) == (E.none, 1, None)
    assert g.last == []


def test_second_member_bumps_the_epoch_and_the_first_takes_its_new_target_at_once() -> None:
    g = Group()
    g.hb("a", 0)
    r = g.hb("b", 0)
    assert (r.member_epoch, len(parts(r))) == (2, 2)
    r = g.hb("a", 1)  # no revocation step: straight to epoch 2 with the new target
    assert (r.error, r.member_epoch, len(parts(r))) == (E.none, 2, 2)
    assert g.beat_all()["a"].isdisjoint(g.beat_all()["b"])


def test_member_epochs_ahead_or_stale_are_fenced_the_previous_one_passes() -> None:
    g = Group()
    g.hb("a", 0)
    g.hb("b", 0)
    g.hb("a", 1)  # a: epoch 2, previous 1
    assert g.hb("a", 3).error == E.fenced_member_epoch
    assert g.hb("a", 1).error == E.none  # the answer that moved it on may have been lost
    r = g.hb("b", 0)  # rejoining under its own id: takes up where it stands
    assert (r.error, r.member_epoch) == (E.none, 2)


def test_unknown_member_and_unknown_group() -> None:
    g = Group()
    assert g.hb("a", 3).error == E.group_id_not_found
    g.hb("a", 0)
    r = g.hb("x", 1)
    assert (r.error, r.error_message) == (E.unknown_member_id, "Member x is not a member of group g.")


def test_request_checks_in_kafkas_words() -> None:
    g = Group()
    assert (g.hb("a", 0, group_id="").error_message) == "GroupId can't be empty."
    assert g.hb("", 0).error_message == "MemberId can't be empty."
    assert g.hb("a", 0, rack_id="").error_message == "RackId can't be empty."
    assert g.hb("a", 0, subscribed_topic_names=()).error_message == "SubscribedTopicNames must be set in first request."
    r = g.hb("a", -2)
    assert (r.error, r.error_message) == (E.invalid_request, "MemberEpoch is invalid.")
    assert g.shard.share_group("g") is None


# ---- leaving and expiry ----------------------------------------------------------------------


def test_leave_with_epoch_minus_one_tombstones_14_13_10_bumps_11_and_is_reported() -> None:
    g = Group()
    g.hb("a", 0)
    g.hb("b", 0)
    assert len(parts(g.hb("a", 1))) == 2
    r = g.hb("b", -1)
    assert (r.error, r.member_id, r.member_epoch) == (E.none, "b", -1)
    assert g.kinds() == [(14, True), (13, True), (10, True), (11, False)]
    assert g.shard.take_share_members_left() == [("g", "b")]
    assert g.shard.take_share_members_left() == []
    r = g.hb("a", 2)
    assert (r.member_epoch, parts(r)) == (3, {0, 1, 2, 3})


def test_the_last_member_leaving_leaves_an_empty_group() -> None:
    g = Group()
    g.hb("a", 0)
    g.hb("a", -1)
    assert (g.group().state, g.group().group_epoch) == ("Empty", 2)


def test_session_expiry_fences_a_silent_member_only() -> None:
    g = Group()
    g.hb("a", 0)
    g.hb("b", 0)
    for _ in range(3):
        g.advance(SESSION // 2)
        g.hb("a", g.group().members["a"].member_epoch)
    assert set(g.group().members) == {"a"}
    assert g.shard.take_share_members_left() == [("g", "b")]
    g.advance(SESSION)
    assert g.group().state == "Empty"


def test_group_overrides_set_the_session_timeout_and_heartbeat_interval() -> None:
    g = Group(overrides=lambda gid: {"share.session.timeout.ms": "60000", "share.heartbeat.interval.ms": "700"})
    assert g.hb("a", 0).heartbeat_interval_ms == 700
    g.advance(SESSION * 2)
    assert "a" in g.group().members
    g.advance(60_000)
    assert "a" not in g.group().members


def test_max_size_refuses_a_new_member_not_an_existing_one() -> None:
    g = Group(share_max_size=2)
    g.hb("a", 0)
    g.hb("b", 0)
    r = g.hb("c", 0)
    assert (r.error, r.error_message) == (
        E.group_max_size_reached,
        "The share group has reached its maximum capacity of 2 members.",
    )
    assert g.hb("a", g.group().members["a"].member_epoch).error == E.none


# ---- the share assignor -------------------------------------------------------------------


def _converged(n: int) -> dict[str, set[int]]:
    g = Group()
    for i in range(n):
        g.hb(f"m{i}", 0)
    g.beat_all()
    return g.beat_all()


def test_one_member_gets_all_four_partitions() -> None:
    assert _converged(1) == {"m0": {0, 1, 2, 3}}


def test_three_members_on_four_partitions_each_partition_goes_to_one_member() -> None:
    held = _converged(3)
    assert sorted(len(p) for p in held.values()) == [1, 1, 2]
    counts = Counter(p for ps in held.values() for p in ps)
    assert counts == {p: 1 for p in range(4)}


def test_five_members_on_four_partitions_share_each_partition_between_two() -> None:
    held = _converged(5)
    assert all(1 <= len(p) <= 2 for p in held.values())
    counts = Counter(p for ps in held.values() for p in ps)
    assert counts == {p: 2 for p in range(4)}


def test_assignor_is_sticky_when_a_member_joins() -> None:
    t = StaticTopics({"t": 4}).topic("t")
    assert t is not None
    old = {"a": frozenset({0, 1}), "b": frozenset({2, 3})}
    members = [ShareAssignmentMember(m, frozenset({t.topic_id}), {t.topic_id: old[m]}) for m in old]
    members.append(ShareAssignmentMember("c", frozenset({t.topic_id}), {}))
    result = assign(members, {t.topic_id: 4})
    # counts 2, 1, 1 in member order: a keeps both, b keeps one, c takes what b gave up
    assert result["a"][t.topic_id] == old["a"] and result["b"][t.topic_id] < old["b"]
    assert result["c"][t.topic_id] == old["b"] - result["b"][t.topic_id]


def test_assignor_heterogeneous_subscriptions_per_topic() -> None:
    topics = StaticTopics({"x": 2, "y": 2})
    x, y = topics.topic("x"), topics.topic("y")
    assert x is not None and y is not None
    members = [
        ShareAssignmentMember("a", frozenset({x.topic_id}), {}),
        ShareAssignmentMember("b", frozenset({x.topic_id, y.topic_id}), {}),
    ]
    result = assign(members, {x.topic_id: 2, y.topic_id: 2})
    assert result["a"] == {x.topic_id: frozenset({0, 1}) - result["b"].get(x.topic_id, frozenset())}
    assert result["b"][y.topic_id] == frozenset({0, 1})


# ---- one group-id space ----------------------------------------------------------------------


def _join(g: Group, group_id: str = "g") -> Any:
    req = JoinGroupRequest(
        group_id=group_id, member_id="", group_instance_id=None, session_timeout_ms=10_000,
        rebalance_timeout_ms=10_000, protocol_type="consumer", protocols=(("range", b""),),
        client_id="c", client_host="/h", require_known_member_id=False,
    )  # fmt: skip
    return g.shard.join_group("j", req, g.now).reply_for("j")


def test_joingroup_for_a_share_group_is_inconsistent_group_protocol() -> None:
    g = Group()
    g.hb("a", 0)
    r = _join(g)
    assert (r.error, r.member_id) == (E.inconsistent_group_protocol, "")


def test_consumer_heartbeat_for_a_share_group_and_share_heartbeat_for_a_consumer_group() -> None:
    g = Group()
    g.hb("a", 0)
    req = ConsumerGroupHeartbeatRequest(
        group_id="g", member_id="c", member_epoch=0, rebalance_timeout_ms=5000,
        subscribed_topic_names=("t",), topic_partitions=(),
    )  # fmt: skip
    r = g.shard.consumer_group_heartbeat("c", req, 0).reply_for("c")
    assert isinstance(r, ConsumerGroupHeartbeatResponse)
    assert (r.error, r.error_message) == (E.group_id_not_found, "Group g is not a consumer group.")
    req = ConsumerGroupHeartbeatRequest(
        group_id="cg", member_id="c", member_epoch=0, rebalance_timeout_ms=5000,
        subscribed_topic_names=("t",), topic_partitions=(),
    )  # fmt: skip
    g.shard.consumer_group_heartbeat("c", req, 0)
    r2 = g.hb("a", 0, group_id="cg")
    assert (r2.error, r2.error_message) == (E.group_id_not_found, "Group cg is not a share group.")
    commit = OffsetCommitRequest("classic", -1, "", None, (("t", ((0, 5, -1, ""),)),))
    g.shard.offset_commit("o", commit, 0)  # a standalone committer's (classic) group
    assert g.hb("a", 0, group_id="classic").error_message == "Group classic is not a share group."



def test_offset_commit_to_a_share_group_is_group_id_not_found() -> None:
    g = Group()
    g.hb("a", 0)
    out = g.shard.offset_commit("c", OffsetCommitRequest("g", -1, "", None, (("t", ((0, 5, -1, ""),)),)), 0)
    assert out.reply_for("c").topics == (("t", ((0, E.group_id_not_found),)),)  # type: ignore[union-attr]


def test_list_describe_and_delete_see_share_groups() -> None:
    g = Group()
    g.hb("a", 0)
    listed = g.shard.list_groups("l", ListGroupsRequest(), 0).reply_for("l").groups  # type: ignore[union-attr]
    assert [(x.group_id, x.protocol_type, x.state, x.group_type) for x in listed] == [("g", "share", "Stable", "share")]
    by_type = g.shard.list_groups("l", ListGroupsRequest(types_filter=frozenset({"consumer"})), 0)
    assert by_type.reply_for("l").groups == ()  # type: ignore[union-attr]
    described = g.shard.describe_groups("d", DescribeGroupsRequest(("g",)), 0).reply_for("d").groups[0]  # type: ignore[union-attr]
    assert described.error == E.group_id_not_found
    d = g.shard.share_group_describe("s", ShareGroupDescribeRequest(("g", "nope")), 0).reply_for("s").groups  # type: ignore[union-attr]
    assert (d[0].error, d[0].state, d[0].assignor_name, d[0].members[0].member_id) == (E.none, "Stable", "simple", "a")
    assert d[0].members[0].assignment[0].topic_name == "t"
    assert (d[1].error, d[1].error_message) == (E.group_id_not_found, "Group nope not found.")
    out = g.shard.delete_groups("x", DeleteGroupsRequest(("g",)), 0)
    assert out.reply_for("x").results[0].error == E.non_empty_group  # type: ignore[union-attr]
    g.hb("a", -1)
    out = g.shard.delete_groups("x", DeleteGroupsRequest(("g",)), 0)
    assert out.reply_for("x").results[0].error == E.none  # type: ignore[union-attr]
    kinds = [int.from_bytes(k[:2], "big") for k, v in out.records if v is None]
    assert kinds[-1] == 11 and {12, 9, 15} <= set(kinds)
    assert g.shard.share_group("g") is None


# ---- the log ---------------------------------------------------------------------------------


def test_records_replayed_into_a_fresh_shard_give_the_same_groups() -> None:
    g = Group()
    for m in ("a", "b", "c"):
        g.hb(m, 0)
    g.beat_all()
    g.hb("c", -1)
    g.beat_all()
    fresh = GroupShard(0, g.config, topics=g.topics)
    for key, value in g.log:
        fresh.replay(key, value, 0)
    fresh.finish_loading(g.now)
    a, b = g.group(), fresh.share_group("g")
    assert b is not None
    assert (a.group_epoch, a.assignment_epoch, a.members, a.target, a.initialized) == (
        b.group_epoch, b.assignment_epoch, b.members, b.target, b.initialized,
    )  # fmt: skip
    r = ShareGroupHeartbeatRequest("g", "a", a.members["a"].member_epoch)
    assert fresh.share_group_heartbeat("h", r, 0).reply_for("h").error == E.none  # type: ignore[union-attr]


def test_a_failed_write_puts_the_group_back() -> None:
    g = Group()
    g.hb("a", 0)
    out = g.shard.share_group_heartbeat("h", ShareGroupHeartbeatRequest("g", "b", 0, subscribed_topic_names=("t",)), 0)
    replies = g.shard.append_failed(out, E.not_leader_or_follower, 0)
    assert replies.reply_for("h").error == E.not_coordinator  # type: ignore[union-attr]
    assert set(g.group().members) == {"a"} and g.group().group_epoch == 1
