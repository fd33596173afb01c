"""Commits of a consumer that only assign()s, as librdkafka sends them with
``group.protocol=consumer`` (issue 32: librdkafka tests 0026, 0030, 0051, 0099, 0130, 0140).

Such a client makes its member id at creation (KIP-1082) and never joins, so its OffsetCommit
and TxnOffsetCommit carry that member id with member epoch -1, usually to a group that does not
exist yet; its OffsetFetch carries no member id and epoch -1. Kafka's rules, each test naming
the one it checks:

- ClassicGroup.validateOffsetCommit: generation < 0 on an Empty group is accepted before any
  member check (J6), whatever member id comes with it;
- ConsumerGroup.validateOffsetCommit: epoch < 0 is accepted while the group has no members,
  before the member is looked up;
- an unknown group gets a commit with epoch < 0 by being created as a simple (classic, Empty)
  group; the same holds for TxnOffsetCommit, whose STALE_MEMBER_EPOCH reads ILLEGAL_GENERATION;
- OffsetFetch: no member id and epoch < 0 is always answered; a named member of a consumer group
  must exist at its epoch; a classic group checks no member.
"""

from __future__ import annotations

from kcoord.coordinator.classic.group import GroupState
from kcoord.coordinator.config import GroupConfig
from kcoord.coordinator.consumer.messages import ConsumerGroupHeartbeatRequest
from kcoord.coordinator.consumer.topics import StaticTopics
from kcoord.coordinator.messages import (
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    TxnMarkerRequest,
    TxnOffsetCommitRequest,
)
from kcoord.coordinator.shard import GroupShard
from kcoord.protocol.errors import ErrorCode as E

MEMBER = "rdkafka-7b3c0f5e-3a39-4a7f-9d2e-5d1b8a0c6f11"  # made by the client, never joined
PID = 77


class Shard:
    """One shard with a topic ``t``, a fake clock and the records it wrote."""

    def __init__(self) -> None:
        self.shard = GroupShard(0, GroupConfig(), topics=StaticTopics({"t": 4}))
        self.shard.finish_loading(0)
        self.now = 1_000
        self.n = 0

    def _handle(self) -> str:
        self.n += 1
        return f"h{self.n}"

    def commit(self, offset: int, *, member: str = MEMBER, epoch: int = -1, version: int = 9) -> int:
        req = OffsetCommitRequest(
            "g", epoch, member, None, (("t", (OffsetCommitPartition(0, offset, -1, None),)),), version
        )
        h = self._handle()
        reply = self.shard.offset_commit(h, req, self.now).reply_for(h)
        assert isinstance(reply, OffsetCommitResponse)
        return reply.topics[0][1][0][1]

    def txn_commit(self, offset: int, *, member: str = MEMBER, epoch: int = -1) -> int:
        req = TxnOffsetCommitRequest(
            "g", "tx", PID, 0, epoch, member, None, (("t", (OffsetCommitPartition(0, offset, -1, None),)),), 4
        )
        h = self._handle()
        reply = self.shard.txn_offset_commit(h, req, self.now).reply_for(h)
        assert isinstance(reply, OffsetCommitResponse)
        return reply.topics[0][1][0][1]

    def commit_marker(self) -> None:
        h = self._handle()
        self.shard.txn_marker(h, TxnMarkerRequest(PID, 0, True, 0), self.now)

    def fetch(self, *, member: str | None = None, epoch: int = -1) -> tuple[int, int]:
        """(group-level error, offset of t-0) as the broker answers an OffsetFetch v9+."""
        error = self.shard.offset_fetch_member_error("g", member, epoch)
        if error is not None:
            return error, -1
        h = self._handle()
        reply = self.shard.offset_fetch(h, OffsetFetchRequest("g", (("t", (0,)),)), self.now).reply_for(h)
        assert isinstance(reply, OffsetFetchResponse)
        return reply.error, reply.topics[0][1][0].offset

    def heartbeat(self, member: str, epoch: int) -> None:
        req = ConsumerGroupHeartbeatRequest(
            group_id="g",
            member_id=member,
            member_epoch=epoch,
            rebalance_timeout_ms=5000,
            subscribed_topic_names=("t",) if epoch == 0 else None,
            topic_partitions=() if epoch == 0 else None,
        )
        self.shard.consumer_group_heartbeat(self._handle(), req, self.now)

    def committed(self) -> dict[tuple[str, int], int]:
        return {tp: v.offset for tp, v in self.shard.committed_offsets("g").items()}


# ---- OffsetCommit ----------------------------------------------------------------------------


def test_commit_with_epoch_minus_one_to_an_unknown_group_creates_a_simple_group_and_stores() -> None:
    s = Shard()
    assert s.commit(5) == E.none
    group = s.shard.group("g")
    assert group is not None and group.state is GroupState.EMPTY and group.protocol_type is None
    assert s.committed() == {("t", 0): 5}
    assert s.commit(6) == E.none  # and again, now that the group exists (the auto-commits)
    assert s.committed() == {("t", 0): 6}


def test_classic_empty_group_takes_generation_minus_one_whatever_member_id_comes_with_it() -> None:
    s = Shard()
    assert s.commit(5, member="", epoch=-1) == E.none  # a simple group, as before
    assert s.commit(7, member=MEMBER, epoch=-1, version=2) == E.none
    assert s.committed() == {("t", 0): 7}
    assert s.commit(8, member=MEMBER, epoch=0) == E.unknown_member_id  # a generation: checked


def test_consumer_group_without_members_takes_epoch_minus_one_before_the_member_lookup() -> None:
    s = Shard()
    s.heartbeat("a", 0)
    s.heartbeat("a", -1)  # left: an Empty consumer group
    assert s.shard.consumer_group("g") is not None
    assert s.commit(5) == E.none
    assert s.committed() == {("t", 0): 5}


def test_consumer_group_with_members_refuses_an_unknown_member_at_epoch_minus_one() -> None:
    s = Shard()
    s.heartbeat("a", 0)
    assert s.commit(5) == E.unknown_member_id
    assert s.committed() == {}


# ---- OffsetFetch -----------------------------------------------------------------------------


def test_offset_fetch_without_member_and_epoch_minus_one_reads_the_simple_groups_offsets() -> None:
    s = Shard()
    assert s.fetch() == (E.none, -1)  # no group yet: nothing committed
    assert s.commit(5) == E.none
    assert s.fetch() == (E.none, 5)
    assert s.fetch(member=MEMBER, epoch=-1) == (E.none, 5)  # a classic group checks no member


def test_offset_fetch_naming_a_member_of_a_consumer_group_needs_that_member() -> None:
    s = Shard()
    s.heartbeat("a", 0)
    assert s.fetch() == (E.none, -1)
    assert s.fetch(member=MEMBER, epoch=-1) == (E.unknown_member_id, -1)


# ---- TxnOffsetCommit -------------------------------------------------------------------------


def test_txn_commit_with_epoch_minus_one_to_an_unknown_group_creates_it_and_commits() -> None:
    s = Shard()
    assert s.txn_commit(5) == E.none
    group = s.shard.group("g")
    assert group is not None and group.state is GroupState.EMPTY
    assert s.committed() == {}  # pending until the marker
    s.commit_marker()
    assert s.committed() == {("t", 0): 5}


def test_txn_commit_with_epoch_minus_one_to_an_empty_consumer_group() -> None:
    s = Shard()
    s.heartbeat("a", 0)
    assert s.txn_commit(5) == E.unknown_member_id  # members: the member is looked up
    s.heartbeat("a", -1)
    assert s.txn_commit(6) == E.none
    s.commit_marker()
    assert s.committed() == {("t", 0): 6}
