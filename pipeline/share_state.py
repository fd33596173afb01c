"""The share coordinator's log ``__share_group_state`` in the pipeline (no Spark here).

The share coordinator keeps the delivery state of every share partition (a share group's view
of one topic partition) as ShareSnapshot and ShareUpdate records (``share.state_records``): a
snapshot holds the whole state, an update the runs that changed since. The log is not
compacted, its older records are pruned once a newer snapshot makes them redundant. Two steps:

1. :func:`segment_share_state` (on the executors, one run of one log partition at a time, as
   ``decode.segment_state`` reads ``__consumer_offsets``): one :data:`SHARE_LOG_SCHEMA` row per
   record, key and value kept as bytes and validated (a malformed record makes the segment a
   problem; a record type other than 0 and 1 is counted and skipped, as Kafka's loader skips
   unknown types), then a ``segment`` statistics row.
2. :func:`replay_share_state` (after a shuffle by share partition, in log order): the records
   replayed through :class:`share.state_shard.ShareStateShard`, the share coordinator's own
   replay, so the state after each record is the one the broker would load from the same log.
   One :data:`REPLAY_SCHEMA` row per record (the ``share_state_history`` table) and, flagged
   ``is_latest``, the last one of every share partition still held (``share_state_latest``).

What a row says after its record: the share-partition start offset (SPSO), KIP-1226's
delivery-complete count (acknowledged and archived offsets at or past the SPSO), the records at
or past the SPSO by persisted state (available with a delivery count, acknowledged, archived),
and ``archived_total``: the distinct offsets that any record of the share partition showed
archived since the log's start or the share partition's last deletion (a record archived and
passed by the SPSO in the same write is never written as archived, so it is not counted; Kafka
writes it first). A tombstone (the share partition deleted) is a ``delete`` row whose state
columns are null; the share partition is not in ``share_state_latest`` unless written again.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator
from typing import Any

import pyarrow as pa

from kcoord.coordinator.schema_errors import SchemaError
from kcoord.share.model import PersistedState, RecordState, SharePartitionKey, StateBatch
from kcoord.share.state_records import (
    SHARE_SNAPSHOT,
    SHARE_UPDATE,
    ShareSnapshotValue,
    decode_key,
    decode_value,
)
from kcoord.share.state_shard import ShareStateShard, delivery_complete_count
from kcoord.storage.partition_metadata import topic_id_to_str

from .decode import Run, SegmentError, SegmentStats, data_batches, segment_row
from .logs import Problem

SHARE_STATE_TOPIC = "__share_group_state"

SHARE_LOG_SCHEMA = pa.schema(
    [
        ("kind", pa.string()),  # share_state | segment | problem
        ("log_partition", pa.int32()),  # N of __share_group_state-N
        ("log_offset", pa.int64()),
        ("record_timestamp", pa.int64()),  # of the record's batch (max timestamp)
        ("group", pa.string()),
        ("topic_id", pa.string()),  # Kafka's text form
        ("partition", pa.int32()),
        ("record_type", pa.string()),  # snapshot | update
        ("tombstone", pa.bool_()),
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("segment", pa.string()),  # segment and problem rows: which run
        ("detail", pa.string()),  # segment rows: statistics as JSON; problem rows: the message
    ]
)
REPLAY_COLUMNS: tuple[str, ...] = (
    "log_partition", "log_offset", "record_timestamp", "group", "topic_id", "partition",
    "record_type", "key", "value",
)  # what replay_share_state reads

STATE_BATCH_TYPE = pa.struct(
    [
        ("first_offset", pa.int64()),
        ("last_offset", pa.int64()),
        ("state", pa.string()),  # available | acknowledged | archived
        ("delivery_count", pa.int32()),
    ]
)
REPLAY_SCHEMA = pa.schema(
    [
        ("group", pa.string()),
        ("topic_id", pa.string()),
        ("topic", pa.string()),  # null: no topic with this id in the data
        ("partition", pa.int32()),
        ("record_type", pa.string()),  # snapshot | update | delete
        ("snapshot_epoch", pa.int32()),
        ("state_epoch", pa.int32()),
        ("leader_epoch", pa.int32()),
        ("start_offset", pa.int64()),  # SPSO; -1: not known yet (share.auto.offset.reset)
        ("delivery_complete_count", pa.int64()),
        ("available_records", pa.int64()),  # at or past the SPSO, in persisted state batches
        ("acknowledged_records", pa.int64()),
        ("archived_records", pa.int64()),
        ("archived_total", pa.int64()),
        ("record_timestamp", pa.int64()),
        ("write_timestamp", pa.int64()),  # snapshots: the share coordinator's write time
        ("log_partition", pa.int32()),
        ("log_offset", pa.int64()),
        # the share partition's last row (is_latest) only:
        ("is_latest", pa.bool_()),
        ("state_batches", pa.list_(STATE_BATCH_TYPE)),
        ("max_delivery_count", pa.int32()),
        ("updates_since_snapshot", pa.int32()),
        ("create_timestamp", pa.int64()),  # of its latest snapshot
        ("first_start_offset", pa.int64()),  # the first known SPSO in the log (>= 0)
        ("first_start_timestamp", pa.int64()),  # when it was written
        ("records", pa.int32()),  # records of the share partition replayed
    ]
)

STATE_NAMES = {
    RecordState.AVAILABLE: "available",
    RecordState.ACKNOWLEDGED: "acknowledged",
    RecordState.ARCHIVED: "archived",
}

# ----------------------------------------------------------------------------- reading


def segment_share_state(ref: Run) -> tuple[list[dict[str, Any]], SegmentStats]:
    """Every record of one run of ``__share_group_state``, validated, and the segment row.
    Raises SegmentError if the run cannot be read completely."""
    stats = SegmentStats()
    rows: list[dict[str, Any]] = []
    try:
        for h, offsets, pairs in data_batches(ref, stats):
            stats.records += len(pairs)
            for i, (key, value) in enumerate(pairs):
                row = share_state_row(ref.log_partition, h.base_offset + i if offsets is None else offsets[i],
                                      h.max_timestamp, key, value)
                if row is None:
                    stats.other_records += 1
                elif value is None:
                    stats.share_state_tombstones += 1
                elif row["record_type"] == "snapshot":
                    stats.share_snapshots += 1
                else:
                    stats.share_updates += 1
                if row is not None:
                    rows.append(row)
    except SchemaError as exc:
        raise SegmentError(Problem(ref.name, f"corrupt: {exc}")) from None
    rows.append(segment_row(ref, stats))
    return rows, stats


def share_state_row(
    log_partition: int, log_offset: int, ts: int, key: bytes | None, value: bytes | None
) -> dict[str, Any] | None:
    """The row of one record, or None for one without a key or of an unknown record type.
    Raises SchemaError if the key or the value is malformed."""
    if key is None:
        return None
    if len(key) < 2:
        raise SchemaError(f"share state key: {len(key)} bytes")
    record_type = int.from_bytes(key[:2], "big", signed=True)
    if record_type not in (SHARE_SNAPSHOT, SHARE_UPDATE):
        return None
    k = decode_key(key)
    if value is not None:
        decode_value(record_type, value)
    return {
        "kind": "share_state",
        "log_partition": log_partition,
        "log_offset": log_offset,
        "record_timestamp": ts,
        "group": k.group_id,
        "topic_id": topic_id_to_str(k.topic_id),
        "partition": k.partition,
        "record_type": "snapshot" if record_type == SHARE_SNAPSHOT else "update",
        "tombstone": value is None,
        "key": bytes(key),
        "value": None if value is None else bytes(value),
    }


def share_state_batch(rows: list[dict[str, Any]]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist(rows, schema=SHARE_LOG_SCHEMA)


# ----------------------------------------------------------------------------- replay


class OffsetSet:
    """A set of offsets kept as sorted, disjoint, non-adjacent inclusive intervals."""

    def __init__(self) -> None:
        self.firsts: list[int] = []
        self.lasts: list[int] = []
        self.count = 0

    def add(self, first: int, last: int) -> None:
        # the intervals that touch or overlap [first, last] are merged into it
        i = bisect.bisect_left(self.lasts, first - 1)
        j = bisect.bisect_right(self.firsts, last + 1)
        if i < j:
            first = min(first, self.firsts[i])
            last = max(last, self.lasts[j - 1])
            self.count -= sum(b - a + 1 for a, b in zip(self.firsts[i:j], self.lasts[i:j], strict=True))
        self.firsts[i:j] = [first]
        self.lasts[i:j] = [last]
        self.count += last - first + 1


class _Partition:
    """What the replay keeps of one share partition besides the shard's state."""

    def __init__(self) -> None:
        self.archived = OffsetSet()
        self.records = 0
        self.create_timestamp: int | None = None
        self.first_start: tuple[int, int] | None = None  # (start offset, record timestamp)
        self.last: dict[str, Any] | None = None  # its latest row
        self.state: PersistedState | None = None


def _counts(state: PersistedState) -> dict[RecordState, int]:
    counts = dict.fromkeys(STATE_NAMES, 0)
    for b in state.batches:
        if b.last_offset >= state.start_offset:
            counts[RecordState(b.delivery_state)] += b.last_offset - max(b.first_offset, state.start_offset) + 1
    return counts


def _batch_row(b: StateBatch) -> dict[str, Any]:
    return {
        "first_offset": b.first_offset,
        "last_offset": b.last_offset,
        "state": STATE_NAMES.get(RecordState(b.delivery_state), str(b.delivery_state)),
        "delivery_count": b.delivery_count,
    }


def _latest(row: dict[str, Any], p: _Partition, shard: ShareStateShard, key: SharePartitionKey) -> None:
    """Fill in the latest-only columns of ``row``, the share partition's last."""
    state = p.state
    assert state is not None
    held = [b for b in state.batches if b.last_offset >= state.start_offset]
    row.update(
        is_latest=True,
        state_batches=[_batch_row(b) for b in held],
        max_delivery_count=max((b.delivery_count for b in held), default=0),
        updates_since_snapshot=shard.updates_since_snapshot(key),
        create_timestamp=p.create_timestamp,
        first_start_offset=None if p.first_start is None else p.first_start[0],
        first_start_timestamp=None if p.first_start is None else p.first_start[1],
        records=p.records,
    )


def replay_share_state(rows: Iterable[dict[str, Any]], names: dict[str, str]) -> Iterator[dict[str, Any]]:
    """:data:`REPLAY_SCHEMA` rows from ``share_state`` rows ordered by log position within
    each share partition (every share partition's rows together); ``names`` maps topic ids
    to names."""
    shard = ShareStateShard(snapshot_every=0)  # replay only: its write policy is not used
    current: SharePartitionKey | None = None
    p = _Partition()

    def finish() -> Iterator[dict[str, Any]]:
        if current is not None and p.last is not None and p.state is not None:
            _latest(p.last, p, shard, current)
        if p.last is not None:
            yield p.last

    for r in rows:
        key_bytes: bytes = r["key"]
        k = decode_key(key_bytes).share_key
        if k != current:
            yield from finish()
            current, p = k, _Partition()
        elif p.last is not None:
            yield p.last
        value: bytes | None = r["value"]
        shard.replay(key_bytes, value, r["log_offset"])
        row: dict[str, Any] = {
            "group": r["group"],
            "topic_id": r["topic_id"],
            "topic": names.get(r["topic_id"]),
            "partition": r["partition"],
            "record_timestamp": r["record_timestamp"],
            "log_partition": r["log_partition"],
            "log_offset": r["log_offset"],
            "is_latest": False,
        }
        if value is None:
            row["record_type"] = "delete"
            p = _Partition()  # its history starts again if it is written again
            p.last = row
            continue
        decoded = decode_value(SHARE_SNAPSHOT if r["record_type"] == "snapshot" else SHARE_UPDATE, value)
        state = shard.read(k)
        p.records += 1
        p.state = state
        for b in decoded.state_batches:
            if b.delivery_state == RecordState.ARCHIVED:
                p.archived.add(b.first_offset, b.last_offset)
        if isinstance(decoded, ShareSnapshotValue):
            p.create_timestamp = decoded.create_timestamp
        if p.first_start is None and state.start_offset >= 0:
            p.first_start = (state.start_offset, r["record_timestamp"])
        counts = _counts(state)
        row.update(
            record_type="snapshot" if isinstance(decoded, ShareSnapshotValue) else "update",
            snapshot_epoch=decoded.snapshot_epoch,
            state_epoch=state.state_epoch,
            leader_epoch=state.leader_epoch,
            start_offset=state.start_offset,
            delivery_complete_count=delivery_complete_count(state),
            available_records=counts[RecordState.AVAILABLE],
            acknowledged_records=counts[RecordState.ACKNOWLEDGED],
            archived_records=counts[RecordState.ARCHIVED],
            archived_total=p.archived.count,
            write_timestamp=decoded.write_timestamp if isinstance(decoded, ShareSnapshotValue) else None,
        )
        p.last = row
    yield from finish()


def share_state_mapper(names: dict[str, str], rows_per_batch: int = 4096) -> Any:
    """A mapInArrow function over ``share_state`` rows sorted by (log partition, group, topic
    id, partition, log offset) within each input partition, every share partition's rows in
    one input partition."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        def rows() -> Iterator[dict[str, Any]]:
            for batch in batches:
                yield from batch.to_pylist()

        out: list[dict[str, Any]] = []
        for row in replay_share_state(rows(), names):
            out.append(row)
            if len(out) >= rows_per_batch:
                yield pa.RecordBatch.from_pylist(out, schema=REPLAY_SCHEMA)
                out = []
        if out:
            yield pa.RecordBatch.from_pylist(out, schema=REPLAY_SCHEMA)

    return run
