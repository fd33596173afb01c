"""Decoding one run of ``__consumer_offsets`` batches into Arrow record batches (no Spark here).

A run (:data:`Run`) is a segment file of a data directory, or a range of rows of the
PostgreSQL engine's ``batches`` table (``pipeline.postgres``); the decoding is the same, and
"segment" below means either. Two views of a segment, both produced with the coordinator's own codecs
(``coordinator.schemas``) on top of ``protocol.key_values.decode_key_values``:

* **commits**: every offset commit record, fully decoded (the ``offset_commits`` table).
* **state**: what survives compaction *within the segment* -- the newest record per offset key
  (tombstones included, so a later stage can apply them) -- plus every group metadata record
  and group tombstone, every KIP-848 consumer-group record the epochs need
  (``pipeline.consumer_groups``, ``kind = "consumer"``) and share-group record
  (``pipeline.share_groups``, ``kind = "share"``), one ``segment`` row with the
  segment's statistics, or one ``problem`` row if the segment cannot be read. Only surviving offset values are decoded, so the shuffle
  that follows carries a few rows per key instead of the whole history.

A segment is all or nothing: if any batch is torn, fails its CRC or holds a record the schemas
reject, the segment produces no rows but a problem naming it (the Spark reader buffers a
segment's batches until it has been read to the end).
"""

from __future__ import annotations

import contextlib
import functools
import json
import struct
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass
from typing import Any

import pyarrow as pa

from kcoord.coordinator.consumer.records import ConsumerRecordKey
from kcoord.coordinator.schemas import (
    GroupMetadataKey,
    OffsetCommitKey,
    RecordKey,
    SchemaError,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
)
from kcoord.coordinator.share.records import SHARE_KEY_TYPES
from kcoord.protocol.batch import HEADER_SIZE, BatchHeader, CorruptBatch
from kcoord.protocol.key_values import decode_key_values
from kcoord.protocol.records import decode_records

from . import fs
from .consumer_groups import STATE_FIELDS, consumer_row
from .logs import Problem, ScanStats, SegmentRef, read_end, scan_batches
from .postgres import PgRun, read_batches, txn_outcomes
from .share_groups import share_row
from .txn import TxnOutcomes, outcomes

ROWS_PER_BATCH = 65536

# ----------------------------------------------------------------------------- schemas

COMMIT_SCHEMA = pa.schema(
    [
        ("group", pa.string()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("leader_epoch", pa.int32()),  # null: unknown (-1 on the wire)
        ("metadata", pa.string()),
        ("commit_timestamp", pa.int64()),  # ms since the epoch, from the record value
        ("log_partition", pa.int32()),  # N of __consumer_offsets-N
        ("log_offset", pa.int64()),
    ]
)

MEMBER_TYPE = pa.struct(
    [
        ("member_id", pa.string()),
        ("group_instance_id", pa.string()),
        ("client_id", pa.string()),
        ("client_host", pa.string()),
        ("session_timeout_ms", pa.int32()),
        ("rebalance_timeout_ms", pa.int32()),
        ("assigned_partitions", pa.int32()),  # null unless a parsable consumer assignment
    ]
)

STATE_SCHEMA = pa.schema(
    [
        ("kind", pa.string()),  # offset | group | consumer | share | segment | problem
        ("log_partition", pa.int32()),
        ("log_offset", pa.int64()),
        ("record_timestamp", pa.int64()),
        ("tombstone", pa.bool_()),
        ("group", pa.string()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("leader_epoch", pa.int32()),
        ("metadata", pa.string()),
        ("commit_timestamp", pa.int64()),
        ("generation", pa.int32()),
        ("protocol_type", pa.string()),
        ("protocol", pa.string()),
        ("leader", pa.string()),
        ("state_timestamp", pa.int64()),
        ("members", pa.list_(MEMBER_TYPE)),
        ("segment", pa.string()),  # segment and problem rows: which file
        ("detail", pa.string()),  # segment rows: statistics as JSON; problem rows: the message
        *STATE_FIELDS,  # consumer and share rows, see pipeline.consumer_groups
    ]
)

_SPARK_TYPES = {
    pa.string(): "string",
    pa.int32(): "int",
    pa.int64(): "bigint",
    pa.bool_(): "boolean",
    pa.binary(): "binary",
}


def _spark_type(t: pa.DataType) -> str:
    if pa.types.is_list(t):
        return f"array<{_spark_type(t.value_type)}>"
    if pa.types.is_struct(t):
        return "struct<" + ", ".join(f"{f.name}: {_spark_type(f.type)}" for f in t) + ">"
    return _SPARK_TYPES[t]


def spark_ddl(schema: pa.Schema) -> str:
    """The same schema as a Spark DDL string (Arrow batches must match it exactly)."""
    return ", ".join(f"`{f.name}` {_spark_type(f.type)}" for f in schema)


# ----------------------------------------------------------------------------- reading


class SegmentError(Exception):
    def __init__(self, problem: Problem) -> None:
        super().__init__(f"{problem.name}: {problem.message}")
        self.problem = problem


@dataclass(slots=True)
class SegmentStats:
    records: int = 0
    offset_commits: int = 0
    offset_tombstones: int = 0
    group_records: int = 0
    group_tombstones: int = 0
    consumer_group_records: int = 0  # KIP-848 records (keys 3-8, 16)
    consumer_group_tombstones: int = 0
    share_group_records: int = 0  # KIP-932 records (keys 9-15)
    share_group_tombstones: int = 0
    share_snapshots: int = 0  # __share_group_state: ShareSnapshot records
    share_updates: int = 0  # ShareUpdate records
    share_state_tombstones: int = 0
    other_records: int = 0  # unknown key versions or record types, records without a key
    batches: int = 0
    control_batches: int = 0
    transactional_batches: int = 0
    uncommitted_batches: int = 0  # transactional batches aborted or still open: skipped
    bytes: int = 0
    torn_tail_bytes: int = 0


Pairs = list[tuple[bytes | None, bytes | None]]


Run = SegmentRef | PgRun
"""A run of batches of one partition of ``__consumer_offsets`` (or ``__share_group_state``): a
segment file, or a range of ``batches`` rows (``pipeline.postgres``)."""


@contextlib.contextmanager
def _reading(run: Run, scan: ScanStats) -> Iterator[Iterable[tuple[BatchHeader, memoryview]]]:
    """The run's batches (header, whole batch), CRC checked, in offset order."""
    if isinstance(run, PgRun):
        batches = read_batches(run, scan)
        try:
            yield batches
        finally:
            batches.close()  # its connection with it
        return
    try:
        f = fs.open_read(run.uri)
    except FileNotFoundError:
        raise SegmentError(Problem(run.name, "segment file missing (listed, then gone)")) from None
    try:
        yield scan_batches(f, scan, end=read_end(run, f), allow_torn_tail=run.last)
    finally:
        f.close()


def data_batches(ref: Run, stats: SegmentStats) -> Iterator[tuple[BatchHeader, list[int] | None, Pairs]]:
    """(header, offsets or None when they are base_offset + i, key/value pairs) per data batch.
    Control batches are skipped, and so are transactional batches whose transaction was not
    committed (aborted, or still open: ``pipeline.txn``); so are records below the run's
    ``min_offset`` (a PostgreSQL partition's log start; files have none)."""
    scan = ScanStats()
    floor = ref.min_offset if isinstance(ref, PgRun) else -1
    txn = TxnOutcomes(functools.partial(txn_outcomes, ref) if isinstance(ref, PgRun) else functools.partial(outcomes, ref))
    try:
        with _reading(ref, scan) as batches:
            for h, batch in batches:
                if h.last_offset < floor:
                    continue
                if h.is_control:
                    stats.control_batches += 1
                    continue
                if h.is_transactional:
                    stats.transactional_batches += 1
                    if not txn.committed(h):
                        stats.uncommitted_batches += 1
                        continue
                payload = batch[HEADER_SIZE:]
                if h.records_count == h.last_offset_delta + 1 and h.base_offset >= floor:
                    yield h, None, decode_key_values(h, payload)
                else:  # a compacted batch (offsets have gaps) or one straddling the log start
                    records = [
                        r for r in decode_records(h, payload) if h.base_offset + r.offset_delta >= floor
                    ]
                    yield (
                        h,
                        [h.base_offset + r.offset_delta for r in records],
                        [(r.key, r.value) for r in records],
                    )
    except (CorruptBatch, SchemaError) as e:
        raise SegmentError(Problem(ref.name, f"corrupt: {e}")) from None
    except OSError as e:
        raise SegmentError(Problem(ref.name, f"unreadable: {e}")) from None
    finally:
        stats.batches = scan.batches
        stats.bytes = scan.bytes
        stats.torn_tail_bytes = scan.torn_tail_bytes


def _count_other(stats: SegmentStats, key: RecordKey | None, value: bytes | None) -> None:
    """Count a record that is neither an offset commit nor a classic group record."""
    if isinstance(key, ConsumerRecordKey):
        if value is None:
            stats.consumer_group_tombstones += 1
        else:
            stats.consumer_group_records += 1
    elif isinstance(key, SHARE_KEY_TYPES):
        if value is None:
            stats.share_group_tombstones += 1
        else:
            stats.share_group_records += 1
    else:
        stats.other_records += 1


def _key_decoder() -> Callable[[bytes | None], RecordKey | None]:
    """decode_key memoised per segment: a few distinct keys are committed over and over."""
    cache: dict[bytes, RecordKey] = {}

    def decode(key: bytes | None) -> RecordKey | None:
        if key is None:
            return None
        k = cache.get(key)
        if k is None:
            k = cache[key] = decode_key(key)
        return k

    return decode


def segment_commits(ref: Run, rows_per_batch: int = ROWS_PER_BATCH) -> tuple[list[pa.RecordBatch], SegmentStats]:
    """Every offset commit of the segment as record batches of COMMIT_SCHEMA.

    Raises SegmentError (naming the file) if the segment cannot be read completely.
    """
    stats = SegmentStats()
    out: list[pa.RecordBatch] = []
    cols: list[list[Any]] = [[] for _ in COMMIT_SCHEMA]
    g, t, p, o, e, m, c, lp, lo = cols
    log_partition = ref.log_partition
    key_of = _key_decoder()
    offset_key = OffsetCommitKey

    def flush() -> None:
        if g:
            lp.extend([log_partition] * (len(g) - len(lp)))
            out.append(pa.RecordBatch.from_arrays([pa.array(col, f.type) for col, f in zip(cols, COMMIT_SCHEMA, strict=True)], schema=COMMIT_SCHEMA))
            for col in cols:
                col.clear()

    try:
        for h, offsets, pairs in data_batches(ref, stats):
            stats.records += len(pairs)
            base = h.base_offset
            for i, (key, value) in enumerate(pairs):
                k = key_of(key)
                if type(k) is offset_key:
                    if value is None:
                        stats.offset_tombstones += 1
                        continue
                    v = decode_offset_commit_value(value)
                    g.append(k.group)
                    t.append(k.topic)
                    p.append(k.partition)
                    o.append(v.offset)
                    e.append(v.leader_epoch if v.leader_epoch >= 0 else None)
                    m.append(v.metadata)
                    c.append(v.commit_timestamp)
                    lo.append(base + i if offsets is None else offsets[i])
                elif isinstance(k, GroupMetadataKey):
                    if value is None:
                        stats.group_tombstones += 1
                    else:
                        stats.group_records += 1
                else:
                    _count_other(stats, k, value)
            if len(g) >= rows_per_batch:
                flush()
        flush()
    except SchemaError as exc:
        raise SegmentError(Problem(ref.name, f"corrupt: {exc}")) from None
    stats.offset_commits = sum(b.num_rows for b in out)
    return out, stats


_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


def assigned_partitions(assignment: bytes) -> int | None:
    """How many partitions a Kafka ConsumerProtocol Assignment gives its member, or None if
    the bytes are not one (int16 version, int32 topic count, per topic a string and an int32
    array of partitions, then user data)."""
    try:
        pos = 2
        (topics,) = _I32.unpack_from(assignment, pos)
        pos += 4
        if topics < 0 or topics > len(assignment):
            return None
        total = 0
        for _ in range(topics):
            (n,) = _I16.unpack_from(assignment, pos)
            pos += 2 + max(n, 0)
            (count,) = _I32.unpack_from(assignment, pos)
            pos += 4
            if count < 0 or pos + 4 * count > len(assignment):
                return None
            pos += 4 * count
            total += count
        return total
    except struct.error:
        return None


def _group_row(
    ref: Run, log_offset: int, ts: int, group: str, value: bytes | None
) -> dict[str, Any]:
    row: dict[str, Any] = {
        "kind": "group",
        "log_partition": ref.log_partition,
        "log_offset": log_offset,
        "record_timestamp": ts,
        "tombstone": value is None,
        "group": group,
    }
    if value is None:
        return row
    v = decode_group_metadata_value(value)
    consumer = v.protocol_type == "consumer"
    row.update(
        generation=v.generation,
        protocol_type=v.protocol_type,
        protocol=v.protocol,
        leader=v.leader,
        state_timestamp=v.current_state_timestamp if v.current_state_timestamp >= 0 else None,
        members=[
            {
                "member_id": mm.member_id,
                "group_instance_id": mm.group_instance_id,
                "client_id": mm.client_id,
                "client_host": mm.client_host,
                "session_timeout_ms": mm.session_timeout,
                "rebalance_timeout_ms": mm.rebalance_timeout if mm.rebalance_timeout >= 0 else None,
                "assigned_partitions": assigned_partitions(mm.assignment) if consumer else None,
            }
            for mm in v.members
        ],
    )
    return row


def segment_state(ref: Run) -> tuple[list[dict[str, Any]], SegmentStats]:
    """The segment compacted in itself: newest record per offset key (tombstones too), every
    group record, then one ``segment`` statistics row. Raises SegmentError."""
    stats = SegmentStats()
    newest: dict[bytes, tuple[int, int, OffsetCommitKey, bytes | None]] = {}
    rows: list[dict[str, Any]] = []
    key_of = _key_decoder()
    try:
        for h, offsets, pairs in data_batches(ref, stats):
            stats.records += len(pairs)
            base, ts = h.base_offset, h.max_timestamp
            for i, (key, value) in enumerate(pairs):
                k = key_of(key)
                log_offset = base + i if offsets is None else offsets[i]
                if type(k) is OffsetCommitKey:
                    assert key is not None
                    newest[key] = (log_offset, ts, k, value)
                    if value is None:
                        stats.offset_tombstones += 1
                    else:
                        stats.offset_commits += 1
                elif type(k) is GroupMetadataKey:
                    rows.append(_group_row(ref, log_offset, ts, k.group, value))
                    if value is None:
                        stats.group_tombstones += 1
                    else:
                        stats.group_records += 1
                elif isinstance(k, ConsumerRecordKey):  # KIP-848 (pipeline.consumer_groups)
                    consumer = consumer_row(ref.log_partition, log_offset, ts, k, value)
                    if consumer is not None:
                        rows.append(consumer)
                    _count_other(stats, k, value)
                elif isinstance(k, SHARE_KEY_TYPES):  # KIP-932 (pipeline.share_groups)
                    share = share_row(ref.log_partition, log_offset, ts, k, value)
                    if share is not None:
                        rows.append(share)
                    _count_other(stats, k, value)
                else:
                    _count_other(stats, k, value)
        for log_offset, ts, k, value in newest.values():
            row: dict[str, Any] = {
                "kind": "offset",
                "log_partition": ref.log_partition,
                "log_offset": log_offset,
                "record_timestamp": ts,
                "tombstone": value is None,
                "group": k.group,
                "topic": k.topic,
                "partition": k.partition,
            }
            if value is not None:
                v = decode_offset_commit_value(value)
                row.update(
                    offset=v.offset,
                    leader_epoch=v.leader_epoch if v.leader_epoch >= 0 else None,
                    metadata=v.metadata,
                    commit_timestamp=v.commit_timestamp,
                )
            rows.append(row)
    except SchemaError as exc:
        raise SegmentError(Problem(ref.name, f"corrupt: {exc}")) from None
    rows.append(segment_row(ref, stats))
    return rows, stats


def segment_row(ref: Run, stats: SegmentStats) -> dict[str, Any]:
    return {
        "kind": "segment",
        "log_partition": ref.log_partition,
        "log_offset": ref.base_offset,
        "segment": ref.name,
        "detail": json.dumps(asdict(stats), sort_keys=True),
    }


def problem_row(problem: Problem, log_partition: int | None = None) -> dict[str, Any]:
    return {
        "kind": "problem",
        "log_partition": log_partition,
        "segment": problem.name,
        "detail": problem.message,
    }


def state_batch(rows: list[dict[str, Any]]) -> pa.RecordBatch:
    """Rows (dicts with any subset of the STATE_SCHEMA columns) as one record batch."""
    return pa.RecordBatch.from_pylist(rows, schema=STATE_SCHEMA)
