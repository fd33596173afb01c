"""How a share group is stored in ``__consumer_offsets`` and rebuilt from it.

The records (keys 10-15; 9 is only read and deleted): :func:`epoch_record` (11),
:func:`member_record` (10), :func:`target_record` (13), :func:`assignment_epoch_record` (12),
:func:`current_assignment_record` (14), :func:`state_record` (15); :func:`member_tombstones` and
:func:`group_tombstones` give the deletions in Kafka's order.

:class:`ShareGroupLoader` collects the newest record of each key while a shard loads and builds
the groups when loading ends, whatever order the records came in.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from kcoord.coordinator.consumer.persistence import from_topic_partitions, to_topic_partitions
from kcoord.coordinator.output import Record
from kcoord.coordinator.share.group import Assignment, ShareGroup, ShareMember
from kcoord.coordinator.share.records import (
    ShareGroupCurrentMemberAssignmentKey,
    ShareGroupCurrentMemberAssignmentValue,
    ShareGroupMemberMetadataKey,
    ShareGroupMemberMetadataValue,
    ShareGroupMetadataKey,
    ShareGroupMetadataValue,
    ShareGroupPartitionMetadataKey,
    ShareGroupStatePartitionMetadataKey,
    ShareGroupStatePartitionMetadataValue,
    ShareGroupTargetAssignmentMemberKey,
    ShareGroupTargetAssignmentMemberValue,
    ShareGroupTargetAssignmentMetadataKey,
    ShareGroupTargetAssignmentMetadataValue,
    ShareRecordKey,
    ShareRecordValue,
    StateTopic,
    decode_share_value,
    encode_share_key,
    encode_share_value,
)


def _record(key: ShareRecordKey, value: ShareRecordValue | None) -> Record:
    return encode_share_key(key), None if value is None else encode_share_value(value)


def epoch_record(group: ShareGroup) -> Record:
    return _record(
        ShareGroupMetadataKey(group.group_id),
        ShareGroupMetadataValue(group.group_epoch, group.metadata_hash),
    )


def member_record(group_id: str, member: ShareMember) -> Record:
    return _record(
        ShareGroupMemberMetadataKey(group_id, member.member_id),
        ShareGroupMemberMetadataValue(
            member.rack_id, member.client_id, member.client_host, member.subscribed_topic_names
        ),
    )


def target_record(group_id: str, member_id: str, assignment: Assignment) -> Record:
    return _record(
        ShareGroupTargetAssignmentMemberKey(group_id, member_id),
        ShareGroupTargetAssignmentMemberValue(to_topic_partitions(assignment)),
    )


def assignment_epoch_record(group: ShareGroup) -> Record:
    return _record(
        ShareGroupTargetAssignmentMetadataKey(group.group_id),
        ShareGroupTargetAssignmentMetadataValue(group.assignment_epoch),
    )


def current_assignment_record(group_id: str, member: ShareMember) -> Record:
    return _record(
        ShareGroupCurrentMemberAssignmentKey(group_id, member.member_id),
        ShareGroupCurrentMemberAssignmentValue(
            member.member_epoch,
            member.previous_member_epoch,
            member.state,
            to_topic_partitions(member.assigned),
        ),
    )


def state_record(group: ShareGroup) -> Record:
    """Record 15: every initialized topic partition of the group (none initializing or
    deleting: see coordinator.share.manager)."""
    initialized = tuple(
        StateTopic(topic_id, name, tuple(sorted(partitions)), created)
        for topic_id, (name, partitions, created) in sorted(
            group.initialized.items(), key=lambda kv: kv[0].bytes
        )
    )
    return _record(
        ShareGroupStatePartitionMetadataKey(group.group_id),
        ShareGroupStatePartitionMetadataValue(initialized=initialized),
    )


def legacy_partition_metadata_tombstone(group_id: str) -> Record:
    return _record(ShareGroupPartitionMetadataKey(group_id), None)


def member_tombstones(group_id: str, member_id: str) -> list[Record]:
    """A member leaves: its current assignment, target and subscription, in that order."""
    return [
        _record(ShareGroupCurrentMemberAssignmentKey(group_id, member_id), None),
        _record(ShareGroupTargetAssignmentMemberKey(group_id, member_id), None),
        _record(ShareGroupMemberMetadataKey(group_id, member_id), None),
    ]


def group_tombstones(group: ShareGroup) -> list[Record]:
    """Every record of a deleted group, in Kafka's order (the group epoch record last)."""
    gid = group.group_id
    members = list(group.members)
    out = [_record(ShareGroupCurrentMemberAssignmentKey(gid, m), None) for m in members]
    out += [_record(ShareGroupTargetAssignmentMemberKey(gid, m), None) for m in members]
    out.append(_record(ShareGroupTargetAssignmentMetadataKey(gid), None))
    out += [_record(ShareGroupMemberMetadataKey(gid, m), None) for m in members]
    out.append(legacy_partition_metadata_tombstone(gid))
    out.append(_record(ShareGroupStatePartitionMetadataKey(gid), None))
    out.append(_record(ShareGroupMetadataKey(gid), None))
    return out


@dataclass(slots=True)
class _Loaded:
    epoch: ShareGroupMetadataValue | None = None
    assignment_epoch: int = 0
    members: dict[str, ShareGroupMemberMetadataValue] = field(default_factory=dict)
    current: dict[str, ShareGroupCurrentMemberAssignmentValue] = field(default_factory=dict)
    target: dict[str, Assignment] = field(default_factory=dict)
    state: ShareGroupStatePartitionMetadataValue | None = None
    legacy: bool = False


class ShareGroupLoader:
    """The newest value of every share-group record of a partition, turned into groups."""

    def __init__(self) -> None:
        self._groups: dict[str, _Loaded] = {}

    def replay(self, key: ShareRecordKey, value: bytes | None) -> None:
        gid = key.group
        loaded = self._groups.get(gid)
        if loaded is None:
            if value is None:
                return
            loaded = self._groups[gid] = _Loaded()
        decoded = None if value is None else decode_share_value(key, value)
        if isinstance(key, ShareGroupMetadataKey):
            if decoded is None:
                del self._groups[gid]  # the group's last record: it was deleted
            else:
                assert isinstance(decoded, ShareGroupMetadataValue)
                loaded.epoch = decoded
        elif isinstance(key, ShareGroupTargetAssignmentMetadataKey):
            assert decoded is None or isinstance(decoded, ShareGroupTargetAssignmentMetadataValue)
            loaded.assignment_epoch = 0 if decoded is None else decoded.assignment_epoch
        elif isinstance(key, ShareGroupMemberMetadataKey):
            _put(loaded.members, key.member_id, decoded)
        elif isinstance(key, ShareGroupCurrentMemberAssignmentKey):
            _put(loaded.current, key.member_id, decoded)
        elif isinstance(key, ShareGroupTargetAssignmentMemberKey):
            assert decoded is None or isinstance(decoded, ShareGroupTargetAssignmentMemberValue)
            _put(
                loaded.target,
                key.member_id,
                None if decoded is None else from_topic_partitions(decoded.topic_partitions),
            )
        elif isinstance(key, ShareGroupStatePartitionMetadataKey):
            assert decoded is None or isinstance(decoded, ShareGroupStatePartitionMetadataValue)
            loaded.state = decoded
        elif isinstance(key, ShareGroupPartitionMetadataKey):
            loaded.legacy = decoded is not None

    def groups(self) -> Iterable[ShareGroup]:
        for gid, loaded in self._groups.items():
            if loaded.epoch is None:
                continue  # records without a group epoch record: a deletion cut short
            group = ShareGroup(
                gid,
                group_epoch=loaded.epoch.epoch,
                assignment_epoch=loaded.assignment_epoch,
                metadata_hash=loaded.epoch.metadata_hash,
                legacy_partition_metadata=loaded.legacy,
            )
            for member_id, meta in loaded.members.items():
                member = ShareMember(
                    member_id,
                    rack_id=meta.rack_id,
                    client_id=meta.client_id,
                    client_host=meta.client_host,
                    subscribed_topic_names=tuple(meta.subscribed_topic_names),
                )
                current = loaded.current.get(member_id)
                if current is not None:
                    member = ShareMember(
                        member_id,
                        member.rack_id,
                        member.client_id,
                        member.client_host,
                        member.subscribed_topic_names,
                        current.member_epoch,
                        current.previous_member_epoch,
                        current.state,
                        from_topic_partitions(current.assigned_partitions),
                    )
                group.members[member_id] = member
                if member_id in loaded.target:
                    group.target[member_id] = loaded.target[member_id]
            if loaded.state is not None:
                for t in loaded.state.initialized:
                    group.initialized[t.topic_id] = (t.name, frozenset(t.partitions), t.create_timestamp)
            yield group
        self._groups.clear()


def _put(into: dict, key: str, value: object | None) -> None:
    if value is None:
        into.pop(key, None)
    else:
        into[key] = value
