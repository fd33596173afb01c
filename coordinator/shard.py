"""``GroupShard``: the coordinator of one ``__consumer_offsets`` partition, the only part of
:mod:`coordinator` the runtime sees.

The shard is a single-writer state machine with no I/O and no clock. Every operation takes the
runtime's opaque ``handle`` for the in-flight request and the time ``now_ms``, checks that the
group is this shard's to serve (its partition, loaded, not moved away), hands the request to
the manager that owns it, and returns the :class:`coordinator.output.Output` the managers wrote:
records to append to the partition (in order) and replies to deliver once they are durable (a
reply may answer an earlier, parked request: a JoinGroup long poll, D12; a parked SyncGroup,
F3). Every handle passed in receives exactly one reply, possibly later.

- The managers: :class:`coordinator.classic.manager.ClassicGroupManager` (classic groups,
  B-H, K, L, M), :class:`coordinator.consumer.manager.ConsumerGroupManager` (KIP-848 consumer
  groups), :class:`coordinator.share.manager.ShareGroupManager` (KIP-932 share groups) and
  :class:`coordinator.offsets.OffsetManager` (committed offsets, J, I6), which sees groups of
  every type only through a narrow interface
  (:class:`coordinator.offset_groups.ShardOffsetGroups`), and
  :class:`coordinator.txn_offsets.TxnOffsets` (TxnOffsetCommit and transaction markers; the
  pending offsets live in the offsets manager). DeleteGroups spans them
  (:func:`coordinator.deletion.delete_groups`), as does the group-type check (one id space
  for all types).
- Timers (:class:`coordinator.timers.Timers`) are shared: the runtime asks
  :meth:`GroupShard.next_wakeup` and calls :meth:`GroupShard.advance` when it passes.
- State is applied eagerly. If the runtime cannot append an Output's records it calls
  :meth:`GroupShard.append_failed`, which hands each failure action to its owner
  (:func:`coordinator.append_failures.handle_failed_append`) and returns the replies to
  deliver instead.
- On start-up the shard is loading: the runtime feeds it the partition's records through
  :meth:`GroupShard.replay` (each routed by its key's record type) and then calls
  :meth:`GroupShard.finish_loading` (K3).
- What the shard holds (its mode, groups, offsets, timers) is read through the accessors of
  its base class, :class:`coordinator.shard_views.ShardViews`.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Hashable, Iterable

from kcoord.coordinator.append_failures import handle_failed_append
from kcoord.coordinator.classic.groups import default_member_id, join_error, sync_error
from kcoord.coordinator.classic.manager import ClassicGroupManager
from kcoord.coordinator.config import GroupConfig, GroupOverrides, no_overrides
from kcoord.coordinator.consumer.classic_members import ClassicMembers
from kcoord.coordinator.consumer.describe import (
    consumer_group_describe,
    listed_consumer_groups,
    not_a_classic_group,
)
from kcoord.coordinator.consumer.heartbeat_checks import heartbeat_request_error
from kcoord.coordinator.consumer.manager import ConsumerGroupManager
from kcoord.coordinator.consumer.messages import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)
from kcoord.coordinator.consumer.regex_refresh import RegexResult, apply_resolution
from kcoord.coordinator.consumer.steady import steady_heartbeat
from kcoord.coordinator.consumer.target import AssignmentResult
from kcoord.coordinator.consumer.topics import NO_TOPICS, TopicsView
from kcoord.coordinator.deletion import delete_groups
from kcoord.coordinator.messages import (
    DeleteGroupsRequest,
    DescribedGroup,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    LeaveGroupRequest,
    LeaveGroupResponse,
    ListGroupsRequest,
    ListGroupsResponse,
    OffsetCommitRequest,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    SyncGroupRequest,
    TopicsDeletedRequest,
    TopicsDeletedResponse,
    TxnMarkerRequest,
    TxnMarkerResponse,
    TxnOffsetCommitRequest,
)
from kcoord.coordinator.migration import GroupMigration
from kcoord.coordinator.offset_groups import ShardOffsetGroups
from kcoord.coordinator.offsets import OffsetManager, commit_error
from kcoord.coordinator.output import Operation, Output
from kcoord.coordinator.schemas import (
    GroupMetadataKey,
    OffsetCommitKey,
    UnknownKey,
    decode_key,
)
from kcoord.coordinator.shard_views import ShardMode, ShardViews
from kcoord.coordinator.share.describe import listed_share_groups
from kcoord.coordinator.share.manager import ShareGroupManager
from kcoord.coordinator.share.messages import ShareGroupDescribeRequest, ShareGroupHeartbeatRequest
from kcoord.coordinator.share.offsets import ShareOffsetsRequest, share_offsets
from kcoord.coordinator.share.records import SHARE_KEY_TYPES
from kcoord.coordinator.share.requests import share_group_describe, share_group_heartbeat
from kcoord.coordinator.timers import Timers
from kcoord.coordinator.topic_deletion import drop_deleted_topics
from kcoord.coordinator.txn_offsets import TxnOffsets
from kcoord.protocol.errors import ErrorCode

__all__ = ["GroupShard", "Output"]

log = logging.getLogger(__name__)

_ACTIVE = ShardMode.ACTIVE


class GroupShard(ShardViews):
    """The groups and offsets of one ``__consumer_offsets`` partition (module docstring).

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
        topics: TopicsView | None = None,
        new_consumer_member_id: Callable[[], str] | None = None,
        overrides: GroupOverrides = no_overrides,
    ) -> None:
        self.partition = partition
        self.config = config if config is not None else GroupConfig()
        self.overrides = overrides
        """The configs set on each group (Kafka's group configs), read at each heartbeat."""
        self._partition_for = partition_for
        self._mode = ShardMode.LOADING
        self._op = op = Operation()
        self.timers = Timers()
        self.classic = ClassicGroupManager(
            self.config, op, self.timers, new_member_id or default_member_id
        )
        self.consumer = ConsumerGroupManager(
            self.config, op, self.timers, topics or NO_TOPICS, new_consumer_member_id, overrides
        )
        self.share = ShareGroupManager(self.config, op, self.timers, topics or NO_TOPICS, overrides)
        """Share groups (KIP-932); ``overrides``: the groups' own configs (session timeout,
        heartbeat interval)."""
        self.classic_members = ClassicMembers(self.consumer, new_member_id or default_member_id)
        self.migration = GroupMigration(self.config, op, self.classic, self.consumer)
        offset_groups = ShardOffsetGroups(self.classic, self.consumer, self.share)
        self.offsets = OffsetManager(partition, self.config, op, self.timers, offset_groups)
        self.txn = TxnOffsets(self.offsets, op, offset_groups)
        """TxnOffsetCommit and transaction markers (pending offsets live in ``offsets``)."""
        self.skipped_records = 0
        """Records with key versions this shard does not know, skipped at load."""

    # ---- timers ----------------------------------------------------------------------------

    def next_deadline(self) -> int | None:
        """The earliest live timer deadline, None if there is none (exact)."""
        return self.timers.next_deadline()

    def next_wakeup(self) -> int | None:
        """A cheap lower bound of :meth:`next_deadline`: when to call :meth:`advance` next.
        Heartbeats leave it unchanged."""
        timers = self.timers.entries
        return timers[0][0] if timers else None

    def advance(self, now_ms: int, limit: int | None = None) -> Output:
        """Fire every timer due at or before ``now_ms``, in deadline order (at most ``limit``
        of them: the others stay due, :meth:`next_wakeup` says so)."""
        self._op.begin()
        self.timers.fire_due(now_ms, limit)
        return self._op.end()

    # ---- classic group requests (D-H) ---------------------------------------------------------

    def join_group(self, handle: Hashable, req: JoinGroupRequest, now_ms: int) -> Output:
        """JoinGroup (D1-D13, L3, L4). May park: the reply then comes in a later Output."""
        op = self._op
        op.begin()
        error = self._gate(req.group_id, empty_id_ok=False)
        if error is None and req.group_id in self.share.groups:
            # Kafka: a group of another type (share) refuses a JoinGroup this way.
            op.reply(handle, join_error("", ErrorCode.inconsistent_group_protocol))
            return op.end()
        consumer_group = self.consumer.get(req.group_id) if error is None else None
        if consumer_group is not None:
            if consumer_group.members:  # a classic member of a consumer group
                self.classic_members.join(handle, consumer_group, req, now_ms)
                return op.end()
            self.consumer.delete(req.group_id)  # an Empty consumer group becomes classic
            log.info("group %s: Empty consumer group converted to a classic group", req.group_id)
        if error is not None:
            op.reply(handle, join_error(req.member_id, error))
        else:
            self.classic.join_group(handle, req, now_ms)
        return op.end()

    def sync_group(self, handle: Hashable, req: SyncGroupRequest, now_ms: int) -> Output:
        """SyncGroup (F2-F6). Parks in CompletingRebalance until the leader's assignment."""
        op = self._op
        op.begin()
        error = self._gate(req.group_id, empty_id_ok=False)
        if error == ErrorCode.coordinator_load_in_progress:
            # K3: the rebalance state is lost; make the member rejoin (old clients do not
            # know COORDINATOR_LOAD_IN_PROGRESS here).
            error = ErrorCode.rebalance_in_progress
        consumer_group = self.consumer.get(req.group_id) if error is None else None
        if error is not None:
            op.reply(handle, sync_error(error))
        elif consumer_group is not None:
            self.classic_members.sync(handle, consumer_group, req, now_ms)
        else:
            self.classic.sync_group(handle, req, now_ms)
        return op.end()

    def heartbeat(self, handle: Hashable, req: HeartbeatRequest, now_ms: int) -> Output:
        """Heartbeat (G2)."""
        error = self.heartbeat_now(
            req.group_id, req.generation_id, req.member_id, req.group_instance_id, now_ms
        )
        op = self._op
        op.begin()
        op.reply(handle, HeartbeatResponse(error))
        return op.end()

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
        self._op.not_reentered()
        error = self._gate(group_id, empty_id_ok=False)
        if error is not None:
            if error == ErrorCode.coordinator_load_in_progress:
                return ErrorCode.none  # K3: answer blindly while loading
            return error
        error = self.classic.heartbeat(group_id, generation_id, member_id, group_instance_id, now_ms)
        if error == ErrorCode.unknown_member_id:  # not a classic group's member: a consumer group's?
            group = self.consumer.groups.get(group_id)
            if group is not None:
                return self.classic_members.heartbeat(
                    group, member_id, group_instance_id, generation_id, now_ms
                )
        return error

    def consumer_heartbeat_now(
        self, group_id: str, member_id: str, member_epoch: int, client_id: str, client_host: str, now_ms: int
    ) -> int | None:
        """A steady ConsumerGroupHeartbeat (coordinator/consumer/steady.py) without the Output
        plumbing: the heartbeat interval to answer; None when it must take the full path."""
        self._op.not_reentered()
        if self._gate(group_id, empty_id_ok=False) is not None or group_id in self.classic.groups:
            return None
        return steady_heartbeat(self.consumer, group_id, member_id, member_epoch, client_id, client_host, now_ms)

    def leave_group(self, handle: Hashable, req: LeaveGroupRequest, now_ms: int) -> Output:
        """LeaveGroup (H3); v3+ batches members."""
        op = self._op
        op.begin()
        error = self._gate(req.group_id, empty_id_ok=False)
        consumer_group = self.consumer.get(req.group_id) if error is None else None
        if error is not None:
            op.reply(handle, LeaveGroupResponse(error, ()))
        elif consumer_group is not None:
            op.reply(handle, self.classic_members.leave(consumer_group, req, now_ms))
        else:
            op.reply(handle, self.classic.leave_group(req, now_ms))
        return op.end()

    # ---- consumer group requests (KIP-848) -----------------------------------------------

    def consumer_group_heartbeat(
        self, handle: Hashable, req: ConsumerGroupHeartbeatRequest, now_ms: int
    ) -> Output:
        """ConsumerGroupHeartbeat: the routing checks, Kafka's request checks, the group-type
        check (an Empty classic group is converted, another is not this API's), then the
        consumer group manager."""
        op = self._op
        op.begin()
        if req.group_id == "":
            op.reply(handle, ConsumerGroupHeartbeatResponse(ErrorCode.invalid_request, "GroupId can't be empty."))
            return op.end()
        error = self._gate(req.group_id, empty_id_ok=False)
        response = (
            ConsumerGroupHeartbeatResponse(error)
            if error is not None
            else heartbeat_request_error(req, self.config.consumer_assignors)
        )
        if response is None and req.group_id in self.share.groups:
            response = ConsumerGroupHeartbeatResponse(
                ErrorCode.group_id_not_found, f"Group {req.group_id} is not a consumer group."
            )
        classic = self.classic.groups.get(req.group_id) if response is None else None
        if classic is not None:
            if req.member_epoch == 0 and classic.is_empty:
                self.classic.delete(req.group_id, now_ms)
                log.info("group %s: Empty classic group converted to a consumer group", req.group_id)
            elif not (req.member_epoch == 0 and self.migration.upgrade(classic, now_ms)):
                response = ConsumerGroupHeartbeatResponse(
                    ErrorCode.group_id_not_found, f"Group {req.group_id} is not a consumer group."
                )
        if response is not None:
            op.reply(handle, response)
        else:
            self.consumer.heartbeat(handle, req, now_ms)
        return op.end()

    def consumer_group_describe(
        self, handle: Hashable, req: ConsumerGroupDescribeRequest, now_ms: int
    ) -> Output:
        """ConsumerGroupDescribe: an unknown group, or one of another type, is GROUP_ID_NOT_FOUND."""
        op = self._op
        op.begin_read()
        other = lambda gid: gid in self.classic.groups or gid in self.share.groups  # noqa: E731
        default_assignor = self.config.consumer_assignors[0]
        op.reply(handle, consumer_group_describe(self.consumer, self._gate, other, default_assignor, req))
        return op.end()

    # ---- share group requests (KIP-932) -------------------------------------------------

    def share_group_heartbeat(
        self, handle: Hashable, req: ShareGroupHeartbeatRequest, now_ms: int
    ) -> Output:
        """ShareGroupHeartbeat (:func:`coordinator.share.requests.share_group_heartbeat`)."""
        self._op.begin()
        share_group_heartbeat(self.share, self._gate, self._not_share, handle, req, now_ms)
        return self._op.end()

    def share_group_describe(
        self, handle: Hashable, req: ShareGroupDescribeRequest, now_ms: int
    ) -> Output:
        """ShareGroupDescribe (:func:`coordinator.share.requests.share_group_describe`)."""
        self._op.begin_read()
        self._op.reply(handle, share_group_describe(self.share, self._gate, self._not_share, req))
        return self._op.end()

    def share_offsets(self, handle: Hashable, req: ShareOffsetsRequest, now_ms: int) -> Output:
        """The share offsets admin APIs' part here (:mod:`coordinator.share.offsets`)."""
        self._op.begin()
        share_offsets(self.share, self._gate, self._not_share, handle, req, now_ms)
        return self._op.end()

    def _not_share(self, group_id: str) -> bool:
        return group_id in self.classic.groups or group_id in self.consumer.groups

    def take_share_members_left(self) -> list[tuple[str, str]]:
        """(group id, member id) of the share members that left or were fenced since the last
        call: the runtime hands them to the broker's share layer."""
        return self.share.take_left()

    def list_groups(self, handle: Hashable, req: ListGroupsRequest, now_ms: int) -> Output:
        """ListGroups: this shard's groups, filtered by state and type (case-insensitive)."""
        op = self._op
        op.begin_read()
        if self._mode is ShardMode.LOADING:
            response = ListGroupsResponse(ErrorCode.coordinator_load_in_progress, ())
        else:
            response = ListGroupsResponse(
                ErrorCode.none,
                self.classic.listed(req)
                + listed_consumer_groups(self.consumer, req)
                + listed_share_groups(self.share, req),
            )
        op.reply(handle, response)
        return op.end()

    def describe_groups(self, handle: Hashable, req: DescribeGroupsRequest, now_ms: int) -> Output:
        """DescribeGroups; an unknown group or one of another type is Dead with GROUP_ID_NOT_FOUND
        and a message (v6+; the broker shows older versions Dead with NONE)."""
        op = self._op
        op.begin_read()
        described = []
        for group_id in req.group_ids:
            error = self._gate(group_id, empty_id_ok=True)
            if error is not None:
                described.append(DescribedGroup(error, group_id, "", "", "", ()))
            elif group_id in self.consumer.groups or group_id in self.share.groups:
                described.append(not_a_classic_group(group_id))
            else:
                described.append(self.classic.describe(group_id))
        op.reply(handle, DescribeGroupsResponse(tuple(described)))
        return op.end()

    def delete_groups(self, handle: Hashable, req: DeleteGroupsRequest, now_ms: int) -> Output:
        """DeleteGroups: only Empty groups; writes offset tombstones then a group tombstone,
        all of one shard's deletions in one atomic write (:func:`coordinator.deletion.delete_groups`)."""
        self._op.begin()
        gate = functools.partial(self._gate, empty_id_ok=True)
        delete_groups(
            self._op, gate, self.classic, self.consumer, self.share, self.offsets, handle, req, now_ms
        )
        return self._op.end()

    # ---- offset requests (J, I6) -------------------------------------------------------------

    def offset_commit(self, handle: Hashable, req: OffsetCommitRequest, now_ms: int) -> Output:
        """OffsetCommit (J6, M3): the routing checks, then the offsets manager's."""
        op = self._op
        op.begin()
        error = self._gate(req.group_id, empty_id_ok=False)
        if error is None:
            error = self.offsets.commit(handle, req, now_ms)
        if error is not None:
            op.reply(handle, commit_error(req, error))
        return op.end()

    def offset_fetch(self, handle: Hashable, req: OffsetFetchRequest, now_ms: int) -> Output:
        """OffsetFetch: answered in every group state and for unknown groups (J6).

        Group-level errors (then no topics): not coordinator, COORDINATOR_LOAD_IN_PROGRESS
        while loading. The empty group id is allowed, as in Kafka (old clients). ``topics``
        None returns every committed offset of the group, sorted by topic then partition;
        otherwise every requested partition comes back in request order, -1 when nothing is
        committed. Pending transactional offsets are never shown; with ``require_stable``
        their partitions are UNSTABLE_OFFSET_COMMIT. The reply comes after every earlier
        Output of the shard is durable (the runtime completes them in order)."""
        response = self.fetch_offsets(req.group_id, req.topics, req.require_stable)
        op = self._op
        op.begin_read()
        op.reply(handle, response)
        return op.end()

    def fetch_offsets(
        self,
        group_id: str,
        wanted: Iterable[tuple[str, Iterable[int]]] | None,
        require_stable: bool = False,
    ) -> OffsetFetchResponse:
        """:meth:`offset_fetch` without the Output plumbing: a fetch emits no records and
        answers no other request. ``wanted`` None: every committed offset of the group."""
        self._op.not_reentered()
        error = self._gate(group_id, empty_id_ok=True)
        if error is not None:
            return OffsetFetchResponse(error, ())
        return self.offsets.fetch(group_id, wanted, require_stable)

    def txn_offset_commit(self, handle: Hashable, req: TxnOffsetCommitRequest, now_ms: int) -> Output:
        """TxnOffsetCommit: the routing checks, then :class:`coordinator.txn_offsets.TxnOffsets`."""
        op = self._op
        op.begin()
        error = self._gate(req.group_id, empty_id_ok=False)
        if error is None:
            error = self.txn.commit(handle, req, now_ms)
        if error is not None:
            op.reply(handle, commit_error(req, error))
        return op.end()

    def assignment_computed(self, result: AssignmentResult, now_ms: int) -> Output:
        """An offloaded target computation (KIP-1263; a stale one is dropped), as an operation."""
        self._op.begin()
        if self._mode is _ACTIVE:
            self.consumer.batching.computed(result, now_ms)
        return self._op.end()

    def topics_deleted(self, handle: Hashable, req: TopicsDeletedRequest, now_ms: int) -> Output:
        """Topics were deleted: tombstone their offsets in one slice of this shard's groups
        (:mod:`coordinator.topic_deletion`); an error, nothing done, while not serving."""
        op = self._op
        op.begin()
        if self._mode is _ACTIVE:
            op.reply(handle, drop_deleted_topics(self.offsets, req))
        else:
            loading = self._mode is ShardMode.LOADING
            error = ErrorCode.coordinator_load_in_progress if loading else ErrorCode.not_coordinator
            op.reply(handle, TopicsDeletedResponse(error, req.start, 0))
        return op.end()

    def regexes_resolved(self, result: RegexResult, now_ms: int) -> Output:
        """A resolution asked for by :meth:`take_regex_requests` (Kafka's
        handleRegularExpressionsResult): its records, no reply. Nothing while not serving."""
        op = self._op
        op.begin()
        if self._mode is _ACTIVE:
            apply_resolution(self.consumer, result, now_ms)
        return op.end()

    def txn_marker(self, handle: Hashable, req: TxnMarkerRequest, now_ms: int) -> Output:
        """A transaction marker for this partition: NOT_COORDINATOR when it is not served
        here, COORDINATOR_LOAD_IN_PROGRESS while loading (the marker writer retries)."""
        op = self._op
        op.begin()
        if self._mode is not _ACTIVE:
            loading = self._mode is ShardMode.LOADING
            op.reply(handle, TxnMarkerResponse(
                ErrorCode.coordinator_load_in_progress if loading else ErrorCode.not_coordinator
            ))
        else:
            self.txn.marker(handle, req, now_ms)
        return op.end()

    def offset_fetch_member_error(
        self, group_id: str, member_id: str | None, member_epoch: int
    ) -> int | None:
        """OffsetFetch v9+ from a member of a consumer group: it must be one, at its current
        member epoch (STALE_MEMBER_EPOCH, UNKNOWN_MEMBER_ID); None when the fetch may go on."""
        group = self.consumer.get(group_id) if self._mode is _ACTIVE else None
        return None if group is None else group.validate_offset_fetch(member_id, member_epoch)

    def offset_delete(self, handle: Hashable, req: OffsetDeleteRequest, now_ms: int) -> Output:
        """OffsetDelete: the routing checks (invalid group id, not coordinator, loading),
        then the offsets manager's (:meth:`coordinator.offsets.OffsetManager.delete`)."""
        op = self._op
        op.begin()
        error = self._gate(req.group_id, empty_id_ok=False)
        if error is not None:
            op.reply(handle, OffsetDeleteResponse(error, ()))
        else:
            self.offsets.delete(handle, req, now_ms)
        return op.end()

    # ---- append failures -------------------------------------------------------------------

    def append_failed(self, output: Output, error: int, now_ms: int) -> Output:
        """The records of ``output`` could not be appended (``error`` is the log's error).

        Returns the replies to deliver INSTEAD of ``output.replies``: the failed writes'
        requests get the mapped error (F3: and the group rebalances; L3: the replacement is
        reverted; J6: the commit's cache update is undone); every other reply of ``output``
        is passed through unchanged (a failed Empty-group record is only logged, as in Kafka).
        """
        op = self._op
        op.begin()
        handle_failed_append(
            op, output, error, now_ms, self.classic, self.consumer, self.share, self.offsets, self.txn
        )
        if output.records and not output.on_failure:
            log.warning("append of %d records failed with %s", len(output.records), error)
        return op.end()

    # ---- loading and unloading (K3) -------------------------------------------------------

    def replay(self, key: bytes, value: bytes | None, now_ms: int) -> None:
        """Apply one record of this shard's partition, oldest first (loading only): routed by
        its key's record type: offsets, classic group metadata, the KIP-848 consumer-group
        records (to the consumer manager's loader) and the KIP-932 share-group records (to the
        share manager's). Unknown key versions are skipped, counted in
        ``skipped_records``."""
        if self._mode is not ShardMode.LOADING:
            raise RuntimeError("replay() is only allowed while the shard is loading")
        decoded = decode_key(key)
        if isinstance(decoded, OffsetCommitKey):
            self.offsets.replay(decoded, value)
        elif isinstance(decoded, GroupMetadataKey):
            self.classic.replay(decoded.group, value)
        elif isinstance(decoded, UnknownKey):
            self.skipped_records += 1
        elif isinstance(decoded, SHARE_KEY_TYPES):
            self.share.loader.replay(decoded, value)
        else:
            self.consumer.loader.replay(decoded, value)

    def finish_loading(self, now_ms: int) -> Output:
        """K3: materialise the loaded groups (Stable with members, else Empty; groups that
        only have offsets become Empty standalone groups), schedule every member's session
        timer and the first offset-retention check (one interval from now), start serving."""
        if self._mode is not ShardMode.LOADING:
            raise RuntimeError("finish_loading() called twice or after unload()")
        op = self._op
        op.begin()
        self._mode = ShardMode.ACTIVE
        self.consumer.finish_loading(now_ms)
        self.share.finish_loading(now_ms)
        consumer_groups = self.consumer.groups
        with_offsets = dict.fromkeys(self.offsets.group_ids())
        pending = self.offsets.pending
        with_offsets.update(dict.fromkeys(g for g in pending.open_groups() if pending.pending_partitions(g)))
        self.classic.finish_loading((g for g in with_offsets if g not in consumer_groups), now_ms)
        self.offsets.arm_retention(now_ms + self.config.offsets_retention_check_interval_ms)
        self.classic.start_timers(now_ms)
        log.debug("partition %d loaded: %d groups", self.partition, len(self.classic.groups))
        return op.end()

    def unload(self, now_ms: int) -> Output:
        """K3: the partition moved away: every group goes Dead, parked requests get
        NOT_COORDINATOR, and later requests are answered NOT_COORDINATOR."""
        op = self._op
        op.begin()
        self.classic.unload(now_ms)
        self.consumer.unload()
        self.share.unload()
        self.offsets.clear()
        self.timers.clear()
        self._mode = ShardMode.UNLOADED
        return op.end()

