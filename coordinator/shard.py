"""``GroupShard``: the sans-IO classic group coordinator for one ``__consumer_offsets`` partition.

This module owns the behaviour of BEHAVIOR.md sections B-H, I-M for every classic group
whose id maps to one partition: JoinGroup/SyncGroup/Heartbeat/LeaveGroup/ListGroups/
DescribeGroups/DeleteGroups, OffsetCommit/OffsetFetch/OffsetDelete, the delayed-join, session,
pending-member, new-member and offset-retention timers, the group and offset records it writes
to its partition, and rebuilding state from those records.

It is a single-writer state machine with no I/O and no clock:

- every operation takes the runtime's opaque ``handle`` for the in-flight request and the
  current time ``now_ms``, and returns an :class:`Output`: records to append (in order) to
  the partition, and replies to deliver once those records are durable. A reply may answer an
  earlier, parked request (a JoinGroup long poll, D12; a parked SyncGroup, F3);
- timers live in a heap with lazy cancellation (each entry carries a token that must still
  match the group's or member's current one); the runtime asks :meth:`GroupShard.next_deadline`
  and calls :meth:`GroupShard.advance` when it passes;
- state is applied eagerly when an operation runs. If the runtime fails to append an
  Output's records it calls :meth:`GroupShard.append_failed`, which returns the replies to
  deliver instead (errors for the writes that failed, the original replies otherwise) and
  undoes what can be undone (F3, C5, L3, and the committed-offset cache for OffsetCommit);
- on start-up the shard is loading: the runtime feeds it the partition's records through
  :meth:`GroupShard.replay` and then calls :meth:`GroupShard.finish_loading` (K3).

Every handle passed in receives exactly one reply, possibly later; when the shard has to drop
a parked request that Kafka would silently forget (a duplicate JoinGroup/SyncGroup from the
same member, a leaving member's parked SyncGroup) it answers it with an error so the runtime's
per-connection response ordering never stalls.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import operator
import struct
import sys
import uuid
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import Enum

from coordinator.config import GroupConfig
from coordinator.group import ClassicGroup, GroupState, JoinTimer, Member
from coordinator.messages import (
    DeleteGroupResult,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribedGroup,
    DescribedMember,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    FetchedOffset,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    LeaveMemberResult,
    ListedGroup,
    ListGroupsRequest,
    ListGroupsResponse,
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
from coordinator.schemas import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    SchemaError,
    UnknownKey,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
    encode_group_metadata_value,
    encode_key,
    encode_offset_commit_fields,
    offset_commit_key_prefix,
)
from coordinator.subscription import CONSUMER_PROTOCOL_TYPE
from coordinator.write_size import (
    group_record_batch_size,
    join_record_floor,
    offset_commit_floor,
    tombstones_batch_size,
)
from protocol.errors import ErrorCode

_I32_PACK = struct.Struct(">i").pack

__all__ = [
    "CommitWriteFailed",
    "DeleteWriteFailed",
    "FailureAction",
    "GroupShard",
    "Output",
    "RebalanceCompleted",
    "ShardMode",
    "StaticReplaceWriteFailed",
    "SyncWriteFailed",
    "fetched_offsets",
    "listed_groups",
]

log = logging.getLogger(__name__)

Record = tuple[bytes, bytes | None]
Reply = tuple[Hashable, Response]

GROUP_TYPE_CLASSIC = "classic"
UNKNOWN_GENERATION = -1


# --------------------------------------------------------------------------------------------
# Output and write-failure bookkeeping


@dataclass(frozen=True, slots=True)
class SyncWriteFailed:
    """The group record written on the leader's SyncGroup (I1) failed: answer ``handles``
    (the syncs the Output completed) with the error and, if the group is still Stable at
    ``generation``, clear assignments and rebalance (F3, C5)."""

    group_id: str
    generation: int
    handles: tuple[Hashable, ...]


@dataclass(frozen=True, slots=True)
class StaticReplaceWriteFailed:
    """The group record written on a static member's replacement in Stable (L3) failed:
    revert the replacement (if nothing happened since) and answer the JoinGroup with the
    error, as Kafka does."""

    group_id: str
    generation: int
    instance_id: str
    old_member_id: str
    new_member_id: str
    old_protocols: tuple[tuple[str, bytes], ...]
    old_rebalance_timeout_ms: int
    old_session_timeout_ms: int
    old_leader_id: str | None
    handle: Hashable


@dataclass(frozen=True, slots=True)
class DeleteWriteFailed:
    """The tombstones of a DeleteGroups failed: report the error for the deleted groups."""

    handle: Hashable
    results: tuple[DeleteGroupResult, ...]
    deleted: frozenset[str]


@dataclass(frozen=True, slots=True)
class CommitWriteFailed:
    """The offset records of an OffsetCommit failed: put back the cached offsets they
    replaced (where nothing newer has been written since) and answer the commit with the
    mapped error for every partition it stored (J6)."""

    handle: Hashable
    response: OffsetCommitResponse
    group_id: str
    written: tuple[tuple[str, int, OffsetCommitValue, OffsetCommitValue | None], ...]
    """(topic, partition, value written, value it replaced), in emission order."""


FailureAction = SyncWriteFailed | StaticReplaceWriteFailed | DeleteWriteFailed | CommitWriteFailed


@dataclass(frozen=True, slots=True)
class RebalanceCompleted:
    """A rebalance that ended (the group became Stable, or Empty at a new generation), for
    the runtime's metrics. ``duration_ms`` runs from the first PreparingRebalance."""

    group_id: str
    generation: int
    members: int
    reason: str
    duration_ms: int


@dataclass(slots=True)
class Output:
    """What one shard operation produced.

    ``records``: (key, value) pairs to append in order; value None is a tombstone.
    ``replies``: (handle, response) pairs to deliver once ``records`` are durable.
    ``on_failure``: how :meth:`GroupShard.append_failed` reacts if the append fails; the
    runtime treats it as opaque and passes the whole Output back.

    Every write must fit in one batch of ``GroupConfig.max_batch_bytes``: an Output with
    ``on_failure`` actions is written atomically (one batch, or append_failed), one without
    (independent records: expired offsets' tombstones, an Empty group's record) may be cut
    into several batches.
    """

    records: list[Record] = field(default_factory=list)
    replies: list[Reply] = field(default_factory=list)
    on_failure: list[FailureAction] = field(default_factory=list)

    def reply_for(self, handle: Hashable) -> Response | None:
        """The reply for ``handle`` in this Output, if any (convenience for callers/tests)."""
        for h, resp in self.replies:
            if h == handle:
                return resp
        return None


class ShardMode(Enum):
    LOADING = "loading"
    ACTIVE = "active"
    UNLOADED = "unloaded"


# Timer kinds in the heap; entries are (deadline_ms, token, kind, group_id, member_id).
_JOIN = 0
_HEARTBEAT = 1
_PENDING = 2
_RETENTION = 3  # the shard's offset-retention check (J2-J4); group id and member id are ""
_TimerEntry = tuple[int, int, int, str, str]

_COMPACT_MIN = 64
_NONE = ErrorCode.none


def _shared(text: str) -> str:
    """One copy of strings that thousands of members repeat (client ids and hosts, protocol
    types and names), however many requests brought them."""
    return sys.intern(text)


def _shared_protocols(protocols: tuple[tuple[str, bytes], ...]) -> tuple[tuple[str, bytes], ...]:
    return tuple((sys.intern(name), metadata) for name, metadata in protocols)


_MEMBER_ID_PREFIX_MAX = 0x7FFF - 37  # "-" + a UUID after it, in a string field of a record


def _default_member_id(prefix: str) -> str:
    """B3: ``prefix-UUID``; a prefix so long that the id would not fit in a record's string
    field (or a response's) is cut short."""
    if len(prefix) * 4 > _MEMBER_ID_PREFIX_MAX:
        raw = prefix.encode("utf-8")[:_MEMBER_ID_PREFIX_MAX]
        prefix = raw.decode("utf-8", errors="ignore")
    return f"{prefix}-{uuid.uuid4()}"


def _join_error(member_id: str, error: int) -> JoinGroupResponse:
    """D13: error responses carry the member id, generation -1, no protocol, no leader."""
    return JoinGroupResponse(
        error=error,
        generation_id=UNKNOWN_GENERATION,
        protocol_type=None,
        protocol_name=None,
        leader="",
        member_id=member_id,
        members=(),
    )


def _sync_error(error: int) -> SyncGroupResponse:
    return SyncGroupResponse(error=error, protocol_type=None, protocol_name=None, assignment=b"")


def _commit_error(req: OffsetCommitRequest, error: int) -> OffsetCommitResponse:
    return OffsetCommitResponse(
        tuple(
            (topic, tuple(zip(map(_first, parts), itertools.repeat(error))))
            for topic, parts in req.topics
        )
    )


_NO_OFFSETS: dict[tuple[str, int], OffsetCommitValue] = {}  # never written


_new_tuple = tuple.__new__  # a named tuple without its constructor's frame (per partition)
_first = operator.itemgetter(0)


def _fetched(partition: int, value: OffsetCommitValue | None) -> FetchedOffset:
    if value is None:
        return _new_tuple(FetchedOffset, (partition, -1, -1, "", _NONE))
    return _new_tuple(
        FetchedOffset, (partition, value.offset, value.leader_epoch, value.metadata, _NONE)
    )


def listed_groups(
    groups: Iterable[ClassicGroup], req: ListGroupsRequest
) -> tuple[ListedGroup, ...]:
    """ListGroups' answer for ``groups``: those not Dead that pass the request's state and
    type filters (case-insensitive; an empty filter passes everything)."""
    states = {s.lower() for s in req.states_filter}
    types = {t.lower() for t in req.types_filter}
    if types and GROUP_TYPE_CLASSIC not in types:
        return ()
    return tuple(
        ListedGroup(g.group_id, g.protocol_type or "", g.state.value)
        for g in groups
        if g.state is not GroupState.DEAD and (not states or g.state.value.lower() in states)
    )


def fetched_offsets(
    offsets: Mapping[tuple[str, int], OffsetCommitValue],
    wanted: Iterable[tuple[str, Iterable[int]]] | None,
) -> tuple[tuple[str, tuple[FetchedOffset, ...]], ...]:
    """The topics of an OffsetFetch answer from a group's committed ``offsets``: every
    requested partition in request order (-1 where nothing is committed), or, ``wanted``
    None, every committed offset by topic, then partition."""
    if wanted is not None:
        return tuple(
            (topic, tuple([_fetched(p, offsets.get((topic, p))) for p in partitions]))
            for topic, partitions in wanted
        )
    by_topic: dict[str, list[tuple[int, OffsetCommitValue]]] = {}
    for (topic, partition), value in offsets.items():
        by_topic.setdefault(topic, []).append((partition, value))
    # Sorted topic by topic, on the partition numbers alone: a sort of one big list of
    # (topic, partition) keys compares strings and holds the interpreter far longer.
    return tuple(
        (topic, tuple([_fetched(p, v) for p, v in sorted(by_topic[topic], key=_first)]))
        for topic in sorted(by_topic)
    )


def map_store_error(error: int) -> int:
    """Kafka's mapping of a failed __consumer_offsets append to the error clients see
    (CoordinatorOperationExceptionHelper, GroupMetadataManager's
    appendGroupMetadataErrorToResponseError). Offset commits use it too: Kafka's coordinator
    answers a commit whose write failed with the mapped error on every partition, a batch
    over the size limit (MESSAGE_TOO_LARGE) included: UNKNOWN_SERVER_ERROR."""
    if error in (
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.not_enough_replicas,
        ErrorCode.not_enough_replicas_after_append,
        ErrorCode.request_timed_out,
    ):
        return ErrorCode.coordinator_not_available
    if error in (ErrorCode.not_leader_or_follower, ErrorCode.kafka_storage_error):
        return ErrorCode.not_coordinator
    if error in (
        ErrorCode.record_list_too_large,
        ErrorCode.message_too_large,
        ErrorCode.invalid_fetch_size,
    ):
        return ErrorCode.unknown_server_error
    if error == ErrorCode.none:
        return ErrorCode.unknown_server_error
    return error


# --------------------------------------------------------------------------------------------
# The shard


_ACTIVE = ShardMode.ACTIVE


class GroupShard:
    """The classic groups of one ``__consumer_offsets`` partition (see the module docstring).

    ``partition_for``, if given, maps a group id to its partition (normally
    ``lambda g: protocol.javahash.partition_for(g, n)``); requests for groups of other
    partitions are answered NOT_COORDINATOR. Without it the shard trusts the router.
    """

    def __init__(
        self,
        partition: int,
        config: GroupConfig | None = None,
        *,
        now_ms: int = 0,
        new_member_id: Callable[[str], str] | None = None,
        partition_for: Callable[[str], int] | None = None,
    ) -> None:
        self.partition = partition
        self.config = config if config is not None else GroupConfig()
        self._new_member_id = new_member_id if new_member_id is not None else _default_member_id
        self._partition_for = partition_for
        self._mode = ShardMode.LOADING
        self._groups: dict[str, ClassicGroup] = {}
        self._offsets: dict[str, dict[tuple[str, int], OffsetCommitValue]] = {}
        self._loaded: dict[str, GroupMetadataValue] = {}
        self._timers: list[_TimerEntry] = []
        self._next_token = 1
        self._compact_at = _COMPACT_MIN
        self._retention_token = 0
        self._out: Output | None = None
        self.skipped_records = 0
        """Records with keys this shard does not model (KIP-848 key versions), skipped."""
        self.offsets_committed = 0
        """Partition offsets accepted by OffsetCommit since start (a metrics counter)."""
        self.rebalance_observer: Callable[[RebalanceCompleted], None] | None = None
        """Called with each completed rebalance (the runtime's metrics hook)."""
        self._rebalance_started: dict[str, tuple[int, str]] = {}

    # ---- introspection ------------------------------------------------------------------

    @property
    def mode(self) -> ShardMode:
        return self._mode

    @property
    def loading(self) -> bool:
        return self._mode is ShardMode.LOADING

    def group(self, group_id: str) -> ClassicGroup | None:
        """The live group (read-only by convention), None if unknown."""
        return self._groups.get(group_id)

    def groups(self) -> Iterator[ClassicGroup]:
        return iter(list(self._groups.values()))

    def committed_offsets(self, group_id: str) -> dict[tuple[str, int], OffsetCommitValue]:
        """A copy of the latest committed offsets of ``group_id`` ((topic, partition) keys)."""
        return dict(self._offsets.get(group_id, {}))

    def offset_count(self) -> int:
        """Committed offsets held, over every group."""
        return sum(len(offsets) for offsets in self._offsets.values())

    def pending_timer_count(self) -> int:
        """Heap size including not-yet-discarded cancelled entries (for metrics/tests)."""
        return len(self._timers)

    # ---- output plumbing ----------------------------------------------------------------

    def _not_reentered(self) -> None:
        if self._out is not None:
            raise RuntimeError("GroupShard is not re-entrant")

    def _begin(self) -> Output:
        self._not_reentered()
        self._out = Output()
        return self._out

    def _end(self) -> Output:
        out = self._out
        self._out = None
        assert out is not None
        return out

    def _reply(self, handle: Hashable, response: Response) -> None:
        assert self._out is not None
        self._out.replies.append((handle, response))

    def _emit(self, key: bytes, value: bytes | None) -> None:
        assert self._out is not None
        self._out.records.append((key, value))

    def _on_failure(self, action: FailureAction) -> None:
        assert self._out is not None
        self._out.on_failure.append(action)

    # ---- timers -------------------------------------------------------------------------

    def _push(
        self,
        deadline_ms: int,
        kind: int,
        group_id: str,
        member_id: str = "",
        token: int | None = None,
    ) -> int:
        """Queue a timer entry under a new token, or under ``token`` (an entry re-queued)."""
        # Compact BEFORE pushing: the caller registers the new token only after this
        # returns, so a compaction that saw the new entry would discard it as stale.
        if len(self._timers) >= self._compact_at:
            self._compact_timers()
        if token is None:
            token = self._next_token
            self._next_token += 1
        heapq.heappush(self._timers, (deadline_ms, token, kind, group_id, member_id))
        return token

    def _compact_timers(self) -> None:
        self._timers = [e for e in self._timers if self._timer_live(e)]
        heapq.heapify(self._timers)
        # Stale entries (timers re-armed earlier or cancelled) stay at most a quarter of the heap:
        # with many idle groups the heap is a good part of their memory.
        self._compact_at = len(self._timers) + max(_COMPACT_MIN, len(self._timers) // 4)

    def _timer_live(self, entry: _TimerEntry) -> bool:
        _, token, kind, group_id, member_id = entry
        if kind == _RETENTION:
            return token == self._retention_token
        group = self._groups.get(group_id)
        if group is None:
            return False
        if kind == _JOIN:
            return group.join_timer is not None and group.join_timer.token == token
        if kind == _HEARTBEAT:
            member = group.members.get(member_id)
            return member is not None and member.heartbeat_token == token
        return group.pending_members.get(member_id) == token

    def _moved_deadline(self, entry: _TimerEntry) -> int | None:
        """The later deadline a live session timer has been pushed to since ``entry`` was
        queued (heartbeats only move it in the member), None if ``entry`` is still its due."""
        if entry[2] != _HEARTBEAT:
            return None
        deadline = self._groups[entry[3]].members[entry[4]].heartbeat_deadline
        return deadline if deadline > entry[0] else None

    def _requeue(self, entry: _TimerEntry, deadline_ms: int) -> None:
        """Queue ``entry`` again, same token, at its member's later deadline."""
        _, token, kind, group_id, member_id = entry
        self._push(deadline_ms, kind, group_id, member_id, token)

    def next_deadline(self) -> int | None:
        """The earliest live timer deadline, None if there is none (exact: entries of cancelled
        timers are dropped, session timers that heartbeats moved later are re-queued)."""
        timers = self._timers
        while timers:
            top = timers[0]
            if not self._timer_live(top):
                heapq.heappop(timers)
                continue
            moved = self._moved_deadline(top)
            if moved is None:
                return top[0]
            heapq.heappop(timers)
            self._requeue(top, moved)
        return None

    def next_wakeup(self) -> int | None:
        """A cheap lower bound of :meth:`next_deadline` (the heap's first entry, live or not):
        when to call :meth:`advance` next. Heartbeats leave it unchanged."""
        return self._timers[0][0] if self._timers else None

    def advance(self, now_ms: int) -> Output:
        """Fire every timer due at or before ``now_ms``, in deadline order."""
        self._begin()
        timers = self._timers
        while timers and timers[0][0] <= now_ms:
            entry = heapq.heappop(timers)
            if not self._timer_live(entry):
                continue
            moved = self._moved_deadline(entry)
            if moved is not None:
                self._requeue(entry, moved)
            else:
                self._fire(entry, now_ms)
        return self._end()

    def _fire(self, entry: _TimerEntry, now_ms: int) -> None:
        _, token, kind, group_id, member_id = entry
        if kind == _RETENTION:
            self._expire_offsets(now_ms)
            self._arm_retention(now_ms + self.config.offsets_retention_check_interval_ms)
            return
        group = self._groups[group_id]
        if kind == _JOIN:
            timer = group.join_timer
            assert timer is not None
            self._on_join_timer(group, timer, now_ms)
        elif kind == _HEARTBEAT:
            member = group.members[member_id]
            member.heartbeat_token = 0  # this timer is spent; the next arm queues a new one
            self._on_heartbeat_expired(group, member, now_ms)
        else:
            log.info(
                "pending member %s of group %s expired after its session timeout",
                member_id,
                group_id,
            )
            self._remove_pending_member_and_update_group(group, member_id, now_ms)

    def _arm_join(
        self,
        group: ClassicGroup,
        deadline_ms: int,
        *,
        initial: bool,
        delay_ms: int = 0,
        remaining_ms: int = 0,
    ) -> None:
        token = self._push(deadline_ms, _JOIN, group.group_id)
        group.join_timer = JoinTimer(token, deadline_ms, initial, delay_ms, remaining_ms)

    def _arm_retention(self, deadline_ms: int) -> None:
        self._retention_token = self._push(deadline_ms, _RETENTION, "")

    def _schedule_heartbeat(
        self, group: ClassicGroup, member: Member, timeout_ms: int, now_ms: int
    ) -> None:
        """G3: (re-)arm the member's liveness timer.

        A later deadline than the armed one (every heartbeat's case) only moves
        ``member.heartbeat_deadline``: the queued entry, due earlier, re-queues itself there when
        it comes up. An earlier deadline, or no armed timer, queues a new entry; older entries
        become stale by their token."""
        deadline = now_ms + timeout_ms
        if member.heartbeat_token and deadline >= member.heartbeat_deadline:
            member.heartbeat_deadline = deadline
            return
        member.heartbeat_token = self._push(
            deadline, _HEARTBEAT, group.group_id, member.member_id
        )
        member.heartbeat_deadline = deadline

    def _on_heartbeat_expired(self, group: ClassicGroup, member: Member, now_ms: int) -> None:
        """G4: expire unless awaiting join or sync (new members: only their 5-minute timer
        counts, and it counts even while awaiting join)."""
        if group.state is GroupState.DEAD:
            return
        if not member.is_new and (member.awaiting_join or member.awaiting_sync):
            return  # re-armed when the join/sync completes
        log.info(
            "member %s of group %s (generation %d) failed its %s; removing it",
            member.member_id,
            group.group_id,
            group.generation,
            "new-member join timeout" if member.is_new else "session timeout",
        )
        self._remove_member_and_update_group(group, member, now_ms)

    def _on_join_timer(self, group: ClassicGroup, timer: JoinTimer, now_ms: int) -> None:
        """E2/E3: the delayed join expired."""
        if timer.initial and group.new_member_added and timer.remaining_ms != 0:
            group.new_member_added = False
            delay = min(self.config.initial_rebalance_delay_ms, timer.remaining_ms)
            remaining = max(timer.remaining_ms - timer.delay_ms, 0)
            self._arm_join(
                group, now_ms + delay, initial=True, delay_ms=delay, remaining_ms=remaining
            )
            return
        self._complete_join(group, now_ms)

    # ---- common checks --------------------------------------------------------------------

    def _gate(self, group_id: str, *, empty_id_ok: bool) -> int | None:
        """D1's first checks: invalid group id, not coordinator, loading."""
        if self._mode is _ACTIVE and group_id:  # the usual case, answered first
            route = self._partition_for
            if route is None or route(group_id) == self.partition:
                return None
        if group_id == "" and not empty_id_ok:
            return ErrorCode.invalid_group_id
        if self._mode is ShardMode.UNLOADED:
            return ErrorCode.not_coordinator
        if self._partition_for is not None and self._partition_for(group_id) != self.partition:
            return ErrorCode.not_coordinator
        if self._mode is ShardMode.LOADING:
            return ErrorCode.coordinator_load_in_progress
        return None

    @staticmethod
    def _validate_current_member(
        group: ClassicGroup, member_id: str, instance_id: str | None
    ) -> int | None:
        """D7/L7: an instance id must be registered to exactly this member id."""
        if instance_id is not None:
            current = group.static_member_id(instance_id)
            if current is None:
                return ErrorCode.unknown_member_id
            if current != member_id:
                return ErrorCode.fenced_instance_id
        if not group.has(member_id):
            return ErrorCode.unknown_member_id
        return None

    # ---- JoinGroup (D) --------------------------------------------------------------------

    def join_group(self, handle: Hashable, req: JoinGroupRequest, now_ms: int) -> Output:
        """JoinGroup (D1-D13, L3, L4). May park: the reply then comes in a later Output."""
        self._begin()
        error = self._gate(req.group_id, empty_id_ok=False)
        if error is not None:
            self._reply(handle, _join_error(req.member_id, error))
        elif not (
            self.config.min_session_timeout_ms
            <= req.session_timeout_ms
            <= self.config.max_session_timeout_ms
        ):
            self._reply(handle, _join_error(req.member_id, ErrorCode.invalid_session_timeout))
        elif join_record_floor(req) > self.config.max_batch_bytes:
            # No group record holding this member could ever be written: Kafka would fail the
            # group's SyncGroup with UNKNOWN_SERVER_ERROR at every generation. Say so now,
            # without taking the metadata into the group.
            log.warning(
                "group %s: JoinGroup of %s refused: its protocol metadata cannot fit in a"
                " group record of at most %d bytes",
                req.group_id,
                req.member_id or req.client_id,
                self.config.max_batch_bytes,
            )
            self._reply(handle, _join_error(req.member_id, ErrorCode.unknown_server_error))
        else:
            self._join(handle, req, now_ms)
        return self._end()

    def _accept_joining_member(self, group: ClassicGroup, member_id: str) -> bool:
        """D2."""
        state = group.state
        if state in (GroupState.EMPTY, GroupState.DEAD):
            return True
        if state is GroupState.PREPARING_REBALANCE:
            return (
                group.has(member_id) and group.get(member_id).awaiting_join
            ) or group.num_awaiting_join < self.config.max_size
        return group.has(member_id) or len(group.members) < self.config.max_size

    def _join(self, handle: Hashable, req: JoinGroupRequest, now_ms: int) -> None:
        is_unknown = req.member_id == ""
        group = self._groups.get(req.group_id)
        if group is None:
            if not is_unknown:
                self._reply(handle, _join_error(req.member_id, ErrorCode.unknown_member_id))
                return
            group = ClassicGroup(req.group_id, state_timestamp_ms=now_ms)  # C2
            self._groups[req.group_id] = group

        if not self._accept_joining_member(group, req.member_id):
            if group.has(req.member_id):
                self._remove_member(group, req.member_id)
            else:
                group.remove(req.member_id)  # drops a pending id
            self._reply(handle, _join_error("", ErrorCode.group_max_size_reached))
        elif is_unknown:
            self._new_member_join(handle, group, req, now_ms)
        else:
            self._current_member_join(handle, group, req, now_ms)

        if group.state is GroupState.PREPARING_REBALANCE:
            self._try_complete_join(group, now_ms)

    def _new_member_join(
        self, handle: Hashable, group: ClassicGroup, req: JoinGroupRequest, now_ms: int
    ) -> None:
        """D3."""
        if group.state is GroupState.DEAD:
            self._reply(handle, _join_error("", ErrorCode.coordinator_not_available))
            return
        names = [name for name, _ in req.protocols]
        if not group.supports_protocols(req.protocol_type, names):
            self._reply(handle, _join_error("", ErrorCode.inconsistent_group_protocol))
            return
        instance_id = req.group_instance_id
        new_id = self._new_member_id(instance_id if instance_id is not None else req.client_id)
        if instance_id is not None:
            old_id = group.static_member_id(instance_id)
            if old_id is not None:
                self._update_static_member_and_rebalance(
                    handle, group, req, instance_id, old_id, new_id, now_ms
                )
            else:
                self._add_member_and_rebalance(handle, group, req, new_id, now_ms)
        elif req.require_known_member_id:
            # D3/D4: hand out an id and wait for the member to come back with it.
            token = self._push(now_ms + req.session_timeout_ms, _PENDING, group.group_id, new_id)
            group.add_pending(new_id, token)
            self._reply(handle, _join_error(new_id, ErrorCode.member_id_required))
        else:
            self._add_member_and_rebalance(handle, group, req, new_id, now_ms)

    def _current_member_join(
        self, handle: Hashable, group: ClassicGroup, req: JoinGroupRequest, now_ms: int
    ) -> None:
        """D6-D8."""
        member_id = req.member_id
        if group.state is GroupState.DEAD:
            self._reply(handle, _join_error(member_id, ErrorCode.coordinator_not_available))
            return
        names = [name for name, _ in req.protocols]
        if not group.supports_protocols(req.protocol_type, names):
            self._reply(handle, _join_error(member_id, ErrorCode.inconsistent_group_protocol))
            return
        if group.is_pending(member_id) and req.group_instance_id is None:
            self._add_member_and_rebalance(handle, group, req, member_id, now_ms)
            return
        error = self._validate_current_member(group, member_id, req.group_instance_id)
        if error is not None:
            self._reply(handle, _join_error(member_id, error))
            return
        member = group.get(member_id)
        state = group.state
        if state is GroupState.PREPARING_REBALANCE:
            self._update_member_and_rebalance(handle, group, member, req, now_ms)
        elif state is GroupState.COMPLETING_REBALANCE:
            if member.matches(req.protocols):
                # The member probably lost its JoinGroup response: same generation again.
                self._reply(handle, self._join_success(group, member_id))
            else:
                self._update_member_and_rebalance(handle, group, member, req, now_ms)
        elif state is GroupState.STABLE:
            if group.is_leader(member_id) or not member.matches(req.protocols):
                self._update_member_and_rebalance(handle, group, member, req, now_ms)
            else:
                self._reply(handle, self._join_success(group, member_id, with_members=False))
        else:
            self._reply(handle, _join_error(member_id, ErrorCode.unknown_member_id))

    def _join_success(
        self, group: ClassicGroup, member_id: str, *, with_members: bool = True
    ) -> JoinGroupResponse:
        is_leader = group.is_leader(member_id)
        return JoinGroupResponse(
            error=ErrorCode.none,
            generation_id=group.generation,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            leader=group.leader_id or "",
            member_id=member_id,
            members=group.current_member_metadata() if is_leader and with_members else (),
        )

    def _add_member_and_rebalance(
        self,
        handle: Hashable,
        group: ClassicGroup,
        req: JoinGroupRequest,
        member_id: str,
        now_ms: int,
    ) -> None:
        """D10."""
        member = Member(
            member_id=member_id,
            group_instance_id=req.group_instance_id,
            client_id=_shared(req.client_id),
            client_host=_shared(req.client_host),
            rebalance_timeout_ms=req.rebalance_timeout_ms,
            session_timeout_ms=req.session_timeout_ms,
            protocol_type=_shared(req.protocol_type),
            protocols=_shared_protocols(req.protocols),
            is_new=True,
        )
        if group.state is GroupState.PREPARING_REBALANCE and group.generation == 0:
            group.new_member_added = True
        group.add(member, handle, awaiting=True)
        # New members cannot heartbeat yet: only the new-member join timeout applies.
        self._schedule_heartbeat(group, member, self.config.new_member_join_timeout_ms, now_ms)
        log.debug(
            "member %s (instance %s) joins group %s in state %s",
            member_id,
            req.group_instance_id,
            group.group_id,
            group.state.value,
        )
        self._maybe_prepare_rebalance(group, now_ms, f"new member {member_id} joined")

    def _update_member_and_rebalance(
        self,
        handle: Hashable,
        group: ClassicGroup,
        member: Member,
        req: JoinGroupRequest,
        now_ms: int,
    ) -> None:
        displaced, old_handle = group.update_member(
            member,
            req.protocols,
            req.rebalance_timeout_ms,
            req.session_timeout_ms,
            handle,
            awaiting=True,
        )
        if displaced:
            # A second JoinGroup from the same member replaces the parked one.
            self._reply(old_handle, _join_error(member.member_id, ErrorCode.rebalance_in_progress))
        self._maybe_prepare_rebalance(
            group, now_ms, f"member {member.member_id} rejoined in {group.state.value}"
        )

    def _fence_parked(self, group: ClassicGroup, member: Member, error: int) -> None:
        """Answer the member's parked JoinGroup/SyncGroup with ``error``."""
        if member.awaiting_join:
            h = group.clear_join(member)
            self._reply(h, _join_error(member.member_id, error))
        if member.awaiting_sync:
            h = member.sync_handle
            member.awaiting_sync = False
            member.sync_handle = None
            self._reply(h, _sync_error(error))

    def _update_static_member_and_rebalance(
        self,
        handle: Hashable,
        group: ClassicGroup,
        req: JoinGroupRequest,
        instance_id: str,
        old_id: str,
        new_id: str,
        now_ms: int,
    ) -> None:
        """L3: a known instance rejoins with member id "": give it a new id."""
        old_leader = group.leader_id
        member = group.get(old_id)
        old_protocols = member.protocols
        old_rebalance_timeout = member.rebalance_timeout_ms
        old_session_timeout = member.session_timeout_ms
        self._fence_parked(group, member, ErrorCode.fenced_instance_id)
        group.replace_static_member(instance_id, old_id, new_id)
        group.update_member(
            member,
            req.protocols,
            req.rebalance_timeout_ms,
            req.session_timeout_ms,
            handle,
            awaiting=True,
        )
        self._schedule_heartbeat(group, member, member.session_timeout_ms, now_ms)
        log.info(
            "static member %s of group %s replaced by %s in state %s",
            old_id,
            group.group_id,
            new_id,
            group.state.value,
        )
        state = group.state
        if state is GroupState.STABLE:
            if group.select_protocol() != group.protocol_name:
                self._maybe_prepare_rebalance(
                    group, now_ms, f"static member {new_id} changed the selected protocol"
                )
                return
            # No rebalance: persist the new member id and answer at once (after the write).
            self._emit_group_record(
                group, {m.member_id: m.assignment for m in group.members.values()}
            )
            group.clear_join(member)
            is_leader = group.is_leader(new_id)
            if req.supports_skip_assignment:
                response = JoinGroupResponse(
                    error=ErrorCode.none,
                    generation_id=group.generation,
                    protocol_type=group.protocol_type,
                    protocol_name=group.protocol_name,
                    leader=group.leader_id or "",
                    member_id=new_id,
                    members=group.current_member_metadata() if is_leader else (),
                    skip_assignment=is_leader,
                )
            else:
                # The old leader id keeps the rejoiner from acting as leader in a Stable group.
                response = JoinGroupResponse(
                    error=ErrorCode.none,
                    generation_id=group.generation,
                    protocol_type=group.protocol_type,
                    protocol_name=group.protocol_name,
                    leader=old_leader or "",
                    member_id=new_id,
                    members=(),
                )
            self._reply(handle, response)
            self._on_failure(
                StaticReplaceWriteFailed(
                    group_id=group.group_id,
                    generation=group.generation,
                    instance_id=instance_id,
                    old_member_id=old_id,
                    new_member_id=new_id,
                    old_protocols=old_protocols,
                    old_rebalance_timeout_ms=old_rebalance_timeout,
                    old_session_timeout_ms=old_session_timeout,
                    old_leader_id=old_leader,
                    handle=handle,
                )
            )
        elif state is GroupState.COMPLETING_REBALANCE:
            # The leader may already hold the old id in its assignment: start over.
            self._prepare_rebalance(group, now_ms, f"static member {new_id} replaced {old_id}")
        # PreparingRebalance: stays parked until the join completes.

    # ---- rebalance (D11, E) ---------------------------------------------------------------

    def _maybe_prepare_rebalance(self, group: ClassicGroup, now_ms: int, reason: str) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group, now_ms, reason)

    def _prepare_rebalance(self, group: ClassicGroup, now_ms: int, reason: str) -> None:
        """D11."""
        if group.state is GroupState.COMPLETING_REBALANCE:
            self._reset_and_propagate_assignment_error(
                group, ErrorCode.rebalance_in_progress, now_ms
            )
        initial = group.state is GroupState.EMPTY
        if group.state is not GroupState.COMPLETING_REBALANCE:
            self._rebalance_started[group.group_id] = (now_ms, reason)
        group.transition_to(GroupState.PREPARING_REBALANCE, now_ms)
        if initial:
            delay = self.config.initial_rebalance_delay_ms
            self._arm_join(
                group,
                now_ms + delay,
                initial=True,
                delay_ms=delay,
                remaining_ms=max(group.rebalance_timeout_ms() - delay, 0),
            )
        else:
            self._arm_join(group, now_ms + group.rebalance_timeout_ms(), initial=False)
        log.info(
            "group %s preparing to rebalance (generation %d): %s",
            group.group_id,
            group.generation,
            reason,
        )
        if not initial:
            self._try_complete_join(group, now_ms)

    def _try_complete_join(self, group: ClassicGroup, now_ms: int) -> None:
        """E1/E9: complete early once every member rejoined and no id is pending; the
        initial delayed join (E3) never completes early."""
        timer = group.join_timer
        if (
            group.state is GroupState.PREPARING_REBALANCE
            and timer is not None
            and not timer.initial
            and group.all_members_joined()
        ):
            self._complete_join(group, now_ms)

    def _complete_join(self, group: ClassicGroup, now_ms: int) -> None:
        """E4-E7."""
        group.join_timer = None
        for member in group.not_yet_rejoined():
            if not member.is_static:
                log.info(
                    "member %s of group %s did not rejoin; removing it",
                    member.member_id,
                    group.group_id,
                )
                self._remove_member(group, member.member_id)
        if group.state is GroupState.DEAD:
            return
        if group.members and not group.maybe_elect_new_joined_leader():
            log.warning(
                "group %s could not complete its rebalance: no member rejoined", group.group_id
            )
            self._arm_join(group, now_ms + group.rebalance_timeout_ms(), initial=False)
            return
        group.init_next_generation(now_ms)
        if group.state is GroupState.EMPTY:
            log.info("group %s is Empty at generation %d", group.group_id, group.generation)
            self._emit_group_record(group, {})
            self._rebalance_completed(group, now_ms)
            return
        log.debug(
            "group %s generation %d: protocol %s, leader %s, %d members",
            group.group_id,
            group.generation,
            group.protocol_name,
            group.leader_id,
            len(group.members),
        )
        leader_view = group.current_member_metadata()
        for member in list(group.members.values()):
            if member.awaiting_join:
                h = group.clear_join(member)
                self._reply(
                    h,
                    JoinGroupResponse(
                        error=ErrorCode.none,
                        generation_id=group.generation,
                        protocol_type=group.protocol_type,
                        protocol_name=group.protocol_name,
                        leader=group.leader_id or "",
                        member_id=member.member_id,
                        members=leader_view if group.is_leader(member.member_id) else (),
                    ),
                )
            self._schedule_heartbeat(group, member, member.session_timeout_ms, now_ms)
            member.is_new = False

    def _reset_and_propagate_assignment_error(
        self, group: ClassicGroup, error: int, now_ms: int
    ) -> None:
        for member in group.members.values():
            member.assignment = b""
        self._propagate_assignment(group, error, now_ms)

    def _propagate_assignment(self, group: ClassicGroup, error: int, now_ms: int) -> list[Hashable]:
        """Answer every parked SyncGroup; returns their handles."""
        ok = error == ErrorCode.none
        answered: list[Hashable] = []
        for member in group.members.values():
            if not member.awaiting_sync:
                continue
            h = member.sync_handle
            member.awaiting_sync = False
            member.sync_handle = None
            self._reply(
                h,
                SyncGroupResponse(
                    error=error,
                    protocol_type=group.protocol_type if ok else None,
                    protocol_name=group.protocol_name if ok else None,
                    assignment=member.assignment,
                ),
            )
            answered.append(h)
            self._schedule_heartbeat(group, member, member.session_timeout_ms, now_ms)
        return answered

    # ---- removal (G7, H3) -----------------------------------------------------------------

    def _remove_member(self, group: ClassicGroup, member_id: str) -> None:
        """Drop a member; a parked JoinGroup gets UNKNOWN_MEMBER_ID with member id "" (as
        Kafka does, so a still-live client rejoins), a parked SyncGroup UNKNOWN_MEMBER_ID."""
        member = group.members.get(member_id)
        if member is None:
            group.remove(member_id)
            return
        if member.awaiting_join:
            h = group.clear_join(member)
            self._reply(h, _join_error("", ErrorCode.unknown_member_id))
        if member.awaiting_sync:
            h = member.sync_handle
            member.awaiting_sync = False
            member.sync_handle = None
            self._reply(h, _sync_error(ErrorCode.unknown_member_id))
        group.remove(member_id)
        member.heartbeat_token = 0

    def _remove_member_and_update_group(
        self, group: ClassicGroup, member: Member, now_ms: int
    ) -> None:
        """G7."""
        self._remove_member(group, member.member_id)
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance(group, now_ms, f"member {member.member_id} removed")
        elif group.state is GroupState.PREPARING_REBALANCE:
            self._try_complete_join(group, now_ms)

    def _remove_pending_member_and_update_group(
        self, group: ClassicGroup, member_id: str, now_ms: int
    ) -> None:
        """G6."""
        group.remove(member_id)
        if group.state is GroupState.PREPARING_REBALANCE:
            self._try_complete_join(group, now_ms)

    # ---- SyncGroup (F) --------------------------------------------------------------------

    def sync_group(self, handle: Hashable, req: SyncGroupRequest, now_ms: int) -> Output:
        """SyncGroup (F2-F6). Parks in CompletingRebalance until the leader's assignment."""
        self._begin()
        error = self._gate(req.group_id, empty_id_ok=False)
        if error == ErrorCode.coordinator_load_in_progress:
            # K3: the rebalance state is lost; make the member rejoin (old clients do not
            # know COORDINATOR_LOAD_IN_PROGRESS here).
            error = ErrorCode.rebalance_in_progress
        if error is not None:
            self._reply(handle, _sync_error(error))
        else:
            self._sync(handle, req, now_ms)
        return self._end()

    def _sync(self, handle: Hashable, req: SyncGroupRequest, now_ms: int) -> None:
        group = self._groups.get(req.group_id)
        if group is None:
            self._reply(handle, _sync_error(ErrorCode.unknown_member_id))
            return
        error: int | None
        if group.state is GroupState.DEAD:
            error = ErrorCode.coordinator_not_available
        else:
            error = self._validate_current_member(group, req.member_id, req.group_instance_id)
            if error is None:
                if req.generation_id != group.generation:
                    error = ErrorCode.illegal_generation
                elif (
                    req.protocol_type is not None and req.protocol_type != group.protocol_type
                ) or (req.protocol_name is not None and req.protocol_name != group.protocol_name):
                    error = ErrorCode.inconsistent_group_protocol
        if error is not None:
            self._reply(handle, _sync_error(error))
            return

        state = group.state
        if state is GroupState.EMPTY:
            self._reply(handle, _sync_error(ErrorCode.unknown_member_id))
        elif state is GroupState.PREPARING_REBALANCE:
            self._reply(handle, _sync_error(ErrorCode.rebalance_in_progress))
        elif state is GroupState.COMPLETING_REBALANCE:
            member = group.get(req.member_id)
            if member.awaiting_sync:
                self._reply(member.sync_handle, _sync_error(ErrorCode.rebalance_in_progress))
            member.awaiting_sync = True
            member.sync_handle = handle
            if group.is_leader(req.member_id):
                self._complete_sync(group, req, now_ms)
        else:  # Stable
            member = group.get(req.member_id)
            self._reply(
                handle,
                SyncGroupResponse(
                    error=ErrorCode.none,
                    protocol_type=group.protocol_type,
                    protocol_name=group.protocol_name,
                    assignment=member.assignment,
                ),
            )
            self._schedule_heartbeat(group, member, member.session_timeout_ms, now_ms)

    def _complete_sync(self, group: ClassicGroup, req: SyncGroupRequest, now_ms: int) -> None:
        """F3: the leader's assignment arrived: fill gaps, write the group record (I1),
        answer every parked sync and become Stable. Replies go out once the record is
        durable; :meth:`append_failed` undoes this if it is not."""
        given = dict(req.assignments)
        assignment = {mid: given.get(mid, b"") for mid in group.members}
        missing = [mid for mid in group.members if mid not in given]
        if missing:
            log.warning(
                "group %s generation %d: empty assignment for members %s",
                group.group_id,
                group.generation,
                missing,
            )
        value = self._group_value(group, assignment)
        try:
            size: int | None = group_record_batch_size(group.group_id, value)
        except SchemaError:
            size = None  # a string too long for its field: cannot be written at all
        if size is None or size > self.config.max_batch_bytes:
            # Kafka's runtime fails this write before changing anything; the failure answers
            # every member awaiting its assignment (the leader too) UNKNOWN_SERVER_ERROR and
            # the group rebalances (F3, C5). Do the same without building the record.
            log.warning(
                "group %s generation %d: the group record (%s bytes) does not fit in one batch"
                " of at most %d bytes; rebalancing",
                group.group_id,
                group.generation,
                "unencodable" if size is None else size,
                self.config.max_batch_bytes,
            )
            self._reset_and_propagate_assignment_error(
                group, ErrorCode.unknown_server_error, now_ms
            )
            self._maybe_prepare_rebalance(group, now_ms, "the group record is too large to store")
            return
        self._emit(encode_key(GroupMetadataKey(group.group_id)), encode_group_metadata_value(value))
        for mid, member in group.members.items():
            member.assignment = assignment[mid]
        handles = self._propagate_assignment(group, ErrorCode.none, now_ms)
        group.transition_to(GroupState.STABLE, now_ms)
        # At INFO the "rebalance completed" line below says as much.
        log.debug("group %s is Stable at generation %d", group.group_id, group.generation)
        self._rebalance_completed(group, now_ms)
        self._on_failure(SyncWriteFailed(group.group_id, group.generation, tuple(handles)))

    def _rebalance_completed(self, group: ClassicGroup, now_ms: int) -> None:
        started, reason = self._rebalance_started.pop(group.group_id, (now_ms, "unknown"))
        done = RebalanceCompleted(
            group.group_id, group.generation, len(group.members), reason, now_ms - started
        )
        log.info(
            "rebalance completed: group=%s generation=%d members=%d reason=%r duration_ms=%d",
            done.group_id,
            done.generation,
            done.members,
            done.reason,
            done.duration_ms,
        )
        if self.rebalance_observer is not None:
            self.rebalance_observer(done)

    # ---- Heartbeat (G) --------------------------------------------------------------------

    def heartbeat(self, handle: Hashable, req: HeartbeatRequest, now_ms: int) -> Output:
        """Heartbeat (G2)."""
        error = self.heartbeat_now(
            req.group_id, req.generation_id, req.member_id, req.group_instance_id, now_ms
        )
        self._begin()
        self._reply(handle, HeartbeatResponse(error))
        return self._end()

    def heartbeat_now(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        now_ms: int,
    ) -> int:
        """Heartbeat (G2) without the Output plumbing: its error code. A heartbeat never emits
        records nor answers another request, so the hot path of a busy coordinator can skip
        building an Output for it."""
        self._not_reentered()
        error = self._gate(group_id, empty_id_ok=False)
        if error == ErrorCode.coordinator_load_in_progress:
            return ErrorCode.none  # K3: answer blindly while loading
        if error is not None:
            return error
        group = self._groups.get(group_id)
        if group is None:
            return ErrorCode.unknown_member_id
        if group.state is GroupState.DEAD:
            return ErrorCode.coordinator_not_available
        if group_instance_id is not None:
            error = self._validate_current_member(group, member_id, group_instance_id)
            if error is not None:
                return error
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.unknown_member_id
        if generation_id != group.generation:
            return ErrorCode.illegal_generation
        state = group.state
        if state is GroupState.EMPTY:
            return ErrorCode.unknown_member_id
        self._schedule_heartbeat(group, member, member.session_timeout_ms, now_ms)
        if state is GroupState.PREPARING_REBALANCE:
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    # ---- LeaveGroup (H) -------------------------------------------------------------------

    def leave_group(self, handle: Hashable, req: LeaveGroupRequest, now_ms: int) -> Output:
        """LeaveGroup (H3); v3+ batches members."""
        self._begin()
        error = self._gate(req.group_id, empty_id_ok=False)
        group = self._groups.get(req.group_id)
        if error is not None:
            response = LeaveGroupResponse(error, ())
        elif group is None:
            response = LeaveGroupResponse(
                ErrorCode.none,
                tuple(
                    LeaveMemberResult(m.member_id, m.group_instance_id, ErrorCode.unknown_member_id)
                    for m in req.members
                ),
            )
        elif group.state is GroupState.DEAD:
            response = LeaveGroupResponse(ErrorCode.coordinator_not_available, ())
        else:
            results = []
            for leaving in req.members:
                err = self._leave_one(group, leaving.member_id, leaving.group_instance_id, now_ms)
                results.append(LeaveMemberResult(leaving.member_id, leaving.group_instance_id, err))
            response = LeaveGroupResponse(ErrorCode.none, tuple(results))
        self._reply(handle, response)
        return self._end()

    def _leave_one(
        self, group: ClassicGroup, member_id: str, instance_id: str | None, now_ms: int
    ) -> int:
        if member_id == "":
            # Administrative removal by instance id.
            current = group.static_member_id(instance_id)
            if current is None:
                return ErrorCode.unknown_member_id
            self._leave_member(group, current, now_ms)
            return ErrorCode.none
        if group.is_pending(member_id):
            log.info("pending member %s left group %s", member_id, group.group_id)
            self._remove_pending_member_and_update_group(group, member_id, now_ms)
            return ErrorCode.none
        error = self._validate_current_member(group, member_id, instance_id)
        if error is not None:
            return error
        self._leave_member(group, member_id, now_ms)
        return ErrorCode.none

    def _leave_member(self, group: ClassicGroup, member_id: str, now_ms: int) -> None:
        log.info("member %s left group %s", member_id, group.group_id)
        self._remove_member_and_update_group(group, group.get(member_id), now_ms)

    # ---- ListGroups / DescribeGroups / DeleteGroups ---------------------------------------

    def list_groups(self, handle: Hashable, req: ListGroupsRequest, now_ms: int) -> Output:
        """ListGroups: this shard's groups, filtered by state and type (case-insensitive)."""
        self._begin()
        if self._mode is ShardMode.LOADING:
            response = ListGroupsResponse(ErrorCode.coordinator_load_in_progress, ())
        else:
            response = ListGroupsResponse(ErrorCode.none, listed_groups(self._groups.values(), req))
        self._reply(handle, response)
        return self._end()

    def describe_groups(self, handle: Hashable, req: DescribeGroupsRequest, now_ms: int) -> Output:
        """DescribeGroups; an unknown group is reported Dead with error NONE."""
        self._begin()
        described = []
        for group_id in req.group_ids:
            error = self._gate(group_id, empty_id_ok=True)
            group = self._groups.get(group_id)
            if error is not None:
                described.append(DescribedGroup(error, group_id, "", "", "", ()))
            elif group is None:
                described.append(
                    DescribedGroup(ErrorCode.none, group_id, GroupState.DEAD.value, "", "", ())
                )
            else:
                described.append(self._describe(group))
        self._reply(handle, DescribeGroupsResponse(tuple(described)))
        return self._end()

    @staticmethod
    def _describe(group: ClassicGroup) -> DescribedGroup:
        stable = group.state is GroupState.STABLE
        protocol = (group.protocol_name or "") if stable else ""
        members = tuple(
            DescribedMember(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                metadata=m.metadata(protocol) if stable else b"",
                assignment=m.assignment if stable else b"",
            )
            for m in group.members.values()
        )
        return DescribedGroup(
            ErrorCode.none,
            group.group_id,
            group.state.value,
            group.protocol_type or "",
            protocol,
            members,
        )

    def delete_groups(self, handle: Hashable, req: DeleteGroupsRequest, now_ms: int) -> Output:
        """DeleteGroups: only Empty groups; writes offset tombstones then a group tombstone."""
        self._begin()
        results: dict[str, int] = {}
        deleted: list[ClassicGroup] = []
        for group_id in dict.fromkeys(req.group_ids):
            error = self._gate(group_id, empty_id_ok=True)
            group = self._groups.get(group_id)
            if error is not None:
                results[group_id] = error
            elif group is None or group.state is GroupState.DEAD:
                results[group_id] = ErrorCode.group_id_not_found
            elif group.state is GroupState.EMPTY:
                deleted.append(group)
                results[group_id] = ErrorCode.none
            else:
                results[group_id] = ErrorCode.non_empty_group
        size = tombstones_batch_size(
            (g.group_id, self._offsets.get(g.group_id, _NO_OFFSETS), True) for g in deleted
        )
        if size > self.config.max_batch_bytes:
            # Kafka writes a shard's deletions atomically and fails them all, before
            # forgetting anything, when they do not fit in one batch: every group this
            # request named here gets UNKNOWN_SERVER_ERROR.
            log.warning(
                "DeleteGroups of %d groups refused: %d bytes of tombstones exceed one batch of"
                " at most %d bytes",
                len(deleted),
                size,
                self.config.max_batch_bytes,
            )
            results = dict.fromkeys(results, ErrorCode.unknown_server_error)
            deleted = []
        for group in deleted:
            group.transition_to(GroupState.DEAD, now_ms)
            for topic, partition in self._offsets.pop(group.group_id, {}):
                self._emit(encode_key(OffsetCommitKey(group.group_id, topic, partition)), None)
            self._emit(encode_key(GroupMetadataKey(group.group_id)), None)
            self._discard_group(group, ErrorCode.coordinator_not_available)
        if deleted:  # one line per request: a request may delete thousands
            names = ", ".join(g.group_id for g in deleted[:10])
            more = f" and {len(deleted) - 10} more" if len(deleted) > 10 else ""
            log.info("%d groups deleted: %s%s", len(deleted), names, more)
        response = DeleteGroupsResponse(
            tuple(DeleteGroupResult(gid, err) for gid, err in results.items())
        )
        self._reply(handle, response)
        if deleted:
            self._on_failure(
                DeleteWriteFailed(handle, response.results, frozenset(g.group_id for g in deleted))
            )
        return self._end()

    def _discard_group(self, group: ClassicGroup, error: int) -> None:
        """Forget a Dead group; parked requests (none for Empty groups) get ``error``."""
        for member in list(group.members.values()):
            self._fence_parked(group, member, error)
        group.join_timer = None
        self._rebalance_started.pop(group.group_id, None)
        del self._groups[group.group_id]

    # ---- OffsetCommit / OffsetFetch / OffsetDelete (J, I6) --------------------------------

    def offset_commit(self, handle: Hashable, req: OffsetCommitRequest, now_ms: int) -> Output:
        """OffsetCommit (J6, M3), checked in Kafka's order:

        invalid (empty) group id / not coordinator / loading; unknown group: generation < 0
        creates an Empty group without protocol type (C2), else ILLEGAL_GENERATION; Dead ->
        COORDINATOR_NOT_AVAILABLE; a commit naming a member (generation >= 0, a member id or
        an instance id) must come from a current member (FENCED_INSTANCE_ID /
        UNKNOWN_MEMBER_ID) of the current generation (ILLEGAL_GENERATION); an anonymous
        commit (generation < 0, no ids) is only accepted by an Empty group (standalone
        consumer), otherwise UNKNOWN_MEMBER_ID; then by state: Empty -> store; Stable or
        PreparingRebalance -> re-arm the member's session timer and store; Completing ->
        REBALANCE_IN_PROGRESS.

        As in Kafka, an unknown group is created before the member checks run, so an
        anonymous-generation commit carrying a member or instance id leaves an Empty group
        behind (removed by the next retention check) and gets UNKNOWN_MEMBER_ID.

        Storing: partitions whose metadata exceeds ``offset_metadata_max_bytes`` UTF-8 bytes
        get OFFSET_METADATA_TOO_LARGE and are skipped; every other partition gets one
        OffsetCommitKey v1 -> OffsetCommitValue v3 record (commit time ``now_ms``) and is
        applied to the cache at once; the reply rides in the same Output, so it is sent once
        the records are durable, and :meth:`append_failed` undoes the cache update.
        """
        self._begin()
        error = self._gate(req.group_id, empty_id_ok=False)
        if error is None:
            error = self._commit(handle, req, now_ms)
        if error is not None:
            self._reply(handle, _commit_error(req, error))
        return self._end()

    def _commit(self, handle: Hashable, req: OffsetCommitRequest, now_ms: int) -> int | None:
        """Validate and store; returns the error for every partition, or None if it replied."""
        group = self._groups.get(req.group_id)
        created = group is None
        if group is None:
            if req.generation_id >= 0:
                # A member of a group this coordinator does not know: an old generation.
                return ErrorCode.illegal_generation
            # Not using Kafka for group management: a standalone consumer's group (C2).
            group = ClassicGroup(req.group_id, state_timestamp_ms=now_ms)
            self._groups[req.group_id] = group
            # DEBUG: one line per request a client can send at will would flood the log.
            log.debug("group %s created by an offset commit (standalone consumer)", req.group_id)
        error = self._validate_offset_commit(group, req)
        if error is not None:
            return error
        state = group.state
        if state is GroupState.COMPLETING_REBALANCE:
            # The member knows the new generation from its JoinGroup response but has no
            # assignment yet: let it finish the rebalance first.
            return ErrorCode.rebalance_in_progress
        limit = self.config.max_batch_bytes
        floor = offset_commit_floor(req.group_id, req.topics, self.config.offset_metadata_max_bytes)
        if floor > limit:
            # Its records cannot fit in one batch: Kafka's runtime fails the write before
            # applying any of it, and the commit is answered UNKNOWN_SERVER_ERROR throughout.
            log.warning(
                "group %s: OffsetCommit refused: its records need at least %d bytes, more than"
                " the %d of one batch",
                req.group_id,
                floor,
                limit,
            )
            if created:
                del self._groups[req.group_id]  # nothing was written: as if never created
            return ErrorCode.unknown_server_error
        if state in (GroupState.STABLE, GroupState.PREPARING_REBALANCE):
            # M3: commits during PreparingRebalance succeed; the heartbeat tells the member
            # about the rebalance.
            member = group.get(req.member_id)
            self._schedule_heartbeat(group, member, member.session_timeout_ms, now_ms)
        self._store_offsets(handle, group.group_id, req, now_ms)
        return None

    def _validate_offset_commit(self, group: ClassicGroup, req: OffsetCommitRequest) -> int | None:
        if group.state is GroupState.DEAD:
            return ErrorCode.coordinator_not_available
        if req.generation_id >= 0 or req.member_id != "" or req.group_instance_id is not None:
            error = self._validate_current_member(group, req.member_id, req.group_instance_id)
            if error is not None:
                return error
            if req.generation_id != group.generation:
                return ErrorCode.illegal_generation
            return None
        if group.state is not GroupState.EMPTY:
            # While the group has members, only members may commit.
            return ErrorCode.unknown_member_id
        return None

    def _store_offsets(
        self, handle: Hashable, group_id: str, req: OffsetCommitRequest, now_ms: int
    ) -> None:
        max_bytes = self.config.offset_metadata_max_bytes
        cache = self._offsets.get(group_id)
        assert self._out is not None
        emit = self._out.records.append  # the hot loop: one record per partition
        new_value = tuple.__new__  # OffsetCommitValue without its constructor's frame
        ok, too_large, no_topic = (
            ErrorCode.none,
            ErrorCode.offset_metadata_too_large,
            ErrorCode.unknown_topic_or_partition,
        )
        results: list[tuple[str, tuple[tuple[int, int], ...]]] = []
        written: list[tuple[str, int, OffsetCommitValue, OffsetCommitValue | None]] = []
        for topic, partitions in req.topics:
            errors: list[tuple[int, int]] = []
            try:
                key_prefix: bytes | None = offset_commit_key_prefix(group_id, topic)
            except SchemaError:
                key_prefix = None
            for partition, offset, leader_epoch, metadata in partitions:
                if metadata is None:
                    metadata = ""
                elif len(metadata) * 4 > max_bytes and len(metadata.encode("utf-8")) > max_bytes:
                    errors.append((partition, too_large))
                    continue
                if key_prefix is None:
                    # A topic or group name too long for the record key: no such topic exists.
                    errors.append((partition, no_topic))
                    continue
                try:
                    value_bytes = encode_offset_commit_fields(offset, leader_epoch, metadata, now_ms)
                except SchemaError:
                    errors.append((partition, no_topic))  # metadata over an int16 length
                    continue
                value = new_value(OffsetCommitValue, (offset, metadata, now_ms, leader_epoch, -1))
                if cache is None:
                    cache = self._offsets.setdefault(group_id, {})
                tp = (topic, partition)
                written.append((topic, partition, value, cache.get(tp)))
                cache[tp] = value
                emit((key_prefix + _I32_PACK(partition), value_bytes))
                errors.append((partition, ok))
            results.append((topic, tuple(errors)))
        response = OffsetCommitResponse(tuple(results))
        self._reply(handle, response)
        if written:
            self.offsets_committed += len(written)
            self._on_failure(CommitWriteFailed(handle, response, group_id, tuple(written)))

    def offset_fetch(self, handle: Hashable, req: OffsetFetchRequest, now_ms: int) -> Output:
        """OffsetFetch: answered in every group state and for unknown groups (J6).

        Group-level errors (then no topics): not coordinator, COORDINATOR_LOAD_IN_PROGRESS
        while loading. The empty group id is allowed, as in Kafka (old clients). ``topics``
        None returns every committed offset of the group, sorted by topic then partition;
        otherwise every requested partition comes back in request order, -1 when nothing is
        committed.

        ``require_stable`` is answered like a plain fetch: there are no transactional
        offset commits yet, and a plain commit's reply and any later fetch reply are
        delivered only after the commit's records are durable (the runtime completes a
        shard's Outputs in order), so no fetch can observe an offset that is still pending.
        """
        response = self.fetch_offsets(req.group_id, req.topics)
        self._begin()
        self._reply(handle, response)
        return self._end()

    def fetch_offsets(
        self, group_id: str, wanted: Iterable[tuple[str, Iterable[int]]] | None
    ) -> OffsetFetchResponse:
        """:meth:`offset_fetch` without the Output plumbing: a fetch emits no records and
        answers no other request. ``wanted`` None: every committed offset of the group."""
        self._not_reentered()
        error = self._gate(group_id, empty_id_ok=True)
        if error is not None:
            return OffsetFetchResponse(error, ())
        offsets = self._offsets.get(group_id, _NO_OFFSETS)
        return OffsetFetchResponse(ErrorCode.none, fetched_offsets(offsets, wanted))

    def offsets_snapshot(
        self, group_id: str
    ) -> tuple[int, dict[tuple[str, int], OffsetCommitValue]]:
        """What an OffsetFetch of ``group_id`` reads, copied as it is now: the group-level
        error (NONE if none) and the committed values. The runtime answers a big fetch from
        it with :func:`fetched_offsets`, off the event loop."""
        self._not_reentered()
        error = self._gate(group_id, empty_id_ok=True)
        if error is not None:
            return error, {}
        return ErrorCode.none, dict(self._offsets.get(group_id, _NO_OFFSETS))

    def offset_count_of(self, group_id: str) -> int:
        """Committed offsets held for ``group_id``."""
        return len(self._offsets.get(group_id, _NO_OFFSETS))

    def offset_delete(self, handle: Hashable, req: OffsetDeleteRequest, now_ms: int) -> Output:
        """OffsetDelete (Kafka's handleDeleteOffsets).

        Group-level errors (then no topics): invalid (empty) group id, not coordinator,
        loading; unknown or Dead group -> GROUP_ID_NOT_FOUND; a group with members whose
        protocol type is not ``consumer`` -> NON_EMPTY_GROUP (its subscriptions cannot be
        known). An Empty group loses every requested offset. A ``consumer`` group with
        members keeps the offsets of topics it subscribes to (GROUP_SUBSCRIBED_TO_TOPIC per
        partition) and loses the others; when its subscriptions are unknown (no completed
        generation yet, or unparseable metadata) every topic counts as subscribed.

        Each removed offset gets a tombstone; partitions without an offset still answer
        NONE. An Empty group left without offsets then goes Dead (I6, with a group
        tombstone if it ever had a generation). Like Kafka, a failed tombstone append does
        not change the (successful) reply.
        """
        self._begin()
        error = self._gate(req.group_id, empty_id_ok=False)
        group = self._groups.get(req.group_id)
        if error is None and (group is None or group.state is GroupState.DEAD):
            error = ErrorCode.group_id_not_found
        if error is None:
            assert group is not None
            if (
                group.state is not GroupState.EMPTY
                and group.protocol_type != CONSUMER_PROTOCOL_TYPE
            ):
                error = ErrorCode.non_empty_group
        if error is not None:
            self._reply(handle, OffsetDeleteResponse(error, ()))
            return self._end()
        assert group is not None
        empty = group.state is GroupState.EMPTY
        cache = self._offsets.get(group.group_id, {})
        found: dict[tuple[str, int], None] = {}  # offsets to delete, in request order
        any_eligible = False
        results: list[tuple[str, tuple[tuple[int, int], ...]]] = []
        for topic, partitions in req.topics:
            if not empty and group.is_subscribed_to(topic):
                results.append(
                    (topic, tuple((p, ErrorCode.group_subscribed_to_topic) for p in partitions))
                )
                continue
            for p in partitions:
                any_eligible = True
                if (topic, p) in cache:
                    found[(topic, p)] = None
            results.append((topic, tuple((p, ErrorCode.none) for p in partitions)))
        # The group's own tombstone comes too if the deletion leaves an Empty group that had
        # a generation without offsets (_cleanup_group).
        with_group = any_eligible and empty and len(found) == len(cache) and group.generation > 0
        size = tombstones_batch_size([(group.group_id, found, with_group)])
        if size > self.config.max_batch_bytes:
            # Kafka writes these tombstones atomically and, when they do not fit in one batch,
            # fails the request before deleting anything: a group-level UNKNOWN_SERVER_ERROR.
            log.warning(
                "group %s: OffsetDelete of %d offsets refused: %d bytes of tombstones exceed"
                " one batch of at most %d bytes",
                req.group_id,
                len(found),
                size,
                self.config.max_batch_bytes,
            )
            self._reply(handle, OffsetDeleteResponse(ErrorCode.unknown_server_error, ()))
            return self._end()
        removed = list(found)
        for tp in removed:
            del cache[tp]
        if any_eligible:
            self._cleanup_group(group, removed, now_ms)
            log.info("group %s: %d offsets deleted by OffsetDelete", req.group_id, len(removed))
        self._reply(handle, OffsetDeleteResponse(ErrorCode.none, tuple(results)))
        return self._end()

    def _cleanup_group(
        self, group: ClassicGroup, removed: list[tuple[str, int]], now_ms: int
    ) -> None:
        """Kafka's cleanupGroupMetadata for one group whose ``removed`` offsets are already
        gone from the cache: tombstone them; an Empty group without offsets goes Dead, is
        forgotten and, if it ever reached a generation (so a group record may exist), gets
        a group tombstone (I6). A generation-0 group only ever stored offsets."""
        group_id = group.group_id
        for topic, partition in removed:
            self._emit(encode_key(OffsetCommitKey(group_id, topic, partition)), None)
        cache = self._offsets.get(group_id)
        if cache is not None and not cache:
            del self._offsets[group_id]
            cache = None
        if group.state is GroupState.EMPTY and cache is None:
            generation = group.generation
            group.transition_to(GroupState.DEAD, now_ms)
            if generation > 0:
                self._emit(encode_key(GroupMetadataKey(group_id)), None)
            self._discard_group(group, ErrorCode.coordinator_not_available)
            log.info("group %s is Dead at generation %d (no offsets left)", group_id, generation)

    # ---- offset retention (J2-J4, I6) ------------------------------------------------------

    def _expire_offsets(self, now_ms: int) -> None:
        """The periodic retention check: expire offsets and drop Empty groups without
        offsets (Kafka's cleanupGroupMetadata with removeExpiredOffsets)."""
        expired_total = 0
        for group in list(self._groups.values()):
            expired = self._expired_offsets(group, now_ms)
            cache = self._offsets.get(group.group_id)
            if cache is not None:
                for tp in expired:
                    del cache[tp]
            expired_total += len(expired)
            self._cleanup_group(group, expired, now_ms)
        if expired_total:
            log.info("partition %d: %d offsets expired", self.partition, expired_total)

    def _expired_offsets(self, group: ClassicGroup, now_ms: int) -> list[tuple[str, int]]:
        """J2-J4. Which offsets of ``group`` have expired at ``now_ms``:

        - a group with a protocol type that is Empty: every offset, ``retention`` after the
          group became Empty (its state timestamp; for groups loaded from records without
          one, the commit time) (behaviour #10);
        - a Stable ``consumer`` group with known subscriptions: offsets of topics it does not
          subscribe to, ``retention`` after their commit;
        - a standalone group (no protocol type): every offset, ``retention`` after its commit;
        - otherwise (rebalancing, other protocol types, unknown subscriptions): none.

        An offset read from a v1 value with an explicit expire timestamp expires at that
        time instead (Kafka's old per-commit retention). There are no pending commits to
        exclude: a commit is in the cache from the moment its record is emitted, and any
        tombstone this check emits is appended after that record.
        """
        cache = self._offsets.get(group.group_id)
        if not cache:
            return []
        subscribed: frozenset[str] = frozenset()
        since_empty: int | None = None
        if group.protocol_type is not None and group.state is GroupState.EMPTY:
            since_empty = group.state_timestamp_ms
        elif (
            group.protocol_type == CONSUMER_PROTOCOL_TYPE
            and group.subscribed_topics is not None
            and group.state is GroupState.STABLE
        ):
            subscribed = group.subscribed_topics
        elif group.protocol_type is not None:
            return []
        retention = self.config.offsets_retention_ms
        expired: list[tuple[str, int]] = []
        for tp, value in cache.items():
            if tp[0] in subscribed:
                continue
            if value.expire_timestamp >= 0:
                if now_ms >= value.expire_timestamp:
                    expired.append(tp)
                continue
            base = since_empty if since_empty is not None else value.commit_timestamp
            if now_ms - base >= retention:
                expired.append(tp)
        return expired

    # ---- persistence (I1, I2, I6) ---------------------------------------------------------

    def _emit_group_record(self, group: ClassicGroup, assignment: dict[str, bytes]) -> None:
        value = self._group_value(group, assignment)
        self._emit(encode_key(GroupMetadataKey(group.group_id)), encode_group_metadata_value(value))

    @staticmethod
    def _group_value(group: ClassicGroup, assignment: dict[str, bytes]) -> GroupMetadataValue:
        """The group record's value (I2): members' subscriptions and ``assignment`` are
        referenced, not copied."""
        return GroupMetadataValue(
            protocol_type=group.protocol_type or "",
            generation=group.generation,
            protocol=group.protocol_name,
            leader=group.leader_id,
            current_state_timestamp=(
                group.state_timestamp_ms if group.state_timestamp_ms is not None else -1
            ),
            members=tuple(
                MemberMetadata(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    rebalance_timeout=m.rebalance_timeout_ms,
                    session_timeout=m.session_timeout_ms,
                    subscription=m.metadata(group.protocol_name),
                    assignment=assignment.get(m.member_id, b""),
                )
                for m in group.members.values()
            ),
        )

    # ---- append failures ------------------------------------------------------------------

    def append_failed(self, output: Output, error: int, now_ms: int) -> Output:
        """The records of ``output`` could not be appended (``error`` is the log's error).

        Returns the replies to deliver INSTEAD of ``output.replies``: the failed writes'
        requests get the mapped error (F3: and the group rebalances; L3: the replacement is
        reverted); every other reply of ``output`` is passed through unchanged (a failed
        Empty-group record is only logged, as in Kafka).
        """
        self._begin()
        mapped = map_store_error(error)
        affected: set[Hashable] = set()
        for action in output.on_failure:
            if isinstance(action, SyncWriteFailed):
                affected.update(action.handles)
            else:
                affected.add(action.handle)
        for h, resp in output.replies:
            if h not in affected:
                self._reply(h, resp)
        for action in output.on_failure:
            if isinstance(action, SyncWriteFailed):
                self._sync_write_failed(action, mapped, now_ms)
            elif isinstance(action, StaticReplaceWriteFailed):
                self._static_replace_write_failed(action, mapped, now_ms)
            elif isinstance(action, CommitWriteFailed):
                self._commit_write_failed(action, mapped)
            else:
                self._reply(
                    action.handle,
                    DeleteGroupsResponse(
                        tuple(
                            DeleteGroupResult(gid, mapped if gid in action.deleted else err)
                            for gid, err in action.results
                        )
                    ),
                )
        if output.records and not output.on_failure:
            log.warning("append of %d records failed with %s", len(output.records), error)
        return self._end()

    def _commit_write_failed(self, action: CommitWriteFailed, error: int) -> None:
        """Undo the cache update of a failed OffsetCommit, newest first, wherever the cache
        still holds the value it wrote (a later commit or tombstone wins), then answer the
        stored partitions with ``error``.

        Known limit: when two in-flight commits of the same partition both fail, the later
        one's undo restores the earlier (also failed) value; nothing durable is lost and
        the next successful commit or a reload corrects it."""
        cache = self._offsets.get(action.group_id)
        if cache is not None:
            for topic, partition, value, previous in reversed(action.written):
                tp = (topic, partition)
                if cache.get(tp) is value:
                    if previous is None:
                        del cache[tp]
                    else:
                        cache[tp] = previous
            if not cache:
                del self._offsets[action.group_id]
        log.warning(
            "group %s: storing %d committed offsets failed (%s)",
            action.group_id,
            len(action.written),
            error,
        )
        self._reply(
            action.handle,
            OffsetCommitResponse(
                tuple(
                    (topic, tuple((p, error if e == ErrorCode.none else e) for p, e in parts))
                    for topic, parts in action.response.topics
                )
            ),
        )

    def _sync_write_failed(self, action: SyncWriteFailed, error: int, now_ms: int) -> None:
        for h in action.handles:
            self._reply(h, _sync_error(error))
        group = self._groups.get(action.group_id)
        if (
            group is not None
            and group.generation == action.generation
            and group.state is GroupState.STABLE
        ):
            log.warning(
                "group %s: storing the generation %d assignment failed (%s); rebalancing",
                group.group_id,
                group.generation,
                error,
            )
            for member in group.members.values():
                member.assignment = b""
            self._maybe_prepare_rebalance(group, now_ms, "failed to store the group assignment")

    def _static_replace_write_failed(
        self, action: StaticReplaceWriteFailed, error: int, now_ms: int
    ) -> None:
        group = self._groups.get(action.group_id)
        if (
            group is not None
            and group.state is GroupState.STABLE
            and group.generation == action.generation
            and group.static_member_id(action.instance_id) == action.new_member_id
        ):
            member = group.get(action.new_member_id)
            if not member.awaiting_join and not member.awaiting_sync:
                group.update_member(
                    member,
                    action.old_protocols,
                    action.old_rebalance_timeout_ms,
                    action.old_session_timeout_ms,
                    None,
                    awaiting=False,
                )
                group.replace_static_member(
                    action.instance_id, action.new_member_id, action.old_member_id
                )
                self._schedule_heartbeat(group, member, member.session_timeout_ms, now_ms)
        self._reply(
            action.handle,
            JoinGroupResponse(
                error=error,
                generation_id=group.generation if group is not None else UNKNOWN_GENERATION,
                protocol_type=group.protocol_type if group is not None else None,
                protocol_name=group.protocol_name if group is not None else None,
                leader=action.old_leader_id or "",
                member_id="",
                members=(),
            ),
        )

    # ---- loading and unloading (K3) -------------------------------------------------------

    def replay(self, key: bytes, value: bytes | None, now_ms: int) -> None:
        """Apply one record of this shard's partition, oldest first (loading only). The
        newest value per key wins (I5); None is a tombstone; unknown key versions are
        skipped."""
        if self._mode is not ShardMode.LOADING:
            raise RuntimeError("replay() is only allowed while the shard is loading")
        decoded = decode_key(key)
        if isinstance(decoded, UnknownKey):
            self.skipped_records += 1
        elif isinstance(decoded, OffsetCommitKey):
            tp = (decoded.topic, decoded.partition)
            if value is None:
                offsets = self._offsets.get(decoded.group)
                if offsets is not None:
                    offsets.pop(tp, None)
                    if not offsets:
                        del self._offsets[decoded.group]
            else:
                commit = decode_offset_commit_value(value)
                self._offsets.setdefault(decoded.group, {})[tp] = commit
        else:
            if value is None:
                self._loaded.pop(decoded.group, None)
            else:
                self._loaded[decoded.group] = decode_group_metadata_value(value)

    def finish_loading(self, now_ms: int) -> Output:
        """K3: materialise the loaded groups (Stable with members, else Empty; groups that
        only have offsets become Empty standalone groups), schedule every member's session
        timer and the first offset-retention check (one interval from now), start serving."""
        if self._mode is not ShardMode.LOADING:
            raise RuntimeError("finish_loading() called twice or after unload()")
        self._begin()
        self._mode = ShardMode.ACTIVE
        for group_id, value in self._loaded.items():
            self._groups[group_id] = self._group_from_record(group_id, value)
        self._loaded.clear()
        for group_id in self._offsets:
            if group_id not in self._groups:
                # Offsets without a group record: a standalone consumer's group (J6).
                self._groups[group_id] = ClassicGroup(group_id, state_timestamp_ms=now_ms)
        self._arm_retention(now_ms + self.config.offsets_retention_check_interval_ms)
        for group in self._groups.values():
            if len(group.members) > self.config.max_size:
                self._prepare_rebalance(group, now_ms, "loaded group is over group.max.size")
            for member in group.members.values():
                self._schedule_heartbeat(group, member, member.session_timeout_ms, now_ms)
        log.debug("partition %d loaded: %d groups", self.partition, len(self._groups))
        return self._end()

    @staticmethod
    def _group_from_record(group_id: str, value: GroupMetadataValue) -> ClassicGroup:
        group = ClassicGroup(
            group_id,
            state=GroupState.STABLE if value.members else GroupState.EMPTY,
            state_timestamp_ms=(
                value.current_state_timestamp if value.current_state_timestamp >= 0 else None
            ),
            generation=value.generation,
            protocol_name=value.protocol,
            leader_id=value.leader,
        )
        for mm in value.members:
            protocols = ((value.protocol, mm.subscription),) if value.protocol is not None else ()
            group.add(
                Member(
                    member_id=mm.member_id,
                    group_instance_id=mm.group_instance_id,
                    client_id=_shared(mm.client_id),
                    client_host=_shared(mm.client_host),
                    rebalance_timeout_ms=(
                        mm.rebalance_timeout if mm.rebalance_timeout >= 0 else mm.session_timeout
                    ),
                    session_timeout_ms=mm.session_timeout,
                    protocol_type=value.protocol_type,
                    protocols=protocols,
                    assignment=mm.assignment,
                )
            )
        group.protocol_type = value.protocol_type or None
        group.compute_subscribed_topics()
        return group

    def unload(self, now_ms: int) -> Output:
        """K3: the partition moved away: every group goes Dead, parked requests get
        NOT_COORDINATOR, and later requests are answered NOT_COORDINATOR."""
        self._begin()
        for group in list(self._groups.values()):
            group.transition_to(GroupState.DEAD, now_ms)
            self._discard_group(group, ErrorCode.not_coordinator)
        self._groups.clear()
        self._offsets.clear()
        self._loaded.clear()
        self._timers.clear()
        self._retention_token = 0
        self._mode = ShardMode.UNLOADED
        return self._end()
