"""The KIP-848 server-side assignors (coordinator/consumer/assignors): ``uniform`` and ``range``.

Property tests on random groups (hypothesis) check what every assignment must be: complete and
exclusive (every partition of a subscribed topic to exactly one member), subscription-true
(nothing to a member not subscribed to its topic), balanced (uniform: counts differ by at most
one when subscriptions are equal, otherwise Kafka's test invariant: no partition could move to
a subscriber of its topic holding two or more fewer; range: per topic ``n // m`` or one more,
the first ``n % m`` in member order getting the one more on a fresh assignment, co-partitioned
topics the same partitions), sticky (after a member joins or leaves, or when nothing changed)
and deterministic (input order does not matter). Example tests follow, named after the rule
they check.
"""

from __future__ import annotations

import random
import uuid
from collections import Counter
from collections.abc import Mapping, Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kcoord.coordinator.consumer.assignors import (
    ASSIGNORS,
    DEFAULT_ASSIGNOR,
    AssignmentMember,
    RangeAssignor,
    TopicId,
    UniformAssignor,
)

Assignment = dict[str, dict[TopicId, frozenset[int]]]
Partitions = Mapping[TopicId, int]

UNIFORM = UniformAssignor()
RANGE = RangeAssignor()
PROPERTY = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def T(i: int) -> uuid.UUID:
    return uuid.UUID(int=i)


def member(
    member_id: str,
    subscribed: Sequence[TopicId],
    current: Mapping[TopicId, Sequence[int]] | None = None,
    instance_id: str | None = None,
) -> AssignmentMember:
    return AssignmentMember(
        member_id,
        instance_id,
        None,
        frozenset(subscribed),
        {t: frozenset(ps) for t, ps in (current or {}).items()},
    )


def holding(members: Sequence[AssignmentMember], result: Assignment) -> list[AssignmentMember]:
    """The members, each now holding its part of ``result``."""
    return [
        AssignmentMember(m.member_id, m.instance_id, m.rack_id, m.subscribed, result[m.member_id])
        for m in members
    ]


def plain(result: Assignment) -> dict[str, dict[int, list[int]]]:
    """``result`` with small topic numbers and sorted lists, for readable comparisons."""
    return {
        mid: {t.int: sorted(ps) for t, ps in sorted(topics.items())}
        for mid, topics in result.items()
    }


def loads(result: Assignment) -> dict[str, int]:
    return {mid: sum(map(len, topics.values())) for mid, topics in result.items()}


def owners(result: Assignment) -> dict[tuple[TopicId, int], str]:
    return {(t, p): mid for mid, topics in result.items() for t, ps in topics.items() for p in ps}


def subscribers(
    members: Sequence[AssignmentMember], partitions: Partitions
) -> dict[TopicId, list[str]]:
    found: dict[TopicId, list[str]] = {t: [] for t in partitions}
    for m in members:
        for t in m.subscribed:
            if t in found:
                found[t].append(m.member_id)
    return found


def check_valid(
    members: Sequence[AssignmentMember], partitions: Partitions, result: Assignment
) -> None:
    """Complete, exclusive, subscription-true, one entry per member, no empty sets."""
    assert set(result) == {m.member_id for m in members}
    by_id = {m.member_id: m for m in members}
    seen: Counter[tuple[TopicId, int]] = Counter()
    for mid, topics in result.items():
        for t, ps in topics.items():
            assert isinstance(ps, frozenset)
            assert ps, f"{mid} has an empty set for {t}"
            assert t in by_id[mid].subscribed and t in partitions, f"{mid} is not subscribed to {t}"
            assert all(0 <= p < partitions[t] for p in ps)
            seen.update((t, p) for p in ps)
    assert all(n == 1 for n in seen.values()), "a partition is assigned twice"
    expected = {
        (t, p)
        for t, subs in subscribers(members, partitions).items()
        if subs
        for p in range(partitions[t])
    }
    assert set(seen) == expected, "some partition is not assigned"


def check_uniform_balance(
    members: Sequence[AssignmentMember], partitions: Partitions, result: Assignment
) -> None:
    load = loads(result)
    if len({m.subscribed & frozenset(partitions) for m in members}) == 1:
        assert max(load.values()) - min(load.values()) <= 1
        return
    # Kafka's invariant: no partition can move to a subscriber of its topic with 2+ fewer.
    subs = subscribers(members, partitions)
    for mid, topics in result.items():
        for t in topics:
            lightest = min(load[s] for s in subs[t])
            assert load[mid] - lightest <= 1, (
                f"{mid} ({load[mid]}) could give {t} to one with {lightest}"
            )


def range_order(members: Sequence[AssignmentMember]) -> list[str]:
    static = sorted(
        (m for m in members if m.instance_id is not None),
        key=lambda m: (m.instance_id, m.member_id),
    )
    dynamic = sorted(m.member_id for m in members if m.instance_id is None)
    return [m.member_id for m in static] + dynamic


def check_range(
    members: Sequence[AssignmentMember], partitions: Partitions, result: Assignment, fresh: bool
) -> None:
    """Per topic ``n // m`` or one more each, ``n % m`` members with one more (on a fresh
    assignment: contiguous ranges, the first members in order with one more); co-partitioned
    topics have the same partitions on the same members."""
    order = range_order(members)
    subs = subscribers(members, partitions)
    for t, n in partitions.items():
        s = [mid for mid in order if mid in subs[t]]
        if not s:
            continue
        q, r = divmod(n, len(s))
        got = [result[mid].get(t, frozenset()) for mid in s]
        sizes = [len(ps) for ps in got]
        assert sorted(sizes, reverse=True) == [q + 1] * r + [q] * (len(s) - r)
        if fresh:
            start = 0
            for k, ps in enumerate(got):
                size = q + (k < r)
                assert ps == frozenset(range(start, start + size))
                start += size
    for t1 in partitions:
        for t2 in partitions:
            if t1 < t2 and partitions[t1] == partitions[t2] and set(subs[t1]) == set(subs[t2]):
                for mid in subs[t1]:
                    assert result[mid].get(t1) == result[mid].get(t2), "not co-partitioned"


# --- strategies ---------------------------------------------------------------------------


@st.composite
def groups(
    draw: st.DrawFn, homogeneous: bool | None = None, min_members: int = 1, static: bool = True
) -> tuple[list[AssignmentMember], dict[TopicId, int]]:
    """A group with fresh members (no current assignment) and its topics' partition counts."""
    topic_ids = draw(st.lists(st.uuids(), min_size=1, max_size=5, unique=True))
    counts = {t: draw(st.integers(1, 12)) for t in topic_ids}
    n = draw(st.integers(min_members, 9))
    ids = draw(
        st.lists(st.text("abcdefgh", min_size=1, max_size=4), min_size=n, max_size=n, unique=True)
    )
    if homogeneous is None:
        homogeneous = draw(st.booleans())
    shared = draw(st.sets(st.sampled_from(topic_ids), min_size=1))
    instances = draw(st.permutations(range(n)))
    members = []
    for k, mid in enumerate(ids):
        subs = shared if homogeneous else draw(st.sets(st.sampled_from(topic_ids)))
        instance = f"i{instances[k]}" if static and draw(st.booleans()) else None
        members.append(AssignmentMember(mid, instance, None, frozenset(subs), {}))
    wanted = frozenset().union(*(m.subscribed for m in members))
    return members, {t: c for t, c in counts.items() if t in wanted}


@st.composite
def garbage(
    draw: st.DrawFn, group: tuple[list[AssignmentMember], dict[TopicId, int]]
) -> list[AssignmentMember]:
    """The group's members with random current assignments: unknown and unsubscribed topics,
    partitions out of range, partitions claimed twice."""
    members, partitions = group
    topic_ids = [*partitions, uuid.UUID(int=0)]
    result = []
    for m in members:
        current = {}
        for t in draw(st.sets(st.sampled_from(topic_ids))):
            top = partitions.get(t, 3)
            current[t] = frozenset(draw(st.sets(st.integers(-1, top + 1), max_size=top + 2)))
        result.append(AssignmentMember(m.member_id, m.instance_id, None, m.subscribed, current))
    return result


def change(
    draw: st.DrawFn,
    members: list[AssignmentMember],
    partitions: dict[TopicId, int],
    homogeneous: bool,
) -> tuple[str, list[AssignmentMember]]:
    """One member joins or leaves (``members`` hold their current assignment)."""
    if len(members) > 1 and draw(st.booleans()):
        gone = draw(st.sampled_from(members))
        return "leave", [m for m in members if m is not gone]
    taken = {m.member_id for m in members}
    mid = draw(st.text("abcdefghij", min_size=1, max_size=4).filter(lambda s: s not in taken))
    if homogeneous or not partitions:
        subs = members[0].subscribed
    else:
        subs = frozenset(draw(st.sets(st.sampled_from(sorted(partitions)), min_size=1)))
    return "join", [*members, AssignmentMember(mid, None, None, subs, {})]


def shuffled(rng: random.Random, members: Sequence[AssignmentMember], partitions: Partitions):
    """The same input in another order: members, topics, current topics, sets rebuilt."""
    items = list(partitions.items())
    rng.shuffle(items)
    again = []
    for m in members:
        current = [(t, list(ps)) for t, ps in m.current.items()]
        rng.shuffle(current)
        subscribed = list(m.subscribed)
        rng.shuffle(subscribed)
        again.append(
            AssignmentMember(
                m.member_id,
                m.instance_id,
                m.rack_id,
                frozenset(subscribed),
                {uuid.UUID(int=t.int): frozenset(reversed(ps)) for t, ps in current},
            )
        )
    rng.shuffle(again)
    return again, dict(items)


# --- properties ---------------------------------------------------------------------------


@PROPERTY
@given(data=st.data())
def test_uniform_is_complete_exclusive_and_balanced_whatever_the_current_assignment(
    data: st.DataObject,
) -> None:
    group = data.draw(groups())
    members, partitions = data.draw(garbage(group)), group[1]
    result = UNIFORM.assign(members, partitions)
    check_valid(members, partitions, result)
    check_uniform_balance(members, partitions, result)


@PROPERTY
@given(data=st.data())
def test_range_gives_contiguous_co_partitioned_ranges_on_a_fresh_assignment(
    data: st.DataObject,
) -> None:
    members, partitions = data.draw(groups())
    result = RANGE.assign(members, partitions)
    check_valid(members, partitions, result)
    check_range(members, partitions, result, fresh=True)


@PROPERTY
@given(data=st.data())
def test_range_is_complete_balanced_and_co_partitioned_whatever_the_current_assignment(
    data: st.DataObject,
) -> None:
    group = data.draw(groups())
    members, partitions = data.draw(garbage(group)), group[1]
    result = RANGE.assign(members, partitions)
    check_valid(members, partitions, result)
    check_range(members, partitions, result, fresh=False)


@PROPERTY
@given(data=st.data(), name=st.sampled_from(sorted(ASSIGNORS)), seed=st.integers(0, 2**32))
def test_input_order_does_not_matter(data: st.DataObject, name: str, seed: int) -> None:
    group = data.draw(groups())
    members, partitions = data.draw(garbage(group)), group[1]
    assignor = ASSIGNORS[name]
    expected = assignor.assign(members, partitions)
    again = assignor.assign(*shuffled(random.Random(seed), members, partitions))
    assert plain(again) == plain(expected)


@PROPERTY
@given(data=st.data(), name=st.sampled_from(sorted(ASSIGNORS)))
def test_nothing_moves_when_nothing_changed(data: st.DataObject, name: str) -> None:
    members, partitions = data.draw(groups())
    assignor = ASSIGNORS[name]
    first = assignor.assign(data.draw(garbage((members, partitions))), partitions)
    assert assignor.assign(holding(members, first), partitions) == first


@PROPERTY
@given(data=st.data(), name=st.sampled_from(sorted(ASSIGNORS)))
def test_shared_subscription_objects_and_first_assignments_take_no_other_result(
    data: st.DataObject, name: str
) -> None:
    # The coordinator gives equal subscriptions one frozenset, and a first assignment has
    # nothing to claim: the assignors take shortcuts for both, which must give what the general
    # path gives (equal frozensets as distinct objects; a member claiming an unknown topic).
    members, partitions = data.draw(groups())
    assignor = ASSIGNORS[name]
    expected = assignor.assign(members, partitions)
    one: dict[frozenset[TopicId], frozenset[TopicId]] = {}
    shared = [
        AssignmentMember(
            m.member_id, m.instance_id, None, one.setdefault(m.subscribed, m.subscribed), {}
        )
        for m in members
    ]
    assert assignor.assign(shared, partitions) == expected
    assert assignor.assign(shared, partitions) == expected  # again: cached topic-id templates
    unknown = {uuid.UUID(int=0): frozenset({0})}
    claiming = [
        AssignmentMember(m.member_id, m.instance_id, None, m.subscribed, unknown if k == 0 else {})
        for k, m in enumerate(shared)
    ]
    assert assignor.assign(claiming, partitions) == expected


@PROPERTY
@given(data=st.data())
def test_uniform_homogeneous_moves_only_what_balance_needs_when_a_member_joins_or_leaves(
    data: st.DataObject,
) -> None:
    members, partitions = data.draw(groups(homogeneous=True))
    before = UNIFORM.assign(data.draw(garbage((members, partitions))), partitions)
    _, now = change(data.draw, holding(members, before), partitions, homogeneous=True)
    after = UNIFORM.assign(now, partitions)
    check_valid(now, partitions, after)
    check_uniform_balance(now, partitions, after)
    old, new = loads(before), loads(after)
    for m in now:
        if m.member_id in before:
            kept = sum(
                len(ps & after[m.member_id].get(t, frozenset()))
                for t, ps in before[m.member_id].items()
            )
            # a member either only gives up partitions or only receives some
            assert kept == min(old[m.member_id], new[m.member_id])
    # and no balanced assignment moves fewer: those over the minimum keep one more while
    # the one-more shares last
    q, extra = divmod(sum(partitions.values()), len(now))
    staying = sorted((old[m.member_id] for m in now if m.member_id in before), reverse=True)
    must_move = sum(max(0, c - q - (k < extra)) for k, c in enumerate(staying))
    moved = sum(
        1 for (t, p), mid in owners(before).items() if mid in new and owners(after)[(t, p)] != mid
    )
    assert moved == must_move


@PROPERTY
@given(data=st.data())
def test_uniform_heterogeneous_stays_balanced_and_close_when_a_member_joins_or_leaves(
    data: st.DataObject,
) -> None:
    members, partitions = data.draw(groups(homogeneous=False))
    before = UNIFORM.assign(members, partitions)
    event, now = change(data.draw, holding(members, before), partitions, homogeneous=False)
    after = UNIFORM.assign(now, partitions)
    check_valid(now, partitions, after)
    check_uniform_balance(now, partitions, after)
    if event == "join":
        # Every move makes the loads more even (it goes from a member to one at least two
        # below), so each lowers the sum of the squared loads by at least two.
        old, new = loads(before), loads(after)
        before_owner, after_owner = owners(before), owners(after)
        moved = sum(1 for k, mid in before_owner.items() if after_owner[k] != mid)
        squares_before = sum(c * c for c in old.values())  # the new member: 0
        assert 2 * moved <= squares_before - sum(c * c for c in new.values())


@PROPERTY
@given(data=st.data())
def test_range_keeps_previous_partitions_within_quota_when_a_member_joins_or_leaves(
    data: st.DataObject,
) -> None:
    members, partitions = data.draw(groups(homogeneous=True))
    before = RANGE.assign(data.draw(garbage((members, partitions))), partitions)
    _, now = change(data.draw, holding(members, before), partitions, homogeneous=True)
    after = RANGE.assign(now, partitions)
    check_valid(now, partitions, after)
    check_range(now, partitions, after, fresh=False)
    for m in now:
        for t, ps in before.get(m.member_id, {}).items():
            q = partitions[t] // len(now)
            assert len(ps & after[m.member_id].get(t, frozenset())) >= min(len(ps), q)


@pytest.mark.parametrize("name", sorted(ASSIGNORS))
@pytest.mark.parametrize("homogeneous", [True, False], ids=["homogeneous", "heterogeneous"])
def test_a_long_run_of_joins_and_leaves_stays_valid_balanced_and_sticky(
    name: str, homogeneous: bool
) -> None:
    assignor = ASSIGNORS[name]
    rng = random.Random(f"{name}-{homogeneous}")
    topics = [uuid.UUID(int=rng.getrandbits(128)) for _ in range(12)]
    counts = {t: rng.randint(1, 40) for t in topics}

    def joiner() -> AssignmentMember:
        subs = topics if homogeneous else rng.sample(topics, rng.randint(1, len(topics)))
        return AssignmentMember(f"m{rng.getrandbits(32):08x}", None, None, frozenset(subs), {})

    members = [joiner() for _ in range(30)]
    result: Assignment = {m.member_id: {} for m in members}
    for _ in range(40):
        members = holding(members, result)
        if len(members) > 2 and rng.random() < 0.5:
            members.remove(rng.choice(members))
        else:
            members.append(joiner())
        wanted = frozenset().union(*(m.subscribed for m in members))
        partitions = {t: n for t, n in counts.items() if t in wanted}
        after = assignor.assign(members, partitions)
        check_valid(members, partitions, after)
        old, new = loads(result), loads(after)
        if name == "range":
            check_range(members, partitions, after, fresh=False)
            for m in members:
                for t, ps in result.get(m.member_id, {}).items():
                    if homogeneous:
                        q = partitions[t] // len(members)
                        assert len(ps & after[m.member_id].get(t, frozenset())) >= min(len(ps), q)
        else:
            check_uniform_balance(members, partitions, after)
            if homogeneous:
                for m in members:
                    if m.member_id in result:
                        kept = sum(
                            len(ps & after[m.member_id].get(t, frozenset()))
                            for t, ps in result[m.member_id].items()
                        )
                        assert kept == min(old[m.member_id], new[m.member_id])
        result = after


# --- examples -----------------------------------------------------------------------------


def test_the_registry_offers_uniform_first_as_the_default_then_range() -> None:
    assert list(ASSIGNORS) == ["uniform", "range"]
    assert DEFAULT_ASSIGNOR == "uniform"
    assert all(a.name == name for name, a in ASSIGNORS.items())


@pytest.mark.parametrize("assignor", [UNIFORM, RANGE], ids=["uniform", "range"])
def test_an_empty_group_gets_an_empty_assignment(assignor) -> None:
    assert assignor.assign([], {T(1): 3}) == {}


@pytest.mark.parametrize("assignor", [UNIFORM, RANGE], ids=["uniform", "range"])
def test_members_without_subscriptions_get_an_empty_entry(assignor) -> None:
    members = [member("a", []), member("b", [T(1)]), member("c", [], {T(1): [0]})]
    assert plain(assignor.assign(members, {T(1): 2})) == {"a": {}, "b": {1: [0, 1]}, "c": {}}


def test_uniform_homogeneous_deals_contiguous_chunks_in_topic_then_member_order() -> None:
    members = [member(mid, [T(2), T(1)]) for mid in "cab"]
    assert plain(UNIFORM.assign(members, {T(1): 4, T(2): 3})) == {
        "a": {1: [0, 1, 2]},
        "b": {1: [3], 2: [0]},
        "c": {2: [1, 2]},
    }


def test_uniform_homogeneous_gives_the_one_more_shares_to_members_that_already_hold_them() -> None:
    # 7 partitions over 3 members: 3, 2, 2. Kafka would give the 3 to "a" (first in its
    # order) and move a partition; here "c", which holds 3, keeps them.
    members = [
        member("a", [T(1)], {T(1): [0, 1]}),
        member("b", [T(1)], {T(1): [2, 3]}),
        member("c", [T(1)], {T(1): [4, 5, 6]}),
    ]
    assert UNIFORM.assign(members, {T(1): 7}) == {m.member_id: m.current for m in members}


def test_uniform_homogeneous_takes_from_the_members_over_quota_only_what_a_new_member_needs() -> (
    None
):
    members = [member("a", [T(1)], {T(1): [0, 1, 2, 3]}), member("b", [T(1)], {T(1): [4, 5, 6, 7]})]
    result = plain(UNIFORM.assign([*members, member("c", [T(1)])], {T(1): 8}))
    assert result == {"a": {1: [0, 1, 2]}, "b": {1: [4, 5, 6]}, "c": {1: [3, 7]}}


def test_uniform_ignores_partitions_of_unsubscribed_deleted_or_missing_topics() -> None:
    members = [
        member("a", [T(1)], {T(1): [0, 5], T(2): [0], T(9): [1]}),  # 5: beyond the count
        member("b", [T(1), T(2)], {T(2): [0, 1]}),
    ]
    result = plain(UNIFORM.assign(members, {T(1): 2, T(2): 2}))
    assert result == {"a": {1: [0, 1]}, "b": {2: [0, 1]}}


@pytest.mark.parametrize("assignor", [UNIFORM, RANGE], ids=["uniform", "range"])
def test_a_topic_without_partitions_is_left_out(assignor) -> None:
    members = [member("a", [T(1), T(3)], {T(3): [0]}), member("b", [T(1), T(3)])]
    assert plain(assignor.assign(members, {T(1): 2, T(3): 0})) == {"a": {1: [0]}, "b": {1: [1]}}


@pytest.mark.parametrize("assignor", [UNIFORM, RANGE], ids=["uniform", "range"])
def test_a_partition_claimed_twice_stays_with_the_first_member_in_order(assignor) -> None:
    members = [member("b", [T(1)], {T(1): [0]}), member("a", [T(1)], {T(1): [0]})]
    assert plain(assignor.assign(members, {T(1): 2})) == {"a": {1: [0]}, "b": {1: [1]}}


def test_uniform_heterogeneous_rebalances_an_unbalanced_previous_assignment() -> None:
    # Kafka's testReassignmentForTwoMembersThreeTopicsGivenUnbalancedPrevAssignment: loads
    # 3, 2, 9 become 4, 5, 5 (Kafka's result has the same loads).
    members = [
        member("A", [T(1)], {T(1): [0, 1, 2]}),
        member("B", [T(1), T(2)], {T(1): [3], T(2): [0]}),
        member("C", [T(1), T(2), T(3)], {T(1): [4, 5], T(2): [1, 2, 3], T(3): [0, 1, 2, 3]}),
    ]
    partitions = {T(1): 6, T(2): 4, T(3): 4}
    result = UNIFORM.assign(members, partitions)
    check_valid(members, partitions, result)
    assert loads(result) == {"A": 4, "B": 5, "C": 5}
    assert result["C"][T(3)] == frozenset(range(4))  # only C can have T3: it keeps it all


def test_uniform_heterogeneous_goes_round_the_topics_until_none_is_unbalanced() -> None:
    # T1 (4 partitions per subscriber) is balanced first: B gives A three; then T2: B gives C
    # three, which leaves B three below A on T1, so T1 needs another round, then T2 again.
    members = [
        member("A", [T(1)], {T(1): range(4)}),
        member("B", [T(1), T(2)], {T(1): range(4, 8), T(2): range(6)}),
        member("C", [T(2)]),
    ]
    partitions = {T(1): 8, T(2): 6}
    result = UNIFORM.assign(members, partitions)
    check_valid(members, partitions, result)
    check_uniform_balance(members, partitions, result)
    assert loads(result) == {"A": 5, "B": 5, "C": 4}


def test_range_splits_each_topic_into_contiguous_ranges_the_first_members_one_longer() -> None:
    members = [member(mid, [T(1)]) for mid in "cba"]
    assert plain(RANGE.assign(members, {T(1): 8})) == {
        "a": {1: [0, 1, 2]},
        "b": {1: [3, 4, 5]},
        "c": {1: [6, 7]},
    }


def test_range_orders_static_members_first_by_instance_id() -> None:
    members = [
        member("a", [T(1)]),
        member("b", [T(1)], instance_id="i2"),
        member("c", [T(1)], instance_id="i1"),
    ]
    assert plain(RANGE.assign(members, {T(1): 3})) == {"c": {1: [0]}, "b": {1: [1]}, "a": {1: [2]}}


def test_range_co_partitions_topics_with_the_same_subscribers_and_count() -> None:
    members = [
        member("a", [T(1), T(2), T(3)]),
        member("b", [T(1), T(2), T(3)]),
        member("c", [T(3)]),
    ]
    result = plain(RANGE.assign(members, {T(1): 3, T(2): 3, T(3): 3}))
    assert result == {
        "a": {1: [0, 1], 2: [0, 1], 3: [0]},
        "b": {1: [2], 2: [2], 3: [1]},
        "c": {3: [2]},
    }


def test_range_keeps_previous_partitions_within_quota_and_deals_the_rest_in_order() -> None:
    # 9 partitions (c's 9 no longer exists) over 3: a, first in member order but new, gets
    # what b and c give up beyond their 3 each, their highest partitions.
    members = [
        member("b", [T(1)], {T(1): [0, 1, 2, 3, 4]}),
        member("c", [T(1)], {T(1): [5, 6, 7, 8, 9]}),
        member("a", [T(1)]),
    ]
    result = plain(RANGE.assign(members, {T(1): 9}))
    assert result == {"a": {1: [3, 4, 8]}, "b": {1: [0, 1, 2]}, "c": {1: [5, 6, 7]}}


def test_range_co_partitioning_wins_when_topics_disagree() -> None:
    # Switching from another assignor: T1 and T2 held differently; each partition number goes
    # to the member that held it in more topics (the first in order on a tie).
    members = [
        member("a", [T(1), T(2)], {T(1): [0, 1], T(2): [0]}),
        member("b", [T(1), T(2)], {T(1): [2, 3], T(2): [1, 2, 3]}),
    ]
    result = plain(RANGE.assign(members, {T(1): 4, T(2): 4}))
    assert result == {"a": {1: [0, 1], 2: [0, 1]}, "b": {1: [2, 3], 2: [2, 3]}}
