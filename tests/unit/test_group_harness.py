"""A fake-clock harness that drives a GroupShard, shared by the test_group_* modules.

It records every record the shard emits and every reply it delivers, and checks the shard's
core contract on every Output: each handle is answered at most once.
"""

from __future__ import annotations

import itertools
import struct
import uuid
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

from kcoord.coordinator.config import GroupConfig
from kcoord.coordinator.messages import (
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribedGroup,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    LeaveMember,
    ListGroupsRequest,
    ListGroupsResponse,
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    Response,
    SyncGroupRequest,
    SyncGroupResponse,
)
from kcoord.coordinator.schemas import (
    GroupMetadataKey,
    GroupMetadataValue,
    decode_group_metadata_value,
    decode_key,
)
from kcoord.coordinator.shard import GroupShard, Output
from kcoord.protocol.errors import ErrorCode

E = ErrorCode
PROTOS: tuple[tuple[str, bytes], ...] = (("range", b"sub"),)


def subscription(
    *topics: str, version: int = 0, user_data: bytes | None = None, tail: bytes = b""
) -> bytes:
    """A ConsumerProtocol Subscription: version, topics, nullable user data, then ``tail``
    (owned partitions / generation / rack of later versions, opaque here)."""
    out = struct.pack(">hi", version, len(topics))
    for t in topics:
        raw = t.encode()
        out += struct.pack(">h", len(raw)) + raw
    out += struct.pack(">i", -1) if user_data is None else struct.pack(">i", len(user_data))
    return out + (user_data or b"") + tail


class Harness:
    """One shard, a fake clock, deterministic member ids (``<prefix>-1``, ``<prefix>-2``...)."""

    def __init__(
        self,
        config: GroupConfig | None = None,
        *,
        load: bool = True,
        partition_for: Any = None,
        topics: Any = None,
    ) -> None:
        self.now = 0
        self._ids = itertools.count(1)
        self._handles = itertools.count(1)
        self.shard = GroupShard(
            0,
            config or GroupConfig(),
            now_ms=0,
            new_member_id=lambda prefix: f"{prefix}-{next(self._ids)}",
            partition_for=partition_for,
            topics=topics,
        )
        self.records: list[tuple[bytes, bytes | None]] = []
        self.replies: dict[Hashable, Response] = {}
        self.outputs: list[Output] = []
        self.issued: list[str] = []
        self.last: Output = Output()
        if load:
            self.absorb(self.shard.finish_loading(self.now))

    # ---- plumbing ------------------------------------------------------------------------

    def absorb(self, out: Output) -> Output:
        seen: set[Hashable] = set()
        for handle, response in out.replies:
            assert handle not in seen, f"handle {handle!r} answered twice in one Output"
            assert handle not in self.replies, f"handle {handle!r} answered twice"
            seen.add(handle)
            self.replies[handle] = response
        self.records.extend(out.records)
        self.outputs.append(out)
        self.last = out
        return out

    def handle(self, tag: str = "h") -> str:
        h = f"{tag}{next(self._handles)}"
        self.issued.append(h)
        return h

    def unanswered(self) -> list[str]:
        return [h for h in self.issued if h not in self.replies]

    def reply(self, handle: Hashable) -> Any:
        return self.replies.get(handle)

    def answered(self, handle: Hashable) -> bool:
        return handle in self.replies

    def tick(self, ms: int) -> Output:
        """Move the clock forward by ``ms``, firing each timer at its own deadline (as a
        runtime with a precise timer would). Returns the last Output."""
        target = self.now + ms
        out = Output()
        while True:
            deadline = self.shard.next_deadline()
            if deadline is None or deadline > target:
                break
            self.now = max(self.now, deadline)
            out = self.absorb(self.shard.advance(self.now))
        self.now = target
        return out

    def tick_to_next(self) -> Output:
        """Advance the clock to the next live deadline and fire it."""
        deadline = self.shard.next_deadline()
        assert deadline is not None, "no timer pending"
        assert deadline >= self.now
        self.now = deadline
        return self.absorb(self.shard.advance(self.now))

    def run_until(self, cond: Any, limit: int = 100) -> None:
        for _ in range(limit):
            if cond():
                return
            self.tick_to_next()
        raise AssertionError("condition not reached")

    def group(self, group_id: str = "g") -> Any:
        return self.shard.group(group_id)

    # ---- requests ------------------------------------------------------------------------

    def join(
        self,
        member_id: str = "",
        *,
        group: str = "g",
        instance: str | None = None,
        protocols: Sequence[tuple[str, bytes]] = PROTOS,
        protocol_type: str = "consumer",
        session: int = 10_000,
        rebalance: int = 30_000,
        client_id: str = "c",
        require_known: bool = False,
        skip_assignment: bool = False,
    ) -> str:
        h = self.handle("join")
        req = JoinGroupRequest(
            group_id=group,
            member_id=member_id,
            group_instance_id=instance,
            session_timeout_ms=session,
            rebalance_timeout_ms=rebalance,
            protocol_type=protocol_type,
            protocols=tuple(protocols),
            client_id=client_id,
            client_host="/127.0.0.1",
            require_known_member_id=require_known,
            reason=None,
            supports_skip_assignment=skip_assignment,
        )
        self.absorb(self.shard.join_group(h, req, self.now))
        return h

    def sync(
        self,
        member_id: str,
        generation: int,
        assignments: Sequence[tuple[str, bytes]] = (),
        *,
        group: str = "g",
        instance: str | None = None,
        protocol_type: str | None = None,
        protocol_name: str | None = None,
    ) -> str:
        h = self.handle("sync")
        req = SyncGroupRequest(
            group, generation, member_id, instance, protocol_type, protocol_name, tuple(assignments)
        )
        self.absorb(self.shard.sync_group(h, req, self.now))
        return h

    def heartbeat(
        self, member_id: str, generation: int, *, group: str = "g", instance: str | None = None
    ) -> int:
        h = self.handle("hb")
        self.absorb(
            self.shard.heartbeat(
                h, HeartbeatRequest(group, generation, member_id, instance), self.now
            )
        )
        resp = self.replies[h]
        assert isinstance(resp, HeartbeatResponse)
        return resp.error

    def leave(self, *members: LeaveMember | str, group: str = "g") -> LeaveGroupResponse:
        h = self.handle("leave")
        ms = tuple(LeaveMember(m) if isinstance(m, str) else m for m in members)
        self.absorb(self.shard.leave_group(h, LeaveGroupRequest(group, ms), self.now))
        resp = self.replies[h]
        assert isinstance(resp, LeaveGroupResponse)
        return resp

    def list_groups(
        self, states: Sequence[str] = (), types: Sequence[str] = ()
    ) -> ListGroupsResponse:
        h = self.handle("list")
        req = ListGroupsRequest(frozenset(states), frozenset(types))
        self.absorb(self.shard.list_groups(h, req, self.now))
        resp = self.replies[h]
        assert isinstance(resp, ListGroupsResponse)
        return resp

    def describe(self, *group_ids: str) -> tuple[DescribedGroup, ...]:
        h = self.handle("describe")
        self.absorb(
            self.shard.describe_groups(h, DescribeGroupsRequest(tuple(group_ids)), self.now)
        )
        resp = self.replies[h]
        assert isinstance(resp, DescribeGroupsResponse)
        return resp.groups

    def delete(self, *group_ids: str) -> dict[str, int]:
        h = self.handle("delete")
        self.absorb(self.shard.delete_groups(h, DeleteGroupsRequest(tuple(group_ids)), self.now))
        resp = self.replies[h]
        assert isinstance(resp, DeleteGroupsResponse)
        return dict(resp.results)

    def commit(
        self,
        offsets: Mapping[tuple[str, int], int | tuple[int, str | None]],
        *,
        group: str = "g",
        generation: int = -1,
        member: str = "",
        instance: str | None = None,
        leader_epoch: int = -1,
        topic_ids: Mapping[str, uuid.UUID] | None = None,
        retention_ms: int = -1,
    ) -> dict[tuple[str, int], int]:
        """OffsetCommit; ``offsets`` maps (topic, partition) to offset or (offset, metadata);
        ``topic_ids``: the topics' ids, as a v10 commit names them; ``retention_ms``: a v2-v4
        commit's retention time.
        Returns (topic, partition) -> error (``self.last`` holds the Output)."""
        by_topic: dict[str, list[OffsetCommitPartition]] = {}
        for (topic, p), spec in offsets.items():
            offset, metadata = spec if isinstance(spec, tuple) else (spec, None)
            by_topic.setdefault(topic, []).append(
                OffsetCommitPartition(p, offset, leader_epoch, metadata)
            )
        req = OffsetCommitRequest(
            group,
            generation,
            member,
            instance,
            tuple((t, tuple(ps)) for t, ps in by_topic.items()),
            topic_ids=tuple((topic_ids or {}).items()),
            retention_ms=retention_ms,
        )
        h = self.handle("commit")
        self.absorb(self.shard.offset_commit(h, req, self.now))
        resp = self.replies[h]
        assert isinstance(resp, OffsetCommitResponse)
        return {(t, p): err for t, parts in resp.topics for p, err in parts}

    def fetch(
        self,
        topics: Mapping[str, Sequence[int]] | None = None,
        *,
        group: str = "g",
        require_stable: bool = False,
    ) -> OffsetFetchResponse:
        req = OffsetFetchRequest(
            group,
            None if topics is None else tuple((t, tuple(ps)) for t, ps in topics.items()),
            require_stable,
        )
        h = self.handle("fetch")
        self.absorb(self.shard.offset_fetch(h, req, self.now))
        resp = self.replies[h]
        assert isinstance(resp, OffsetFetchResponse)
        return resp

    def offset_delete(
        self, topics: Mapping[str, Sequence[int]], *, group: str = "g"
    ) -> OffsetDeleteResponse:
        req = OffsetDeleteRequest(group, tuple((t, tuple(ps)) for t, ps in topics.items()))
        h = self.handle("odel")
        self.absorb(self.shard.offset_delete(h, req, self.now))
        resp = self.replies[h]
        assert isinstance(resp, OffsetDeleteResponse)
        return resp

    def offsets(self, group: str = "g") -> dict[tuple[str, int], int]:
        """The cached committed offsets of ``group``: (topic, partition) -> offset."""
        return {tp: v.offset for tp, v in self.shard.committed_offsets(group).items()}

    # ---- composite steps -------------------------------------------------------------------

    def join_response(self, handle: str) -> JoinGroupResponse:
        resp = self.replies[handle]
        assert isinstance(resp, JoinGroupResponse), resp
        return resp

    def sync_response(self, handle: str) -> SyncGroupResponse:
        resp = self.replies[handle]
        assert isinstance(resp, SyncGroupResponse), resp
        return resp

    def stable_group(
        self, n: int, *, group: str = "g", instances: Sequence[str | None] | None = None, **kw: Any
    ) -> list[str]:
        """Join ``n`` members into a new group, wait out the initial delay, sync everyone.
        Returns member ids in join order (the first is the leader)."""
        instances = list(instances) if instances is not None else [None] * n
        handles = [
            self.join(group=group, instance=instances[i], client_id=f"c{i}", **kw) for i in range(n)
        ]
        self.run_until(lambda: all(self.answered(h) for h in handles))
        responses = [self.join_response(h) for h in handles]
        assert all(r.error == E.none for r in responses), responses
        ids = [r.member_id for r in responses]
        gen = responses[0].generation_id
        leader = responses[0].leader
        self.sync(leader, gen, [(m, f"assign-{m}".encode()) for m in ids], group=group)
        for m in ids:
            if m != leader:
                self.sync(m, gen, group=group)
        assert self.group(group).state.value == "Stable"
        return ids

    def group_records(self, group_id: str = "g") -> list[GroupMetadataValue | None]:
        """Decoded group records (None = tombstone) emitted for ``group_id`` so far."""
        out: list[GroupMetadataValue | None] = []
        for key, value in self.records:
            k = decode_key(key)
            if isinstance(k, GroupMetadataKey) and k.group == group_id:
                out.append(None if value is None else decode_group_metadata_value(value))
        return out


def test_harness_smoke() -> None:
    h = Harness()
    ids = h.stable_group(2)
    assert ids == ["c0-1", "c1-2"]
    assert h.group().generation == 1
    assert h.shard.next_deadline() == h.now + 10_000
