"""How a consumer group is stored in ``__consumer_offsets`` and rebuilt from it.

The record types (Kafka's, keys 3 and 5-8; 4 and 16 are read): the group epoch (3), one
member's subscription and identity (5), the target assignment epoch (6) and one member's
target (7), one member's current assignment, epoch and state (8), a resolved regex (16).
:func:`member_tombstones` and :func:`group_tombstones` give the deletions in Kafka's order.

:class:`ConsumerGroupLoader` collects the newest record of each key while a shard loads and
builds the groups when loading ends, whatever order the records came in.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from kcoord.coordinator.consumer.group import INITIAL_EPOCH, ConsumerGroup, ResolvedRegex
from kcoord.coordinator.consumer.member import Assignment, ConsumerMember, MemberState
from kcoord.coordinator.consumer.records import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupRegularExpressionValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    ConsumerRecordKey,
    TopicPartitions,
    decode_consumer_value,
    encode_consumer_key,
    encode_consumer_value,
)
from kcoord.coordinator.consumer.topics import TopicId
from kcoord.coordinator.output import Record

__all__ = [
    "ConsumerGroupLoader",
    "assignment_epoch_record",
    "current_assignment_record",
    "epoch_record",
    "group_tombstones",
    "member_record",
    "member_tombstones",
    "regex_record",
    "target_record",
]


def to_topic_partitions(assignment: Assignment) -> TopicPartitions:
    return tuple(
        (topic_id, tuple(sorted(partitions)))
        for topic_id, partitions in sorted(assignment.items(), key=lambda kv: kv[0].bytes)
        if partitions
    )


def from_topic_partitions(value: TopicPartitions) -> Assignment:
    out: dict = {}
    for topic_id, partitions in value:
        if partitions:
            out[topic_id] = out.get(topic_id, frozenset()) | frozenset(partitions)
    return out


def _record(key: ConsumerRecordKey, value: object | None) -> Record:
    return encode_consumer_key(key), None if value is None else encode_consumer_value(value)  # type: ignore[arg-type]


def epoch_record(group: ConsumerGroup) -> Record:
    return _record(
        ConsumerGroupMetadataKey(group.group_id),
        ConsumerGroupMetadataValue(group.group_epoch, group.metadata_hash),
    )


def partition_metadata_tombstone(group_id: str) -> Record:
    """Deletes a group's record 4 (KIP-1101: written by Kafka before 4.1, only deleted since)."""
    return _record(ConsumerGroupPartitionMetadataKey(group_id), None)


def member_record(group_id: str, member: ConsumerMember) -> Record:
    return _record(
        ConsumerGroupMemberMetadataKey(group_id, member.member_id),
        ConsumerGroupMemberMetadataValue(
            instance_id=member.instance_id,
            rack_id=member.rack_id,
            client_id=member.client_id,
            client_host=member.client_host,
            subscribed_topic_names=member.subscribed_topic_names,
            subscribed_topic_regex=member.subscribed_topic_regex,
            rebalance_timeout_ms=member.rebalance_timeout_ms,
            server_assignor=member.server_assignor,
            classic_member_metadata=member.classic,
        ),
    )


def target_record(group_id: str, member_id: str, assignment: Assignment) -> Record:
    return _record(
        ConsumerGroupTargetAssignmentMemberKey(group_id, member_id),
        ConsumerGroupTargetAssignmentMemberValue(to_topic_partitions(assignment)),
    )


def assignment_epoch_record(group: ConsumerGroup) -> Record:
    return _record(
        ConsumerGroupTargetAssignmentMetadataKey(group.group_id),
        ConsumerGroupTargetAssignmentMetadataValue(group.assignment_epoch, group.assignment_timestamp),
    )


def current_assignment_record(group_id: str, member: ConsumerMember) -> Record:
    assigned = to_topic_partitions(member.assigned)
    pending = to_topic_partitions(member.pending_revocation)
    return _record(
        ConsumerGroupCurrentMemberAssignmentKey(group_id, member.member_id),
        ConsumerGroupCurrentMemberAssignmentValue(
            member_epoch=member.member_epoch,
            previous_member_epoch=member.previous_member_epoch,
            state=int(member.state),
            assigned_partitions=assigned,
            partitions_pending_revocation=pending,
            assigned_epochs=_epochs_in_order(member, assigned),
            pending_revocation_epochs=_epochs_in_order(member, pending),
        ),
    )


def _epochs_in_order(member: ConsumerMember, tps: TopicPartitions) -> tuple[tuple[int, ...], ...]:
    """KIP-1251: the assignment epochs of ``tps``'s partitions, in the record's order."""
    return tuple(
        tuple(member.assignment_epoch(topic_id, p) or 0 for p in partitions)
        for topic_id, partitions in tps
    )


def regex_record(group_id: str, regex: str, resolved: ResolvedRegex | None) -> Record:
    value = (
        None
        if resolved is None
        else ConsumerGroupRegularExpressionValue(resolved.topics, resolved.version, resolved.timestamp)
    )
    return _record(ConsumerGroupRegularExpressionKey(group_id, regex), value)


def member_tombstones(group_id: str, member_id: str) -> list[Record]:
    """A member leaves: its current assignment, target and subscription, in that order."""
    return [
        _record(ConsumerGroupCurrentMemberAssignmentKey(group_id, member_id), None),
        _record(ConsumerGroupTargetAssignmentMemberKey(group_id, member_id), None),
        _record(ConsumerGroupMemberMetadataKey(group_id, member_id), None),
    ]


def group_tombstones(group: ConsumerGroup) -> list[Record]:
    """Every record of a deleted group, in Kafka's order."""
    gid = group.group_id
    members = list(group.members)
    out = [_record(ConsumerGroupCurrentMemberAssignmentKey(gid, m), None) for m in members]
    out += [_record(ConsumerGroupTargetAssignmentMemberKey(gid, m), None) for m in members]
    out.append(_record(ConsumerGroupTargetAssignmentMetadataKey(gid), None))
    out += [_record(ConsumerGroupMemberMetadataKey(gid, m), None) for m in members]
    out += [_record(ConsumerGroupRegularExpressionKey(gid, r), None) for r in group.regexes]
    out.append(partition_metadata_tombstone(gid))
    out.append(_record(ConsumerGroupMetadataKey(gid), None))
    return out


@dataclass(slots=True)
class _Loaded:
    epoch: ConsumerGroupMetadataValue | None = None
    assignment_epoch: int | None = None
    assignment_timestamp: int = 0
    members: dict[str, ConsumerGroupMemberMetadataValue] = field(default_factory=dict)
    current: dict[str, ConsumerGroupCurrentMemberAssignmentValue] = field(default_factory=dict)
    target: dict[str, Assignment] = field(default_factory=dict)
    regexes: dict[str, ConsumerGroupRegularExpressionValue] = field(default_factory=dict)
    legacy_partition_metadata: bool = False


class ConsumerGroupLoader:
    """The newest value of every consumer-group record of a partition, turned into groups."""

    def __init__(self) -> None:
        self._groups: dict[str, _Loaded] = {}

    def replay(self, key: ConsumerRecordKey, value: bytes | None) -> None:
        gid = key.group
        loaded = self._groups.get(gid)
        if loaded is None:
            if value is None:
                return
            loaded = self._groups[gid] = _Loaded()
        decoded = None if value is None else decode_consumer_value(key, value)
        if isinstance(key, ConsumerGroupMetadataKey):
            if decoded is None:
                del self._groups[gid]  # the group's last record: it was deleted
            else:
                assert isinstance(decoded, ConsumerGroupMetadataValue)
                loaded.epoch = decoded
        elif isinstance(key, ConsumerGroupTargetAssignmentMetadataKey):
            if decoded is None:
                loaded.assignment_epoch, loaded.assignment_timestamp = None, 0
            else:
                assert isinstance(decoded, ConsumerGroupTargetAssignmentMetadataValue)
                loaded.assignment_epoch = decoded.assignment_epoch
                loaded.assignment_timestamp = decoded.assignment_timestamp
        elif isinstance(key, ConsumerGroupMemberMetadataKey):
            _put(loaded.members, key.member_id, decoded)
        elif isinstance(key, ConsumerGroupCurrentMemberAssignmentKey):
            _put(loaded.current, key.member_id, decoded)
        elif isinstance(key, ConsumerGroupTargetAssignmentMemberKey):
            _put(
                loaded.target,
                key.member_id,
                None if decoded is None else from_topic_partitions(decoded.topic_partitions),  # type: ignore[union-attr]
            )
        elif isinstance(key, ConsumerGroupRegularExpressionKey):
            _put(loaded.regexes, key.regex, decoded)
        elif isinstance(key, ConsumerGroupPartitionMetadataKey):
            # Kafka before 4.1: only remembered, for its tombstone (group_epoch.refresh_topics);
            # the topics' state is the metadata hash, recomputed from the topics.
            loaded.legacy_partition_metadata = decoded is not None

    def groups(self) -> Iterable[ConsumerGroup]:
        for gid, loaded in self._groups.items():
            if loaded.epoch is None:
                continue  # members without a group record: a deletion cut short
            group = ConsumerGroup(
                gid,
                group_epoch=loaded.epoch.epoch,
                assignment_epoch=INITIAL_EPOCH if loaded.assignment_epoch is None else loaded.assignment_epoch,
                assignment_timestamp=loaded.assignment_timestamp,
                metadata_hash=loaded.epoch.metadata_hash,
                legacy_partition_metadata=loaded.legacy_partition_metadata,
            )
            for member_id, meta in loaded.members.items():
                current = loaded.current.get(member_id)
                member = ConsumerMember(
                    member_id=member_id,
                    instance_id=meta.instance_id,
                    rack_id=meta.rack_id,
                    client_id=meta.client_id,
                    client_host=meta.client_host,
                    subscribed_topic_names=tuple(meta.subscribed_topic_names),
                    subscribed_topic_regex=meta.subscribed_topic_regex,
                    rebalance_timeout_ms=meta.rebalance_timeout_ms,
                    server_assignor=meta.server_assignor,
                    classic=meta.classic_member_metadata,
                    **({} if current is None else _current_fields(current)),
                )
                group.put_member(member)
                if member_id in loaded.target:
                    group.target[member_id] = loaded.target[member_id]
            for regex, resolved in loaded.regexes.items():
                group.regexes[regex] = ResolvedRegex(
                    tuple(resolved.topics), resolved.version, resolved.timestamp
                )
            yield group
        self._groups.clear()


def _put(into: dict, key: str, value: object | None) -> None:
    if value is None:
        into.pop(key, None)
    else:
        into[key] = value


def _current_fields(current: ConsumerGroupCurrentMemberAssignmentValue) -> dict[str, Any]:
    """A member's fields its current-assignment record gives."""
    try:
        state = MemberState(current.state)
    except ValueError:
        state = MemberState.UNKNOWN
    # KIP-1251: a partition without a recorded assignment epoch (a record from before it)
    # counts as assigned at the record's member epoch (at least 0), as Kafka reads it.
    default = max(current.member_epoch, 0)
    epochs: dict[TopicId, dict[int, int]] = {}
    for tps, recorded in (
        (current.assigned_partitions, current.assigned_epochs),
        (current.partitions_pending_revocation, current.pending_revocation_epochs),
    ):
        for i, (topic_id, partitions) in enumerate(tps):
            topic_epochs = recorded[i] if i < len(recorded) else ()
            into = epochs.setdefault(topic_id, {})
            for j, p in enumerate(partitions):
                into[p] = topic_epochs[j] if j < len(topic_epochs) else default
    return {
        "member_epoch": current.member_epoch,
        "previous_member_epoch": current.previous_member_epoch,
        "state": state,
        "assigned": from_topic_partitions(current.assigned_partitions),
        "pending_revocation": from_topic_partitions(current.partitions_pending_revocation),
        "assignment_epochs": {t: e for t, e in epochs.items() if e},
    }
