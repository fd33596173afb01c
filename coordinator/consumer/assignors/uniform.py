"""The ``uniform`` assignor: as many partitions to every member as subscriptions allow, sticky.

It follows Kafka's UniformAssignor (group-coordinator, ``assignor/``), which picks one of two
algorithms by the shape of the group:

* **Homogeneous** (every member subscribes to the same topics), :func:`_homogeneous`: the
  partitions are spread by count only, so the quota of a member is ``total // members``, and
  ``total % members`` of them get one more. The extra ones go to members that already hold more
  than the minimum (Kafka gives them to the first members it happens to iterate), so that only
  the minimum moves:
  a member over its quota gives up the excess (its highest topic ids and partitions first),
  and the partitions nobody keeps are dealt, in topic id then partition order, in contiguous
  chunks to the members under their quota, in member id order. Counts differ by at most one.
* **Heterogeneous**, :func:`_heterogeneous`: every member keeps what it holds of its
  subscriptions; the partitions nobody holds are dealt topic by topic (most partitions per
  subscriber first) to the least loaded subscribers (water filling); then, topic by topic
  again, a partition moves from the most loaded subscriber holding one to the least loaded
  subscriber while their counts differ by two or more. Unlike Kafka, whose last phase stops
  after 16 rounds over the topics, this one runs until a whole round moves nothing (each move
  lowers the sum of the squared counts, so it ends), which guarantees Kafka's test invariant:
  no partition can move to another subscriber of its topic holding two or more fewer
  partitions than its owner.

Both are sticky: a partition stays with its owner unless the owner stopped subscribing to its
topic or balance needs it elsewhere. For equal input the output is the same whatever the order
of ``members``, of their subscriptions and of ``partitions``.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, bisect_right
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from fractions import Fraction
from operator import attrgetter
from typing import cast

from kcoord.coordinator.consumer.assignors.spec import (
    Assignment,
    AssignmentMember,
    Named,
    TopicId,
    Topics,
    claims,
    output,
    subscriptions,
    union,
)

__all__ = ["UniformAssignor"]


_member_id = attrgetter("member_id")
_current = attrgetter("current")
NOTHING: dict[int, frozenset[int]] = {}
"""What a member holds before its first assignment (shared: never filled)."""


class UniformAssignor:
    """Kafka's ``uniform`` server-side assignor (the default one)."""

    name = "uniform"

    def assign(
        self, members: Sequence[AssignmentMember], partitions: Mapping[TopicId, int]
    ) -> Assignment:
        if not members:
            return {}
        ordered = sorted(members, key=_member_id)
        subscribed, homogeneous = subscriptions(ordered, partitions)
        if homogeneous:
            return _homogeneous(ordered, Topics(subscribed[0], partitions))
        return _heterogeneous(ordered, subscribed, partitions)


def _homogeneous(ordered: Sequence[AssignmentMember], topics: Topics) -> Assignment:
    """Every member subscribes to every topic of ``topics``; ``ordered`` is sorted by member id."""
    m = len(ordered)
    counts = topics.counts
    held: list[dict[int, frozenset[int]]]
    owned: list[set[int] | None]
    if any(map(_current, ordered)):
        claimed = claims(ordered, None, topics)
        held, owned = claimed.held, claimed.owned
        changed = [not whole for whole in claimed.intact]
        sizes = [sum(map(len, h.values())) if h else 0 for h in held]
    else:  # a first assignment: nothing to claim (the dealing below never fills NOTHING)
        held = [NOTHING] * m
        owned = [None] * len(counts)
        changed = [False] * m
        sizes = [0] * m
    min_quota, extra = divmod(sum(counts), m)

    # Quotas: the one-more ones first to members holding more than the minimum.
    quotas = [min_quota] * m
    over = [i for i, size in enumerate(sizes) if size > min_quota]
    for i in over[:extra]:
        quotas[i] += 1
    extra -= min(extra, len(over))
    if extra:
        for i, size in enumerate(sizes):
            if size <= min_quota:
                quotas[i] += 1
                extra -= 1
                if not extra:
                    break

    # Members over their quota keep their first partitions (topic id, then partition order).
    for i in over:
        keep = quotas[i]
        if sizes[i] <= keep:
            continue
        kept: dict[int, frozenset[int]] = {}
        for k, parts in sorted(held[i].items()):
            taken = owned[k]
            assert taken is not None
            if keep >= len(parts):
                kept[k] = parts
                keep -= len(parts)
            elif keep:
                in_order = sorted(parts)
                kept[k] = frozenset(in_order[:keep])
                taken.difference_update(in_order[keep:])
                keep = 0
            else:
                taken.difference_update(parts)
        held[i] = kept
        sizes[i] = quotas[i]
        changed[i] = True

    # Deal what nobody keeps, in contiguous chunks, to the members under their quota.
    pool: list[tuple[int, Sequence[int]]] = []
    for k, n in enumerate(counts):
        taken = owned[k]
        if taken is None:
            pool.append((k, range(n)))
        elif len(taken) < n:
            pool.append((k, sorted(set(range(n)).difference(taken))))
    # A chunk of a topic nobody held is a range: equal ranges (of different topics) share one
    # frozenset. A member that holds nothing and gets one chunk (all of them, on a first
    # assignment) has its result made at once.
    named = Named(topics)
    singles = named.singles
    fromkeys = dict.fromkeys
    results: list[dict[TopicId, frozenset[int]] | None] = [None] * m
    ranges: dict[int, frozenset[int]] = {}  # offset << 32 | end -> the chunk
    segment = offset = 0
    for i in range(m):
        need = quotas[i] - sizes[i]
        if need <= 0:
            continue
        h = held[i]
        while need:
            k, free = pool[segment]
            size = len(free)
            take = min(need, size - offset)
            end = offset + take
            if isinstance(free, range):
                chunk = ranges.get(offset << 32 | end)
                if chunk is None:
                    chunk = ranges[offset << 32 | end] = frozenset(free[offset:end])
            else:
                chunk = frozenset(free[offset:end])
            need -= take
            offset = end
            if offset == size:
                segment += 1
                offset = 0
            if not h and not need:
                single = singles[k]
                if single is None:
                    single = named.single(k)
                results[i] = fromkeys(single, chunk)
                break
            if not h:
                h = held[i] = {}
            old = h.get(k)
            h[k] = old | chunk if old else chunk
            changed[i] = True

    result: Assignment = {}
    for i, member in enumerate(ordered):
        done = results[i]
        if done is None:
            done = named(held[i]) if changed[i] else dict(member.current)
        result[member.member_id] = done
    return result


def _heterogeneous(
    ordered: Sequence[AssignmentMember],
    subscribed: Sequence[frozenset[TopicId]],
    partitions: Mapping[TopicId, int],
) -> Assignment:
    """Members subscribe to different topics; ``ordered`` is sorted by member id and members
    are numbered by their position in it."""
    topics = Topics(union(subscribed), partitions)
    counts = topics.counts
    claimed = claims(ordered, subscribed, topics)
    owned = claimed.owned
    # A member's partitions of a topic stay the input's frozenset until they change; then they
    # become a set of our own (and a frozenset again on the way out).
    held = cast(list[dict[int, AbstractSet[int]]], claimed.held)
    loads = [sum(map(len, h.values())) for h in held]
    touched: set[int] = set()

    # Subscribers of each topic, in member order; equal subscriptions looked up once.
    by_subscription: dict[frozenset[TopicId], list[int]] = {}
    for i, s in enumerate(subscribed):
        same = by_subscription.get(s)
        if same is None:
            by_subscription[s] = [i]
        else:
            same.append(i)
    subscribers: list[list[int]] = [[] for _ in counts]
    number = topics.number
    for s, same in by_subscription.items():
        for topic in s:
            subscribers[number[topic.int]].extend(same)
    if len(by_subscription) > 1:
        for found in subscribers:
            found.sort()
    holders = [set(found) for found in claimed.holders]

    def topic_order(k: int) -> tuple[Fraction, int, int]:
        # Most partitions per subscriber first, then fewest subscribers, then topic id.
        n = len(subscribers[k])
        return Fraction(-counts[k], n), n, k

    # Deal the partitions nobody holds to the least loaded subscribers.
    for k in sorted(range(len(counts)), key=topic_order):
        n = counts[k]
        taken = owned[k]
        if taken is None:
            free: Sequence[int] = range(n)
        elif len(taken) < n:
            free = sorted(set(range(n)).difference(taken))
        else:
            continue
        offset = 0
        gains = _water_fill(subscribers[k], loads, len(free))
        for i, gain in gains:
            chunk = free[offset : offset + gain]
            offset += gain
            h = held[i]
            old = h.get(k)
            h[k] = frozenset(chunk) if old is None else old | frozenset(chunk)
            loads[i] += gain
        receivers = [i for i, _ in gains]
        holders[k].update(receivers)
        touched.update(receivers)

    # Move partitions from the most to the least loaded subscribers of each topic until no
    # topic has a subscriber two or more below a holder; a move on one topic can unbalance
    # another, so go round the topics until a whole round moves nothing. A topic whose most
    # loaded holder is within one of the least loaded member of all is skipped at once (moves
    # never lower that floor: a giver ends at least one above its taker).
    shared = sorted((k for k, s in enumerate(subscribers) if len(s) > 1), key=topic_order)
    active = [i for i, s in enumerate(subscribed) if s]
    floor = min(map(loads.__getitem__, active), default=0)
    quiet = position = 0
    while quiet < len(shared):
        k = shared[position]
        position = (position + 1) % len(shared)
        moved = bool(holders[k]) and max(map(loads.__getitem__, holders[k])) - floor > 1
        if moved:
            moved = _balance_topic(k, subscribers[k], holders[k], held, loads, touched)
            floor = min(map(loads.__getitem__, active))
        quiet = 1 if moved else quiet + 1

    ids = topics.ids
    result: Assignment = {}
    for i, member in enumerate(ordered):
        if i in touched:
            result[member.member_id] = {
                ids[k]: p if isinstance(p, frozenset) else frozenset(p) for k, p in held[i].items()
            }
        else:
            # untouched: still the frozensets of claims()
            result[member.member_id] = output(member, claimed.held[i], claimed.intact[i], topics)
    return result


def _water_fill(members: list[int], loads: list[int], amount: int) -> list[tuple[int, int]]:
    """How to deal ``amount`` partitions over ``members`` so that the least loaded rise first:
    ``(member, how many)`` pairs in member order. Members that end at the top level with one
    more are the first in (load, member) order."""
    ranked = sorted(members, key=loads.__getitem__)  # stable: ties stay in member order
    levels = list(map(loads.__getitem__, ranked))  # ascending
    size = len(ranked)
    level = levels[0]
    below = bisect_right(levels, level)  # ranked[:below] are at or under ``level``
    left = amount
    while below < size:
        step = levels[below] - level
        if step * below > left:
            break
        left -= step * below
        level += step
        below = bisect_right(levels, level, below)
    level += left // below
    extra = left % below
    # ranked[:under] are below the final level; after them only the first ``extra`` gain
    under = bisect_left(levels, level, 0, below)
    gains = [
        (ranked[position], level - levels[position] + (position < extra))
        for position in range(max(under, extra))
    ]
    gains.sort()
    return gains


def _balance_topic(
    topic: int,
    subscribers: list[int],
    holders: set[int],
    held: list[dict[int, AbstractSet[int]]],
    loads: list[int],
    touched: set[int],
) -> bool:
    """Move partitions of ``topic`` from its most loaded holders to its least loaded
    subscribers until they differ by at most one; whether anything moved."""
    lowest = min(map(loads.__getitem__, subscribers))
    highest = max(map(loads.__getitem__, holders))
    if highest - lowest <= 1:
        return False
    # Lazy heaps: an entry is current while its load matches (and, for givers, while the
    # member still holds some of the topic); every change pushes a fresh entry.
    givers = [(-loads[i], i) for i in holders]
    takers = [(loads[i], i) for i in subscribers]
    heapq.heapify(givers)
    heapq.heapify(takers)
    # A giver gives its highest partition: its partitions sorted once, popped from the end
    # (dropped when it receives one, sorted again if it gives after that).
    stacks: dict[int, list[int]] = {}
    while givers:
        load, giver = givers[0]
        if -load != loads[giver] or giver not in holders:
            heapq.heappop(givers)
            continue
        load, taker = takers[0]
        if load != loads[taker]:
            heapq.heappop(takers)
            continue
        if loads[giver] - loads[taker] <= 1:
            break
        parts = held[giver][topic]
        stack = stacks.get(giver)
        if stack is None:
            stack = stacks[giver] = sorted(parts)
        partition = stack.pop()
        if len(parts) == 1:
            del held[giver][topic]
            holders.discard(giver)
        elif isinstance(parts, set):
            parts.discard(partition)
        else:
            mutable = set(parts)
            mutable.discard(partition)
            held[giver][topic] = mutable
        target = held[taker].get(topic)
        if target is None:
            held[taker][topic] = {partition}
        elif isinstance(target, set):
            target.add(partition)
        else:
            held[taker][topic] = set(target) | {partition}
        stacks.pop(taker, None)
        holders.add(taker)
        touched.add(giver)
        touched.add(taker)
        loads[giver] -= 1
        loads[taker] += 1
        if giver in holders:
            heapq.heappush(givers, (-loads[giver], giver))
        heapq.heappush(givers, (-loads[taker], taker))
        heapq.heappush(takers, (loads[taker], taker))
        heapq.heappush(takers, (loads[giver], giver))
    return True
