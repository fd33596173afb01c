"""Regular-expression subscriptions (ConsumerGroupHeartbeat v1): RE2 syntax, matched against
whole topic names, as Kafka's RE2/J does. Internal topics are never matched.

This module owns which patterns are acceptable and what compiled patterns stay in memory:

- A pattern longer than :data:`MAX_REGEX_BYTES` (UTF-8) is refused before RE2 sees it. The
  pattern is the key of a ConsumerGroupRegularExpression record (16), an int16-length string,
  so a longer one could never be written; Kafka has no bound of its own and fails when it
  serialises that record, kcoord answers INVALID_REGULAR_EXPRESSION instead.
- An invalid pattern is refused with Kafka's message and nothing of it is kept: re-checking a
  bad pattern costs one parse of at most 32 KiB, keeping its message cost memory an attacker
  chooses.
- Valid compiled patterns live in a small LRU cache (:data:`CACHE_ENTRIES`), each with RE2's
  memory budget capped (:data:`RE2_MAX_MEM`); a group's pattern that fell out is compiled again
  when the group next resolves it (a heartbeat that sends it, or a topic change). re2.compile's
  own cache (128 entries, no byte bound) is bypassed.
- RE2 running out of memory, or exceeding its budget, is a refusal like any invalid pattern.

Resolving is in two parts, so that the matching can run off the event loop (Kafka resolves
regexes asynchronously, off its coordinator thread): :func:`compile_regexes` on the coordinator's
thread (it uses the cache), then :func:`match_topics`, which touches no shared state and may
run in any thread over a snapshot of the topic names (RE2's matching is thread-safe).
:func:`resolve_regex` does both at once.

With an authorizer, a pattern resolves only to topics the principal of the heartbeat that
resolves it may DESCRIBE (the ``describable`` predicate the broker hands in, as Kafka 4.0 does
since KAFKA-18813): a member never learns a hidden topic's id or partitions from its assignment.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any

import re2

from kcoord.coordinator.consumer.group import ResolvedRegex
from kcoord.coordinator.consumer.topics import TopicsView

INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})

MAX_REGEX_BYTES = 32767
"""Longest pattern accepted, in UTF-8 bytes: the most an int16-length record key holds."""

CACHE_ENTRIES = 32
"""Valid compiled patterns kept (least recently used go first)."""

RE2_MAX_MEM = 2 << 20
"""RE2's memory budget per compiled pattern (program and match caches; RE2's default is 8 MiB).
A 32 KiB alternation of topic names needs well under it; a pattern whose program does not fit
is refused ("pattern too large"), and matching past the cache budget falls back to a slower
path inside RE2, never to more memory."""

_cache: OrderedDict[str, Any] = OrderedDict()

Describable = Callable[[str], bool]
"""Whether the principal behind a request may DESCRIBE the topic of that name."""


def every_topic(_name: str) -> bool:
    """The :data:`Describable` of a broker without an authorizer."""
    return True


def _options() -> Any:
    options = re2.Options()
    options.max_mem = RE2_MAX_MEM
    options.log_errors = False  # RE2 would write every bad pattern, whole, to stderr
    return options


_OPTIONS = _options()


def _compile(pattern: str) -> Any:
    """Compile with no cache: re2.compile memoises up to 128 patterns whatever their size."""
    return re2._Regexp(pattern, _OPTIONS)


def compile_regex(pattern: str) -> tuple[Any, str | None]:
    """The compiled pattern, or None and why it is refused (the INVALID_REGULAR_EXPRESSION
    message)."""
    compiled = _cache.get(pattern)
    if compiled is not None:
        _cache.move_to_end(pattern)
        return compiled, None
    size = len(pattern.encode("utf-8", "surrogatepass"))
    if size > MAX_REGEX_BYTES:
        return None, (
            f"SubscribedTopicRegex of {size} bytes is too long: at most {MAX_REGEX_BYTES}"
            f" bytes are allowed (it begins {pattern[:40]!r})."
        )
    try:
        compiled = _compile(pattern)
    except re2.error as e:
        return None, f"SubscribedTopicRegex `{pattern}` is not a valid regular expression: {_reason(e)}."
    except MemoryError:
        return None, f"SubscribedTopicRegex of {size} bytes could not be compiled: out of memory."
    except ValueError as e:  # text RE2 cannot take (e.g. a lone surrogate)
        return None, f"SubscribedTopicRegex is not a valid regular expression: {e}."
    _cache[pattern] = compiled
    if len(_cache) > CACHE_ENTRIES:
        _cache.popitem(last=False)
    return compiled, None


def _reason(error: re2.error) -> str:
    """RE2's reason as text, cut short: it quotes the offending part, which may be most of
    the pattern (already quoted whole in the message)."""
    raw = error.args[0] if error.args else ""
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
    return text if len(text) <= 200 else text[:200] + "..."


def cached_regexes() -> int:
    """How many compiled patterns are kept."""
    return len(_cache)


def forget_regexes() -> None:
    """Drop every kept compiled pattern (tests)."""
    _cache.clear()


def resolve_regex(
    pattern: str, topics: TopicsView, now_ms: int, describable: Describable = every_topic
) -> ResolvedRegex:
    """The topics ``pattern`` matches now that ``describable`` allows (sorted), as of the
    view's version; none for a pattern that is refused."""
    compiled = compile_regex(pattern)[0]
    matched: tuple[str, ...] = ()
    if compiled is not None:
        matched = tuple(
            sorted(
                name
                for name in topics.names()
                if name not in INTERNAL_TOPICS
                and compiled.fullmatch(name) is not None
                and describable(name)
            )
        )
    return ResolvedRegex(matched, topics.version, now_ms)


def compile_regexes(patterns: Iterable[str]) -> dict[str, Any]:
    """The compiled form of each acceptable pattern (refused ones are left out: they match
    nothing). Uses the cache: the coordinator's thread only."""
    compiled = {}
    for pattern in patterns:
        regexp = compile_regex(pattern)[0]
        if regexp is not None:
            compiled[pattern] = regexp
    return compiled


def match_topics(compiled: dict[str, Any], names: Iterable[str]) -> dict[str, tuple[str, ...]]:
    """The names (sorted) each compiled pattern matches whole, internal topics left out. Any
    thread: it reads only its arguments."""
    matched: dict[str, list[str]] = {pattern: [] for pattern in compiled}
    for name in names:
        if name in INTERNAL_TOPICS:
            continue
        for pattern, regexp in compiled.items():
            if regexp.fullmatch(name) is not None:
                matched[pattern].append(name)
    return {pattern: tuple(sorted(found)) for pattern, found in matched.items()}
