"""A consumer group's epoch and what moves it: a member joining, leaving or changing its
subscription, or a change in the topics the group subscribes to.

:func:`refresh_topics` re-reads the group's subscribed topics from the topics view, re-resolves
its regular expressions (a record 16 for each that changed or is no longer used) and tells
whether the subscription's metadata changed. Regexes are resolved only for a
ConsumerGroupHeartbeat, keeping the topics its principal may describe (for the whole group, as
in Kafka: the heartbeat that finds a regex stale resolves it); a refresh without one (a member
fenced by a timer, a classic member's JoinGroup) keeps their last resolution and leaves the
group stale for the next heartbeat. :func:`bump_group_epoch` moves the epoch on
(record 3) and starts a rebalance if none is under way. The target assignment then catches up
with the epoch (:mod:`coordinator.consumer.target`). Both write into the operation under way
and mark the group changed (:class:`coordinator.consumer.change.Change`).
"""

from __future__ import annotations

from dataclasses import replace

from kcoord.coordinator.consumer import persistence as records
from kcoord.coordinator.consumer.change import Change
from kcoord.coordinator.consumer.regex import Describable, resolve_regex
from kcoord.coordinator.consumer.topics import TopicsView, metadata_hash, subscribed_topics
from kcoord.coordinator.output import Operation
from kcoord.coordinator.rebalances import begin


def refresh_topics(
    op: Operation, change: Change, topics: TopicsView, now_ms: int, describable: Describable | None
) -> bool:
    """Re-read the subscribed topics (and re-resolve regexes, keeping the topics
    ``describable`` allows; None: not now, see the module docstring); True if they changed."""
    group = change.group
    version = topics.version
    changed = False
    stale = False
    used = {m.subscribed_topic_regex for m in group.members.values() if m.subscribed_topic_regex}
    for regex in [r for r in group.regexes if r not in used]:
        change.touch()
        del group.regexes[regex]
        op.emit(*records.regex_record(group.group_id, regex, None))
    for regex in used:
        old = group.regexes.get(regex)
        if old is not None and old.version == version:
            continue
        if describable is None:
            stale = True
            continue
        resolved = resolve_regex(regex, topics, now_ms, describable)
        change.touch()
        if old is None or old.topics != resolved.topics:
            group.regexes[regex] = resolved
            op.emit(*records.regex_record(group.group_id, regex, resolved))
            changed = True
        else:
            group.regexes[regex] = replace(old, version=version)
    subscribed = subscribed_topics(topics, group.subscribed_topic_names())
    digest = metadata_hash(subscribed)
    read_at = -1 if stale else version  # -1: the next heartbeat refreshes again
    if subscribed != group.subscribed or group.topics_version != read_at:
        change.touch()
        group.subscribed = subscribed
        group.topics_version = read_at
    if digest != group.metadata_hash:
        group.metadata_hash = digest
        changed = True
    return changed


def bump_group_epoch(op: Operation, change: Change, now_ms: int, reason: str) -> None:
    """Move the group epoch on (record 3) and, if none is under way, start a rebalance
    (``reason``: why, for its event)."""
    group = change.group
    change.touch()
    group.group_epoch += 1
    op.emit(*records.epoch_record(group))
    if group.rebalance is None:
        group.rebalance = begin(now_ms, reason, group.settled)
