"""What a server-side assignor is given and returns, and the input checks every assignor shares.

An assignor sees the group as a sequence of :class:`AssignmentMember` (its subscribed topic ids
and its current *target* assignment, for stickiness) and the partition count of every topic
that some member subscribes to and that exists. It returns, for every member, the partitions it
should own: ``{member id: {topic id: frozenset of partitions}}``. Input order never matters:
assignors sort by member id and topic id wherever a choice depends on order.

The current assignments are read defensively (:func:`claims`): a partition of a topic the
member no longer subscribes to, of a topic that no longer exists or beyond the topic's partition
count is ignored, and a partition two members both claim stays with the first one in the
assignor's member order.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from operator import attrgetter
from typing import Protocol

__all__ = [
    "Assignment",
    "AssignmentMember",
    "Claims",
    "Named",
    "PartitionAssignor",
    "TopicId",
    "Topics",
    "claims",
    "output",
    "subscriptions",
    "union",
]

TopicId = uuid.UUID

Assignment = dict[str, dict[TopicId, frozenset[int]]]
"""member id -> topic id -> partitions; every member present, no topic with an empty set."""


@dataclass(frozen=True, slots=True)
class AssignmentMember:
    """One member as an assignor sees it."""

    member_id: str
    instance_id: str | None
    rack_id: str | None
    subscribed: frozenset[TopicId]
    """The topic ids it subscribes to (only topics that exist)."""
    current: Mapping[TopicId, frozenset[int]]
    """Its current target assignment. May name topics or partitions that no longer exist or
    that it no longer subscribes to: assignors ignore those."""


class PartitionAssignor(Protocol):
    """A server-side assignor: ``name`` is what ConsumerGroupHeartbeat's ServerAssignor names."""

    name: str

    def assign(
        self, members: Sequence[AssignmentMember], partitions: Mapping[TopicId, int]
    ) -> Assignment:
        """The new target assignment of ``members``; ``partitions``: topic id -> partition
        count, for every subscribed topic that exists."""
        ...


class Topics:
    """The subscribed topics numbered ``0..n-1`` in topic id order.

    Assignors work on these numbers: hashing a :class:`uuid.UUID` runs Python code
    (``UUID.__hash__``), hashing an int does not, and an assignor looks topics up tens of
    thousands of times. A topic id is found by its ``int`` (:attr:`number`).
    """

    __slots__ = ("counts", "ids", "number")

    def __init__(self, topics: AbstractSet[TopicId], counts: Mapping[TopicId, int]) -> None:
        if len(topics) == len(counts):  # every topic of ``counts``: no lookup (UUID.__hash__)
            pairs = sorted(counts.items(), key=_key_as_int)
            self.ids: list[TopicId] = [t for t, _ in pairs]
            self.counts: list[int] = [n for _, n in pairs]
        else:
            self.ids = sorted(topics, key=_as_int)
            self.counts = [counts[t] for t in self.ids]
        self.number: dict[int, int] = {t.int: k for k, t in enumerate(self.ids)}


_SINGLES: dict[int, tuple[TopicId, dict[TopicId, None]]] = {}
"""topic id's int -> (the topic id, {topic id: None}): :class:`Named`'s templates."""
_SINGLES_MAX = 100_000


class Named:
    """Turns ``{topic number: partitions}`` into ``{topic id: partitions}`` without hashing a
    topic id (``UUID.__hash__`` is Python code): each topic id is hashed once, into a
    one-key dict that ``dict.fromkeys`` then copies with its stored hash."""

    __slots__ = ("ids", "singles")

    def __init__(self, topics: Topics) -> None:
        self.ids = topics.ids
        self.singles: list[dict[TopicId, None] | None] = [None] * len(topics.ids)

    def single(self, k: int) -> dict[TopicId, None]:
        """``{topic id of k: None}``, made once (kept across calls while the same topic id
        object comes back, as the coordinator's long-lived topic infos do)."""
        single = self.singles[k]
        if single is None:
            topic = self.ids[k]
            known = _SINGLES.get(topic.int)
            if known is not None and known[0] is topic:
                single = known[1]
            else:
                if len(_SINGLES) >= _SINGLES_MAX:
                    _SINGLES.clear()
                single = {topic: None}
                _SINGLES[topic.int] = (topic, single)
            self.singles[k] = single
        return single

    def one(self, k: int, parts: frozenset[int]) -> dict[TopicId, frozenset[int]]:
        """``{topic id of k: parts}``."""
        single = self.singles[k]
        return dict.fromkeys(self.single(k) if single is None else single, parts)

    def __call__(self, held: Mapping[int, frozenset[int]]) -> dict[TopicId, frozenset[int]]:
        result: dict[TopicId, frozenset[int]] | None = None
        for k, parts in held.items():
            if result is None:
                result = self.one(k, parts)
            else:
                result.update(self.one(k, parts))
        return {} if result is None else result


_subscribed = attrgetter("subscribed")


def _as_int(topic: TopicId) -> int:
    return topic.int


def _key_as_int(item: tuple[TopicId, int]) -> int:
    return item[0].int


def subscriptions(
    members: Sequence[AssignmentMember], counts: Mapping[TopicId, int]
) -> tuple[list[frozenset[TopicId]], bool]:
    """Each member's subscribed topics that have partitions, and whether they are all equal.

    Only operations between frozensets here: they reuse the stored hashes of the topic ids.
    Members sharing one frozenset (the coordinator gives equal subscriptions one) cost one
    check between them.
    """
    existing = frozenset(counts)
    if any(n <= 0 for n in counts.values()):
        existing = frozenset(t for t, n in counts.items() if n > 0)
    if members:
        first = members[0].subscribed
        for m in members:
            if m.subscribed is not first:
                break
        else:  # one frozenset for all (the coordinator's usual homogeneous group)
            only = first if first <= existing else first & existing
            return [only] * len(members), True
    subscribed = list(map(_subscribed, members))
    # id -> each distinct frozenset (the members keep them alive), then its topics that exist
    distinct = {id(s): s for s in subscribed}
    valid = {key: s if s <= existing else s & existing for key, s in distinct.items()}
    if any(valid[key] is not s for key, s in distinct.items()):
        subscribed = list(map(valid.__getitem__, map(id, subscribed)))
    first = subscribed[0] if subscribed else existing
    return subscribed, all(s is first or s == first for s in valid.values())


def union(subscribed: Sequence[frozenset[TopicId]]) -> frozenset[TopicId]:
    """The topics some member subscribes to; a frozenset shared by members is read once."""
    return frozenset().union(*{id(s): s for s in subscribed}.values())


@dataclass(slots=True)
class Claims:
    """The valid part of the members' current assignments (see :func:`claims`)."""

    held: list[dict[int, frozenset[int]]]
    """Per member (in the order given): topic number -> partitions it may keep."""
    owned: list[set[int] | None]
    """Per topic number: the partitions someone holds (None: nobody holds any)."""
    holders: list[list[int]]
    """Per topic number: the members holding some of it, ascending."""
    intact: list[bool]
    """Per member: its current assignment was valid as it stands (nothing dropped)."""


def claims(
    ordered: Sequence[AssignmentMember],
    member_topics: Sequence[frozenset[TopicId]] | None,
    topics: Topics,
) -> Claims:
    """The valid part of each member's current assignment, in the order of ``ordered``.

    ``member_topics`` are the members' effective subscriptions (same order), or None when every
    member subscribes to every topic of ``topics``. A topic counts only if the member
    subscribes to it; partitions outside ``range(count)`` are dropped; a partition claimed by an
    earlier member is dropped from a later one's claim. The partition sets of the input are
    reused when they need no filtering.
    """
    number = topics.number.get
    counts = topics.counts
    held: list[dict[int, frozenset[int]]] = []
    intact = [True] * len(ordered)
    holders: list[list[int]] = [[] for _ in counts]  # per topic: who claims some
    claimed: list[list[frozenset[int]]] = [[] for _ in counts]  # and what, in the same order
    for i, member in enumerate(ordered):
        current = member.current
        valid: dict[int, frozenset[int]] = {}
        held.append(valid)
        if not current:
            continue
        # set(dict) copies the dict's stored hashes, and <= between sets uses them: no
        # UUID.__hash__ calls (frozenset.issuperset(dict) would hash every key).
        subscribed = None
        if member_topics is not None and not set(current) <= member_topics[i]:
            subscribed = member_topics[i]
            intact[i] = False
        for topic, parts in current.items():
            k = number(topic.int)
            if k is None or not parts or (subscribed is not None and topic not in subscribed):
                intact[i] = False
                continue
            valid[k] = parts
            holders[k].append(i)
            claimed[k].append(parts)

    # Per topic, check all the claims at once; only a topic that fails goes claim by claim.
    owned: list[set[int] | None] = [None] * len(counts)
    for k, sets in enumerate(claimed):
        if not sets:
            continue
        union = set().union(*sets)
        n = counts[k]
        if len(union) == sum(map(len, sets)) and min(union) >= 0 and max(union) < n:
            owned[k] = union
            continue
        seen: set[int] = set()
        for i, parts in zip(holders[k], sets, strict=True):
            if min(parts) < 0 or max(parts) >= n:
                parts = frozenset(p for p in parts if 0 <= p < n)
            if not seen.isdisjoint(parts):
                parts = parts.difference(seen)
            if parts:
                seen |= parts
                if parts is not held[i][k]:
                    held[i][k] = parts
                    intact[i] = False
            else:
                del held[i][k]
                intact[i] = False
        owned[k] = seen
        holders[k] = [i for i in holders[k] if k in held[i]]
    return Claims(held, owned, holders, intact)


def output(
    member: AssignmentMember, held: dict[int, frozenset[int]], intact: bool, topics: Topics
) -> dict[TopicId, frozenset[int]]:
    """A member's result from its (unchanged) claim: a copy of its input when that was valid."""
    if intact:
        return dict(member.current)
    ids = topics.ids
    return {ids[k]: parts for k, parts in held.items()}
