"""The Spark job: eight Parquet tables (and a report) from a broker's data directory, or from
its PostgreSQL database (``storage.url``; read through ``pipeline.postgres``).

Tables under ``out``:

* ``offset_commits``: every offset commit in the ``__consumer_offsets`` log.
* ``offsets_latest``: compaction semantics -- the newest record per (group, topic, partition)
  by log position; a tombstone removes the key. Equals what OffsetFetch answers.
* ``group_generations``: one row per group metadata record, the rebalance history; records
  before a group's latest deletion (group tombstone) are left out, like the group itself.
* ``consumer_group_epochs``: the rebalance history of KIP-848 consumer groups, one row per
  group epoch record: the target assignment epoch, the members as of the epoch with their
  member epochs, states and partition counts as they stood before the next epoch, and whether
  the group converged (``pipeline.consumer_groups``). Epochs before a group's deletion are
  left out. Topic ids are named from the topic directories' ``partition.metadata`` files.
* ``share_group_epochs``: the same for share groups (KIP-932, records 9-15,
  ``pipeline.share_groups``).
* ``share_state_history``: one row per record of ``__share_group_state``, the share
  coordinator's log, replayed per share partition (group, topic, partition) in log order
  (``pipeline.share_state``): its start offset (SPSO), delivery-complete count and records by
  state after the record.
* ``share_state_latest``: the last of those rows per share partition still held, with its
  in-flight state batches and how fast its start offset advanced.
* ``consumer_lag``: ``offsets_latest`` joined with every topic partition's log start and end
  offset (read from the topic logs in the same data directory): lag in messages,
  ``log_end_offset - max(committed, log_start_offset)``, and in time, the age (at ``as_of``) of
  the oldest unconsumed record. Offsets of topics without a log there have null lag.

Every table is read from one snapshot of the logs (``pipeline.snapshot``), fixed when the job
starts: a broker writing meanwhile adds nothing to any of them, and ``as_of`` is the time the
snapshot was taken.

Unreadable segments are skipped and named in ``summary.json``, in the report and by the CLI
(exit status 3), never silently.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, DataFrameReader, SparkSession
from pyspark.sql import functions as F

from kcoord.storage.postgres.engine import redacted

from . import fs, postgres
from .consumer_groups import EPOCHS_SCHEMA, STATE_COLUMNS, epochs_mapper
from .decode import SegmentStats, spark_ddl
from .logs import first_record_at_or_after, topic_names
from .postgres import is_postgres_url
from .share_groups import SHARE_MEMBER_TYPE
from .share_state import REPLAY_COLUMNS, REPLAY_SCHEMA, share_state_mapper
from .snapshot import OPTION, Snapshot, take
from .source import register

TABLES = (
    "offset_commits", "offsets_latest", "group_generations", "consumer_group_epochs",
    "consumer_lag", "share_group_epochs", "share_state_history", "share_state_latest",
)

LAG_OUT_SCHEMA = pa.schema(
    [
        ("group", pa.string()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("committed_offset", pa.int64()),
        ("log_start_offset", pa.int64()),
        ("log_end_offset", pa.int64()),
        ("lag", pa.int64()),
        ("oldest_unconsumed_offset", pa.int64()),
        ("oldest_unconsumed_timestamp", pa.int64()),
    ]
)


@dataclass
class Summary:
    data_dir: str
    out: str
    as_of_ms: int
    segments: list[dict[str, Any]] = field(default_factory=list)
    problems: list[dict[str, Any]] = field(default_factory=list)
    rows: dict[str, int] = field(default_factory=dict)
    totals: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0

    def to_json(self) -> str:
        return json.dumps(self.__dict__, indent=2, sort_keys=True)


def _oldest_unconsumed(source: str) -> Any:
    """mapInArrow function: the first record at or after the effective committed offset, in
    the data directory or the PostgreSQL database ``source``."""

    def lookup(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        if not is_postgres_url(source):
            yield from _lookups(batches, lambda r, start: first_record_at_or_after(
                source, r["dirname"], r["segment_bases"], start))
            return
        with contextlib.ExitStack() as stack:
            conns: list[Any] = []  # one connection for the task's lookups, opened on the first

            def first(r: dict[str, Any], start: int) -> tuple[int, int] | None:
                if not conns:
                    conns.append(stack.enter_context(postgres.connect(source)))
                return postgres.first_record_at_or_after(conns[0], r["topic"], r["partition"], start)

            yield from _lookups(batches, first)

    return lookup


def _lookups(
    batches: Iterator[pa.RecordBatch],
    first_at_or_after: Callable[[dict[str, Any], int], tuple[int, int] | None],
) -> Iterator[pa.RecordBatch]:
    """The lag rows of ``batches`` with the oldest unconsumed record of each."""
    cache: dict[tuple[str, int], tuple[int, int] | None] = {}
    for batch in batches:
        rows = batch.to_pylist()
        out = []
        for r in rows:
            offset = ts = None
            start, end = r["effective_offset"], r["log_end_offset"]
            if start is not None and end is not None and start < end:
                key = (r["dirname"], start)
                if key not in cache:
                    cache[key] = first_at_or_after(r, start)
                found = cache[key]
                if found is not None and found[0] < end:  # not past the snapshot's end
                    offset, ts = found
            out.append(
                {
                    "group": r["group"],
                    "topic": r["topic"],
                    "partition": r["partition"],
                    "committed_offset": r["committed_offset"],
                    "log_start_offset": r["log_start_offset"],
                    "log_end_offset": end,
                    "lag": r["lag"],
                    "oldest_unconsumed_offset": offset,
                    "oldest_unconsumed_timestamp": ts,
                }
            )
        yield pa.RecordBatch.from_pylist(out, schema=LAG_OUT_SCHEMA)


def offsets_latest(state: DataFrame) -> DataFrame:
    """Newest record per key by log position (partial aggregation before the shuffle); keys
    whose newest record is a tombstone are gone."""
    newest = (
        state.where(F.col("kind") == "offset")
        .groupBy("group", "topic", "partition")
        .agg(
            F.max(
                F.struct(
                    "log_offset",
                    "tombstone",
                    "offset",
                    "leader_epoch",
                    "metadata",
                    "commit_timestamp",
                    "log_partition",
                )
            ).alias("n")
        )
    )
    return newest.where(~F.col("n.tombstone")).select(
        "group",
        "topic",
        "partition",
        F.col("n.offset").alias("offset"),
        F.col("n.leader_epoch").alias("leader_epoch"),
        F.col("n.metadata").alias("metadata"),
        F.col("n.commit_timestamp").alias("commit_timestamp"),
        F.timestamp_millis(F.col("n.commit_timestamp")).alias("commit_time"),
        F.col("n.log_partition").alias("log_partition"),
        F.col("n.log_offset").alias("log_offset"),
    )


def group_generations(state: DataFrame) -> DataFrame:
    groups = state.where(F.col("kind") == "group")
    deleted = (
        groups.where(F.col("tombstone")).groupBy("group").agg(F.max("log_offset").alias("deleted_at"))
    )
    live = groups.where(~F.col("tombstone")).join(deleted, "group", "left")
    live = live.where(F.col("deleted_at").isNull() | (F.col("log_offset") > F.col("deleted_at")))
    return live.select(
        "group",
        "generation",
        "protocol_type",
        "protocol",
        "leader",
        F.size("members").alias("member_count"),
        F.transform(
            "members",
            lambda m: F.struct(
                m["member_id"].alias("member_id"),
                m["client_id"].alias("client_id"),
                m["group_instance_id"].alias("group_instance_id"),
                m["assigned_partitions"].alias("partitions"),
            ),
        ).alias("partitions_per_member"),
        F.col("members"),
        F.timestamp_millis(F.coalesce("state_timestamp", "record_timestamp")).alias("time"),
        F.timestamp_millis("record_timestamp").alias("record_time"),
        "log_partition",
        "log_offset",
    )


def _epochs(state: DataFrame, names: dict[str, str], kind: str, members: Any) -> DataFrame:
    """The ``kind`` rows (consumer or share) replayed per group in log order
    (``pipeline.consumer_groups``), with ``members`` as the members column."""
    records = state.where(F.col("kind") == kind).select(*STATE_COLUMNS)
    epochs = (
        records.repartition("log_partition", "group")
        .sortWithinPartitions("log_partition", "group", "log_offset")
        .mapInArrow(epochs_mapper(names), spark_ddl(EPOCHS_SCHEMA))
    )
    return epochs.select(
        "group",
        "group_epoch",
        "assignment_epoch",
        "member_count",
        members.alias("members"),
        "converged",
        F.timestamp_millis("record_timestamp").alias("time"),
        F.timestamp_millis("end_timestamp").alias("end_time"),
        "log_partition",
        "log_offset",
        "end_log_offset",
    )


def consumer_group_epochs(state: DataFrame, names: dict[str, str]) -> DataFrame:
    """KIP-848 records replayed per group in log order (``pipeline.consumer_groups``)."""
    return _epochs(state, names, "consumer", F.col("members"))


def share_group_epochs(state: DataFrame, names: dict[str, str]) -> DataFrame:
    """Share-group records replayed as consumer-group records are (``pipeline.share_groups``);
    the members keep the fields a share member has."""
    fields = [f.name for f in SHARE_MEMBER_TYPE]
    members = F.transform("members", lambda m: F.struct(*(m[name].alias(name) for name in fields)))
    return _epochs(state, names, "share", members)


def share_state_replayed(log: DataFrame, names: dict[str, str]) -> DataFrame:
    """``__share_group_state`` replayed per share partition in log order
    (``pipeline.share_state``): history rows, the last of each live one ``is_latest``."""
    keys = ("log_partition", "group", "topic_id", "partition")
    return (
        log.where(F.col("kind") == "share_state")
        .select(*REPLAY_COLUMNS)
        .repartition(*keys)
        .sortWithinPartitions(*keys, "log_offset")
        .mapInArrow(share_state_mapper(names), spark_ddl(REPLAY_SCHEMA))
    )


def share_state_history(replayed: DataFrame) -> DataFrame:
    return replayed.select(
        "group", "topic", "topic_id", "partition", "record_type", "snapshot_epoch",
        "state_epoch", "leader_epoch", "start_offset", "delivery_complete_count",
        "available_records", "acknowledged_records", "archived_records", "archived_total",
        F.timestamp_millis("record_timestamp").alias("time"),
        F.timestamp_millis("write_timestamp").alias("write_time"),
        "log_partition", "log_offset",
    )


def share_state_latest(replayed: DataFrame) -> DataFrame:
    seconds = (F.col("record_timestamp") - F.col("first_start_timestamp")) / 1000
    advanced = F.col("start_offset") - F.col("first_start_offset")
    return replayed.where(F.col("is_latest")).select(
        "group", "topic", "topic_id", "partition", "state_epoch", "leader_epoch",
        "snapshot_epoch", "start_offset", "delivery_complete_count",
        F.col("state_batches").alias("in_flight_batches"),
        "available_records", "acknowledged_records", "archived_records", "archived_total",
        "max_delivery_count", "updates_since_snapshot", "first_start_offset",
        F.timestamp_millis("first_start_timestamp").alias("first_start_time"),
        advanced.alias("start_offset_advance"),
        F.when(seconds > 0, advanced / seconds).alias("start_offset_rate"),
        F.timestamp_millis("create_timestamp").alias("create_time"),
        F.timestamp_millis("record_timestamp").alias("time"),
        "records", "log_partition", "log_offset",
    )


def consumer_lag(latest: DataFrame, topics: DataFrame, source: str, as_of_ms: int) -> DataFrame:
    joined = latest.select(
        "group", "topic", "partition", F.col("offset").alias("committed_offset")
    ).join(topics, ["topic", "partition"], "left")
    effective = F.greatest(F.col("committed_offset"), F.col("log_start_offset"))
    joined = joined.withColumn("effective_offset", effective).withColumn(
        "lag",
        F.when(F.col("log_end_offset").isNull(), F.lit(None)).otherwise(
            F.greatest(F.col("log_end_offset") - effective, F.lit(0))
        ),
    )
    looked_up = joined.repartition("topic", "partition").mapInArrow(
        _oldest_unconsumed(source), spark_ddl(LAG_OUT_SCHEMA)
    )
    return looked_up.select(
        "*",
        F.when(F.col("lag") == 0, F.lit(0))
        .otherwise(F.lit(as_of_ms) - F.col("oldest_unconsumed_timestamp"))
        .alias("lag_ms"),
        F.timestamp_millis(F.lit(as_of_ms)).alias("as_of"),
    )


def _note_runs(summary: Summary, log: DataFrame) -> None:
    """Add the segment (or run) statistics and the problems of ``log`` to ``summary``."""
    for r in log.where(F.col("kind").isin("segment", "problem")).collect():
        if r["kind"] == "problem":
            summary.problems.append({"name": r["segment"], "message": r["detail"]})
        else:
            summary.segments.append({"name": r["segment"], **json.loads(r["detail"])})


def run_job(
    spark: SparkSession,
    source: str,
    out: str,
    *,
    as_of_ms: int | None = None,
    report: bool = True,
    snapshot: Snapshot | None = None,
) -> Summary:
    """Read ``source`` (a data directory, or a ``postgresql://`` URL of the database of a
    broker with ``storage.url``) as of ``snapshot`` (taken now if not given), write the tables
    (and the report) under ``out``. ``as_of_ms`` replaces the snapshot's time as the lag's
    clock (for reproducible tables)."""
    started = time.monotonic()
    register(spark)
    snapshot = take(source) if snapshot is None else snapshot
    as_of_ms = snapshot.taken_ms if as_of_ms is None else as_of_ms
    on_postgres = is_postgres_url(source)
    summary = Summary(redacted(source) if on_postgres else source, out, as_of_ms)
    fixed = snapshot.to_json()

    def load(reader: DataFrameReader) -> DataFrame:
        reader = reader.option(OPTION, fixed)
        return reader.option("url", source).load() if on_postgres else reader.load(source)

    def write(df: DataFrame, name: str) -> None:
        df.write.mode("overwrite").parquet(fs.join(out, name))

    def offsets_log(view: str) -> DataFrame:
        return load(spark.read.format("kcoord_offsets").option("view", view))

    commits = offsets_log("commits").withColumn(
        "commit_time", F.timestamp_millis("commit_timestamp")
    )
    write(commits, "offset_commits")

    names = postgres.topic_names(source) if on_postgres else topic_names(source)
    state = offsets_log("state").persist()
    try:
        _note_runs(summary, state)
        write(offsets_latest(state), "offsets_latest")
        write(group_generations(state), "group_generations")
        write(consumer_group_epochs(state, names), "consumer_group_epochs")
        write(share_group_epochs(state, names), "share_group_epochs")
    finally:
        state.unpersist()

    share_log = load(spark.read.format("kcoord_share_state")).persist()
    try:
        _note_runs(summary, share_log)
        replayed = share_state_replayed(share_log, names).persist()
        try:
            write(share_state_history(replayed), "share_state_history")
            write(share_state_latest(replayed), "share_state_latest")
        finally:
            replayed.unpersist()
    finally:
        share_log.unpersist()
    summary.segments.sort(key=lambda s: s["name"])
    summary.problems.sort(key=lambda p: p["name"])
    for key in (f.name for f in dataclasses.fields(SegmentStats) if f.name != "batches"):
        summary.totals[key] = sum(int(s.get(key, 0)) for s in summary.segments)

    latest_table = spark.read.parquet(fs.join(out, "offsets_latest"))
    topics = load(spark.read.format("kcoord_topic_logs"))
    write(consumer_lag(latest_table, topics, source, as_of_ms), "consumer_lag")

    tables = {name: spark.read.parquet(fs.join(out, name)) for name in TABLES}
    for name, df in tables.items():
        # offset_commits holds every commit of the segments read; no need to scan it again.
        summary.rows[name] = summary.totals["offset_commits"] if name == "offset_commits" else df.count()
    if report:
        from .report import write_report

        write_report(spark, tables, summary)
    summary.seconds = round(time.monotonic() - started, 3)
    fs.write_bytes(fs.join(out, "summary.json"), summary.to_json().encode())
    return summary
