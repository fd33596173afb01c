"""Rebuilding groups' past rebalances from a ``__consumer_offsets`` partition, sans-IO.

The start-up load keeps only the newest record per key (``loading``); this sees every record
in log order as well, with its batch's timestamp, and turns the history the records still hold
into :class:`coordinator.output.RebalanceCompleted` events (trigger ``restored`` unless the
records say who joined). What the records allow:

- classic groups: each GroupMetadataValue at a new generation is a completed rebalance: its
  ``current_state_timestamp`` (or the batch's time) is the end, the previous record gives the
  members before and the partitions moved (assignments decoded as the consumer protocol's),
  and the members that appeared or vanished name the trigger: a join is ``member_joined``; a
  member gone is ``restored`` ("left or expired": the records do not say which). The start is
  not recorded: the event starts when it ends.
- consumer groups: each epoch record (3) at a higher epoch starts a rebalance (its batch's
  time); the target assignment record (6) reaching that epoch ends it, the member records
  (5, 7) between them give the trigger, the members and the partitions moved (target owners).

Compaction keeps only the newest record per key, so the history reaches back to the last
cleaning of the partition; a group's events are kept newest last, ``per_group`` at most.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from kcoord.coordinator.consumer.records import (
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    decode_consumer_value,
)
from kcoord.coordinator.output import RebalanceCompleted
from kcoord.coordinator.rebalances import MEMBER_JOINED, RESTORED, Owners, classic_owners, moved
from kcoord.coordinator.schemas import GroupMetadataKey, decode_group_metadata_value, decode_key
from kcoord.coordinator.share.records import SHARE_KEY_TYPES


@dataclass(slots=True)
class _Classic:
    generation: int
    members: frozenset[str]
    owners: Owners


@dataclass(slots=True)
class _Consumer:
    members: set[str] = field(default_factory=set)
    settled: int = 0
    owners: dict[tuple[str, int], str] = field(default_factory=dict)
    """Each partition's owner in the newest targets."""
    held: dict[str, list[tuple[str, int]]] = field(default_factory=dict)
    """Member -> the partitions its newest target gave it (some may have gone to another
    member since): a target record touches only its member's partitions, never the whole map."""
    before: dict[tuple[str, int], str | None] = field(default_factory=dict)
    """The owner at the last settled epoch of every partition touched since (the partitions
    moved are counted over these only)."""
    epoch: int = 0
    started_ms: int | None = None
    joined: list[str] = field(default_factory=list)
    gone: list[str] = field(default_factory=list)


def _reason(joined: list[str], gone: list[str]) -> tuple[str, str, str]:
    """(trigger, member, reason) from the members that appeared and vanished."""
    if joined:
        return MEMBER_JOINED, joined[0], f"restored: member {joined[0]} joined"
    if gone:
        return RESTORED, gone[0], f"restored: member {gone[0]} left or expired"
    return RESTORED, "", "restored: subscription, metadata or assignment change"


def _set_target(g: _Consumer, member_id: str, value: object | None) -> None:
    """``member_id``'s new target (None: removed): its old partitions lose it as owner, its
    new ones get it; the settled owner of each partition touched is kept first."""
    owners, before = g.owners, g.before
    for tp in g.held.pop(member_id, ()):
        if owners.get(tp) == member_id:
            if tp not in before:
                before[tp] = member_id
            del owners[tp]
    if value is None:
        return
    assert isinstance(value, ConsumerGroupTargetAssignmentMemberValue)
    held = g.held[member_id] = []
    for topic_id, parts in value.topic_partitions:
        name = str(topic_id)
        for p in parts:
            tp = (name, p)
            if tp not in before:
                before[tp] = owners.get(tp)
            owners[tp] = member_id
            held.append(tp)


class HistoryReplay:
    """Feed every record of a partition in log order (:meth:`add`); then :meth:`events`."""

    def __init__(self, per_group: int = 20) -> None:
        self.per_group = per_group
        self._classic: dict[str, _Classic] = {}
        self._consumer: dict[str, _Consumer] = {}
        self._events: dict[str, deque[RebalanceCompleted]] = {}

    def add(self, pairs: Iterable[tuple[bytes | None, bytes | None]], timestamp_ms: int) -> None:
        for key, value in pairs:
            # offset commits (key versions 0 and 1) are most records: skip them undecoded
            if key is None or len(key) < 2 or key[0] != 0 or key[1] < 2:
                continue
            try:
                self._add(key, value, timestamp_ms)
            except Exception:  # noqa: BLE001 - a record we cannot read adds no history
                continue

    def _add(self, key: bytes, value: bytes | None, ts: int) -> None:
        k = decode_key(key)
        if isinstance(k, GroupMetadataKey):
            self._classic_record(k.group, value, ts)
            return
        group_id = getattr(k, "group", None)
        if not isinstance(group_id, str) or isinstance(k, SHARE_KEY_TYPES):
            return  # share groups have no rebalances to show
        if value is None and isinstance(k, ConsumerGroupMetadataKey):
            self._consumer.pop(group_id, None)  # the group was deleted
            return
        g = self._consumer.setdefault(group_id, _Consumer())
        if isinstance(k, ConsumerGroupMemberMetadataKey):
            if value is None:
                if k.member_id in g.members:
                    g.members.discard(k.member_id)
                    g.gone.append(k.member_id)
            elif k.member_id not in g.members:
                g.members.add(k.member_id)
                g.joined.append(k.member_id)
        elif isinstance(k, ConsumerGroupTargetAssignmentMemberKey):
            _set_target(g, k.member_id, None if value is None else decode_consumer_value(k, value))
        elif isinstance(k, ConsumerGroupMetadataKey) and value is not None:
            v3 = decode_consumer_value(k, value)
            assert isinstance(v3, ConsumerGroupMetadataValue)
            if v3.epoch > g.epoch:
                g.epoch = v3.epoch
                if g.started_ms is None:
                    g.started_ms = ts
        elif isinstance(k, ConsumerGroupTargetAssignmentMetadataKey) and value is not None:
            v6 = decode_consumer_value(k, value)
            assert isinstance(v6, ConsumerGroupTargetAssignmentMetadataValue)
            if g.started_ms is not None and v6.assignment_epoch >= g.epoch:
                trigger, member, reason = _reason(g.joined, g.gone)
                self._keep(
                    RebalanceCompleted(
                        group_id,
                        v6.assignment_epoch,
                        len(g.members),
                        reason,
                        max(ts - g.started_ms, 0),
                        group_type="consumer",
                        trigger=trigger,
                        member=member,
                        started_ms=g.started_ms,
                        members_before=g.settled,
                        partitions_moved=moved(g.before, {tp: g.owners.get(tp) for tp in g.before}),
                    )
                )
                g.started_ms, g.joined, g.gone = None, [], []
                g.settled = len(g.members)
                g.before.clear()

    def _classic_record(self, group_id: str, value: bytes | None, ts: int) -> None:
        if value is None:
            self._classic.pop(group_id, None)
            return
        v = decode_group_metadata_value(value)
        members = frozenset(m.member_id for m in v.members)
        owners = classic_owners((m.member_id, m.assignment) for m in v.members)
        prev = self._classic.get(group_id)
        self._classic[group_id] = _Classic(v.generation, members, owners)
        if prev is not None and prev.generation == v.generation:
            return  # the same generation rewritten (a static member's new id, say)
        before = prev.members if prev is not None else frozenset()
        trigger, member, reason = _reason(sorted(members - before), sorted(before - members))
        end = v.current_state_timestamp if v.current_state_timestamp > 0 else ts
        self._keep(
            RebalanceCompleted(
                group_id,
                v.generation,
                len(members),
                reason,
                0,
                group_type="classic",
                trigger=trigger,
                member=member,
                started_ms=end,
                members_before=len(before),
                partitions_moved=moved(prev.owners if prev is not None else {}, owners),
            )
        )

    def _keep(self, event: RebalanceCompleted) -> None:
        events = self._events.get(event.group_id)
        if events is None:
            events = self._events[event.group_id] = deque(maxlen=self.per_group)
        events.append(event)

    def events(self) -> Iterator[RebalanceCompleted]:
        """Every group's rebuilt events, oldest first within a group."""
        for events in self._events.values():
            yield from events
