"""KIP-848 consumer groups driven through GroupShard with a fake clock: epochs, reconciliation,
fencing, static members, regex subscriptions, group-type conversion, offsets, persistence.
Each test is named after the rule it checks (Kafka 4.x's GroupMetadataManager behaviour)."""

from __future__ import annotations

import random
from typing import Any

import pytest

from kcoord.coordinator.config import GroupConfig, GroupOverrides, no_overrides
from kcoord.coordinator.consumer.member import MemberState
from kcoord.coordinator.consumer.messages import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)
from kcoord.coordinator.consumer.records import ConsumerRecordKey
from kcoord.coordinator.consumer.regex_refresh import resolve_now
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
from kcoord.protocol.errors import ErrorCode

E = ErrorCode
SESSION = 6000
REBALANCE = 5000


class Group:
    """A shard with one consumer group under test and a log of what it wrote."""

    def __init__(
        self,
        topics: dict[str, int] | None = None,
        overrides: GroupOverrides = no_overrides,
        **config: Any,
    ) -> None:
        self.topics = StaticTopics(topics if topics is not None else {"t": 6})
        self.config = GroupConfig(
            consumer_session_timeout_ms=SESSION, consumer_heartbeat_interval_ms=500, **config
        )
        self.shard = GroupShard(0, self.config, topics=self.topics, overrides=overrides)
        self.shard.finish_loading(0)
        self.now = 0
        self.log: list[tuple[bytes, bytes | None]] = []
        self.last_records: list[tuple[bytes, bytes | None]] = []

    def id_of(self, topic: str) -> Any:
        info = self.topics.topic(topic)
        assert info is not None
        return info.topic_id

    def hb(self, member: str, epoch: int, **kw: Any) -> ConsumerGroupHeartbeatResponse:
        kw.setdefault("group_id", "g")
        if epoch == 0:
            kw.setdefault("rebalance_timeout_ms", REBALANCE)
            kw.setdefault("subscribed_topic_names", ("t",))
            kw.setdefault("topic_partitions", ())
        req = ConsumerGroupHeartbeatRequest(member_id=member, member_epoch=epoch, **kw)
        out = self.shard.consumer_group_heartbeat("h", req, self.now)
        self.last_records = out.records
        self.log += out.records
        reply = out.reply_for("h")
        assert isinstance(reply, ConsumerGroupHeartbeatResponse)
        return reply

    def owned(self, reply: ConsumerGroupHeartbeatResponse) -> Any:
        assert reply.assignment is not None
        return reply.assignment

    def resolve(self) -> int:
        """Resolve the regexes the shard asked for, as the broker's runtime does later (its
        own operation); how many resolutions there were."""
        requests = self.shard.take_regex_requests()
        self.last_records = []
        for request in requests:
            out = self.shard.regexes_resolved(resolve_now(request, self.topics, self.now), self.now)
            self.last_records += out.records
            self.log += out.records
        return len(requests)

    def advance(self, ms: int) -> None:
        self.now += ms
        out = self.shard.advance(self.now)
        self.last_records = out.records
        self.log += out.records

    def group(self) -> Any:
        group = self.shard.consumer_group("g")
        assert group is not None
        return group

    def kinds(self) -> list[tuple[int, bool]]:
        """(record type, tombstone?) of the last operation's records."""
        out = []
        for key, value in self.last_records:
            decoded = decode_key(key)
            assert isinstance(decoded, ConsumerRecordKey)
            out.append((_TYPE[type(decoded).__name__], value is None))
        return out


_TYPE = {
    "ConsumerGroupMetadataKey": 3,
    "ConsumerGroupPartitionMetadataKey": 4,
    "ConsumerGroupMemberMetadataKey": 5,
    "ConsumerGroupTargetAssignmentMetadataKey": 6,
    "ConsumerGroupTargetAssignmentMemberKey": 7,
    "ConsumerGroupCurrentMemberAssignmentKey": 8,
    "ConsumerGroupRegularExpressionKey": 16,
}


def partitions(reply: ConsumerGroupHeartbeatResponse) -> set[int]:
    assert reply.assignment is not None
    return {p for _, ps in reply.assignment for p in ps}


# ---- joining, epochs and the write order ----------------------------------------------------


def test_join_bumps_the_group_epoch_and_writes_5_3_7_6_8() -> None:
    g = Group()
    r = g.hb("a", 0)
    # A new group is at epoch 1 with an empty target (KAFKA-20268): the join makes it 2.
    assert (r.error, r.member_id, r.member_epoch) == (E.none, "a", 2)
    assert partitions(r) == set(range(6))
    assert r.heartbeat_interval_ms == 500
    assert g.kinds() == [(5, False), (3, False), (7, False), (6, False), (8, False)]
    assert (g.group().group_epoch, g.group().assignment_epoch, g.group().state) == (2, 2, "Stable")


def test_v0_join_without_member_id_gets_one_from_the_coordinator() -> None:
    g = Group()
    r = g.hb("", 0, version=0)
    assert r.error == E.none and r.member_id


def test_identical_heartbeat_writes_nothing_and_sends_no_assignment() -> None:
    g = Group()
    r = g.hb("a", 0)
    again = g.hb("a", 2, topic_partitions=g.owned(r))
    assert again.error == E.none and again.member_epoch == 2
    assert again.assignment is None and g.last_records == []
    full = g.hb("a", 2, rebalance_timeout_ms=REBALANCE, subscribed_topic_names=("t",), topic_partitions=g.owned(r))
    assert partitions(full) == set(range(6))  # a full request gets the assignment
    assert g.last_records == []


def test_new_member_gets_partitions_only_once_the_old_owner_revoked_them() -> None:
    g = Group()
    ra = g.hb("a", 0)
    rb = g.hb("b", 0)
    assert rb.member_epoch == 3 and partitions(rb) == set()  # all still held by a
    assert g.group().members["b"].state is MemberState.UNRELEASED_PARTITIONS
    # a still owns everything: it is asked to revoke, at its current epoch.
    ra = g.hb("a", 2, topic_partitions=g.owned(ra))
    assert ra.member_epoch == 2 and len(partitions(ra)) == 3
    assert g.group().members["a"].state is MemberState.UNREVOKED_PARTITIONS
    assert g.group().state == "Reconciling"
    # Until a revokes, b gets nothing more.
    rb = g.hb("b", 3, topic_partitions=())
    assert rb.assignment is None
    ra = g.hb("a", 2, topic_partitions=g.owned(ra))  # revoked
    assert ra.member_epoch == 3
    rb = g.hb("b", 3, topic_partitions=())
    assert ra.assignment is None  # unchanged: no assignment sent
    assert partitions(rb) == set(range(6)) - _assigned(g, "a") and len(partitions(rb)) == 3
    assert g.group().state == "Stable"


def test_a_member_that_keeps_its_partitions_never_loses_them_on_a_join() -> None:
    g = Group({"t": 12})
    for m in ("a", "b"):
        g.hb(m, 0)
    for _ in range(3):
        for m in ("a", "b"):
            g.hb(m, g.group().members[m].member_epoch, topic_partitions=_owned(g, m))
    before = {m: _assigned(g, m) for m in ("a", "b")}
    g.hb("c", 0)
    for m in ("a", "b"):
        reply = g.hb(m, g.group().members[m].member_epoch, topic_partitions=_owned(g, m))
        kept = partitions(reply) if reply.assignment is not None else _assigned(g, m)
        assert kept <= before[m] and len(kept) == 4


def _owned(g: Group, member: str) -> Any:
    """What a well-behaved member reports owning: its assignment, having revoked the rest."""
    m = g.group().members[member]
    return tuple((t, tuple(sorted(ps))) for t, ps in m.assigned.items())


def _assigned(g: Group, member: str) -> set[int]:
    return {p for ps in g.group().members[member].assigned.values() for p in ps}


def test_lost_response_previous_epoch_with_owned_subset_is_accepted() -> None:
    g = Group()
    ra = g.hb("a", 0)
    g.hb("b", 0)
    ra = g.hb("a", 2, topic_partitions=g.owned(ra))
    ra = g.hb("a", 2, topic_partitions=g.owned(ra))  # revoked: now epoch 3
    assert ra.member_epoch == 3
    again = g.hb("a", 2, topic_partitions=_owned(g, "a"))  # the epoch-3 answer was lost
    assert again.error == E.none and again.member_epoch == 3


def test_lower_epoch_owning_more_than_assigned_is_fenced() -> None:
    g = Group()
    ra = g.hb("a", 0)
    g.hb("b", 0)
    full = g.owned(ra)
    ra = g.hb("a", 2, topic_partitions=full)
    ra = g.hb("a", 2, topic_partitions=g.owned(ra))
    assert g.hb("a", 2, topic_partitions=full).error == E.fenced_member_epoch


def test_greater_epoch_is_fenced_and_unknown_member_is_refused() -> None:
    g = Group()
    g.hb("a", 0)
    assert g.hb("a", 7, topic_partitions=()).error == E.fenced_member_epoch
    assert g.hb("zz", 1, topic_partitions=()).error == E.unknown_member_id
    assert g.hb("a", 1, group_id="nope").error == E.group_id_not_found


@pytest.mark.parametrize(
    ("member", "epoch", "fields", "error"),
    [
        ("", 0, {}, E.invalid_request),  # v1: the client makes the member id
        ("", 3, {"version": 0}, E.invalid_request),
        ("a", 0, {"rebalance_timeout_ms": -1}, E.invalid_request),
        ("a", 0, {"topic_partitions": None}, E.invalid_request),
        ("a", 0, {"subscribed_topic_names": ()}, E.invalid_request),
        ("a", -2, {}, E.invalid_request),  # a static leave needs the instance id
        ("a", -3, {}, E.invalid_request),
        ("a", 0, {"instance_id": ""}, E.invalid_request),
        ("a", 0, {"server_assignor": "sticky"}, E.unsupported_assignor),
        ("a", 0, {"subscribed_topic_regex": "(unclosed"}, E.invalid_regular_expression),
        ("a", 0, {"group_id": ""}, E.invalid_request),
    ],
)
def test_request_validation_errors(member: str, epoch: int, fields: dict[str, Any], error: int) -> None:
    g = Group()
    r = g.hb(member, epoch, **fields)
    assert r.error == error and r.error_message
    assert g.shard.consumer_group("g") is None


def test_group_max_size_refuses_new_members_only() -> None:
    g = Group(consumer_max_size=1)
    ra = g.hb("a", 0)
    assert g.hb("b", 0).error == E.group_max_size_reached
    assert g.hb("a", 2, topic_partitions=g.owned(ra)).error == E.none


# ---- leaving and fencing ---------------------------------------------------------------------


def test_leave_writes_tombstones_8_7_5_then_bumps_3() -> None:
    g = Group()
    g.hb("a", 0)
    g.hb("b", 0)
    r = g.hb("b", -1)
    assert (r.error, r.member_id, r.member_epoch) == (E.none, "b", -1)
    assert g.kinds() == [(8, True), (7, True), (5, True), (3, False)]
    assert set(g.group().members) == {"a"} and g.group().group_epoch == 4


def test_last_member_leaving_leaves_an_empty_group() -> None:
    g = Group()
    g.hb("a", 0)
    g.hb("a", -1)
    assert g.group().state == "Empty" and g.group().group_epoch == 3


def test_session_expiry_fences_the_member_and_its_partitions_move() -> None:
    g = Group()
    ra = g.hb("a", 0)
    g.hb("b", 0)
    for _ in range(3):  # settle
        ra = g.hb("a", g.group().members["a"].member_epoch, topic_partitions=_owned(g, "a"))
        g.hb("b", g.group().members["b"].member_epoch, topic_partitions=_owned(g, "b"))
    g.advance(SESSION - 1000)
    g.hb("a", g.group().members["a"].member_epoch, topic_partitions=_owned(g, "a"))
    g.advance(1500)  # b silent for the whole session
    assert set(g.group().members) == {"a"}
    assert (8, True) in g.kinds() and (3, False) in g.kinds()
    ra = g.hb("a", g.group().members["a"].member_epoch, topic_partitions=_owned(g, "a"))
    assert partitions(ra) == set(range(6))


def test_a_member_that_does_not_revoke_within_its_rebalance_timeout_is_fenced() -> None:
    g = Group()
    ra = g.hb("a", 0)
    g.hb("b", 0)
    g.hb("a", 2, topic_partitions=g.owned(ra))  # asked to revoke
    assert g.group().members["a"].state is MemberState.UNREVOKED_PARTITIONS
    for _ in range(REBALANCE // 1000 + 1):
        g.advance(1000)
        g.hb("b", g.group().members["b"].member_epoch, topic_partitions=())
        if "a" in g.group().members:
            g.hb("a", 2, topic_partitions=g.owned(ra))  # still holding everything
    assert "a" not in g.group().members


# ---- static members ----------------------------------------------------------------------------


def test_static_leave_keeps_the_assignment_and_the_same_instance_gets_it_back() -> None:
    g = Group()
    g.hb("a", 0, instance_id="ia")
    g.hb("b", 0, instance_id="ib")
    for _ in range(3):
        for m in ("a", "b"):
            g.hb(m, g.group().members[m].member_epoch, topic_partitions=_owned(g, m))
    held = _assigned(g, "a")
    epoch = g.group().group_epoch
    r = g.hb("a", -2, instance_id="ia")
    assert (r.error, r.member_epoch) == (E.none, -2)
    assert g.kinds() == [(8, False)] and g.group().group_epoch == epoch
    # b cannot take a's partitions while they are reserved.
    g.hb("b", g.group().members["b"].member_epoch, topic_partitions=_owned(g, "b"))
    assert _assigned(g, "b").isdisjoint(held)
    back = g.hb("a2", 0, instance_id="ia")
    assert back.error == E.none and partitions(back) == held
    assert "a" not in g.group().members and g.group().group_epoch == epoch  # no rebalance


def test_static_member_still_active_makes_a_newcomer_unreleased_instance_id() -> None:
    g = Group()
    g.hb("a", 0, instance_id="ia")
    assert g.hb("a2", 0, instance_id="ia").error == E.unreleased_instance_id


def test_static_member_with_another_member_id_is_fenced_instance_id() -> None:
    g = Group()
    g.hb("a", 0, instance_id="ia")
    assert g.hb("x", 1, instance_id="ia", topic_partitions=()).error == E.fenced_instance_id
    assert g.hb("x", 1, instance_id="nobody", topic_partitions=()).error == E.unknown_member_id


def test_static_member_away_past_its_session_is_removed() -> None:
    g = Group()
    g.hb("a", 0, instance_id="ia")
    g.hb("a", -2, instance_id="ia")
    g.advance(SESSION + 1)
    assert g.group().members == {}


def test_a_replaced_static_member_that_dies_is_removed_after_its_session() -> None:
    """Issue 19's path for KIP-848 groups: the member that took over an instance (a new member
    id) has a session timer of its own, so it expires when it stops heartbeating."""
    g = Group()
    g.hb("a", 0, instance_id="ia")
    g.hb("b", 0, instance_id="ib")
    g.hb("a", -2, instance_id="ia")  # a restarts ...
    assert g.hb("a2", 0, instance_id="ia").error == E.none  # ... as a2, and then dies
    for _ in range(4):  # b lives on
        g.advance(SESSION // 4)
        g.hb("b", g.group().members["b"].member_epoch, topic_partitions=_owned(g, "b"))
    g.advance(SESSION // 4)
    assert set(g.group().members) == {"b"}


# ---- topics and regular expressions -------------------------------------------------------


def test_partition_count_change_bumps_the_epoch_and_assigns_the_new_partitions() -> None:
    g = Group()
    ra = g.hb("a", 0)
    g.topics.create("t", 8)
    ra = g.hb("a", 2, topic_partitions=g.owned(ra))
    assert g.group().group_epoch == 3 and partitions(ra) == set(range(8))


def test_a_deleted_topic_bumps_the_epoch_and_its_partitions_are_revoked() -> None:
    g = Group({"t": 2, "u": 2})
    ra = g.hb("a", 0, subscribed_topic_names=("t", "u"))
    assert len(g.owned(ra)) == 2
    g.topics.delete("u")
    ra = g.hb("a", 2, topic_partitions=g.owned(ra))
    assert g.group().group_epoch == 3 and len(g.owned(ra)) == 1


def test_regex_subscription_is_resolved_persisted_and_picks_up_a_new_topic() -> None:
    # Resolved asynchronously (Kafka's maybeUpdateRegularExpressions): the join gets nothing,
    # the resolution writes 16 and a new group epoch, the next heartbeat gets the topics.
    g = Group({"orders-1": 2, "other": 2})
    r = g.hb("a", 0, subscribed_topic_names=None, subscribed_topic_regex="orders-.*")
    assert r.error == E.none and partitions(r) == set()
    assert (16, False) not in g.kinds()
    assert g.resolve() == 1 and g.kinds() == [(16, False), (3, False)]
    r = g.hb("a", r.member_epoch, topic_partitions=g.owned(r))
    assert len(partitions(r)) == 2
    owned = g.owned(r)
    g.topics.create("orders-2", 3)
    r = g.hb("a", r.member_epoch, topic_partitions=owned)
    assert (16, False) not in g.kinds() and r.assignment is None
    assert g.resolve() == 1 and (16, False) in g.kinds()
    r = g.hb("a", r.member_epoch, topic_partitions=owned)
    names = {g.topics.topic_by_id(t).name for t, _ in g.owned(r)}  # type: ignore[union-attr]
    assert names == {"orders-1", "orders-2"}
    assert g.shard.offsets.committed_count == 0


# ---- group types --------------------------------------------------------------------------


def _join(g: Group, group_id: str = "g") -> Any:
    req = JoinGroupRequest(
        group_id=group_id, member_id="", group_instance_id=None, session_timeout_ms=10_000,
        rebalance_timeout_ms=10_000, protocol_type="consumer", protocols=(("range", b""),),
        client_id="c", client_host="/h", require_known_member_id=False,
    )
    return g.shard.join_group("j", req, g.now)


def test_a_classic_group_with_members_is_not_a_consumer_group() -> None:
    g = Group(initial_rebalance_delay_ms=0)
    _join(g)
    assert g.hb("a", 0).error == E.group_id_not_found


def test_an_empty_classic_group_becomes_a_consumer_group() -> None:
    g = Group()
    commit = OffsetCommitRequest("g", -1, "", None, (("t", ((0, 5, -1, ""),)),))
    g.shard.offset_commit("c", commit, 0)
    assert g.shard.group("g") is not None
    assert g.hb("a", 0).error == E.none
    assert g.shard.group("g") is None
    assert g.shard.committed_offsets("g")[("t", 0)].offset == 5  # offsets stay


def test_join_group_to_a_consumer_group() -> None:
    g = Group()
    g.hb("a", 0)
    reply = _join(g).reply_for("j")
    assert reply.error == E.inconsistent_group_protocol
    g.hb("a", -1)
    _join(g)  # an Empty consumer group converts: the join is the classic group's first
    assert g.shard.consumer_group("g") is None and g.shard.group("g") is not None


def test_list_describe_and_delete() -> None:
    g = Group()
    g.hb("a", 0)
    listed = g.shard.list_groups("l", ListGroupsRequest(types_filter=frozenset({"Consumer"})), 0)
    assert [(x.group_id, x.group_type, x.state) for x in listed.reply_for("l").groups] == [  # type: ignore[union-attr]
        ("g", "consumer", "Stable")
    ]
    classic_only = g.shard.list_groups("l", ListGroupsRequest(types_filter=frozenset({"classic"})), 0)
    assert classic_only.reply_for("l").groups == ()  # type: ignore[union-attr]
    described = g.shard.consumer_group_describe("d", ConsumerGroupDescribeRequest(("g", "x")), 0)
    ok, missing = described.reply_for("d").groups  # type: ignore[union-attr]
    assert (ok.error, ok.state, ok.group_epoch, ok.assignor_name) == (E.none, "Stable", 2, "uniform")
    assert ok.members[0].assignment[0].topic_name == "t"
    assert missing.error == E.group_id_not_found
    old = g.shard.describe_groups("o", DescribeGroupsRequest(("g",)), 0).reply_for("o")
    assert old.groups[0].error == E.group_id_not_found  # type: ignore[union-attr]
    deleted = g.shard.delete_groups("x", DeleteGroupsRequest(("g",)), 0).reply_for("x")
    assert deleted.results[0].error == E.non_empty_group  # type: ignore[union-attr]
    g.hb("a", -1)
    out = g.shard.delete_groups("x", DeleteGroupsRequest(("g",)), 0)
    assert out.reply_for("x").results[0].error == E.none  # type: ignore[union-attr]
    assert g.shard.consumer_group("g") is None and out.records[-1][1] is None


def test_a_deletion_that_cannot_be_stored_leaves_the_consumer_group() -> None:
    """Issue 19: DeleteGroups whose tombstones fail puts the Empty consumer group back."""
    g = Group()
    g.hb("a", 0)
    g.hb("a", -1)  # Empty now
    before = g.shard.consumer_group("g")
    out = g.shard.delete_groups("x", DeleteGroupsRequest(("g",)), 0)
    assert g.shard.consumer_group("g") is None
    failed = g.shard.append_failed(out, E.kafka_storage_error, 0).reply_for("x")
    assert failed.results[0].error == E.not_coordinator  # type: ignore[union-attr]
    assert g.shard.consumer_group("g") is before and not before.dead
    listed = g.shard.list_groups("l", ListGroupsRequest(), 0).reply_for("l")
    assert [(x.group_id, x.state) for x in listed.groups] == [("g", "Empty")]  # type: ignore[union-attr]
    out = g.shard.delete_groups("y", DeleteGroupsRequest(("g",)), 0)  # and it can go for good
    assert out.reply_for("y").results[0].error == E.none  # type: ignore[union-attr]


# ---- offsets ---------------------------------------------------------------------------------


def test_offset_commit_checks_the_member_epoch_and_version() -> None:
    g = Group()
    g.hb("a", 0)

    def commit(member: str, epoch: int, version: int = 9) -> int:
        req = OffsetCommitRequest("g", epoch, member, None, (("t", ((0, 5, -1, ""),)),), version)
        out = g.shard.offset_commit("c", req, g.now)
        return out.reply_for("c").topics[0][1][0][1]  # type: ignore[union-attr]

    assert commit("a", 2) == E.none
    assert commit("a", 1) == E.stale_member_epoch
    assert commit("a", 2, version=8) == E.unsupported_version
    assert commit("zz", 2) == E.unknown_member_id
    assert commit("", -1) == E.unknown_member_id  # an admin commit needs an Empty group
    g.hb("a", -1)
    assert commit("", -1) == E.none


# ---- failed writes and persistence -----------------------------------------------------------


def test_a_failed_write_puts_the_group_back() -> None:
    g = Group()
    g.hb("a", 0)
    req = ConsumerGroupHeartbeatRequest("g", "b", 0, rebalance_timeout_ms=REBALANCE,
                                        subscribed_topic_names=("t",), topic_partitions=())
    out = g.shard.consumer_group_heartbeat("h", req, 0)
    assert g.shard.consumer_group("g").group_epoch == 3  # type: ignore[union-attr]
    answer = g.shard.append_failed(out, E.not_leader_or_follower, 0)
    assert answer.reply_for("h").error == E.not_coordinator  # type: ignore[union-attr]
    group = g.group()
    assert set(group.members) == {"a"} and group.group_epoch == 2


def _state(shard: GroupShard) -> dict[str, Any]:
    out = {}
    for group in shard.consumer_groups():
        out[group.group_id] = (
            group.group_epoch,
            group.assignment_epoch,
            group.assignment_timestamp,
            {m.member_id: m for m in group.members.values()},
            dict(group.target),
            dict(group.static_members),
            {t: dict(p) for t, p in group.partition_epochs.items()},
            {r: v.topics for r, v in group.regexes.items()},
            (group.metadata_hash, group.legacy_partition_metadata),
        )
    return out


def _random_activity(seed: int, **config: Any) -> Group:
    rnd = random.Random(seed)
    g = Group({"t": 6, "u": 3}, **config)
    g.now = 1_000  # a target's timestamp of 0 reads as "not known" (KIP-1263)
    members = ["a", "b", "c", "d"]
    for _ in range(60):
        m = rnd.choice(members)
        group = g.shard.consumer_group("g")
        current = None if group is None else group.members.get(m)
        action = rnd.random()
        if current is None:
            g.hb(m, 0, subscribed_topic_names=rnd.choice([("t",), ("t", "u"), ("u",)]),
                 instance_id=rnd.choice([None, "i-" + m]))
        elif action < 0.1:
            g.hb(m, -1, instance_id=current.instance_id)
        elif action < 0.15 and current.instance_id is not None:
            g.hb(m, -2, instance_id=current.instance_id)
        elif action < 0.2:
            g.advance(rnd.choice([100, SESSION // 2, SESSION + 1]))
        elif action < 0.25:  # KIP-1101: a topic gains a partition or its racks change
            name = rnd.choice(["t", "u"])
            info = g.topics.topic(name)
            assert info is not None
            if rnd.random() < 0.5 and info.partitions < 10:
                g.topics.create(name, info.partitions + 1, racks=info.racks)
            else:
                racks = tuple((rnd.choice(["r1", "r2"]),) for _ in range(info.partitions))
                g.topics.create(name, info.partitions, racks=racks)
        else:
            g.hb(m, current.member_epoch, instance_id=current.instance_id,
                 topic_partitions=_owned(g, m) if rnd.random() < 0.8 else None)
    return g


@pytest.mark.parametrize("seed", range(8))
def test_replaying_the_written_records_rebuilds_the_same_groups(seed: int) -> None:
    g = _random_activity(seed)
    fresh = GroupShard(0, g.config, topics=g.topics)
    for key, value in g.log:
        fresh.replay(key, value, g.now)
    fresh.finish_loading(g.now)
    assert _state(fresh) == _state(g.shard)


def test_offset_fetch_v9_from_a_member_checks_its_epoch() -> None:
    g = Group()
    g.hb("a", 0)
    check = g.shard.offset_fetch_member_error
    assert check("g", None, -1) is None  # an admin fetch
    assert check("g", "a", 2) is None
    assert check("g", "a", 1) == E.stale_member_epoch
    assert check("g", "zz", 2) == E.unknown_member_id
    assert check("classic-or-unknown", "a", 3) is None


@pytest.mark.parametrize(("seed", "drop_tombstones"), [(1, False), (2, True), (3, True)])
def test_a_compacted_log_reloads_the_same_groups(seed: int, drop_tombstones: bool, tmp_path: Any) -> None:
    from kcoord.coordinator.loading import LatestRecords
    from kcoord.protocol.batch import HEADER_SIZE
    from kcoord.protocol.key_values import decode_key_values
    from kcoord.protocol.record_encoding import encode_kv_batch
    from kcoord.storage.compaction import compact
    from kcoord.storage.log import PartitionLog

    g = _random_activity(seed)
    path = tmp_path / "__consumer_offsets-0"
    with PartitionLog.open(path, segment_bytes=2000) as log:
        for i in range(0, len(g.log), 5):
            log.append(encode_kv_batch(g.log[i : i + 5], g.now))
        log.flush()
        compact(log, now_ms=g.now + 10**9, delete_retention_ms=0 if drop_tombstones else 10**12)
    latest = LatestRecords()
    with PartitionLog.open(path, segment_bytes=2000) as log:
        for _base, header, data in log.iter_batches(verify_crc=True):
            latest.add(decode_key_values(header, data[HEADER_SIZE:]))
    fresh = GroupShard(0, g.config, topics=g.topics)
    latest.replay_into(fresh, g.now)
    fresh.finish_loading(g.now)
    assert _state(fresh) == _state(g.shard)
