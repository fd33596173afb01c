"""The classic group data model and state machine (BEHAVIOR.md B, C, E7)."""

from __future__ import annotations

import re
import uuid

import pytest

from kcoord.coordinator.classic.group import (
    ClassicGroup,
    GroupState,
    IllegalStateTransition,
    Member,
)
from kcoord.coordinator.classic.groups import default_member_id
from kcoord.coordinator.classic.one_member import OneMember

S = GroupState


def member(
    mid: str, protocols: tuple[tuple[str, bytes], ...] = (("range", b"x"),), **kw: object
) -> Member:
    return Member(
        member_id=mid,
        group_instance_id=kw.get("instance"),  # type: ignore[arg-type]
        client_id="c",
        client_host="h",
        rebalance_timeout_ms=kw.get("rebalance", 1000),  # type: ignore[arg-type]
        session_timeout_ms=kw.get("session", 1000),  # type: ignore[arg-type]
        protocol_type="consumer",
        protocols=protocols,
    )


def test_C1_states_and_names() -> None:
    assert [s.value for s in S] == [
        "Empty",
        "PreparingRebalance",
        "CompletingRebalance",
        "Stable",
        "Dead",
    ]


def test_C3_C4_valid_transitions_stamp_time() -> None:
    g = ClassicGroup("g", state_timestamp_ms=0)
    assert g.can_rebalance()
    g.transition_to(S.PREPARING_REBALANCE, 10)
    assert g.state_timestamp_ms == 10 and not g.can_rebalance()
    g.transition_to(S.COMPLETING_REBALANCE, 20)
    assert g.can_rebalance()
    g.transition_to(S.STABLE, 30)
    assert g.can_rebalance()
    g.transition_to(S.PREPARING_REBALANCE, 40)
    g.transition_to(S.EMPTY, 50)
    assert g.state_timestamp_ms == 50
    g.transition_to(S.DEAD, 60)
    g.transition_to(S.DEAD, 70)
    assert g.state is S.DEAD and g.state_timestamp_ms == 70


@pytest.mark.parametrize(
    ("start", "target"),
    [
        (S.EMPTY, S.STABLE),
        (S.EMPTY, S.COMPLETING_REBALANCE),
        (S.STABLE, S.COMPLETING_REBALANCE),
        (S.PREPARING_REBALANCE, S.STABLE),
        (S.COMPLETING_REBALANCE, S.EMPTY),
        (S.DEAD, S.PREPARING_REBALANCE),
        (S.PREPARING_REBALANCE, S.PREPARING_REBALANCE),
    ],
)
def test_C3_invalid_transitions_raise(start: GroupState, target: GroupState) -> None:
    g = ClassicGroup("g", state=start)
    with pytest.raises(IllegalStateTransition):
        g.transition_to(target, 1)
    assert g.state is start


def test_B3_default_member_ids_are_prefix_dash_uuid() -> None:
    mid = default_member_id("client-a")
    assert re.fullmatch(
        r"client-a-[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[0-9a-f]{4}-[0-9a-f]{12}", mid
    )
    assert default_member_id("x") != default_member_id("x")
    ids = [default_member_id("p")[2:] for _ in range(600)]  # past one pool of random bytes
    assert len(set(ids)) == len(ids)
    assert all(str(u := uuid.UUID(i)) == i and u.version == 4 and u.variant == uuid.RFC_4122 for i in ids)


def test_B4_add_sets_type_leader_votes_awaiting() -> None:
    g = ClassicGroup("g")
    g.add(member("a", (("range", b""), ("rr", b""))), "h1", awaiting=True)
    assert g.protocol_type == "consumer" and g.leader_id == "a"
    assert g.protocol_votes == {"range": 1, "rr": 1}
    assert g.num_awaiting_join == 1
    g.add(member("b", (("rr", b""),)))
    assert g.leader_id == "a" and g.protocol_votes == {"range": 1, "rr": 2}
    assert g.num_awaiting_join == 1


def test_B4_one_member_groups_share_their_votes_until_they_change() -> None:
    g1, g2 = ClassicGroup("g1"), ClassicGroup("g2")
    g1.add(member("a", (("range", b""),)))
    g2.add(member("b", (("range", b""),)))
    assert g1.protocol_votes is g2.protocol_votes and g1.protocol_votes == {"range": 1}
    g1.add(member("c", (("range", b""), ("rr", b""))))
    assert g1.protocol_votes == {"range": 2, "rr": 1} and g2.protocol_votes == {"range": 1}
    g1.remove("a")
    g1.remove("c")
    assert g1.protocol_votes == {} and g2.protocol_votes == {"range": 1}


def test_B4_B5_members_of_a_group_of_one_are_compact_and_read_as_a_dict() -> None:
    g = ClassicGroup("g")
    assert g.members == {} and not g.members
    a, b, c = member("a", instance="i-a"), member("b"), member("c")
    g.add(a)
    assert type(g.members) is OneMember  # no dict for a group of one
    assert g.members == {"a": a} and list(g.members) == ["a"] and len(g.members) == 1
    assert g.members.get("a") is a and g.members.get("x") is None and "a" in g.members
    assert list(g.members.values()) == [a] and list(g.members.items()) == [("a", a)]
    with pytest.raises(KeyError):
        g.members["x"]
    g.add(b)
    g.add(c)
    assert type(g.members) is dict and list(g.members) == ["a", "b", "c"]
    g.remove("b")
    assert list(g.members) == ["a", "c"]
    g.remove("a")  # one left: compact again, and it leads
    assert type(g.members) is OneMember and g.members == {"c": c} and g.leader_id == "c"
    g.add(a)
    g.remove("c")
    g.replace_static_member("i-a", "a", "a2")  # the only member takes its new id
    assert g.members == {"a2": a} and a.member_id == "a2" and g.leader_id == "a2"
    g.remove("a2")
    assert g.members == {} and g.leader_id is None and g.static_members == {}


def test_B4_add_registers_static_member_and_drops_pending() -> None:
    g = ClassicGroup("g")
    g.add_pending("p", 1)
    g.add(member("p"))
    assert not g.pending_members
    g.add(member("s", instance="i1"))
    assert g.static_members == {"i1": "s"}
    with pytest.raises(IllegalStateTransition):
        g.add(member("s2", instance="i1"))


def test_B5_remove_decrements_and_replaces_leader_in_insertion_order() -> None:
    g = ClassicGroup("g")
    for mid in ("a", "b", "c"):
        g.add(member(mid, instance=f"i-{mid}"), f"h-{mid}", awaiting=mid != "b")
    assert g.num_awaiting_join == 2
    g.remove("a")
    # b did not rejoin but is first in insertion order
    assert g.leader_id == "b"
    assert g.num_awaiting_join == 1
    assert g.protocol_votes == {"range": 2}
    assert g.static_members == {"i-b": "b", "i-c": "c"}
    g.remove("b")
    g.remove("c")
    assert g.leader_id is None and g.protocol_votes == {} and g.num_awaiting_join == 0


def test_B6_update_member_recounts_votes_and_awaiting() -> None:
    g = ClassicGroup("g")
    m = member("a", (("range", b""),))
    g.add(m)
    displaced, old = g.update_member(m, (("rr", b""), ("sticky", b"")), 5, 6, "h1", awaiting=True)
    assert displaced is False and old is None
    assert g.protocol_votes == {"rr": 1, "sticky": 1}
    assert g.num_awaiting_join == 1 and m.rebalance_timeout_ms == 5 and m.session_timeout_ms == 6
    displaced, old = g.update_member(m, (("rr", b""),), 5, 6, "h2", awaiting=True)
    assert (displaced, old) == (True, "h1")
    assert g.num_awaiting_join == 1 and m.join_handle == "h2"


def test_B7_all_members_joined() -> None:
    g = ClassicGroup("g")
    assert g.all_members_joined()
    g.add(member("a"), "h", awaiting=True)
    assert g.all_members_joined()
    g.add(member("b"))
    assert not g.all_members_joined()
    g.remove("b")
    g.add_pending("p", 1)
    assert not g.all_members_joined()


def test_B8_rebalance_timeout_is_the_maximum() -> None:
    g = ClassicGroup("g")
    assert g.rebalance_timeout_ms() == 0
    g.add(member("a", rebalance=100))
    g.add(member("b", rebalance=300))
    g.add(member("c", rebalance=200))
    assert g.rebalance_timeout_ms() == 300


def test_B9_leader_view_uses_selected_protocol_metadata() -> None:
    g = ClassicGroup("g")
    g.add(member("a", (("range", b"a-range"), ("rr", b"a-rr")), instance="ia"))
    g.add(member("b", (("rr", b"b-rr"), ("range", b"b-range"))))
    g.state = S.COMPLETING_REBALANCE
    g.protocol_name = "rr"
    view = g.current_member_metadata()
    assert [(m.member_id, m.group_instance_id, m.metadata) for m in view] == [
        ("a", "ia", b"a-rr"),
        ("b", None, b"b-rr"),
    ]


def test_D5_supports_protocols() -> None:
    g = ClassicGroup("g")
    assert g.supports_protocols("consumer", ["x"])
    assert not g.supports_protocols("", ["x"])
    assert not g.supports_protocols("consumer", [])
    g.add(member("a", (("range", b""), ("rr", b""))))
    g.state = S.STABLE
    assert g.supports_protocols("consumer", ["rr"])
    assert not g.supports_protocols("connect", ["rr"])
    assert not g.supports_protocols("consumer", ["sticky"])


def test_E7_protocol_vote_vector() -> None:
    g = ClassicGroup("g")
    g.add(member("m1", (("B", b""), ("A", b""))))
    g.add(member("m2", (("A", b""), ("B", b""), ("C", b""))))
    g.add(member("m3", (("D", b""), ("B", b""), ("A", b""))))
    assert g.candidate_protocols() == {"A", "B"}
    assert g.select_protocol() == "B"


def test_E7_tie_break_is_deterministic_first_voter() -> None:
    g = ClassicGroup("g")
    g.add(member("m1", (("A", b""), ("B", b""))))
    g.add(member("m2", (("B", b""), ("A", b""))))
    assert g.select_protocol() == "A"
    g2 = ClassicGroup("g")
    g2.add(member("m2", (("B", b""), ("A", b""))))
    g2.add(member("m1", (("A", b""), ("B", b""))))
    assert g2.select_protocol() == "B"


def test_ten_8_votes_recounted_on_update() -> None:
    g = ClassicGroup("g")
    m1 = member("m1", (("A", b""), ("B", b"")))
    g.add(m1)
    g.add(member("m2", (("B", b""), ("A", b""))))
    g.add(member("m3", (("A", b""), ("B", b""))))
    assert g.select_protocol() == "A"
    g.update_member(m1, (("B", b""),), 1, 1, None, awaiting=False)
    assert g.candidate_protocols() == {"B"}
    assert g.select_protocol() == "B"


def test_E6_maybe_elect_new_joined_leader() -> None:
    g = ClassicGroup("g")
    assert not g.maybe_elect_new_joined_leader()
    g.add(member("a"))
    g.add(member("b"), "hb", awaiting=True)
    assert g.maybe_elect_new_joined_leader() and g.leader_id == "b"
    g.update_member(g.get("a"), (("range", b""),), 1, 1, "ha", awaiting=True)
    assert g.maybe_elect_new_joined_leader() and g.leader_id == "b"
    g2 = ClassicGroup("g")
    g2.add(member("a"))
    assert not g2.maybe_elect_new_joined_leader()


def test_E5_init_next_generation_to_empty_clears_protocol() -> None:
    g = ClassicGroup("g", state=S.PREPARING_REBALANCE, generation=4, protocol_name="range")
    g.protocol_type = "consumer"
    g.init_next_generation(99)
    assert (g.generation, g.state, g.protocol_name, g.protocol_type) == (
        5,
        S.EMPTY,
        None,
        "consumer",
    )
    assert g.state_timestamp_ms == 99
