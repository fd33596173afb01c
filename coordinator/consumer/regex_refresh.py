"""Resolving a consumer group's regular expressions asynchronously, as Kafka does (its
``maybeUpdateRegularExpressions`` schedules the resolution off the coordinator thread and
``handleRegularExpressionsResult`` applies what it found as an operation of its own).

The coordinator stays sans-IO; the resolution is asked for and handed back:

- A ConsumerGroupHeartbeat that finds one of the group's regexes unresolved, or resolved
  against an older topics view, does not resolve it: :func:`ask_resolution` queues a
  :class:`RegexRequest` (every regex the group uses, with the heartbeat principal's
  ``describable``) unless one is already out for the group. The heartbeat is answered with
  what the group has: a member that subscribes to a topic and a new regex gets that topic at
  once and the regex's topics later, in a new group epoch.
- The broker's runtime takes the queued requests (``GroupShard.take_regex_requests``), matches
  the patterns against a snapshot of the topic names (off the event loop when that is big) and
  gives back a :class:`RegexResult`; :func:`apply_resolution` (``GroupShard.regexes_resolved``)
  stores what changed (record 16 for each regex whose topics changed), re-reads the subscribed
  topics and bumps the group epoch (record 3) if the subscription changed; the next heartbeat
  then computes the new target assignment.

Only the records are state: whether a resolution is out (``ConsumerGroup.regex_resolving``) is
not written, and a group loaded from its records asks again at its next heartbeat.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable
from dataclasses import dataclass, replace
from typing import Protocol

from kcoord.coordinator.consumer import persistence as records
from kcoord.coordinator.consumer.change import Change
from kcoord.coordinator.consumer.group import ConsumerGroup, ResolvedRegex
from kcoord.coordinator.consumer.group_epoch import bump_group_epoch, refresh_topics
from kcoord.coordinator.consumer.regex import Describable, compile_regexes, match_topics
from kcoord.coordinator.consumer.topics import TopicsView
from kcoord.coordinator.output import Operation

log = logging.getLogger(__name__)


class Groups(Protocol):
    """What applying a resolution needs of the consumer groups' manager."""

    groups: dict[str, ConsumerGroup]
    op: Operation
    topics: TopicsView

    def finish(self, change: Change, handle: Hashable | None) -> None: ...


@dataclass(frozen=True, slots=True)
class RegexRequest:
    """Resolve ``regexes`` of group ``group_id`` with the topics ``describable`` allows."""

    group_id: str
    regexes: frozenset[str]
    describable: Describable


@dataclass(frozen=True, slots=True)
class RegexResult:
    """What a :class:`RegexRequest` found: each regex's topics (sorted), as of the topics
    view's ``version``, resolved at ``timestamp``; ``failed`` if it could not be resolved
    (nothing is stored then, and the next heartbeat asks again)."""

    group_id: str
    topics: dict[str, tuple[str, ...]]
    version: int
    timestamp: int
    failed: bool = False


def stale_regexes(group: ConsumerGroup, version: int) -> frozenset[str]:
    """The regexes the members use whose resolution is missing or older than ``version``."""
    used = {m.subscribed_topic_regex for m in group.members.values() if m.subscribed_topic_regex}
    return frozenset(
        r for r in used if (old := group.regexes.get(r)) is None or old.version != version
    )


def ask_resolution(
    queue: list[RegexRequest], group: ConsumerGroup, describable: Describable
) -> None:
    """Queue the resolution of every regex the group uses, unless one is already out."""
    if group.regex_resolving:
        return
    used = frozenset(
        m.subscribed_topic_regex for m in group.members.values() if m.subscribed_topic_regex
    )
    if used:
        group.regex_resolving = True
        queue.append(RegexRequest(group.group_id, used, describable))


def resolve_now(request: RegexRequest, topics: TopicsView, now_ms: int) -> RegexResult:
    """Resolve ``request`` at once against ``topics`` (tests and tools; the broker's runtime
    does the same in steps, the matching off the event loop)."""
    matched = match_topics(compile_regexes(request.regexes), list(topics.names()))
    allowed = request.describable
    found = {
        pattern: tuple(name for name in matched.get(pattern, ()) if allowed(name))
        for pattern in request.regexes
    }
    return RegexResult(request.group_id, found, topics.version, now_ms)


def apply_resolution(manager: Groups, result: RegexResult, now_ms: int) -> None:
    """Store a resolution (module docstring): records 16 for the regexes whose topics changed,
    then record 3 if the group's subscription changed. Regexes no member uses any more are
    skipped; a group that is gone is left alone."""
    group = manager.groups.get(result.group_id)
    if group is None:
        return
    group.regex_resolving = False
    if result.failed:
        return
    change = Change(group, created=False)
    used = {m.subscribed_topic_regex for m in group.members.values() if m.subscribed_topic_regex}
    moved = False
    for regex, topics in result.topics.items():
        if regex not in used:
            continue
        old = group.regexes.get(regex)
        if old is None or old.topics != topics:
            change.touch()
            resolved = ResolvedRegex(topics, result.version, result.timestamp)
            group.regexes[regex] = resolved
            manager.op.emit(*records.regex_record(group.group_id, regex, resolved))
            moved = True
        elif old.version != result.version:
            group.regexes[regex] = replace(old, version=result.version)
    if refresh_topics(manager.op, change, manager.topics, now_ms, None) or moved:
        log.info("group %s: regular expressions resolved: %s", group.group_id, result.topics)
        bump_group_epoch(manager.op, change, now_ms, "the regular expressions were resolved")
    manager.finish(change, None)
