"""Rebalance events and each group's recent history of them, sans-IO.

A rebalance starts when a classic group goes to PreparingRebalance, or when a KIP-848 consumer
group's epoch is bumped while none is under way; it ends when the group is Stable again (or
Empty at a new generation). The managers call :func:`begin` at the start and :func:`finish` at
the end; what comes out is a :class:`coordinator.output.RebalanceCompleted` with the trigger
(read from the reason the manager gave: who joined, left or expired, or what changed), the
start and end times, the generation or epoch, the members before and after, and how many
partitions changed owner.

:class:`RebalanceHistory` keeps the last ``per_group`` events of each group (at most
``max_groups`` groups, the least recently changed forgotten first) for the web console; it also
renders the structured log line of an event (:func:`log_fields`). Nothing here does I/O: time
is always an argument.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from kcoord.coordinator.output import RebalanceCompleted
from kcoord.coordinator.sharing import SharingTable, shared_copy

MEMBER_JOINED = "member_joined"
MEMBER_LEFT = "member_left"
MEMBER_EXPIRED = "member_expired"
SUBSCRIPTION_CHANGED = "subscription_changed"
METADATA_CHANGED = "metadata_changed"
RESTORED = "restored"
"""Not a trigger seen live: the group's last rebalance, as rebuilt from its records at start-up."""
OTHER = "other"
TRIGGERS = (
    MEMBER_JOINED,
    MEMBER_LEFT,
    MEMBER_EXPIRED,
    SUBSCRIPTION_CHANGED,
    METADATA_CHANGED,
    RESTORED,
    OTHER,
)

Owners = dict[tuple[str, int], str]
"""Which member holds each (topic, partition)."""

_MEMBER = re.compile(r"member (\S+)")
_RULES: tuple[tuple[str, str], ...] = (
    ("expired", MEMBER_EXPIRED),
    ("session timeout", MEMBER_EXPIRED),
    ("rebalance timeout", MEMBER_EXPIRED),
    ("fenced", MEMBER_EXPIRED),
    ("did not rejoin", MEMBER_EXPIRED),
    ("subscription", SUBSCRIPTION_CHANGED),
    ("selected protocol", SUBSCRIPTION_CHANGED),
    ("topics changed", METADATA_CHANGED),
    ("metadata", METADATA_CHANGED),
    ("left", MEMBER_LEFT),
    ("replaced", MEMBER_JOINED),
    ("rejoined", MEMBER_JOINED),
    ("joined", MEMBER_JOINED),
)


def classify(reason: str) -> tuple[str, str]:
    """The trigger and the member named in a manager's reason (``""`` when none is)."""
    lowered = reason.lower()
    trigger = next((t for word, t in _RULES if word in lowered), OTHER)
    found = _MEMBER.search(reason)
    return trigger, found.group(1) if found else ""


@dataclass(frozen=True, slots=True)
class Settled:
    """A group as its last rebalance left it (or as loaded): the members and who owned what.
    The next rebalance's "before" (a member removed first is still counted there)."""

    members: int = 0
    owners: Owners = field(default_factory=dict)


NOTHING_SETTLED = Settled()
"""A new group's (shared; never changed)."""


@dataclass(slots=True)
class RebalanceStart:
    """What a rebalance under way remembers of its start."""

    started_ms: int
    reason: str
    members_before: int
    owners_before: Owners
    member: str = ""
    """The member id the reason names, as the manager holds it ("": none given)."""


def begin(now_ms: int, reason: str, settled: Settled, member: str = "") -> RebalanceStart:
    """``member``: the id ``reason`` names, if any (the event then shares it; see
    :class:`RebalanceCompleted`)."""
    return RebalanceStart(now_ms, reason, settled.members, settled.owners, member)


def moved(
    before: Mapping[tuple[str, int], str | None], after: Mapping[tuple[str, int], str | None]
) -> int:
    """Partitions whose owner changed (got one, lost one, or another one; None: none)."""
    keys = before.keys() | after.keys()
    return sum(1 for k in keys if before.get(k) != after.get(k))


def finish(
    start: RebalanceStart | None,
    *,
    group_id: str,
    group_type: str,
    generation: int,
    members: int,
    owners: Owners,
    now_ms: int,
) -> tuple[RebalanceCompleted, Settled]:
    """The event of a rebalance that ends now (``start`` None: its start is unknown), and the
    group's new :class:`Settled`."""
    if start is None:
        start = RebalanceStart(now_ms, "unknown", members, owners)
    reason = start.reason
    trigger, member = classify(reason)
    head, tail = reason, None
    if member and member == start.member:
        member = start.member  # the manager's string, not the copy read out of the text
        before, _, after = reason.partition(member)
        head, tail = shared_copy(_texts, before), shared_copy(_texts, after)
    return RebalanceCompleted(
        group_id,
        generation,
        members,
        head,
        now_ms - start.started_ms,
        group_type=group_type,
        trigger=trigger,
        member=member,
        started_ms=start.started_ms,
        members_before=start.members_before,
        partitions_moved=moved(start.owners_before, owners),
        reason_tail=tail,
    ), Settled(members, owners) if owners else _settled_of(members)


_texts: SharingTable[str, str] = SharingTable()
"""The texts around member ids in reasons (few distinct ones: "new member ", " joined"...). A
table of our own rather than ``sys.intern``: interned strings are dropped and interned again
whenever no event holds them, and that churn grows the interned dict."""
_settled_without_owners: SharingTable[int, Settled] = SharingTable(1024)
"""A :class:`Settled` of so many members owning nothing, shared (never changed): idle groups
without an assignment keep no object of their own."""


def _settled_of(members: int) -> Settled:
    settled = _settled_without_owners.get(members)
    return settled if settled is not None else _settled_without_owners.put(members, Settled(members))


# ---- classic assignments (ConsumerProtocolAssignment) -------------------------------------------
def decode_assignment(data: bytes) -> list[tuple[str, int]]:
    """The partitions of a classic consumer-protocol assignment (``[]`` if it is not one)."""
    out: list[tuple[str, int]] = []
    try:
        if len(data) < 6:
            return out
        pos = 2  # version
        (topics,) = struct.unpack_from(">i", data, pos)
        pos += 4
        for _ in range(max(topics, 0)):
            (n,) = struct.unpack_from(">h", data, pos)
            pos += 2
            topic = data[pos : pos + n].decode()
            pos += n
            (count,) = struct.unpack_from(">i", data, pos)
            pos += 4
            if count < 0 or pos + 4 * count > len(data):
                return []
            out.extend((topic, p) for p in struct.unpack_from(f">{count}i", data, pos))
            pos += 4 * count
    except (struct.error, UnicodeDecodeError):
        return []
    return out


def classic_owners(members: Iterable[tuple[str, bytes]]) -> Owners:
    """Owners from (member id, assignment bytes) pairs."""
    return {tp: member_id for member_id, data in members for tp in decode_assignment(data)}


# ---- the history ------------------------------------------------------------------------------
class _GroupHistory:
    """A group's events after its second rebalance (its first is kept alone: see
    :class:`RebalanceHistory`). Lists, not deques: an empty deque takes a block of 64 slots,
    and the history of 10,000 idle groups was most of their memory."""

    __slots__ = ("ends", "events", "total")

    def __init__(self, events: list[RebalanceCompleted], ends: list[int], total: int) -> None:
        self.events = events
        self.ends = ends
        """End times of the rebalances of the last hour (at most MAX_ENDS): counts per hour."""
        self.total = total


MAX_ENDS = 250
HOUR_MS = 3_600_000


def _end(event: RebalanceCompleted) -> int:
    return event.started_ms + event.duration_ms


@dataclass(slots=True)
class RebalanceHistory:
    """The last ``per_group`` rebalances of each group (at most ``max_groups`` groups).

    A group that rebalanced once (most idle groups) is kept as its one event, without a
    :class:`_GroupHistory` around it. The groups are a plain dict in the order they last
    changed (a group moves to the end by being taken out and put back): an OrderedDict's
    links cost 66 bytes a group."""

    per_group: int = 20
    max_groups: int = 10_000
    _groups: dict[str, _GroupHistory | RebalanceCompleted] = field(default_factory=dict)

    def record(self, event: RebalanceCompleted) -> None:
        """Keep ``event`` (the oldest of its group goes when it has ``per_group``)."""
        groups = self._groups
        history = groups.get(event.group_id)
        if history is None:
            groups[event.group_id] = event if self.per_group > 0 else _GroupHistory([], [_end(event)], 1)
            while len(groups) > self.max_groups:
                del groups[next(iter(groups))]  # the least recently changed
            return
        del groups[event.group_id]  # put back at the end below: the most recently changed
        if not isinstance(history, _GroupHistory):
            history = _GroupHistory([history], [_end(history)], 1)
        groups[event.group_id] = history
        events = history.events
        events.append(event)
        if len(events) > self.per_group:
            del events[: len(events) - self.per_group]
        end = _end(event)
        ends = history.ends
        old = 0
        while old < len(ends) and ends[old] < end - HOUR_MS:
            old += 1
        if old:
            del ends[:old]
        ends.append(end)
        if len(ends) > MAX_ENDS:
            del ends[: len(ends) - MAX_ENDS]
        history.total += 1

    def restore(self, events: Iterable[RebalanceCompleted]) -> None:
        """Events rebuilt at start-up, oldest first within a group: kept for the groups that
        have no live event yet (those came later than anything rebuilt)."""
        live = set(self._groups)
        for event in events:
            if event.group_id not in live:
                self.record(event)

    def events(self, group_id: str) -> list[RebalanceCompleted]:
        history = self._groups.get(group_id)
        if history is None:
            return []
        if isinstance(history, _GroupHistory):
            return list(history.events)
        return [history]

    def last(self, group_id: str) -> RebalanceCompleted | None:
        history = self._groups.get(group_id)
        if isinstance(history, _GroupHistory):
            return history.events[-1] if history.events else None
        return history

    def count_since(self, group_id: str, since_ms: int) -> int:
        """Rebalances of the group that ended at or after ``since_ms`` (of the last
        :data:`MAX_ENDS`)."""
        history = self._groups.get(group_id)
        if history is None:
            return 0
        if isinstance(history, _GroupHistory):
            return sum(1 for end in history.ends if end >= since_ms)
        return 1 if _end(history) >= since_ms else 0

    def total(self, group_id: str) -> int:
        history = self._groups.get(group_id)
        if history is None:
            return 0
        return history.total if isinstance(history, _GroupHistory) else 1

    def __len__(self) -> int:
        return len(self._groups)

    def __iter__(self) -> Iterator[str]:
        return iter(self._groups)


def as_json(event: RebalanceCompleted) -> dict[str, object]:
    """An event for the console's JSON."""
    return {
        "group": event.group_id,
        "type": event.group_type,
        "trigger": event.trigger,
        "member": event.member or None,
        "reason": event.reason,
        "start_ms": event.started_ms,
        "end_ms": event.started_ms + event.duration_ms,
        "duration_ms": event.duration_ms,
        "generation": event.generation,
        "members_before": event.members_before,
        "members_after": event.members,
        "partitions_moved": event.partitions_moved,
    }


_NEEDS_QUOTES = re.compile(r'[ "=\\]')
"""A character that makes a logfmt value quoted."""


def log_fields(event: RebalanceCompleted) -> str:
    """The structured log line of an event: ``key=value`` pairs (logfmt), values quoted when
    they hold spaces or quotes."""
    parts = []
    for key, value in as_json(event).items():
        if type(value) is int:  # a number never needs quotes: no pattern search for it
            parts.append(f"{key}={value}")
            continue
        text = "" if value is None else str(value)
        if not text or _NEEDS_QUOTES.search(text):
            text = '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
        parts.append(f"{key}={text}")
    return " ".join(parts)
