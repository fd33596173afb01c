"""Regular-expression subscriptions (ConsumerGroupHeartbeat v1): RE2 syntax, matched against
whole topic names, as Kafka's RE2/J does. Internal topics are never matched."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import re2

from kcoord.coordinator.consumer.group import ResolvedRegex
from kcoord.coordinator.consumer.topics import TopicsView

INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})


@lru_cache(maxsize=1024)
def compile_regex(pattern: str) -> tuple[Any, str | None]:
    """The compiled pattern, or None and why it is invalid."""
    try:
        return re2.compile(pattern), None
    except re2.error as e:
        return None, f"SubscribedTopicRegex {pattern} is not a valid regular expression: {e}."


def resolve_regex(pattern: str, topics: TopicsView, now_ms: int) -> ResolvedRegex:
    """The topics ``pattern`` matches now (sorted), as of the view's version."""
    compiled = compile_regex(pattern)[0]
    matched: tuple[str, ...] = ()
    if compiled is not None:
        matched = tuple(
            sorted(
                name
                for name in topics.names()
                if name not in INTERNAL_TOPICS and compiled.fullmatch(name) is not None
            )
        )
    return ResolvedRegex(matched, topics.version, now_ms)
