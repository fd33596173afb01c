"""The ``range`` assignor: every topic split into ranges over its subscribers, co-partitioned.

Topics with the same subscribers and the same partition count (co-partitioned topics) are
assigned as one: every member gets the same partition numbers of each of them, so that a join
of such topics finds matching partitions on one member. Within such a group of topics (often a
single topic) with ``n`` partitions and ``m`` subscribers, every subscriber gets ``n // m``
partitions and the first ``n % m`` one more.

Members are ordered as Kafka's server-side RangeAssignor (Kafka 3.9 and later) orders them:
static members first, by instance id, then the others by member id. Its stable instance ids
let a restarted static member find its old range even without stickiness.

Stickiness follows the RangeAssignor of Kafka 3.6 to 3.8 (Kafka's newer one recomputes the
ranges from scratch each time and is not sticky): in member order, a member keeps its lowest
previous partitions up to ``n // m``, and one more while the ``n % m`` larger shares last; the
partitions nobody keeps are then dealt in ascending order, to the members still short of their
share, in member order (the one-more shares left going to the first of them). A fresh
assignment is therefore contiguous ranges (Kafka's); after members come and go, a member's
partitions may not be contiguous, but only the minimum moves.

The previous partitions of a group of co-partitioned topics are read per partition number: a
member that held the same partitions of every topic of the group (which this assignor keeps
true) claims them; otherwise each partition number goes to the subscriber that held it in the
most topics of the group (the first in member order on a tie). Co-partitioning therefore wins
over stickiness when topics become co-partitioned (a topic gains partitions, or subscriptions
change) and when switching from another assignor.

Kafka's newest RangeAssignor also matches member racks with partition replica racks; the
input here has no partition racks, so ``rack_id`` is not used.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from operator import attrgetter

from kcoord.coordinator.consumer.assignors.spec import (
    Assignment,
    AssignmentMember,
    Claims,
    TopicId,
    Topics,
    claims,
    subscriptions,
    union,
)

__all__ = ["RangeAssignor"]


def _range_order(members: Sequence[AssignmentMember]) -> list[AssignmentMember]:
    """Static members first, by instance id; then the others, by member id."""
    static = [m for m in members if m.instance_id is not None]
    dynamic = [m for m in members if m.instance_id is None]
    static.sort(key=attrgetter("instance_id", "member_id"))
    dynamic.sort(key=attrgetter("member_id"))
    return static + dynamic


class _Group:
    """Co-partitioned topics: the same subscribers, the same partition count."""

    __slots__ = ("count", "members", "topic_ids", "topics")

    def __init__(self, members: list[int], count: int) -> None:
        self.members = members  # positions in the member order, ascending
        self.count = count
        self.topics: list[int] = []  # topic numbers, ascending
        self.topic_ids: frozenset[TopicId] = frozenset()


class RangeAssignor:
    """Kafka's ``range`` server-side assignor."""

    name = "range"

    def assign(
        self, members: Sequence[AssignmentMember], partitions: Mapping[TopicId, int]
    ) -> Assignment:
        if not members:
            return {}
        ordered = _range_order(members)
        subscribed, homogeneous = subscriptions(ordered, partitions)
        topics = Topics(subscribed[0] if homogeneous else union(subscribed), partitions)
        held = claims(ordered, None if homogeneous else subscribed, topics)
        result: Assignment = {member.member_id: {} for member in ordered}
        for group in _groups(subscribed, homogeneous, topics):
            for i, share in _assign_group(group, _previous(group, held)):
                # fromkeys(frozenset) and update(dict) reuse the stored hashes of the topic ids
                result[ordered[i].member_id].update(dict.fromkeys(group.topic_ids, share))
        return result


def _groups(
    subscribed: Sequence[frozenset[TopicId]], homogeneous: bool, topics: Topics
) -> list[_Group]:
    """The co-partitioned groups of topics."""
    counts = topics.counts
    if homogeneous:
        subscribers = [list(range(len(subscribed)))] * len(counts)
    else:
        by_subscription: dict[frozenset[TopicId], list[int]] = {}
        for i, s in enumerate(subscribed):
            same = by_subscription.get(s)
            if same is None:
                by_subscription[s] = [i]
            else:
                same.append(i)
        subscribers = [[] for _ in counts]
        for s, same in by_subscription.items():
            for topic in s:
                subscribers[topics.number[topic.int]].extend(same)
        if len(by_subscription) > 1:
            for found in subscribers:
                found.sort()
    groups: dict[tuple[tuple[int, ...], int], _Group] = {}
    for k, n in enumerate(counts):
        key = (() if homogeneous else tuple(subscribers[k]), n)
        group = groups.get(key)
        if group is None:
            group = groups[key] = _Group(subscribers[k], n)
        group.topics.append(k)
    ids = topics.ids
    for group in groups.values():
        group.topic_ids = frozenset(ids[k] for k in group.topics)
    return list(groups.values())


def _previous(group: _Group, held: Claims) -> dict[int, frozenset[int]]:
    """Member position -> the partition numbers it held of the group before (valid ones, each
    claimed by one member only: see the module docstring)."""
    first, *rest = group.topics
    holders = held.holders[first]
    previous = {i: held.held[i][first] for i in holders}
    if all(
        held.holders[k] == holders and all(held.held[i][k] == previous[i] for i in holders)
        for k in rest
    ):
        return previous

    # The topics disagree: each partition number goes to its most frequent holder.
    tally: dict[int, dict[int, int]] = {}
    for i in sorted({i for k in group.topics for i in held.holders[k]}):
        for k in group.topics:
            for p in held.held[i].get(k, ()):
                votes = tally.setdefault(p, {})
                votes[i] = votes.get(i, 0) + 1
    chosen: dict[int, list[int]] = {}
    for p, votes in tally.items():
        chosen.setdefault(min(votes, key=lambda i: (-votes[i], i)), []).append(p)
    return {i: frozenset(parts) for i, parts in chosen.items()}


def _assign_group(
    group: _Group, previous: dict[int, frozenset[int]]
) -> list[tuple[int, frozenset[int]]]:
    """(member position, partitions) of every member of ``group`` that gets some."""
    n = group.count
    min_quota, extra = divmod(n, len(group.members))
    shares: list[tuple[int, frozenset[int]]] = []
    kept: dict[int, frozenset[int]] = {}  # the others' kept partitions
    for i in sorted(previous):
        claim = previous[i]
        size = len(claim)
        if size <= min_quota:
            kept[i] = claim
        elif extra:
            extra -= 1
            share = claim if size == min_quota + 1 else frozenset(sorted(claim)[: min_quota + 1])
            shares.append((i, share))
        elif min_quota:
            kept[i] = frozenset(sorted(claim)[:min_quota])
    if not min_quota and not extra:
        return shares  # nobody else gets anything
    retained = set().union(*kept.values(), *(share for _, share in shares))
    free = sorted(set(range(n)).difference(retained)) if retained else range(n)
    offset = 0
    full = {i for i, _ in shares}
    for i in group.members:
        if i in full:
            continue
        keep = kept.get(i, frozenset())
        need = min_quota - len(keep)
        if extra:
            need += 1
            extra -= 1
        if need > 0:
            keep = keep.union(free[offset : offset + need])
            offset += need
        if keep:
            shares.append((i, keep))
        elif not extra and not min_quota:
            break  # nobody after this one gets anything
    return shares
