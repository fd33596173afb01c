"""KIP-848 consumer groups in the pipeline: their records as state rows, and their epochs.

A consumer group (the KIP-848 protocol) has no generation record like a classic group: its
state is spread over records per key (``coordinator.consumer.records``), each written when it
changes. The pipeline turns them into rebalance history in two steps:

1. :func:`consumer_row` (run by ``decode.segment_state`` on the executors): every group epoch,
   member metadata, target assignment and current assignment record (tombstones included) as
   one ``kind = "consumer"`` row of ``decode.STATE_SCHEMA``, with the :data:`STATE_FIELDS`
   columns. The deprecated partition-metadata records (key 4) and the regular-expression
   records (key 16) are decoded (so a malformed one makes the segment a problem) but produce
   no row: the epochs do not depend on them.
2. :func:`replay_epochs` (after a shuffle by group, in log order): one row of
   :data:`EPOCHS_SCHEMA` per group epoch record, the ``consumer_group_epochs`` table.

What an epoch row holds. The members are those of the group as of its epoch record: Kafka
writes a member's metadata (or its tombstone) before the epoch bump it causes. For each member,
its target partitions and its current assignment (member epoch, state, assigned and pending
partitions) are the last ones written before the group's next epoch record (or the end of the
log), so a row shows how far the members got towards the epoch's assignment; ``converged``:
the target assignment is the epoch's and every member reached it with nothing left to revoke.
A group epoch tombstone deletes the group: its earlier epochs are left out, as
``group_generations`` leaves out a deleted classic group. Topic ids are named through the
topic directories' ``partition.metadata`` files (null for a topic no longer there).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import pyarrow as pa

from kcoord.coordinator.consumer.records import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMetadataKey,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerRecordKey,
    TopicPartitions,
    decode_consumer_value,
)
from kcoord.storage.partition_metadata import topic_id_to_str

TOPIC_PARTITIONS_TYPE = pa.list_(
    pa.struct([("topic_id", pa.string()), ("partitions", pa.list_(pa.int32()))])
)
CONSUMER_MEMBER_TYPE = pa.struct(
    [
        ("instance_id", pa.string()),
        ("rack_id", pa.string()),
        ("client_id", pa.string()),
        ("client_host", pa.string()),
        ("subscribed_topic_names", pa.list_(pa.string())),
        ("subscribed_topic_regex", pa.string()),
        ("rebalance_timeout_ms", pa.int32()),
        ("server_assignor", pa.string()),
        ("classic_session_timeout_ms", pa.int32()),  # null unless the member uses JoinGroup
    ]
)
STATE_FIELDS = [
    # kind = "consumer" rows: group_epoch | member | target_epoch | target_member | assignment
    ("record_type", pa.string()),
    ("member_id", pa.string()),
    ("epoch", pa.int32()),  # group epoch, target assignment epoch or member epoch
    ("previous_epoch", pa.int32()),  # assignment: the previous member epoch
    ("member_state", pa.int32()),  # assignment: Kafka's MemberState code
    ("partitions", TOPIC_PARTITIONS_TYPE),  # target_member: target; assignment: assigned
    ("pending_partitions", TOPIC_PARTITIONS_TYPE),  # assignment: pending revocation
    ("consumer_member", CONSUMER_MEMBER_TYPE),  # member
]
STATE_COLUMNS: tuple[str, ...] = (
    "kind", "log_partition", "log_offset", "record_timestamp", "tombstone", "group",
    *(name for name, _ in STATE_FIELDS),
)  # the columns replay_epochs reads

ASSIGNMENT_TYPE = pa.list_(
    pa.struct(
        [("topic", pa.string()), ("topic_id", pa.string()), ("partitions", pa.list_(pa.int32()))]
    )
)
EPOCH_MEMBER_TYPE = pa.struct(
    [
        ("member_id", pa.string()),
        ("instance_id", pa.string()),
        ("rack_id", pa.string()),
        ("client_id", pa.string()),
        ("client_host", pa.string()),
        ("member_epoch", pa.int32()),  # null: no current assignment written yet
        ("state", pa.string()),  # stable | unrevoked_partitions | unreleased_partitions | ...
        ("assigned_partitions", pa.int32()),
        ("pending_revocation_partitions", pa.int32()),
        ("target_partitions", pa.int32()),  # null: no target assignment written yet
        ("assignment", ASSIGNMENT_TYPE),
        ("subscribed_topic_names", pa.list_(pa.string())),
        ("subscribed_topic_regex", pa.string()),
        ("server_assignor", pa.string()),
        ("classic_protocol", pa.bool_()),
    ]
)
EPOCHS_SCHEMA = pa.schema(
    [
        ("group", pa.string()),
        ("group_epoch", pa.int32()),
        ("assignment_epoch", pa.int32()),  # the target assignment's epoch by the epoch's end
        ("member_count", pa.int32()),
        ("members", pa.list_(EPOCH_MEMBER_TYPE)),
        ("converged", pa.bool_()),
        ("record_timestamp", pa.int64()),  # of the group epoch record's batch
        ("end_timestamp", pa.int64()),  # of the last record of the group before the next epoch
        ("log_partition", pa.int32()),
        ("log_offset", pa.int64()),  # of the group epoch record
        ("end_log_offset", pa.int64()),
    ]
)

MEMBER_STATES = {0: "stable", 1: "unrevoked_partitions", 2: "unreleased_partitions", 127: "unknown"}

# ----------------------------------------------------------------------------- state rows


def topic_partition_rows(tps: TopicPartitions) -> list[dict[str, Any]]:
    """(topic id, partitions) pairs as :data:`TOPIC_PARTITIONS_TYPE` values."""
    return [{"topic_id": topic_id_to_str(t), "partitions": list(ps)} for t, ps in tps]


def consumer_row(
    log_partition: int,
    log_offset: int,
    ts: int,
    key: ConsumerRecordKey,
    value: bytes | None,
) -> dict[str, Any] | None:
    """The state row of one consumer-group record, or None for the keys the epochs do not
    need (partition metadata, regular expressions; their values are still decoded).
    Raises SchemaError on a malformed value."""
    row: dict[str, Any] = {
        "kind": "consumer",
        "log_partition": log_partition,
        "log_offset": log_offset,
        "record_timestamp": ts,
        "tombstone": value is None,
        "group": key.group,
    }
    if isinstance(key, ConsumerGroupMetadataKey):
        row["record_type"] = "group_epoch"
        if value is not None:
            row["epoch"] = decode_consumer_value(key, value).epoch
    elif isinstance(key, ConsumerGroupTargetAssignmentMetadataKey):
        row["record_type"] = "target_epoch"
        if value is not None:
            row["epoch"] = decode_consumer_value(key, value).assignment_epoch
    elif isinstance(key, ConsumerGroupMemberMetadataKey):
        row.update(record_type="member", member_id=key.member_id)
        if value is not None:
            m = decode_consumer_value(key, value)
            classic = m.classic_member_metadata
            row["consumer_member"] = {
                "instance_id": m.instance_id,
                "rack_id": m.rack_id,
                "client_id": m.client_id,
                "client_host": m.client_host,
                "subscribed_topic_names": list(m.subscribed_topic_names),
                "subscribed_topic_regex": m.subscribed_topic_regex,
                "rebalance_timeout_ms": m.rebalance_timeout_ms,
                "server_assignor": m.server_assignor,
                "classic_session_timeout_ms": None if classic is None else classic.session_timeout_ms,
            }
    elif isinstance(key, ConsumerGroupTargetAssignmentMemberKey):
        row.update(record_type="target_member", member_id=key.member_id)
        if value is not None:
            row["partitions"] = topic_partition_rows(decode_consumer_value(key, value).topic_partitions)
    elif isinstance(key, ConsumerGroupCurrentMemberAssignmentKey):
        row.update(record_type="assignment", member_id=key.member_id)
        if value is not None:
            a = decode_consumer_value(key, value)
            row.update(
                epoch=a.member_epoch,
                previous_epoch=a.previous_member_epoch,
                member_state=a.state,
                partitions=topic_partition_rows(a.assigned_partitions),
                pending_partitions=topic_partition_rows(a.partitions_pending_revocation),
            )
    else:
        if value is not None:
            decode_consumer_value(key, value)  # validated, not kept
        return None
    return row


# ----------------------------------------------------------------------------- epochs


def _state_name(code: int) -> str:
    return MEMBER_STATES.get(code, str(code))


def _count(tps: list[dict[str, Any]] | None) -> int:
    return sum(len(t["partitions"]) for t in tps or ())


class _Group:
    """One group's replay: its current records, and the epoch row being filled in."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.members: dict[str, dict[str, Any]] = {}  # member id -> consumer_member
        self.current: dict[str, dict[str, Any]] = {}  # member id -> assignment row
        self.target: dict[str, list[dict[str, Any]]] = {}  # member id -> target partitions
        self.assignment_epoch: int | None = None
        self.rows: list[dict[str, Any]] = []  # finished epochs
        self.open: dict[str, Any] | None = None  # the epoch being filled in

    def apply(self, r: dict[str, Any], names: dict[str, str]) -> None:
        kind, gone = r["record_type"], r["tombstone"]
        member: str = r.get("member_id") or ""  # group-level records have none
        epoch = self.open
        if kind == "group_epoch":
            self.close(names)
            if gone:  # the group was deleted (or converted): its history goes with it
                self.reset()
                return
            self.open = {
                "group_epoch": r["epoch"],
                "log_partition": r["log_partition"],
                "log_offset": r["log_offset"],
                "record_timestamp": r["record_timestamp"],
                "members": dict(self.members),
                "current": {m: v for m, v in self.current.items() if m in self.members},
                "target": {m: v for m, v in self.target.items() if m in self.members},
                "assignment_epoch": self.assignment_epoch,
            }
        elif kind == "member":
            if gone:
                self.members.pop(member, None)
            else:
                self.members[member] = r["consumer_member"]
        elif kind == "target_epoch":
            self.assignment_epoch = None if gone else r["epoch"]
            if epoch is not None and not gone:
                epoch["assignment_epoch"] = r["epoch"]
        elif kind == "target_member":
            if gone:
                self.target.pop(member, None)
            else:
                self.target[member] = r["partitions"]
                if epoch is not None and member in epoch["members"]:
                    epoch["target"][member] = r["partitions"]
        elif kind == "assignment":
            if gone:
                self.current.pop(member, None)
            else:
                self.current[member] = r
                if epoch is not None and member in epoch["members"]:
                    epoch["current"][member] = r
        if epoch is not None and self.open is epoch:
            epoch["end_log_offset"] = r["log_offset"]
            epoch["end_timestamp"] = r["record_timestamp"]

    def close(self, names: dict[str, str]) -> None:
        e, self.open = self.open, None
        if e is None:
            return
        members = []
        converged = e["assignment_epoch"] == e["group_epoch"]
        for member_id in sorted(e["members"]):
            meta = e["members"][member_id]
            cur = e["current"].get(member_id)
            target = e["target"].get(member_id)
            assigned = cur["partitions"] if cur else []
            pending = _count(cur["pending_partitions"]) if cur else 0
            member_epoch = cur["epoch"] if cur else None
            converged = converged and member_epoch == e["group_epoch"] and not pending
            members.append(
                {
                    "member_id": member_id,
                    "instance_id": meta["instance_id"],
                    "rack_id": meta["rack_id"],
                    "client_id": meta["client_id"],
                    "client_host": meta["client_host"],
                    "member_epoch": member_epoch,
                    "state": None if cur is None else _state_name(cur["member_state"]),
                    "assigned_partitions": _count(assigned),
                    "pending_revocation_partitions": pending,
                    "target_partitions": None if target is None else _count(target),
                    "assignment": [
                        {
                            "topic": names.get(t["topic_id"]),
                            "topic_id": t["topic_id"],
                            "partitions": t["partitions"],
                        }
                        for t in assigned
                    ],
                    "subscribed_topic_names": meta["subscribed_topic_names"],
                    "subscribed_topic_regex": meta["subscribed_topic_regex"],
                    "server_assignor": meta["server_assignor"],
                    "classic_protocol": meta["classic_session_timeout_ms"] is not None,
                }
            )
        self.rows.append(
            {
                "group_epoch": e["group_epoch"],
                "assignment_epoch": e["assignment_epoch"],
                "member_count": len(members),
                "members": members,
                "converged": converged,
                "record_timestamp": e["record_timestamp"],
                "end_timestamp": e.get("end_timestamp", e["record_timestamp"]),
                "log_partition": e["log_partition"],
                "log_offset": e["log_offset"],
                "end_log_offset": e.get("end_log_offset", e["log_offset"]),
            }
        )


def replay_epochs(rows: Iterable[dict[str, Any]], names: dict[str, str]) -> Iterator[dict[str, Any]]:
    """:data:`EPOCHS_SCHEMA` rows from ``kind = "consumer"`` state rows ordered by
    (log partition, group, log offset); ``names`` maps topic ids to names."""
    key: tuple[int, str] | None = None
    group = _Group()
    for r in rows:
        k = (r["log_partition"], r["group"])
        if k != key:
            if key is not None:
                group.close(names)
                for out in group.rows:
                    yield {"group": key[1], **out}
            key, group = k, _Group()
        group.apply(r, names)
    if key is not None:
        group.close(names)
        for out in group.rows:
            yield {"group": key[1], **out}


def epochs_mapper(names: dict[str, str], rows_per_batch: int = 4096) -> Any:
    """A mapInArrow function over state rows sorted by (log partition, group, log offset)
    within each input partition, every group's rows in one partition."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        def rows() -> Iterator[dict[str, Any]]:
            for batch in batches:
                yield from batch.to_pylist()

        out: list[dict[str, Any]] = []
        for row in replay_epochs(rows(), names):
            out.append(row)
            if len(out) >= rows_per_batch:
                yield pa.RecordBatch.from_pylist(out, schema=EPOCHS_SCHEMA)
                out = []
        if out:
            yield pa.RecordBatch.from_pylist(out, schema=EPOCHS_SCHEMA)

    return run
