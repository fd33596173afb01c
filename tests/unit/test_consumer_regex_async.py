"""Regular expressions resolved asynchronously, as Kafka 4 does (GroupMetadataManager's
maybeUpdateRegularExpressions and handleRegularExpressionsResult; issue 32, librdkafka's test
0045): a heartbeat asks for the resolution, the broker's runtime resolves it later and hands
it back as an operation of its own, which writes record 16 and a new group epoch (record 3).
``Group.resolve`` plays the runtime's part. Each test names the rule it checks."""

from __future__ import annotations

import random
from typing import Any

import pytest

from kcoord.coordinator.consumer.regex_refresh import RegexResult
from kcoord.coordinator.shard import GroupShard
from kcoord.protocol.errors import ErrorCode as E
from tests.unit.test_consumer_group import Group, _state

TOPICS = {"lit": 2, "rx-1": 2, "rx-2": 1, "other": 1}


def names_of(g: Group, reply: Any) -> set[str]:
    assert reply.assignment is not None
    return {g.topics.topic_by_id(t).name for t, _ in reply.assignment}  # type: ignore[union-attr]


def test_a_literal_topic_is_assigned_first_and_the_regex_topics_at_a_later_group_epoch() -> None:
    g = Group(TOPICS)
    r = g.hb("a", 0, subscribed_topic_names=("lit",), subscribed_topic_regex="rx-.*")
    assert r.error == E.none and names_of(g, r) == {"lit"}
    first = r.member_epoch
    assert (16, False) not in g.kinds()  # the join resolves nothing
    assert g.resolve() == 1
    assert g.kinds() == [(16, False), (3, False)]  # the resolution's own write
    assert g.group().group_epoch == first + 1
    assert g.group().regexes["rx-.*"].topics == ("rx-1", "rx-2")
    r = g.hb("a", first, topic_partitions=r.assignment)
    assert r.member_epoch == first + 1 and names_of(g, r) == {"lit", "rx-1", "rx-2"}


def test_while_a_resolution_is_out_no_other_is_asked_for() -> None:
    g = Group(TOPICS)
    r = g.hb("a", 0, subscribed_topic_names=("lit",), subscribed_topic_regex="rx-.*")
    g.hb("b", 0, subscribed_topic_names=None, subscribed_topic_regex="oth.*")
    g.hb("a", r.member_epoch, topic_partitions=r.assignment)
    requests = g.shard.take_regex_requests()
    assert len(requests) == 1 and requests[0].regexes == {"rx-.*"}
    g.hb("a", r.member_epoch, topic_partitions=r.assignment)
    assert g.shard.take_regex_requests() == []
    # The result lands; b's regex is still unresolved: the next heartbeat asks for both.
    result = RegexResult("g", {"rx-.*": ("rx-1", "rx-2")}, g.topics.version, g.now)
    g.shard.regexes_resolved(result, g.now)
    g.hb("a", r.member_epoch, topic_partitions=r.assignment)
    (again,) = g.shard.take_regex_requests()
    assert again.regexes == {"rx-.*", "oth.*"}


def test_a_regex_the_group_has_resolved_is_used_at_once_by_a_member_that_joins_with_it() -> None:
    g = Group(TOPICS)
    g.hb("a", 0, subscribed_topic_names=None, subscribed_topic_regex="rx-.*")
    assert g.resolve() == 1
    r = g.hb("b", 0, subscribed_topic_names=None, subscribed_topic_regex="rx-.*")
    assert g.shard.take_regex_requests() == []  # up to date: nothing to ask
    assert r.error == E.none and g.group().target["b"]  # part of the regex's partitions


def test_a_result_for_a_regex_no_member_uses_any_more_is_dropped() -> None:
    g = Group(TOPICS)
    g.hb("a", 0, subscribed_topic_names=("lit",), subscribed_topic_regex="rx-.*")
    r = g.hb("b", 0, subscribed_topic_names=("lit",))
    g.hb("a", -1)  # the only member with the regex leaves before the resolution lands
    epoch = g.group().group_epoch
    assert g.resolve() == 1
    assert g.last_records == [] and g.group().regexes == {} and g.group().group_epoch == epoch
    assert r.error == E.none


def test_a_failed_resolution_is_asked_for_again_at_the_next_heartbeat() -> None:
    g = Group(TOPICS)
    r = g.hb("a", 0, subscribed_topic_names=("lit",), subscribed_topic_regex="rx-.*")
    (request,) = g.shard.take_regex_requests()
    out = g.shard.regexes_resolved(RegexResult("g", {}, g.topics.version, g.now, failed=True), g.now)
    assert out.records == []
    g.hb("a", r.member_epoch, topic_partitions=r.assignment)
    assert [x.regexes for x in g.shard.take_regex_requests()] == [request.regexes]


def test_a_resolution_whose_records_cannot_be_stored_is_undone_and_asked_for_again() -> None:
    g = Group(TOPICS)
    r = g.hb("a", 0, subscribed_topic_names=("lit",), subscribed_topic_regex="rx-.*")
    epoch = g.group().group_epoch
    (request,) = g.shard.take_regex_requests()
    result = RegexResult("g", {"rx-.*": ("rx-1",)}, g.topics.version, g.now)
    out = g.shard.regexes_resolved(result, g.now)
    assert out.records and g.group().group_epoch == epoch + 1
    g.shard.append_failed(out, E.kafka_storage_error, g.now)
    assert g.group().group_epoch == epoch and g.group().regexes == {}
    g.hb("a", r.member_epoch, topic_partitions=r.assignment)
    assert len(g.shard.take_regex_requests()) == 1


def test_a_topic_created_during_the_resolution_is_resolved_again_next() -> None:
    g = Group(TOPICS)
    r = g.hb("a", 0, subscribed_topic_names=None, subscribed_topic_regex="rx-.*")
    (request,) = g.shard.take_regex_requests()
    seen = g.topics.version
    g.topics.create("rx-3", 1)  # after the runtime took its snapshot
    g.shard.regexes_resolved(RegexResult("g", {"rx-.*": ("rx-1", "rx-2")}, seen, g.now), g.now)
    r = g.hb("a", g.group().members["a"].member_epoch, topic_partitions=())
    assert g.resolve() == 1
    assert g.group().regexes["rx-.*"].topics == ("rx-1", "rx-2", "rx-3")
    assert r.error == E.none


def _regex_activity(seed: int) -> Group:
    rnd = random.Random(seed)
    g = Group(dict(TOPICS))
    subscriptions: list[dict[str, Any]] = [
        {"subscribed_topic_names": ("lit",), "subscribed_topic_regex": "rx-.*"},
        {"subscribed_topic_names": None, "subscribed_topic_regex": "rx-.*"},
        {"subscribed_topic_names": ("other",), "subscribed_topic_regex": "o.*|lit"},
        {"subscribed_topic_names": ("lit",)},
    ]
    created = 0
    for _ in range(80):
        m = rnd.choice(["a", "b", "c"])
        group = g.shard.consumer_group("g")
        current = None if group is None else group.members.get(m)
        action = rnd.random()
        if current is None:
            g.hb(m, 0, **rnd.choice(subscriptions))
        elif action < 0.1:
            g.hb(m, -1)
        elif action < 0.25:
            g.resolve()
        elif action < 0.3:
            created += 1
            g.topics.create(f"rx-new-{created}", 1)
        elif action < 0.35:
            g.advance(rnd.choice([100, 7000]))
        else:
            owned = tuple((t, tuple(sorted(ps))) for t, ps in current.assigned.items())
            g.hb(m, current.member_epoch, topic_partitions=owned if rnd.random() < 0.8 else None)
    g.resolve()
    return g


@pytest.mark.parametrize("seed", range(6))
def test_replaying_the_records_of_heartbeats_and_resolutions_rebuilds_the_same_groups(
    seed: int,
) -> None:
    g = _regex_activity(seed)
    fresh = GroupShard(0, g.config, topics=g.topics)
    for key, value in g.log:
        fresh.replay(key, value, g.now)
    fresh.finish_loading(g.now)
    assert _state(fresh) == _state(g.shard)
