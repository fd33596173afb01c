"""Share groups (KIP-932) in ``__consumer_offsets``: records 9-15 as state rows, and their epochs.

A share group's membership is stored as a KIP-848 consumer group's is: a group epoch record
(11), member metadata (10), a target assignment epoch (12), per member a target (13) and a
current assignment (14) (``coordinator.share.records``). So the pipeline treats them as it
treats consumer groups (``pipeline.consumer_groups``): :func:`share_row` (run by
``decode.segment_state`` on the executors) turns each of those records, tombstones included,
into one ``kind = "share"`` state row with the same :data:`~pipeline.consumer_groups.STATE_FIELDS`
columns, and the same replay (:func:`~pipeline.consumer_groups.replay_epochs`) makes them the
``share_group_epochs`` table. What a share record does not carry stays null: a share member
has no instance id, regular expression, rebalance timeout or server assignor, and a share
assignment has no partitions pending revocation (Kafka revokes nothing in share groups: several
members may read one partition).

Record 9 (the deprecated partition metadata) and 15 (which topic partitions have their share
state initialized, in ``__share_group_state``) are decoded, so that a malformed one makes the
segment a problem, but produce no row: the epochs do not depend on them.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from kcoord.coordinator.share.records import (
    ShareGroupCurrentMemberAssignmentKey,
    ShareGroupCurrentMemberAssignmentValue,
    ShareGroupMemberMetadataKey,
    ShareGroupMemberMetadataValue,
    ShareGroupMetadataKey,
    ShareGroupMetadataValue,
    ShareGroupTargetAssignmentMemberKey,
    ShareGroupTargetAssignmentMemberValue,
    ShareGroupTargetAssignmentMetadataKey,
    ShareGroupTargetAssignmentMetadataValue,
    ShareRecordKey,
    decode_share_value,
)

from .consumer_groups import ASSIGNMENT_TYPE, topic_partition_rows

SHARE_MEMBER_TYPE = pa.struct(
    [
        ("member_id", pa.string()),
        ("rack_id", pa.string()),
        ("client_id", pa.string()),
        ("client_host", pa.string()),
        ("member_epoch", pa.int32()),  # null: no current assignment written yet
        ("state", pa.string()),
        ("assigned_partitions", pa.int32()),
        ("target_partitions", pa.int32()),  # null: no target assignment written yet
        ("assignment", ASSIGNMENT_TYPE),
        ("subscribed_topic_names", pa.list_(pa.string())),
    ]
)
"""A member of a ``share_group_epochs`` row: the fields of ``consumer_group_epochs``' members
that a share member has."""

_NOT_IN_SHARE_MEMBERS = {
    "instance_id": None,
    "subscribed_topic_regex": None,
    "rebalance_timeout_ms": None,
    "server_assignor": None,
    "classic_session_timeout_ms": None,
}


def share_row(
    log_partition: int,
    log_offset: int,
    ts: int,
    key: ShareRecordKey,
    value: bytes | None,
) -> dict[str, Any] | None:
    """The state row of one share-group record, or None for records 9 and 15 (their values
    are still decoded). Raises SchemaError on a malformed value."""
    row: dict[str, Any] = {
        "kind": "share",
        "log_partition": log_partition,
        "log_offset": log_offset,
        "record_timestamp": ts,
        "tombstone": value is None,
        "group": key.group,
    }
    decoded = None if value is None else decode_share_value(key, value)
    if isinstance(key, ShareGroupMetadataKey):
        row["record_type"] = "group_epoch"
        if isinstance(decoded, ShareGroupMetadataValue):
            row["epoch"] = decoded.epoch
    elif isinstance(key, ShareGroupTargetAssignmentMetadataKey):
        row["record_type"] = "target_epoch"
        if isinstance(decoded, ShareGroupTargetAssignmentMetadataValue):
            row["epoch"] = decoded.assignment_epoch
    elif isinstance(key, ShareGroupMemberMetadataKey):
        row.update(record_type="member", member_id=key.member_id)
        if isinstance(decoded, ShareGroupMemberMetadataValue):
            row["consumer_member"] = {
                **_NOT_IN_SHARE_MEMBERS,
                "rack_id": decoded.rack_id,
                "client_id": decoded.client_id,
                "client_host": decoded.client_host,
                "subscribed_topic_names": list(decoded.subscribed_topic_names),
            }
    elif isinstance(key, ShareGroupTargetAssignmentMemberKey):
        row.update(record_type="target_member", member_id=key.member_id)
        if isinstance(decoded, ShareGroupTargetAssignmentMemberValue):
            row["partitions"] = topic_partition_rows(decoded.topic_partitions)
    elif isinstance(key, ShareGroupCurrentMemberAssignmentKey):
        row.update(record_type="assignment", member_id=key.member_id)
        if isinstance(decoded, ShareGroupCurrentMemberAssignmentValue):
            row.update(
                epoch=decoded.member_epoch,
                previous_epoch=decoded.previous_member_epoch,
                member_state=decoded.state,
                partitions=topic_partition_rows(decoded.assigned_partitions),
                pending_partitions=[],
            )
    else:
        return None
    return row
