"""The share groups' assignor: Kafka 4.2's SimpleAssignor, in its intent.

Balance first, then stickiness. For each group of partitions assigned together (all the
subscribed partitions when every member subscribes to the same topics, else one topic at a time
over the members subscribing to it), with M members and P partitions:

- each partition should be shared by ``S = ceil(M / P)`` members: with fewer members than
  partitions every partition goes to one member, with more they are shared;
- member ``i`` (members in id order) should get ``ceil(S*P*(i+1)/M) - ceil(S*P*i/M)``
  partitions, so that counts differ by at most one;
- a member keeps the partitions it had in its last target (within its count and within each
  partition's sharing), then the partitions still short of members are handed, in order, to the
  members still short of partitions, round robin, never twice to the same member.

Deterministic for a given input (Kafka's own iteration order is that of hash maps, so its
choices may differ from these while following the same rules).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kcoord.coordinator.consumer.topics import TopicId

TopicPartition = tuple[TopicId, int]


@dataclass(frozen=True, slots=True)
class ShareAssignmentMember:
    member_id: str
    topics: frozenset[TopicId]
    """The subscribed topics that exist."""
    current: Mapping[TopicId, frozenset[int]]
    """The member's last target."""


def assign(
    members: Sequence[ShareAssignmentMember], partitions: Mapping[TopicId, int]
) -> dict[str, dict[TopicId, frozenset[int]]]:
    """The target assignment: member id -> partitions by topic id (see the module docstring).
    ``partitions``: the partition count of every subscribed topic."""
    ordered = sorted(members, key=lambda m: m.member_id)
    out: dict[str, dict[TopicId, set[int]]] = {m.member_id: {} for m in ordered}
    subscriptions = {m.topics for m in ordered}
    if len(subscriptions) == 1:
        topics = sorted(next(iter(subscriptions)) & partitions.keys(), key=lambda t: t.bytes)
        _assign_together(ordered, [(t, p) for t in topics for p in range(partitions[t])], out)
    else:
        for topic in sorted(partitions, key=lambda t: t.bytes):
            subscribers = [m for m in ordered if topic in m.topics]
            if subscribers:
                _assign_together(subscribers, [(topic, p) for p in range(partitions[topic])], out)
    return {
        member_id: {t: frozenset(ps) for t, ps in assigned.items() if ps}
        for member_id, assigned in out.items()
    }


def _assign_together(
    members: Sequence[ShareAssignmentMember],
    targets: Sequence[TopicPartition],
    out: dict[str, dict[TopicId, set[int]]],
) -> None:
    m, p = len(members), len(targets)
    if not m or not p:
        return
    sharing = -(-m // p)
    slots = sharing * p
    wanted = [-(-slots * (i + 1) // m) - -(-slots * i // m) for i in range(m)]
    holders: dict[TopicPartition, set[int]] = {tp: set() for tp in targets}
    held = [0] * m
    # Keep what each member had, within its count and each partition's sharing.
    for i, member in enumerate(members):
        for topic_id in sorted(member.current, key=lambda t: t.bytes):
            for partition in sorted(member.current[topic_id]):
                tp = (topic_id, partition)
                owners = holders.get(tp)
                if owners is None or held[i] >= wanted[i] or len(owners) >= sharing:
                    continue
                owners.add(i)
                held[i] += 1
    # Hand out the partitions short of members to the members short of partitions.
    short = [i for i in range(m) if held[i] < wanted[i]]
    cursor = 0
    for tp in targets:
        owners = holders[tp]
        tried = 0
        while len(owners) < sharing and short and tried < len(short):
            cursor %= len(short)
            i = short[cursor]
            if i in owners:
                cursor += 1
                tried += 1
                continue
            owners.add(i)
            held[i] += 1
            tried = 0
            if held[i] >= wanted[i]:
                short.pop(cursor)
            else:
                cursor += 1
        if not short:
            break
    for tp, owners in holders.items():
        for i in owners:
            out[members[i].member_id].setdefault(tp[0], set()).add(tp[1])
