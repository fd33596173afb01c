"""Regular-expression subscriptions (coordinator/consumer/regex.py): what is valid, what is
kept in memory. An invalid or over-long pattern is refused with INVALID_REGULAR_EXPRESSION and
leaves nothing behind; only a few valid compiled patterns are cached; an RE2 failure to
allocate is a refusal too, never an exception out of the coordinator. With an authorizer, a
pattern resolves only to topics the resolving heartbeat's principal may describe. Resolution
is asynchronous (tests/unit/test_consumer_regex_async.py): ``Group.resolve`` plays the
runtime's part."""

from __future__ import annotations

from typing import Any

import pytest
import re2

from kcoord.coordinator.consumer import regex as regex_module
from kcoord.coordinator.consumer.regex import (
    CACHE_ENTRIES,
    MAX_REGEX_BYTES,
    cached_regexes,
    compile_regex,
    resolve_regex,
)
from kcoord.coordinator.consumer.topics import StaticTopics
from kcoord.protocol.errors import ErrorCode
from tests.unit.test_consumer_group import Group


@pytest.fixture(autouse=True)
def _empty_cache() -> None:
    regex_module.forget_regexes()


def test_a_valid_pattern_compiles_and_matches_whole_names() -> None:
    compiled, problem = compile_regex("orders-.*")
    assert problem is None and compiled is not None
    topics = StaticTopics({"orders-1": 1, "orders-2": 1, "x-orders-3": 1, "__consumer_offsets": 1})
    assert resolve_regex("orders-.*", topics, 5).topics == ("orders-1", "orders-2")
    assert resolve_regex(".*", topics, 5).topics == ("orders-1", "orders-2", "x-orders-3")


def test_an_invalid_pattern_is_refused_with_kafkas_message_and_not_kept() -> None:
    compiled, problem = compile_regex("(unclosed")
    assert compiled is None and problem is not None
    assert problem.startswith("SubscribedTopicRegex `(unclosed` is not a valid regular expression:")
    assert "b'" not in problem  # RE2's reason as text, not bytes
    for i in range(200):
        assert compile_regex(f"({i}" + "x" * 20_000)[1] is not None
    assert cached_regexes() == 0
    assert resolve_regex("(unclosed", StaticTopics({"t": 1}), 0).topics == ()


def test_the_longest_pattern_a_record_key_can_hold_is_the_limit() -> None:
    # The regex is the key of a ConsumerGroupRegularExpression record: an int16-length string.
    assert MAX_REGEX_BYTES == 32767
    assert compile_regex("a" * MAX_REGEX_BYTES)[1] is None
    compiled, problem = compile_regex("a" * (MAX_REGEX_BYTES + 1))
    assert compiled is None and problem is not None and "32767" in problem
    assert len(problem) < 1000  # the message does not echo the whole pattern
    # UTF-8 bytes count, not characters.
    assert compile_regex("é" * (MAX_REGEX_BYTES // 2 + 1))[1] is not None
    huge = "(" * 400_000  # invalid and far too long: refused before RE2 sees it
    assert compile_regex(huge)[1] is not None
    assert cached_regexes() == 1  # the valid one at the limit only
    assert resolve_regex("a" * (MAX_REGEX_BYTES + 1), StaticTopics({"a": 1}), 0).topics == ()


def test_only_a_few_valid_patterns_stay_compiled() -> None:
    made_by_re2 = re2._Regexp._make.cache_info().currsize
    for i in range(CACHE_ENTRIES * 4):
        assert compile_regex(f"t{i}-" + "[a-z]" * 1000)[1] is None
    assert cached_regexes() == CACHE_ENTRIES
    # re2.compile's own (unbounded in bytes) cache is not used either
    assert re2._Regexp._make.cache_info().currsize == made_by_re2
    # the most recently used stay
    first, _ = compile_regex(f"t{CACHE_ENTRIES * 4 - 1}-" + "[a-z]" * 1000)
    again, _ = compile_regex(f"t{CACHE_ENTRIES * 4 - 1}-" + "[a-z]" * 1000)
    assert first is again


def test_running_out_of_memory_is_a_refusal(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_memory(pattern: str) -> Any:
        raise MemoryError

    monkeypatch.setattr(regex_module, "_compile", no_memory)
    compiled, problem = compile_regex("fine-.*")
    assert compiled is None and problem is not None and "memory" in problem
    assert cached_regexes() == 0
    assert resolve_regex("fine-.*", StaticTopics({"fine-1": 1}), 0).topics == ()


@pytest.mark.parametrize(
    "pattern",
    ["a" * (MAX_REGEX_BYTES + 1), "(" * 100_000, "(?:a{1000}){1000}"],
)
def test_a_heartbeat_with_such_a_pattern_is_refused_and_writes_nothing(pattern: str) -> None:
    g = Group()
    r = g.hb("a", 0, subscribed_topic_regex=pattern, subscribed_topic_names=())
    assert r.error == ErrorCode.invalid_regular_expression and r.error_message
    assert g.log == [] and g.shard.consumer_group("g") is None


def test_a_heartbeat_whose_regex_cannot_be_compiled_for_memory_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_memory(pattern: str) -> Any:
        raise MemoryError

    monkeypatch.setattr(regex_module, "_compile", no_memory)
    g = Group()
    r = g.hb("a", 0, subscribed_topic_regex="t.*", subscribed_topic_names=())
    assert r.error == ErrorCode.invalid_regular_expression
    assert g.log == []


def test_a_long_valid_regex_subscription_works_and_is_persisted() -> None:
    g = Group({"t": 2, "u": 1})
    pattern = "t|" + "|".join(f"x{i:05d}" for i in range(4500))  # about 31 KB
    assert len(pattern.encode()) <= MAX_REGEX_BYTES
    r = g.hb("a", 0, subscribed_topic_regex=pattern, subscribed_topic_names=())
    assert r.error == ErrorCode.none
    assert g.resolve() == 1
    assert g.group().regexes[pattern].topics == ("t",)


# ---- what the member may describe (KAFKA-18813) -----------------------------------------------


def test_a_regex_resolves_only_the_topics_the_heartbeat_s_principal_may_describe() -> None:
    g = Group({"visible": 2, "hidden": 2})

    def may(name: str) -> bool:
        return name.startswith("visible")

    r = g.hb("a", 0, subscribed_topic_names=None, subscribed_topic_regex=".*", describable=may)
    assert r.error == ErrorCode.none and g.resolve() == 1
    assert g.group().regexes[".*"].topics == ("visible",)
    r = g.hb("a", r.member_epoch, describable=may)
    assert {t for t, _ in r.assignment or ()} == {g.id_of("visible")}
    # A topic created later: resolved after the next heartbeat, under the same rule.
    g.topics.create("visible-2", 1)
    g.topics.create("hidden-2", 1)
    g.hb("a", r.member_epoch, describable=may)
    assert g.resolve() == 1
    assert g.group().regexes[".*"].topics == ("visible", "visible-2")
    g.hb("a", g.group().members["a"].member_epoch, describable=may)
    assigned = {t for m in g.group().target.values() for t in m}
    assert assigned == {g.id_of("visible"), g.id_of("visible-2")}
    # Without an authorizer (no predicate), every topic.
    g.hb("b", 0, group_id="g2", subscribed_topic_names=None, subscribed_topic_regex=".*")
    assert g.resolve() == 1
    other = g.shard.consumer_group("g2")
    assert other is not None
    assert other.regexes[".*"].topics == ("hidden", "hidden-2", "visible", "visible-2")


def test_a_refresh_without_a_heartbeat_leaves_regexes_for_the_next_one() -> None:
    g = Group({"visible": 1})

    def may(name: str) -> bool:
        return name.startswith("visible")

    a = g.hb("a", 0, subscribed_topic_names=None, subscribed_topic_regex=".*", describable=may)
    b = g.hb("b", 0, subscribed_topic_names=("visible",), describable=may)
    assert a.error == b.error == ErrorCode.none and g.resolve() == 1
    g.topics.create("hidden", 1)
    g.topics.create("visible-2", 1)
    g.hb("b", -1)  # b leaves: a refresh with no heartbeat's view
    assert g.resolve() == 0  # no resolution asked for there (nor an unfiltered one)
    assert g.group().regexes[".*"].topics == ("visible",)
    g.hb("a", g.group().members["a"].member_epoch, describable=may)
    assert g.resolve() == 1
    assert g.group().regexes[".*"].topics == ("visible", "visible-2")
