"""The consumer groups (KIP-848) of one shard: ConsumerGroupHeartbeat, its timers, and the
group side of ListGroups, ConsumerGroupDescribe, DeleteGroups and offsets.

A heartbeat that passed Kafka's checks (:mod:`coordinator.consumer.heartbeat_checks`) goes
through Kafka's three steps: (1) create or update the member (record 5), bumping the group epoch
(record 3, :mod:`coordinator.consumer.group_epoch`) when its subscription changed or the
subscribed topics did; (2) if the group epoch is ahead of the target assignment, recompute the
target (records 7, then 6) when :mod:`coordinator.consumer.batching` says so (KIP-1263); (3)
move the member towards its target (record 8, :func:`coordinator.consumer.member.reconcile`). A member leaves with epoch -1 (tombstones 8, 7,
5, then 3), a static member steps out with epoch -2 and keeps its partitions until its session
ends or the same instance id comes back; a member silent for the session timeout, or one that
does not revoke within its rebalance timeout, is fenced the same way.

State changes at once; if the records of an operation cannot be stored, the failure action
(:class:`ConsumerWriteFailed`) puts the group back as it was before the operation, provided
nothing changed it since.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Hashable, Iterable, Iterator
from dataclasses import replace
from functools import partial

from kcoord.coordinator.config import GroupConfig, GroupOverrides, no_overrides
from kcoord.coordinator.consumer import persistence as records
from kcoord.coordinator.consumer.assignors import ASSIGNORS
from kcoord.coordinator.consumer.batching import TargetBatching
from kcoord.coordinator.consumer.change import Change, ConsumerWriteFailed
from kcoord.coordinator.consumer.group import STABLE, ConsumerGroup, MemberTimers
from kcoord.coordinator.consumer.group_epoch import bump_group_epoch, refresh_topics
from kcoord.coordinator.consumer.heartbeat_checks import epoch_checked, heartbeat_error
from kcoord.coordinator.consumer.member import (
    JOIN_EPOCH,
    STATIC_LEAVE_EPOCH,
    ConsumerMember,
    MemberState,
    reconcile,
)
from kcoord.coordinator.consumer.messages import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)
from kcoord.coordinator.consumer.persistence import ConsumerGroupLoader, to_topic_partitions
from kcoord.coordinator.consumer.regex import Describable, every_topic
from kcoord.coordinator.consumer.regex_refresh import RegexRequest, ask_resolution
from kcoord.coordinator.consumer.topics import TopicId, TopicsView
from kcoord.coordinator.output import Operation, RebalanceCompleted
from kcoord.coordinator.rebalances import Settled, finish
from kcoord.coordinator.timers import TimerEntry, TimerKind, Timers
from kcoord.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

SESSION_TIMER = 4
REBALANCE_TIMER = 5


class ConsumerGroupManager:
    """The consumer groups of a shard (see the module docstring)."""

    def __init__(
        self,
        config: GroupConfig,
        op: Operation,
        timers: Timers,
        topics: TopicsView,
        new_member_id: Callable[[], str] | None = None,
        overrides: GroupOverrides = no_overrides,
    ) -> None:
        self.config = config
        self.overrides = overrides
        """The configs set on each group: ``consumer.heartbeat.interval.ms`` and
        ``consumer.session.timeout.ms`` over the broker's, read at each heartbeat."""
        self.op = op
        """The shard's operation under way (the classic-member handlers reply through it)."""
        self._timers = timers
        self.topics = topics
        self._new_member_id = new_member_id or (lambda: str(uuid.uuid4()))
        self.groups: dict[str, ConsumerGroup] = {}
        self.regex_requests: list[RegexRequest] = []
        """Resolutions asked for and not yet taken by the runtime (regex_refresh)."""
        self.loader = ConsumerGroupLoader()
        self.rebalance_observer: Callable[[RebalanceCompleted], None] | None = None
        self.downgrade: Callable[[ConsumerGroup, ConsumerMember, int], bool] | None = None
        """Set by the shard: converts a group whose last consumer-protocol member leaves to a
        classic group; False when the policy or the group does not allow it."""
        for name in config.consumer_assignors:
            if name not in ASSIGNORS:
                raise ValueError(f"unknown consumer group assignor {name!r}")
        timers.register(
            SESSION_TIMER,
            TimerKind(live=self._session_live, fire=self._session_expired, moved=self._session_moved),
        )
        timers.register(
            REBALANCE_TIMER, TimerKind(live=self._rebalance_live, fire=self._rebalance_expired)
        )
        self.batching = TargetBatching(self, timers)
        """When and where targets are computed (KIP-1263: interval, offloaded runs)."""

    def __iter__(self) -> Iterator[ConsumerGroup]:
        return iter(self.groups.values())

    def get(self, group_id: str) -> ConsumerGroup | None:
        return self.groups.get(group_id)

    # ---- ConsumerGroupHeartbeat ------------------------------------------------------------

    def heartbeat(self, handle: Hashable, req: ConsumerGroupHeartbeatRequest, now_ms: int) -> None:
        """One ConsumerGroupHeartbeat of a well-formed request
        (:func:`coordinator.consumer.heartbeat_checks.heartbeat_request_error`) for a group id
        that is not a classic group's; its reply goes into the operation."""
        op = self.op
        gid = req.group_id
        group = self.groups.get(gid)
        if req.member_epoch < 0:
            response = self._leave(group, req, now_ms, handle)
            op.reply(handle, response)
            return
        if group is None:
            if req.member_epoch != JOIN_EPOCH:
                op.reply(
                    handle,
                    heartbeat_error(ErrorCode.group_id_not_found, f"Consumer group {gid} not found."),
                )
                return
            group = ConsumerGroup(gid)
            change = Change(group, created=True)
        else:
            change = Change(group, created=False)
        member_id = req.member_id or self._new_member_id()
        if len(group.members) >= self.config.consumer_max_size and member_id not in group.members:
            op.reply(
                handle,
                heartbeat_error(
                    ErrorCode.group_max_size_reached,
                    "The consumer group has reached its maximum capacity of "
                    f"{self.config.consumer_max_size} members.",
                ),
            )
            return
        found = self._member(change, member_id, req)
        if isinstance(found, ConsumerGroupHeartbeatResponse):
            op.reply(handle, found)
            return
        member, is_new = found
        updated = member.with_request(
            instance_id=req.instance_id,
            rack_id=req.rack_id,
            rebalance_timeout_ms=req.rebalance_timeout_ms,
            server_assignor=req.server_assignor,
            subscribed_topic_names=req.subscribed_topic_names,
            subscribed_topic_regex=req.subscribed_topic_regex,
            client_id=req.client_id,
            client_host=req.client_host,
        )
        current = self.apply_member(
            change, member, updated, is_new, req.topic_partitions, now_ms, req.describable or every_topic
        )
        self.maybe_completed(group, now_ms)
        full = req.member_epoch == JOIN_EPOCH or (
            req.rebalance_timeout_ms != -1
            and req.subscribed_topic_names is not None
            and req.topic_partitions is not None
        )
        op.reply(
            handle,
            ConsumerGroupHeartbeatResponse(
                ErrorCode.none,
                None,
                member_id,
                current.member_epoch,
                self.heartbeat_interval_ms(gid),
                to_topic_partitions(current.assigned)
                if full or current.assigned != member.assigned
                else None,
            ),
        )
        self.finish(change, handle)

    def apply_member(
        self,
        change: Change,
        member: ConsumerMember,
        updated: ConsumerMember,
        is_new: bool,
        owned: Iterable[tuple[TopicId, Iterable[int]]] | None,
        now_ms: int,
        describable: Describable | None = None,
    ) -> ConsumerMember:
        """Kafka's three steps for a member's request (module docstring): store ``updated``
        (``member`` as it was, ``is_new`` if it joins) and bump the group epoch if need be,
        recompute the target if it is behind, reconcile the member given the partitions it
        reports owning; returns the member as it now stands. ``describable``: the topics the
        request's principal may describe, for the group's regexes (None for a classic member's
        request: they are then left for the next ConsumerGroupHeartbeat); a regex that needs
        resolving is asked for (coordinator.consumer.regex_refresh), not resolved here."""
        group = change.group
        gid = group.group_id
        member_id = updated.member_id
        emit = self.op.emit
        reason = ""
        if is_new or updated is not member:
            change.touch()
            emit(*records.member_record(gid, updated))
            group.put_member(updated)
            if is_new:
                reason = f"member {member_id} joined"
                protocol = "classic" if updated.classic is not None else "consumer"
                log.info("group %s: member %s joins (%s protocol)", gid, member_id, protocol)
            elif updated.subscription_differs(member):
                reason = f"member {member_id} changed its subscription"
        topics_moved = group.topics_version != self.topics.version
        ask = None if describable is None else partial(
            ask_resolution, self.regex_requests, describable=describable
        )
        if (
            (reason or topics_moved)
            and refresh_topics(self.op, change, self.topics, now_ms, ask)
            and not reason
        ):
            reason = "the subscribed topics changed"
        if reason:
            bump_group_epoch(self.op, change, now_ms, reason)
        if group.group_epoch > group.assignment_epoch:
            self.batching.maybe_update(change, now_ms)
        current = group.members[member_id]
        # Kafka's "subscription changed": for a classic member, whatever bumped the epoch
        subscription_changed = bool(reason) if updated.classic else updated.subscription_differs(member)
        if subscription_changed or not current.is_reconciled_to(group.assignment_epoch):
            names = group.topics_of(current)

            def subscribed(topic_id: TopicId) -> bool:
                info = self.topics.topic_by_id(topic_id)
                return info is not None and info.name in names

            reconciled = reconcile(
                current, group.assignment_epoch, group.target_of(member_id), group.owner_epoch,
                owned, subscribed, subscription_changed,
            )
            if not reconciled.same_assignment_record(current):
                change.touch()
                emit(*records.current_assignment_record(gid, reconciled))
                group.put_member(reconciled)
                timers = self.timers_of(group, member_id)
                if reconciled.state is MemberState.UNREVOKED_PARTITIONS and reconciled.classic is None:
                    self.arm_rebalance(group, reconciled, timers, now_ms)
                else:
                    timers.rebalance_token = 0
            current = reconciled
        self.arm_session(group, current, now_ms)
        return current

    def _member(
        self, change: Change, member_id: str, req: ConsumerGroupHeartbeatRequest
    ) -> tuple[ConsumerMember, bool] | ConsumerGroupHeartbeatResponse:
        """The member the heartbeat is from (new or existing), or the error to answer."""
        group = change.group
        joining = req.member_epoch == JOIN_EPOCH
        if req.instance_id is None:
            member = group.members.get(member_id)
            if member is None:
                if not joining:
                    return heartbeat_error(
                        ErrorCode.unknown_member_id,
                        f"Member {member_id} is not a member of group {group.group_id}.",
                    )
                return ConsumerMember(member_id), True
            return epoch_checked(member, req)
        existing = group.static_member(req.instance_id)
        if joining:
            if existing is None:
                member = group.members.get(member_id)
                return (member, False) if member is not None else (ConsumerMember(member_id), True)
            if existing.member_epoch != STATIC_LEAVE_EPOCH:
                return heartbeat_error(
                    ErrorCode.unreleased_instance_id,
                    f"Static member {member_id} with instance id {req.instance_id} cannot join the"
                    f" group because the instance id is owned by {existing.member_id} member.",
                )
            return self.replace_static(change, existing, member_id), False
        if existing is None:
            return heartbeat_error(
                ErrorCode.unknown_member_id, f"Instance id {req.instance_id} is unknown."
            )
        if existing.member_id != member_id:
            return heartbeat_error(
                ErrorCode.fenced_instance_id,
                f"Static member {member_id} with instance id {req.instance_id} was fenced by"
                f" member {existing.member_id}.",
            )
        return epoch_checked(existing, req)

    def replace_static(self, change: Change, old: ConsumerMember, member_id: str) -> ConsumerMember:
        """A static member comes back under a new member id: it takes over the old one's
        subscription, target and partitions, at epoch 0."""
        group = change.group
        gid = group.group_id
        change.touch()
        # Its partitions count as assigned at its new epoch 0 (KIP-1251): the new incarnation
        # may commit them from the epoch it is given on.
        new = replace(
            old,
            member_id=member_id,
            member_epoch=0,
            previous_member_epoch=0,
            assignment_epochs={t: dict.fromkeys(ps, 0) for t, ps in old.assigned.items()},
        )
        target = group.target_of(old.member_id)
        emit = self.op.emit
        for record in records.member_tombstones(gid, old.member_id):
            emit(*record)
        emit(*records.member_record(gid, new))
        emit(*records.target_record(gid, member_id, target))
        emit(*records.current_assignment_record(gid, new))
        group.remove_member(old.member_id)
        group.put_member(new)
        group.target[member_id] = target
        log.info(
            "group %s: static member %s (instance %s) replaces member %s",
            gid,
            member_id,
            old.instance_id,
            old.member_id,
        )
        return new

    # ---- leaving and fencing -------------------------------------------------------------

    def _leave(
        self,
        group: ConsumerGroup | None,
        req: ConsumerGroupHeartbeatRequest,
        now_ms: int,
        handle: Hashable,
    ) -> ConsumerGroupHeartbeatResponse:
        if group is None:
            return heartbeat_error(
                ErrorCode.group_id_not_found, f"Consumer group {req.group_id} not found."
            )
        if req.instance_id is None:
            member = group.members.get(req.member_id)
            if member is None:
                return heartbeat_error(
                    ErrorCode.unknown_member_id,
                    f"Member {req.member_id} is not a member of group {group.group_id}.",
                )
        else:
            member = group.static_member(req.instance_id)
            if member is None:
                return heartbeat_error(
                    ErrorCode.unknown_member_id, f"Instance id {req.instance_id} is unknown."
                )
            if member.member_id != req.member_id:
                return heartbeat_error(
                    ErrorCode.fenced_instance_id,
                    f"Static member {req.member_id} with instance id {req.instance_id} was fenced"
                    f" by member {member.member_id}.",
                )
        change = Change(group, created=False)
        if req.member_epoch == STATIC_LEAVE_EPOCH:
            change.touch()
            away = replace(
                member,
                member_epoch=STATIC_LEAVE_EPOCH,
                pending_revocation={},
                assignment_epochs=member.epochs_of((member.assigned,), 0),
            )
            self.op.emit(*records.current_assignment_record(group.group_id, away))
            group.put_member(away)
            self.timers_of(group, member.member_id).rebalance_token = 0
            log.info(
                "group %s: static member %s (instance %s) left for now",
                group.group_id,
                member.member_id,
                member.instance_id,
            )
        else:
            self.fence(change, member, "left the group", now_ms)
        self.finish(change, handle)
        return ConsumerGroupHeartbeatResponse(
            ErrorCode.none, None, req.member_id, req.member_epoch, 0, None
        )

    def fence(self, change: Change, member: ConsumerMember, why: str, now_ms: int) -> None:
        """Remove a member (tombstones 8, 7, 5) and bump the group epoch (3); a group left
        empty also gets its target epoch caught up with it (6, KAFKA-20442: an empty group's
        epochs match). Or, when the last consumer-protocol member goes and classic members
        remain, hand the group back to the classic protocol (:attr:`downgrade`)."""
        group = change.group
        change.touch()
        downgrade = self.downgrade
        if (
            downgrade is not None
            and member.classic is None
            and len(group.members) > 1
            and group.classic_only_without(member.member_id)
            and downgrade(group, member, now_ms)
        ):
            log.info("group %s: member %s %s", group.group_id, member.member_id, why)
            return
        for record in records.member_tombstones(group.group_id, member.member_id):
            self.op.emit(*record)
        group.remove_member(member.member_id)
        refresh_topics(self.op, change, self.topics, now_ms, None)
        log.info("group %s: member %s %s", group.group_id, member.member_id, why)
        bump_group_epoch(self.op, change, now_ms, f"member {member.member_id} {why}")
        if not group.members:  # nothing to compute: the (empty) target is at the new epoch
            group.assignment_epoch = group.group_epoch
            self.op.emit(*records.assignment_epoch_record(group))

    def finish(self, change: Change, handle: Hashable | None) -> None:
        """Register a created group and attach the undo of a changing operation."""
        if not change.touched or change.group.dead:
            return  # nothing changed, or the group was deleted or converted (no undo then)
        group = change.group
        group.changes += 1
        if change.created:
            self.groups[group.group_id] = group
        self.op.on_failure(ConsumerWriteFailed(handle, group.group_id, change.before, group.changes))

    def write_failed(self, action: ConsumerWriteFailed, error: int) -> None:
        group = self.groups.get(action.group_id)
        if group is not None and group.changes == action.changes:
            if action.before is None:
                del self.groups[action.group_id]
            else:
                self.groups[action.group_id] = action.before
        else:
            log.warning(
                "group %s: a failed write could not be undone (the group changed since)",
                action.group_id,
            )
        if action.handle is not None:
            self.op.reply(action.handle, heartbeat_error(error))

    def maybe_completed(self, group: ConsumerGroup, now_ms: int) -> None:
        if group.rebalance is None or group.state != STABLE:
            return
        done, group.settled = finish(
            group.rebalance,
            group_id=group.group_id,
            group_type="consumer",
            generation=group.group_epoch,
            members=len(group.members),
            owners=group.owners(),
            now_ms=now_ms,
        )
        group.rebalance = None
        if self.rebalance_observer is not None:  # the broker logs it (logger kcoord.rebalance)
            self.rebalance_observer(done)

    # ---- timers --------------------------------------------------------------------------

    def heartbeat_interval_ms(self, group_id: str) -> int:
        """The heartbeat interval told to the group's members: its own, else the broker's."""
        own = self.overrides(group_id).get("consumer.heartbeat.interval.ms")
        return self.config.consumer_heartbeat_interval_ms if own is None else int(own)

    def session_timeout_ms(self, group_id: str) -> int:
        """The session timeout of the group's consumer-protocol members: its own, else the
        broker's."""
        own = self.overrides(group_id).get("consumer.session.timeout.ms")
        return self.config.consumer_session_timeout_ms if own is None else int(own)

    @staticmethod
    def timers_of(group: ConsumerGroup, member_id: str) -> MemberTimers:
        timers = group.timers.get(member_id)
        if timers is None:
            timers = group.timers[member_id] = MemberTimers()
        return timers

    def arm_session(self, group: ConsumerGroup, member: ConsumerMember, now_ms: int) -> None:
        """(Re-)arm the member's session: the broker's session timeout, or the one a classic
        member asked for in its JoinGroup."""
        member_id = member.member_id
        timers = self.timers_of(group, member_id)
        classic = member.classic
        timeout = (
            classic.session_timeout_ms if classic is not None else self.session_timeout_ms(group.group_id)
        )
        deadline = now_ms + timeout
        timers.session_deadline = deadline
        if timers.session_token == 0:
            timers.session_token = self._timers.push(deadline, SESSION_TIMER, group.group_id, member_id)

    def _member_timers(self, entry: TimerEntry) -> MemberTimers | None:
        group = self.groups.get(entry[3])
        return None if group is None else group.timers.get(entry[4])

    def _session_live(self, entry: TimerEntry) -> bool:
        timers = self._member_timers(entry)
        return timers is not None and timers.session_token == entry[1]

    def _session_moved(self, entry: TimerEntry) -> int | None:
        timers = self._member_timers(entry)
        assert timers is not None
        return timers.session_deadline if timers.session_deadline > entry[0] else None

    def _session_expired(self, entry: TimerEntry, now_ms: int) -> None:
        group = self.groups[entry[3]]
        member = group.members.get(entry[4])
        if member is None:
            return
        change = Change(group, created=False)
        self.fence(change, member, "was fenced: its session expired", now_ms)
        self.finish(change, None)

    def arm_rebalance(
        self, group: ConsumerGroup, member: ConsumerMember, timers: MemberTimers, now_ms: int
    ) -> None:
        timeout = member.rebalance_timeout_ms if member.rebalance_timeout_ms > 0 else 0
        timers.rebalance_epoch = member.member_epoch
        timers.rebalance_token = self._timers.push(
            now_ms + timeout, REBALANCE_TIMER, group.group_id, member.member_id
        )

    def _rebalance_live(self, entry: TimerEntry) -> bool:
        timers = self._member_timers(entry)
        return timers is not None and timers.rebalance_token == entry[1]

    def _rebalance_expired(self, entry: TimerEntry, now_ms: int) -> None:
        group = self.groups[entry[3]]
        member = group.members.get(entry[4])
        timers = group.timers[entry[4]]
        timers.rebalance_token = 0
        if member is None or member.member_epoch != timers.rebalance_epoch:
            return
        change = Change(group, created=False)
        self.fence(
            change,
            member,
            f"was fenced: it did not revoke (or, a classic member, rejoin and sync) within its"
            f" rebalance timeout of {member.rebalance_timeout_ms} ms",
            now_ms,
        )
        self.finish(change, None)

    # ---- deletion and the offsets' view ----------------------------------------------------

    def delete_check(self, group_id: str) -> int:
        """Whether DeleteGroups may delete the group: only an Empty one."""
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.group_id_not_found
        return ErrorCode.none if not group.members else ErrorCode.non_empty_group

    def delete(self, group_id: str) -> None:
        """Forget a group, with a tombstone for each of its records."""
        group = self.groups.pop(group_id)
        for record in records.group_tombstones(group):
            self.op.emit(*record)
        group.dead = True

    def offsets_gone(self, group_id: str) -> None:
        """An Empty group left without offsets is deleted (Kafka's cleanup)."""
        group = self.groups.get(group_id)
        if group is not None and not group.members:
            self.delete(group_id)
            log.info("group %s deleted: Empty and no offsets left", group_id)

    # ---- loading ---------------------------------------------------------------------------

    def finish_loading(self, now_ms: int) -> None:
        """Build the loaded groups and start every member's session timer (and the rebalance
        timer of members still revoking)."""
        for group in self.loader.groups():
            self.groups[group.group_id] = group
            group.settled = Settled(len(group.members), group.owners())
            for member in group.members.values():
                self.arm_session(group, member, now_ms)
                if member.state is MemberState.UNREVOKED_PARTITIONS:
                    self.arm_rebalance(group, member, self.timers_of(group, member.member_id), now_ms)

    def unload(self) -> None:
        for group in self.groups.values():
            group.dead = True
        self.groups.clear()
