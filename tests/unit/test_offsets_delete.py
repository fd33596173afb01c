"""OffsetDelete and DeleteGroups on offsets (BEHAVIOR.md I6, J; Kafka's handleDeleteOffsets),
and the consumer-protocol subscription parser that decides which topics a group uses."""

from __future__ import annotations

from kcoord.coordinator.classic.group import GroupState
from kcoord.coordinator.config import GroupConfig
from kcoord.coordinator.messages import OffsetDeleteResponse
from kcoord.coordinator.schemas import GroupMetadataKey, OffsetCommitKey, decode_key
from kcoord.coordinator.shard import GroupShard
from kcoord.coordinator.subscription import parse_subscription_topics, subscribed_topics
from tests.unit.test_group_harness import E, Harness, subscription

S = GroupState
NONE = E.none


def _new_records(h: Harness, since: int) -> list[tuple[object, bool]]:
    """(decoded key, is tombstone) of the records emitted after ``since``."""
    return [(decode_key(k), v is None) for k, v in h.records[since:]]


def _consumer_group(h: Harness, *topics: str, n: int = 2) -> list[str]:
    ids = h.stable_group(n, protocols=[("range", subscription(*topics, version=1, tail=b"\0" * 4))])
    assert h.group().subscribed_topics == frozenset(topics)
    return ids


# ---- group-level errors ---------------------------------------------------------------------------


def test_offset_delete_unknown_group_is_group_id_not_found() -> None:
    h = Harness()
    assert h.offset_delete({"t": [0]}, group="nope") == OffsetDeleteResponse(
        E.group_id_not_found, ()
    )


def test_offset_delete_dead_group_is_group_id_not_found() -> None:
    h = Harness()
    h.commit({("t", 0): 1})
    h.group().transition_to(S.DEAD, h.now)
    assert h.offset_delete({"t": [0]}).error == E.group_id_not_found


def test_offset_delete_gates_invalid_id_loading() -> None:
    assert Harness().offset_delete({"t": [0]}, group="").error == E.invalid_group_id
    h = Harness(load=False)
    assert h.offset_delete({"t": [0]}).error == E.coordinator_load_in_progress


def test_offset_delete_non_consumer_group_with_members_is_non_empty_group() -> None:
    h = Harness()
    h.stable_group(1, protocol_type="connect")
    h.commit({("t", 0): 1}, generation=1, member=h.group().leader_id)
    assert h.offset_delete({"t": [0]}) == OffsetDeleteResponse(E.non_empty_group, ())
    assert h.offsets() == {("t", 0): 1}


# ---- Empty groups: everything goes -------------------------------------------------------------


def test_I6_offset_delete_on_empty_group_removes_all_and_tombstones_existing_keys() -> None:
    h = Harness()
    (a,) = h.stable_group(1)
    h.commit({("t", 0): 1, ("t", 1): 2, ("u", 0): 3}, generation=1, member=a)
    h.leave(a)
    n = len(h.records)
    resp = h.offset_delete({"t": [0, 5], "v": [0]})
    assert resp == OffsetDeleteResponse(NONE, (("t", ((0, NONE), (5, NONE))), ("v", ((0, NONE),))))
    assert _new_records(h, n) == [(OffsetCommitKey("g", "t", 0), True)]
    assert h.offsets() == {("t", 1): 2, ("u", 0): 3}
    assert h.group().state is S.EMPTY  # offsets remain: the group stays


def test_I6_offset_delete_of_last_offsets_kills_empty_group_with_group_tombstone() -> None:
    h = Harness()
    (a,) = h.stable_group(1)
    h.commit({("t", 0): 1}, generation=1, member=a)
    h.leave(a)
    n = len(h.records)
    assert h.offset_delete({"t": [0]}).error == NONE
    assert _new_records(h, n) == [
        (OffsetCommitKey("g", "t", 0), True),
        (GroupMetadataKey("g"), True),
    ]
    assert h.group() is None and h.describe("g")[0].state == "Dead"


def test_I6_offset_delete_of_standalone_group_needs_no_group_tombstone() -> None:
    h = Harness()
    h.commit({("t", 0): 1}, group="s")
    n = len(h.records)
    assert h.offset_delete({"t": [0]}, group="s").error == NONE
    assert _new_records(h, n) == [(OffsetCommitKey("s", "t", 0), True)]  # generation 0
    assert h.group("s") is None


# ---- groups with members -------------------------------------------------------------------------


def test_offset_delete_refuses_subscribed_topics_and_deletes_the_rest() -> None:
    h = Harness()
    a, _ = _consumer_group(h, "t1", "t2")
    h.commit({("t1", 0): 1, ("t3", 0): 3, ("t3", 1): 4}, generation=1, member=a)
    n = len(h.records)
    resp = h.offset_delete({"t1": [0], "t3": [0, 1]})
    assert resp == OffsetDeleteResponse(
        NONE, (("t1", ((0, E.group_subscribed_to_topic),)), ("t3", ((0, NONE), (1, NONE))))
    )
    assert h.offsets() == {("t1", 0): 1}
    assert _new_records(h, n) == [
        (OffsetCommitKey("g", "t3", 0), True),
        (OffsetCommitKey("g", "t3", 1), True),
    ]
    assert h.group().state is S.STABLE


def test_offset_delete_union_of_members_subscriptions() -> None:
    h = Harness()
    ja = h.join(protocols=[("range", subscription("t1"))])
    jb = h.join(protocols=[("range", subscription("t2"))])
    h.run_until(lambda: h.answered(ja) and h.answered(jb))
    assert h.group().subscribed_topics == frozenset({"t1", "t2"})
    resp = h.offset_delete({"t1": [0], "t2": [0], "t3": [0]})
    assert [(t, parts[0][1]) for t, parts in resp.topics] == [
        ("t1", E.group_subscribed_to_topic),
        ("t2", E.group_subscribed_to_topic),
        ("t3", NONE),
    ]


def test_offset_delete_unknown_subscriptions_refuse_every_topic() -> None:
    h = Harness()
    a = h.stable_group(1)[0]  # metadata b"sub" is no Subscription
    assert h.group().subscribed_topics is None
    h.commit({("t", 0): 1}, generation=1, member=a)
    resp = h.offset_delete({"t": [0], "u": [1]})
    assert resp == OffsetDeleteResponse(
        NONE,
        (("t", ((0, E.group_subscribed_to_topic),)), ("u", ((1, E.group_subscribed_to_topic),))),
    )
    assert h.offsets() == {("t", 0): 1}


def test_offset_delete_before_the_first_generation_counts_every_topic_as_subscribed() -> None:
    h = Harness()
    h.join(protocols=[("range", subscription("t1"))])
    assert h.group().state is S.PREPARING_REBALANCE and h.group().generation == 0
    resp = h.offset_delete({"zzz": [0]})
    assert resp.topics == (("zzz", ((0, E.group_subscribed_to_topic),)),)


def test_offset_delete_subscriptions_are_those_of_the_last_generation() -> None:
    # Kafka computes them at each new generation: a rejoin with new metadata during
    # PreparingRebalance does not change them until the join completes.
    h = Harness()
    a, b = _consumer_group(h, "t1")
    h.join(a, protocols=[("range", subscription("t9"))])
    assert h.group().state is S.PREPARING_REBALANCE
    assert h.offset_delete({"t9": [0]}).topics == (("t9", ((0, NONE),)),)
    assert h.offset_delete({"t1": [0]}).topics == (("t1", ((0, E.group_subscribed_to_topic),)),)


def test_offset_delete_replays_to_the_same_offsets() -> None:
    h = Harness()
    a, _ = _consumer_group(h, "t1")
    h.commit({("t1", 0): 1, ("t2", 0): 2}, generation=1, member=a)
    h.offset_delete({"t2": [0]})
    fresh = GroupShard(0, GroupConfig())
    for k, v in h.records:
        fresh.replay(k, v, h.now)
    fresh.finish_loading(h.now)
    assert fresh.committed_offsets("g") == h.shard.committed_offsets("g")
    g = fresh.group("g")
    assert g is not None and g.subscribed_topics == frozenset({"t1"})


# ---- DeleteGroups (I6) -------------------------------------------------------------------------------


def test_I6_delete_groups_tombstones_every_offset_and_replay_removes_them() -> None:
    h = Harness()
    (a,) = h.stable_group(1)
    h.commit({("t", 0): 1, ("t", 1): 2}, generation=1, member=a)
    h.leave(a)
    h.commit({("x", 0): 1}, group="other")
    n = len(h.records)
    assert h.delete("g") == {"g": NONE}
    assert _new_records(h, n) == [
        (OffsetCommitKey("g", "t", 0), True),
        (OffsetCommitKey("g", "t", 1), True),
        (GroupMetadataKey("g"), True),
    ]
    assert h.shard.committed_offsets("g") == {}
    fresh = GroupShard(0, GroupConfig())
    for k, v in h.records:
        fresh.replay(k, v, h.now)
    fresh.finish_loading(h.now)
    assert fresh.group("g") is None and fresh.committed_offsets("g") == {}
    assert fresh.committed_offsets("other") == h.shard.committed_offsets("other")


def test_I6_delete_standalone_group_removes_its_offsets() -> None:
    h = Harness()
    h.commit({("t", 0): 1}, group="s")
    assert h.delete("s") == {"s": NONE}
    assert h.fetch({"t": [0]}, group="s").topics[0][1][0].offset == -1


# ---- the subscription parser -------------------------------------------------------------------------


def test_subscription_parser_reads_every_version_by_its_v0_prefix() -> None:
    assert parse_subscription_topics(subscription("a", "b")) == {"a", "b"}
    assert parse_subscription_topics(subscription("a", user_data=b"ud")) == {"a"}
    owned = b"\x00\x00\x00\x01\x00\x01a\x00\x00\x00\x01\x00\x00\x00\x00"  # v1 owned partitions
    assert parse_subscription_topics(subscription("a", version=1, tail=owned)) == {"a"}
    v3_tail = owned + b"\x00\x00\x00\x05" + b"\x00\x04rack"  # generation, rack
    assert parse_subscription_topics(subscription("a", "é", version=3, tail=v3_tail)) == {"a", "é"}
    assert parse_subscription_topics(subscription()) == frozenset()


def test_subscription_parser_rejects_malformed_metadata() -> None:
    assert parse_subscription_topics(b"") is None
    assert parse_subscription_topics(b"sub") is None
    assert parse_subscription_topics(b"\x00\x00\xff\xff\xff\xff") is None  # null topic array
    assert parse_subscription_topics(b"\x00\x00\x00\x00\x00\x05\x00\x01a") is None  # count
    assert parse_subscription_topics(subscription("abc")[:-6]) is None  # truncated topic
    assert parse_subscription_topics(subscription("a")[:-2]) is None  # truncated user data
    assert parse_subscription_topics(subscription("a", user_data=b"xy")[:-1]) is None


def test_subscribed_topics_by_protocol_type() -> None:
    sub = subscription("t")
    assert subscribed_topics("consumer", "range", [sub, subscription("u")]) == {"t", "u"}
    assert subscribed_topics("consumer", None, []) == frozenset()
    assert subscribed_topics("consumer", "range", [sub, b"junk"]) is None
    assert subscribed_topics("connect", "range", [sub]) is None
    assert subscribed_topics(None, None, []) is None
