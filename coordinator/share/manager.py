"""The share groups (KIP-932) of one shard: ShareGroupHeartbeat, session expiry, the group
side of ShareGroupDescribe, ListGroups and DeleteGroups, and record 15 as the share offsets
admin APIs set it (:meth:`ShareGroupManager.set_initialized`, coordinator/share/offsets.py).

A heartbeat that passed Kafka's request checks (:mod:`coordinator.share.checks`) for a group id
that is no other type's goes through Kafka's three steps (GroupMetadataManager's
shareGroupHeartbeat): (1) create or update the member (record 10) and bump the group epoch
(record 11, with the subscribed topics' hash) when its subscription changed or the subscribed
topics did; (2) if the group epoch is ahead of the target assignment, recompute the target with
the share assignor (:mod:`coordinator.share.assignor`; records 13 then 12); (3) move the member
to the target at once (record 14): share members revoke nothing. A member leaves with epoch -1
(tombstones 14, 13, 10, then 11); one silent for the session timeout is fenced the same way.

Share state: Kafka's coordinator asks the share coordinator to initialize the state of newly
assigned partitions (InitializeShareGroupState, start offset -1) and only assigns them once that
is done. Here they are assigned at once and record 15 marks them initialized in the same write:
a share partition with no stored state starts from ``share.auto.offset.reset``, which is what
the initialization would have set up.

Members that left or were fenced are queued in :attr:`ShareGroupManager.left` for the runtime to
hand to the broker's share layer (which releases the records they held).

State changes at once; if the records of an operation cannot be stored, the failure action
(:class:`ShareWriteFailed`) puts the group back as it was, provided nothing changed it since.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from kcoord.coordinator.config import GroupConfig, GroupOverrides, no_overrides
from kcoord.coordinator.consumer.persistence import to_topic_partitions
from kcoord.coordinator.consumer.topics import (
    TopicId,
    TopicsView,
    metadata_hash,
    subscribed_topics,
)
from kcoord.coordinator.output import Operation
from kcoord.coordinator.share import persistence as records
from kcoord.coordinator.share.assignor import ShareAssignmentMember, assign
from kcoord.coordinator.share.checks import epoch_error, heartbeat_error
from kcoord.coordinator.share.group import JOIN_EPOCH, SessionTimer, ShareGroup, ShareMember
from kcoord.coordinator.share.messages import (
    ShareGroupHeartbeatRequest,
    ShareGroupHeartbeatResponse,
)
from kcoord.coordinator.timers import TimerEntry, TimerKind, Timers
from kcoord.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

SESSION_TIMER = 6
SESSION_TIMEOUT = "share.session.timeout.ms"
HEARTBEAT_INTERVAL = "share.heartbeat.interval.ms"


@dataclass(frozen=True, slots=True)
class ShareWriteFailed:
    """The records of a share-group operation failed: put the group back as ``before`` (None:
    it did not exist) if its change count is still ``changes``, and answer the request (if
    any) with the mapped error: ``answer(error)``, a heartbeat's error by default."""

    handle: Hashable | None
    group_id: str
    before: ShareGroup | None
    changes: int
    answer: Callable[[int], Any] | None = None

    @property
    def handles(self) -> tuple[Hashable, ...]:
        return () if self.handle is None else (self.handle,)


class _Change:
    """The group an operation changes, and its copy before the first change."""

    __slots__ = ("before", "created", "group", "touched")

    def __init__(self, group: ShareGroup, created: bool) -> None:
        self.group = group
        self.created = created
        self.touched = False
        self.before: ShareGroup | None = None

    def touch(self) -> None:
        if not self.touched:
            self.touched = True
            self.before = None if self.created else self.group.copy()


class ShareGroupManager:
    """The share groups of a shard (see the module docstring)."""

    def __init__(
        self,
        config: GroupConfig,
        op: Operation,
        timers: Timers,
        topics: TopicsView,
        overrides: GroupOverrides = no_overrides,
    ) -> None:
        self.config = config
        self.op = op
        self._timers = timers
        self.topics = topics
        self.overrides = overrides
        self.groups: dict[str, ShareGroup] = {}
        self.loader = records.ShareGroupLoader()
        self.left: list[tuple[str, str]] = []
        """(group id, member id) of members that left or were fenced, not yet taken."""
        self.rebalances = 0
        """Group epoch bumps since start: Kafka's share-group rebalances (a metrics counter)."""
        timers.register(
            SESSION_TIMER,
            TimerKind(live=self._session_live, fire=self._session_expired, moved=self._session_moved),
        )

    def __iter__(self) -> Iterator[ShareGroup]:
        return iter(self.groups.values())

    def get(self, group_id: str) -> ShareGroup | None:
        return self.groups.get(group_id)

    # ---- per-group settings --------------------------------------------------------------

    def _setting(self, group_id: str, name: str, default: int) -> int:
        value = self.overrides(group_id).get(name)
        if value is None:
            return default
        try:
            return int(value)
        except ValueError:
            return default

    def session_timeout_ms(self, group_id: str) -> int:
        return self._setting(group_id, SESSION_TIMEOUT, self.config.share_session_timeout_ms)

    def heartbeat_interval_ms(self, group_id: str) -> int:
        return self._setting(group_id, HEARTBEAT_INTERVAL, self.config.share_heartbeat_interval_ms)

    # ---- ShareGroupHeartbeat -------------------------------------------------------------

    def heartbeat(self, handle: Hashable, req: ShareGroupHeartbeatRequest, now_ms: int) -> None:
        """One well-formed ShareGroupHeartbeat for a group id that is no other type's; its
        reply goes into the operation."""
        op = self.op
        gid = req.group_id
        group = self.groups.get(gid)
        if group is None and req.member_epoch != JOIN_EPOCH:
            op.reply(handle, heartbeat_error(ErrorCode.group_id_not_found, f"Share group {gid} not found."))
            return
        if req.member_epoch < 0:
            assert group is not None
            op.reply(handle, self._leave(group, req.member_id, req.member_epoch, now_ms, handle))
            return
        change = _Change(group, False) if group is not None else _Change(ShareGroup(gid), True)
        group = change.group
        member_id = req.member_id
        member = group.members.get(member_id)
        if member is None and len(group.members) >= self.config.share_max_size:
            op.reply(
                handle,
                heartbeat_error(
                    ErrorCode.group_max_size_reached,
                    "The share group has reached its maximum capacity of "
                    f"{self.config.share_max_size} members.",
                ),
            )
            return
        if member is None:
            if req.member_epoch != JOIN_EPOCH:
                op.reply(
                    handle,
                    heartbeat_error(
                        ErrorCode.unknown_member_id, f"Member {member_id} is not a member of group {gid}."
                    ),
                )
                return
            member = ShareMember(member_id)
            is_new = True
        else:
            is_new = False
            # A member re-joining under its own id (epoch 0) takes up where it stands.
            refused = None if req.member_epoch == JOIN_EPOCH else epoch_error(member, req.member_epoch)
            if refused is not None:
                op.reply(handle, refused)
                return
        updated = member.with_request(
            req.rack_id, req.subscribed_topic_names, req.client_id, req.client_host
        )
        current = self._apply(change, member, updated, is_new, now_ms)
        self._arm_session(group, member_id, now_ms)
        op.reply(
            handle,
            ShareGroupHeartbeatResponse(
                ErrorCode.none,
                None,
                member_id,
                current.member_epoch,
                self.heartbeat_interval_ms(gid),
                to_topic_partitions(current.assigned)
                if req.member_epoch == JOIN_EPOCH or current.assigned != member.assigned
                else None,
            ),
        )
        self._finish(change, handle)

    def _apply(
        self, change: _Change, member: ShareMember, updated: ShareMember, is_new: bool, now_ms: int
    ) -> ShareMember:
        """Kafka's three steps for a member's heartbeat (module docstring); the member as it
        now stands."""
        group = change.group
        gid = group.group_id
        emit = self.op.emit
        reason = ""
        if is_new or updated is not member:
            change.touch()
            emit(*records.member_record(gid, updated))
            group.members[updated.member_id] = updated
            if is_new:
                reason = f"member {updated.member_id} joined"
                log.info("share group %s: member %s joins", gid, updated.member_id)
            elif updated.subscribed_topic_names != member.subscribed_topic_names:
                reason = f"member {updated.member_id} changed its subscription"
        if (reason or group.topics_version != self.topics.version) and self._refresh_topics(change):
            reason = reason or "the subscribed topics changed"
        if reason:
            self._bump(change, reason)
        if group.group_epoch > group.assignment_epoch:
            self._update_target(change, now_ms)
        current = group.members[updated.member_id]
        reconciled = current.reconciled(group.assignment_epoch, group.target_of(current.member_id))
        if reconciled is not current:
            change.touch()
            emit(*records.current_assignment_record(gid, reconciled))
            group.members[reconciled.member_id] = reconciled
        return reconciled

    def _refresh_topics(self, change: _Change) -> bool:
        """Re-read the subscribed topics; True if their metadata hash changed."""
        group = change.group
        subscribed = subscribed_topics(self.topics, group.subscribed_topic_names())
        digest = metadata_hash(subscribed)
        if subscribed != group.subscribed or group.topics_version != self.topics.version:
            change.touch()
            group.subscribed = subscribed
            group.topics_version = self.topics.version
        if digest == group.metadata_hash:
            return False
        change.touch()
        group.metadata_hash = digest
        return True

    def _bump(self, change: _Change, reason: str) -> None:
        group = change.group
        change.touch()
        group.group_epoch += 1
        self.rebalances += 1
        self.op.emit(*records.epoch_record(group))
        if group.legacy_partition_metadata:  # Kafka 4.1+ deletes the old record 9
            self.op.emit(*records.legacy_partition_metadata_tombstone(group.group_id))
            group.legacy_partition_metadata = False
        log.info("share group %s: epoch %d (%s)", group.group_id, group.group_epoch, reason)

    def _update_target(self, change: _Change, now_ms: int) -> None:
        """Recompute the target at the group epoch: record 15 for partitions newly assigned
        (module docstring), a record 13 per member whose target changed, then record 12."""
        group = change.group
        gid = group.group_id
        emit = self.op.emit
        change.touch()
        subscribed = group.subscribed
        members = [
            ShareAssignmentMember(
                m.member_id,
                frozenset(subscribed[n].topic_id for n in m.subscribed_topic_names if n in subscribed),
                group.target_of(m.member_id),
            )
            for m in group.members.values()
        ]
        result = assign(members, {t.topic_id: t.partitions for t in subscribed.values()})
        names = {t.topic_id: t.name for t in subscribed.values()}
        initialized = dict(group.initialized)
        for assignment in result.values():
            for topic_id, partitions in assignment.items():
                name, held, created = initialized.get(topic_id, (names[topic_id], frozenset(), now_ms))
                if not partitions <= held:
                    initialized[topic_id] = (name, held | partitions, created)
        if initialized != group.initialized:
            group.initialized = initialized
            emit(*records.state_record(group))
        for member_id in group.members:
            new = result.get(member_id, {})
            old = group.target.get(member_id)
            if old is None or new != old:
                group.target[member_id] = new
                emit(*records.target_record(gid, member_id, new))
        group.assignment_epoch = group.group_epoch
        emit(*records.assignment_epoch_record(group))

    # ---- leaving and fencing -------------------------------------------------------------

    def _leave(
        self, group: ShareGroup, member_id: str, epoch: int, now_ms: int, handle: Hashable
    ) -> ShareGroupHeartbeatResponse:
        member = group.members.get(member_id)
        if member is None:
            return heartbeat_error(
                ErrorCode.unknown_member_id,
                f"Member {member_id} is not a member of group {group.group_id}.",
            )
        change = _Change(group, False)
        self.fence(change, member, "left the group")
        self._finish(change, handle)
        return ShareGroupHeartbeatResponse(ErrorCode.none, None, member_id, epoch, 0, None)

    def fence(self, change: _Change, member: ShareMember, why: str) -> None:
        """Remove a member (tombstones 14, 13, 10) and bump the group epoch (11)."""
        group = change.group
        change.touch()
        for record in records.member_tombstones(group.group_id, member.member_id):
            self.op.emit(*record)
        group.remove_member(member.member_id)
        self._refresh_topics(change)
        self._bump(change, f"member {member.member_id} {why}")
        self.left.append((group.group_id, member.member_id))
        log.info("share group %s: member %s %s", group.group_id, member.member_id, why)

    def take_left(self) -> list[tuple[str, str]]:
        """The members that left or were fenced since the last call."""
        left = self.left
        if left:
            self.left = []
        return left

    def _finish(
        self, change: _Change, handle: Hashable | None, answer: Callable[[int], Any] | None = None
    ) -> None:
        """Register a created group and attach the undo of a changing operation."""
        if not change.touched or change.group.dead:
            return
        group = change.group
        group.changes += 1
        if change.created:
            self.groups[group.group_id] = group
        self.op.on_failure(
            ShareWriteFailed(handle, group.group_id, change.before, group.changes, answer)
        )

    def write_failed(self, action: ShareWriteFailed, error: int) -> None:
        group = self.groups.get(action.group_id)
        if group is not None and group.changes == action.changes:
            if action.before is None:
                del self.groups[action.group_id]
            else:
                self.groups[action.group_id] = action.before
        else:
            log.warning(
                "share group %s: a failed write could not be undone (the group changed since)",
                action.group_id,
            )
        if action.handle is not None:
            answer = heartbeat_error if action.answer is None else action.answer
            self.op.reply(action.handle, answer(error))

    # ---- the share state's partitions (AlterShareGroupOffsets, DeleteShareGroupOffsets) ----

    def set_initialized(
        self,
        handle: Hashable,
        group_id: str,
        initialized: Mapping[TopicId, tuple[str, frozenset[int], int]],
        answer: Callable[[int], Any],
    ) -> None:
        """Record 15 holding ``initialized`` (topic id -> name, partitions, when added),
        creating the share group (record 11, epoch 0) if there is none; if the write fails
        the request is answered ``answer(error)``. The caller checked that the id is no other
        type's group (coordinator/share/offsets.py)."""
        group = self.groups.get(group_id)
        change = _Change(group, False) if group is not None else _Change(ShareGroup(group_id), True)
        group = change.group
        change.touch()
        if change.created:
            self.op.emit(*records.epoch_record(group))
            log.info("share group %s: created by an offsets change", group_id)
        group.initialized = {t: v for t, v in initialized.items() if v[1]}
        self.op.emit(*records.state_record(group))
        self._finish(change, handle, answer)

    # ---- sessions --------------------------------------------------------------------------

    def _arm_session(self, group: ShareGroup, member_id: str, now_ms: int) -> None:
        timer = group.sessions.get(member_id)
        if timer is None:
            timer = group.sessions[member_id] = SessionTimer()
        timer.deadline = deadline = now_ms + self.session_timeout_ms(group.group_id)
        if timer.token == 0:
            timer.token = self._timers.push(deadline, SESSION_TIMER, group.group_id, member_id)

    def _timer(self, entry: TimerEntry) -> SessionTimer | None:
        group = self.groups.get(entry[3])
        return None if group is None else group.sessions.get(entry[4])

    def _session_live(self, entry: TimerEntry) -> bool:
        timer = self._timer(entry)
        return timer is not None and timer.token == entry[1]

    def _session_moved(self, entry: TimerEntry) -> int | None:
        timer = self._timer(entry)
        assert timer is not None
        return timer.deadline if timer.deadline > entry[0] else None

    def _session_expired(self, entry: TimerEntry, now_ms: int) -> None:
        group = self.groups[entry[3]]
        member = group.members.get(entry[4])
        if member is None:
            return
        change = _Change(group, False)
        self.fence(change, member, "was fenced: its session expired")
        self._finish(change, None)

    # ---- deletion, loading -----------------------------------------------------------------

    def delete_check(self, group_id: str) -> int:
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.group_id_not_found
        return ErrorCode.none if not group.members else ErrorCode.non_empty_group

    def delete(self, group_id: str) -> None:
        """Forget an Empty group, with a tombstone for each of its records."""
        group = self.groups.pop(group_id)
        for record in records.group_tombstones(group):
            self.op.emit(*record)
        group.dead = True

    def finish_loading(self, now_ms: int) -> None:
        """Build the loaded groups and start every member's session."""
        for group in self.loader.groups():
            self.groups[group.group_id] = group
            for member_id in group.members:
                self._arm_session(group, member_id, now_ms)

    def unload(self) -> None:
        for group in self.groups.values():
            group.dead = True
        self.groups.clear()
