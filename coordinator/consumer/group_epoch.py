"""A consumer group's epoch and what moves it: a member joining, leaving or changing its
subscription, or a change in the topics the group subscribes to.

:func:`refresh_topics` re-reads the group's subscribed topics from the topics view (a
tombstone 16 for each regex no longer used) and tells whether the subscription's metadata
changed: whether their KIP-1101 metadata hash (:func:`coordinator.consumer.topics.
metadata_hash`, kept in record 3) differs from the group's. A group loaded with a record 4
(the topics' metadata as Kafka before 4.1 wrote it; never written here) gets its tombstone at
its first refresh, as Kafka deletes it at the group's next subscription-metadata update. It never resolves a regular expression itself: a ConsumerGroupHeartbeat that finds
one unresolved or stale asks for its resolution, which comes back later as an operation of its
own (:mod:`coordinator.consumer.regex_refresh`, as Kafka resolves them off its coordinator
thread), keeping the topics that heartbeat's principal may describe (for the whole group, as
in Kafka); a refresh without a heartbeat (a member fenced by a timer, a classic member's
JoinGroup) keeps their last resolution and leaves the group stale for the next heartbeat.
:func:`bump_group_epoch` moves the epoch on
(record 3) and starts a rebalance if none is under way. The target assignment then catches up
with the epoch (:mod:`coordinator.consumer.target`). Both write into the operation under way
and mark the group changed (:class:`coordinator.consumer.change.Change`).
"""

from __future__ import annotations

from collections.abc import Callable

from kcoord.coordinator.consumer import persistence as records
from kcoord.coordinator.consumer.change import Change
from kcoord.coordinator.consumer.group import ConsumerGroup
from kcoord.coordinator.consumer.topics import TopicsView, metadata_hash, subscribed_topics
from kcoord.coordinator.output import Operation
from kcoord.coordinator.rebalances import begin


def refresh_topics(
    op: Operation,
    change: Change,
    topics: TopicsView,
    now_ms: int,
    ask: Callable[[ConsumerGroup], None] | None,
) -> bool:
    """Re-read the subscribed topics; True if their metadata changed. Regexes no member uses
    any more get their tombstone; regexes whose resolution is missing or older than the
    topics view are not resolved here (module docstring): ``ask`` queues their resolution (a
    ConsumerGroupHeartbeat's), None leaves them for the next heartbeat, and meanwhile their
    last resolution stands (none yet: no topics)."""
    group = change.group
    version = topics.version
    used = {m.subscribed_topic_regex for m in group.members.values() if m.subscribed_topic_regex}
    for regex in [r for r in group.regexes if r not in used]:
        change.touch()
        del group.regexes[regex]
        op.emit(*records.regex_record(group.group_id, regex, None))
    stale = False
    for regex in used:
        old = group.regexes.get(regex)
        if old is None or old.version != version:
            stale = True
    if stale and ask is not None:
        ask(group)
    subscribed = subscribed_topics(topics, group.subscribed_topic_names())
    digest = metadata_hash(subscribed)
    read_at = -1 if stale else version  # -1: the next heartbeat looks again
    changed = False
    if subscribed != group.subscribed or group.topics_version != read_at:
        change.touch()
        group.subscribed = subscribed
        group.topics_version = read_at
    if digest != group.metadata_hash:
        change.touch()
        group.metadata_hash = digest
        changed = True
    if group.legacy_partition_metadata:  # KIP-1101: the hash replaces record 4, deleted now
        change.touch()
        group.legacy_partition_metadata = False
        op.emit(*records.partition_metadata_tombstone(group.group_id))
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
