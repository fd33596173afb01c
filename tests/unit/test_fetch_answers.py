"""The OffsetFetch answers the direct path remembers (broker/groups/fetch_answers.py), on a real
GroupRuntime and OffsetApi: an answer is given again only while nothing that changes it
happened, and each kind of change (commits, transactions, expiry, deletions, loading and
unloading, a write waiting to become durable, a failed write undone) is seen at once."""

from __future__ import annotations

import asyncio
import struct
import types
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.serial import entity_reader

from kcoord.broker.config import Config
from kcoord.broker.groups.fetch_answers import ENTRY_OVERHEAD, FetchAnswers
from kcoord.broker.groups.offset_api import OffsetApi
from kcoord.broker.groups.runtime import GroupRuntime
from kcoord.broker.groups.write_path import ShardRuntime
from kcoord.broker.services import MetricsHooks
from kcoord.coordinator import messages as m
from kcoord.coordinator.consumer.messages import ConsumerGroupDescribeRequest
from kcoord.coordinator.shard import GroupShard
from kcoord.coordinator.share.messages import ShareGroupDescribeRequest
from kcoord.protocol.codec import response_type
from kcoord.protocol.errors import ErrorCode
from kcoord.protocol.offset_fetch import request_body
from tests.unit.test_offset_fetch_codec import request_frame

E = ErrorCode
GROUP = "watched"
T0 = 1_000_000
RETENTION_CHECK_MS = 600_000


class Env:
    """A runtime of 4 offsets partitions, every shard loaded, and the offset APIs over it."""

    def __init__(self, tmp: Path) -> None:
        config = Config.load(environ={}, data_dir=tmp, overrides=["offsets.topic.num.partitions=4"])
        self.store = types.SimpleNamespace(get=lambda name: None, version=0, topics={}, by_id={})
        self.runtime = GroupRuntime(config, self.store, None, MetricsHooks())  # type: ignore[arg-type]
        for sr in self.runtime.shards:
            sr.shard.finish_loading(T0)
        self.api = OffsetApi(config, self.runtime, self.store)  # type: ignore[arg-type]
        self.uncached = OffsetApi(config, self.runtime, self.store)  # type: ignore[arg-type]
        self.uncached._answers = FetchAnswers(max_bytes=0)  # keeps nothing
        self.p = self.runtime.partition_of(GROUP)
        self.correlation = 100

    @property
    def shard(self) -> GroupShard:
        return self.runtime.shards[self.p].shard

    def fetch(
        self, partitions: list[int] | None = None, version: int = 6, stable: bool = False
    ) -> bytes | None:
        """The direct answer (a whole frame), checked against one built without the cache."""
        frame = request_frame(
            version, "client", GROUP, None if partitions is None else [("t", partitions)], stable
        )
        self.correlation += 1
        got = self.api.offset_fetch_direct(frame, version, self.correlation, "host")
        fresh = self.uncached.offset_fetch_direct(frame, version, self.correlation, "host")
        assert got == fresh
        return got

    def offsets(
        self, partitions: list[int] | None = None, version: int = 6, stable: bool = False
    ) -> tuple[int, dict[int, tuple[int, int]]]:
        """(group error, {partition: (offset, error)}) of a direct answer."""
        data = self.fetch(partitions, version, stable)
        assert data is not None
        head = 9 if version >= 6 else 8  # size, correlation id, flexible header's tags
        r: Any
        r, _ = entity_reader(response_type(9, version))(data, head)
        error = r.error_code if version >= 2 else E.none
        return error, {p.partition_index: (p.committed_offset, p.error_code)
                       for t in r.topics for p in t.partitions}  # fmt: skip

    def commit(self, offsets: dict[int, int], retention_ms: int = -1) -> m.OffsetCommitRequest:
        req = m.OffsetCommitRequest(
            GROUP, -1, "", None,
            (("t", tuple(m.OffsetCommitPartition(p, o, -1, "") for p, o in offsets.items())),),
            api_version=2 if retention_ms != -1 else 8, retention_ms=retention_ms,
        )  # fmt: skip
        assert self.shard.offset_commit("commit", req, T0).records
        return req

    def txn_commit(self, offsets: dict[int, int]) -> None:
        req = m.TxnOffsetCommitRequest(
            GROUP, "tx", 7, 0, -1, "", None,
            (("t", tuple(m.OffsetCommitPartition(p, o, -1, "") for p, o in offsets.items())),), 3,
        )  # fmt: skip
        assert self.shard.txn_offset_commit("txn", req, T0).records

    def marker(self, commit: bool) -> None:
        out = self.shard.txn_marker("marker", m.TxnMarkerRequest(7, 0, commit, 0), T0)
        assert out.marker is not None


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    yield Env(tmp_path)


def _neighbour(env: Env) -> str:
    """A group of the same shard as GROUP."""
    return next(g for g in (f"g{i}" for i in range(100)) if env.runtime.partition_of(g) == env.p)


def _kept(env: Env) -> int:
    return len(env.api._answers)


def test_the_same_question_is_answered_again_without_reading_the_shard(env: Env) -> None:
    env.commit({0: 10, 1: 11})
    assert env.offsets([0, 1, 2]) == (E.none, {0: (10, 0), 1: (11, 0), 2: (-1, 0)})
    assert _kept(env) == 1
    frame = request_frame(6, "another-client", GROUP, [("t", [0, 1, 2])])
    first = env.api.offset_fetch_direct(frame, 6, 4242, "host")
    # Proof that the shard is not read again: its offsets changed behind its back (never done
    # but here) leave the remembered answer as it was.
    env.shard.offsets.of(GROUP).clear()
    again = env.api.offset_fetch_direct(frame, 6, 4243, "host")
    assert first is not None and again is not None and first[8:] == again[8:]
    assert struct.unpack_from(">ii", again) == (len(again) - 4, 4243)  # its own correlation id
    assert env.uncached.offset_fetch_direct(frame, 6, 4243, "host") != again
    assert _kept(env) == 1


def test_reads_of_the_shard_keep_the_answer_and_a_join_does_not(env: Env) -> None:
    """Describes, ListGroups and the generic OffsetFetch change nothing: a lag exporter that
    lists and describes the groups between its fetches still gets the remembered answers."""
    env.commit({0: 10})
    frame = request_frame(7, "exporter", GROUP, [("t", [0])])
    first = env.api.offset_fetch_direct(frame, 7, 1, "host")
    env.shard.offsets.of(GROUP).clear()  # behind the shard's back: only a fresh read sees it
    shard, groups = env.shard, (GROUP,)
    shard.list_groups("l", m.ListGroupsRequest(), T0)
    shard.describe_groups("d", m.DescribeGroupsRequest(groups), T0)
    shard.consumer_group_describe("c", ConsumerGroupDescribeRequest(groups), T0)
    shard.share_group_describe("s", ShareGroupDescribeRequest(groups), T0)
    shard.offset_fetch("f", m.OffsetFetchRequest(GROUP, (("t", (0,)),)), T0)
    assert first is not None and env.api.offset_fetch_direct(frame, 7, 1, "host") == first
    join = m.JoinGroupRequest(
        _neighbour(env), "", None, 30_000, 30_000, "consumer", (("range", b""),), "c", "h", False
    )  # any operation that is not a read, of another group of the shard
    shard.join_group("j", join, T0)
    assert env.api.offset_fetch_direct(frame, 7, 1, "host") != first


def test_a_commit_changes_the_answer(env: Env) -> None:
    env.commit({0: 10})
    assert env.offsets([0]) == (E.none, {0: (10, 0)})
    env.commit({0: 20})
    assert env.offsets([0]) == (E.none, {0: (20, 0)})
    assert env.offsets(None) == (E.none, {0: (20, 0)})  # all of the group's, too
    env.commit({3: 5})
    assert env.offsets(None) == (E.none, {0: (20, 0), 3: (5, 0)})


def test_a_commit_of_another_group_of_the_shard_leaves_the_answer_as_it_was(env: Env) -> None:
    env.commit({0: 10})
    assert env.offsets([0]) == (E.none, {0: (10, 0)})
    other = _neighbour(env)
    req = m.OffsetCommitRequest(
        other, -1, "", None, (("t", (m.OffsetCommitPartition(0, 1, -1, ""),)),)
    )
    env.shard.offset_commit("other", req, T0)
    assert env.offsets([0]) == (E.none, {0: (10, 0)})


def test_a_pending_transactional_commit_and_its_commit_marker(env: Env) -> None:
    env.commit({0: 10})
    assert env.offsets([0], version=7, stable=True) == (E.none, {0: (10, 0)})
    assert env.offsets([0], version=7) == (E.none, {0: (10, 0)})
    env.txn_commit({0: 50})
    # RequireStable: the partition is unstable while the transaction is open; without it the
    # committed value is still the visible one.
    assert env.offsets([0], version=7, stable=True) == (E.none, {0: (-1, E.unstable_offset_commit)})
    assert env.offsets([0], version=7) == (E.none, {0: (10, 0)})
    env.marker(commit=True)
    assert env.offsets([0], version=7, stable=True) == (E.none, {0: (50, 0)})
    assert env.offsets([0], version=7) == (E.none, {0: (50, 0)})


def test_an_abort_marker_ends_the_unstable_answer(env: Env) -> None:
    env.commit({0: 10})
    env.txn_commit({0: 50})
    assert env.offsets([0], version=7, stable=True) == (E.none, {0: (-1, E.unstable_offset_commit)})
    env.marker(commit=False)
    assert env.offsets([0], version=7, stable=True) == (E.none, {0: (10, 0)})


def test_expiry_changes_the_answer(env: Env) -> None:
    env.commit({0: 10}, retention_ms=1_000)  # an OffsetCommit v2 retention time
    env.commit({1: 11})
    assert env.offsets([0, 1]) == (E.none, {0: (10, 0), 1: (11, 0)})
    out = env.shard.advance(T0 + 2 * RETENTION_CHECK_MS)  # the retention check ran
    assert out.records
    assert env.offsets([0, 1]) == (E.none, {0: (-1, 0), 1: (11, 0)})


def test_offset_delete_changes_the_answer(env: Env) -> None:
    env.commit({0: 10, 1: 11})
    assert env.offsets(None) == (E.none, {0: (10, 0), 1: (11, 0)})
    env.shard.offset_delete("delete", m.OffsetDeleteRequest(GROUP, (("t", (0,)),)), T0)
    assert env.offsets(None) == (E.none, {1: (11, 0)})


def test_delete_groups_changes_the_answer(env: Env) -> None:
    env.commit({0: 10})
    assert env.offsets([0]) == (E.none, {0: (10, 0)})
    out = env.shard.delete_groups("delete", m.DeleteGroupsRequest((GROUP,)), T0)
    assert out.records
    assert env.offsets([0]) == (E.none, {0: (-1, 0)})


def test_a_deleted_topics_tombstones_change_the_answer(env: Env) -> None:
    env.commit({0: 10})
    assert env.offsets([0]) == (E.none, {0: (10, 0)})
    deleted = m.DeletedTopic("t", uuid.uuid4(), 1, T0)
    out = env.shard.topics_deleted("gone", m.TopicsDeletedRequest((deleted,), (GROUP,)), T0)
    assert out.records
    assert env.offsets([0]) == (E.none, {0: (-1, 0)})


def test_a_failed_commit_undone_changes_the_answer_back(env: Env) -> None:
    env.commit({0: 10})
    env.shard.offset_commit("c", m.OffsetCommitRequest(
        GROUP, -1, "", None, (("t", (m.OffsetCommitPartition(0, 20, -1, ""),)),)), T0)  # fmt: skip
    # The shard applies a commit at once; when its write fails, the shard undoes it.
    out = env.shard.offset_commit("c2", m.OffsetCommitRequest(
        GROUP, -1, "", None, (("t", (m.OffsetCommitPartition(0, 30, -1, ""),)),)), T0)  # fmt: skip
    assert env.offsets([0]) == (E.none, {0: (30, 0)})
    env.shard.append_failed(out, E.kafka_storage_error, T0)  # the write of 30 failed: undone
    assert env.offsets([0]) == (E.none, {0: (20, 0)})


def test_nothing_is_answered_while_a_write_of_the_shard_is_in_flight(env: Env) -> None:
    env.commit({0: 10})
    assert env.fetch([0]) is not None
    sr = env.runtime.shards[env.p]
    loop = asyncio.new_event_loop()
    try:
        sr.chain = loop.create_future()  # an output waiting to become durable
        assert env.fetch([0]) is None  # the generic path answers, after it
        sr.chain = None
        assert env.offsets([0]) == (E.none, {0: (10, 0)})
    finally:
        loop.close()


def test_unloading_loading_and_a_new_shard(env: Env) -> None:
    env.commit({0: 10})
    assert env.offsets([0]) == (E.none, {0: (10, 0)})
    env.shard.unload(T0)  # moved away (cluster mode), or its log went offline
    assert env.offsets([0]) == (E.not_coordinator, {})
    sr = env.runtime.shards[env.p]
    sr.shard = env.runtime._new_shard(env.p, T0)  # reloading, as GroupRuntime.lead does
    assert env.offsets([0]) == (E.coordinator_load_in_progress, {})
    sr.shard.finish_loading(T0)
    assert env.offsets([0]) == (E.none, {0: (-1, 0)})


def test_v0_and_v1_share_a_body_but_not_an_answer(env: Env) -> None:
    env.commit({0: 10})
    for version in (0, 1, 0, 5, 6, 7):
        assert env.offsets([0], version=version) == (E.none, {0: (10, 0)})
    env.shard.unload(T0)
    for version in (0, 1):  # the group's error on every partition, as v0/v1 have no other place
        assert env.offsets([0], version=version) == (E.none, {0: (-1, E.not_coordinator)})


def test_unusual_frames_are_answered_but_not_kept(env: Env) -> None:
    env.commit({0: 10})
    frame = request_frame(6, "c", GROUP, [("t", [0])])
    tagged = frame[:-1] + b"\x01\x00\x00"  # a tagged field at the end: the generic decoder
    assert request_body(tagged, 6) is not None
    assert env.api.offset_fetch_direct(tagged, 6, 1, "h") is not None
    assert _kept(env) == 0


def test_request_body_is_what_follows_the_header() -> None:
    frame = request_frame(6, "client", GROUP, [("t", [0])])
    body = request_body(frame, 6)
    assert body is not None and frame.endswith(body) and len(frame) - len(body) == 8 + 2 + 6 + 1
    old = request_frame(3, None, GROUP, [("t", [0])])
    assert request_body(old, 3) == old[10:]  # a null client id
    assert request_body(frame[:9], 6) is None
    assert request_body(frame, 8) is None
    assert request_body(bytearray(frame), 6) is None  # a large frame, read in place: not kept


def _shards() -> list[ShardRuntime]:
    return [ShardRuntime(0, GroupShard(0))]


def test_bounded_in_entries_oldest_leaving_first() -> None:
    answers = FetchAnswers(max_entries=3)
    shards = _shards()
    stamp = shards[0].idle_stamp()
    for i in range(5):
        answers.keep(b"body%d" % i, 6, 0, stamp, b"\x00" * 8 + b"answer%d" % i)
    assert len(answers) == 3
    assert answers.answer(b"body1", 6, 1, shards) is None
    assert answers.answer(b"body4", 6, 9, shards) == struct.pack(">ii", 11, 9) + b"answer4"
    assert answers.bytes == 3 * (5 + 7 + ENTRY_OVERHEAD)


def test_bounded_in_bytes_and_large_answers_are_not_kept() -> None:
    answers = FetchAnswers(max_bytes=1_000)
    shards = _shards()
    stamp = shards[0].idle_stamp()
    answers.keep(b"big", 6, 0, stamp, b"\x00" * 8 + b"x" * 20_000)
    assert len(answers) == 0 and answers.bytes == 0
    for i in range(10):
        answers.keep(b"b%d" % i, 6, 0, stamp, b"\x00" * 8 + b"y" * 100)
    assert answers.bytes <= 1_000 and len(answers) == 1_000 // (2 + 100 + ENTRY_OVERHEAD)
    answers.keep(b"b9", 6, 0, stamp, b"\x00" * 8 + b"z")  # replacing an entry counts it once
    assert answers.bytes == sum(2 + 100 + ENTRY_OVERHEAD for _ in range(len(answers) - 1)) + (
        2 + 1 + ENTRY_OVERHEAD
    )
    assert answers.answer(b"b9", 6, 1, shards) == struct.pack(">ii", 5, 1) + b"z"


def test_a_changed_stamp_or_version_is_a_miss() -> None:
    answers = FetchAnswers()
    shards = _shards()
    answers.keep(b"q", 6, 0, shards[0].idle_stamp(), b"\x00" * 8 + b"a")
    assert answers.answer(b"q", 6, 1, shards) is not None
    assert answers.answer(b"q", 7, 1, shards) is None
    shards[0].shard.finish_loading(T0)  # an operation of the shard
    assert answers.answer(b"q", 6, 1, shards) is None
    answers.keep(b"r", 6, 0, 0, b"\x00" * 8 + b"a")  # 0: a shard that was not idle
    assert answers.answer(b"r", 6, 1, shards) is None
    assert len(answers) == 1
