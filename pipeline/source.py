"""Spark Python Data Sources over kcoord's (and Kafka's) partition logs.

``kcoord_offsets``: the ``__consumer_offsets-N`` segments, one input partition per segment
file, so the decoding spreads over the executors::

    spark.dataSource.register(OffsetsLogSource)
    spark.read.format("kcoord_offsets").option("view", "commits").load(data_dir)

``view`` is ``commits`` (every offset commit, :data:`pipeline.decode.COMMIT_SCHEMA`) or
``state`` (per-segment compacted offsets, group records, KIP-848 consumer-group records,
segment statistics and problems, :data:`pipeline.decode.STATE_SCHEMA`). The segment files are listed here, not by Spark: Spark's
file sources hide directories whose names start with ``_``.

``kcoord_share_state``: the ``__share_group_state-N`` segments (the share coordinator's log)
read the same way, one input partition per segment file, each record a row of
:data:`pipeline.share_state.SHARE_LOG_SCHEMA`, with segment statistics and problems.

``kcoord_topic_logs``: log start and end offset of every topic partition directory (internal
``__*`` topics excluded), a few directories per input partition.

Each reads up to the partition ends of ``.option("snapshot", Snapshot.to_json())``
(``pipeline.snapshot``; the job gives all its reads the same one), or of a snapshot it takes
when Spark plans the read if it has none.

All read a broker's PostgreSQL database instead when given ``.option("url",
"postgresql://...")`` and no path (``pipeline.postgres``): ``kcoord_offsets`` and
``kcoord_share_state`` then have one input partition per run of ``batches`` rows (a range of
offsets of one partition of their topic), and ``kcoord_topic_logs`` one reading the
``partitions`` rows. The option is named
``url`` because Spark redacts the values of options so named in the plans it prints
(``spark.sql.redaction.options.regex``); the password still travels to the executors, which
connect with it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from .decode import (
    COMMIT_SCHEMA,
    STATE_SCHEMA,
    Run,
    SegmentError,
    problem_row,
    segment_commits,
    segment_state,
    spark_ddl,
    state_batch,
)
from .logs import (
    NO_SEGMENTS,
    OFFSETS_TOPIC,
    Problem,
    TopicLog,
    offsets_segments,
    parse_partition_dir,
    topic_log,
)
from .postgres import is_postgres_url, offsets_runs, topic_logs
from .share_state import SHARE_LOG_SCHEMA, SHARE_STATE_TOPIC, segment_share_state, share_state_batch
from .snapshot import OPTION, given_or_taken

VIEWS = ("commits", "state")
SHARE_VIEW = "share_state"  # the reader's view of __share_group_state
TOPIC_DIRS_PER_PARTITION = 64

TOPIC_LOG_SCHEMA = pa.schema(
    [
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("dirname", pa.string()),
        ("log_start_offset", pa.int64()),
        ("log_end_offset", pa.int64()),
        ("segment_bases", pa.list_(pa.int64())),
        ("problem", pa.string()),
    ]
)


def _where(options: Any) -> tuple[str, str | None]:
    """(data dir, None) or ("", PostgreSQL URL) from the source's options."""
    url = options.get("url")
    if url:
        if not is_postgres_url(str(url)):
            raise ValueError("option url must be a postgresql:// URL")
        return "", str(url)
    path = options.get("path")
    if not path:
        raise ValueError(
            "load(<data dir>), .option('path', <data dir>) or .option('url', <postgresql URL>)"
            " is required"
        )
    return str(path), None


class OffsetsLogSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "kcoord_offsets"

    def schema(self) -> str:
        view = self.options.get("view", "commits")
        if view not in VIEWS:
            raise ValueError(f"view must be one of {VIEWS}, not {view!r}")
        return spark_ddl(COMMIT_SCHEMA if view == "commits" else STATE_SCHEMA)

    def reader(self, schema: StructType) -> DataSourceReader:
        data_dir, url = _where(self.options)
        return InternalLogReader(
            data_dir,
            self.options.get("view", "commits"),
            self.options.get("topic", OFFSETS_TOPIC),
            url,
            self.options.get(OPTION),
        )


class InternalLogReader(DataSourceReader):
    """The segments (or database runs) of one internal topic, ``__consumer_offsets`` or
    ``__share_group_state``, decoded as one of the views."""

    def __init__(
        self, data_dir: str, view: str, topic: str, url: str | None = None, snapshot: str | None = None
    ) -> None:
        self.data_dir = data_dir
        self.view = view
        self.topic = topic
        self.url = url
        self.snapshot = snapshot  # Snapshot.to_json(), or None

    def partitions(self) -> Sequence[InputPartition]:
        snap = given_or_taken(self.snapshot, self.url or self.data_dir)
        if self.url is not None:
            runs = offsets_runs(self.url, self.topic, partitions=snap.rows)
            return [InputPartition(r) for r in runs] or [InputPartition([])]
        refs, problems = offsets_segments(self.data_dir, self.topic, snap.ends)
        # Empty files (every partition starts with one) hold nothing: no task for them.
        parts: list[InputPartition] = [InputPartition(r) for r in refs if r.size > 0]
        if problems:
            parts.append(InputPartition(problems))
        return parts or [InputPartition([])]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        value = partition.value
        batch = share_state_batch if self.view == SHARE_VIEW else state_batch
        if isinstance(value, list):  # listing problems (reported by the state views only)
            if self.view != "commits" and value:
                yield batch([problem_row(p) for p in value])
            return
        ref: Run = value
        if self.view == SHARE_VIEW:
            try:
                rows, _ = segment_share_state(ref)
            except SegmentError as e:
                rows = [problem_row(e.problem, ref.log_partition)]
            yield batch(rows)
            return
        if self.view == "commits":
            try:
                batches, _ = segment_commits(ref)
            except SegmentError:
                return  # the state view reports it; a segment is all or nothing
            yield from batches
            return
        try:
            rows, _ = segment_state(ref)
        except SegmentError as e:
            rows = [problem_row(e.problem, ref.log_partition)]
        yield state_batch(rows)


class ShareStateLogSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "kcoord_share_state"

    def schema(self) -> str:
        return spark_ddl(SHARE_LOG_SCHEMA)

    def reader(self, schema: StructType) -> DataSourceReader:
        data_dir, url = _where(self.options)
        return InternalLogReader(data_dir, SHARE_VIEW, SHARE_STATE_TOPIC, url, self.options.get(OPTION))


class TopicLogsSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "kcoord_topic_logs"

    def schema(self) -> str:
        return spark_ddl(TOPIC_LOG_SCHEMA)

    def reader(self, schema: StructType) -> DataSourceReader:
        return TopicLogsReader(*_where(self.options), self.options.get(OPTION))


class TopicLogsReader(DataSourceReader):
    def __init__(self, data_dir: str, url: str | None = None, snapshot: str | None = None) -> None:
        self.data_dir = data_dir
        self.url = url
        self.snapshot = snapshot  # Snapshot.to_json(), or None

    def partitions(self) -> Sequence[InputPartition]:
        snap = given_or_taken(self.snapshot, self.url or self.data_dir)
        if self.url is not None:
            return [InputPartition(snap.rows)]  # the snapshot's rows answer for every partition
        dirs = sorted(
            (*parsed, dirname, end)
            for dirname, end in snap.ends.items()
            if (parsed := parse_partition_dir(dirname)) is not None and not parsed[0].startswith("__")
        )
        step = TOPIC_DIRS_PER_PARTITION
        return [InputPartition(dirs[i : i + step]) for i in range(0, len(dirs), step)] or [
            InputPartition([])
        ]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if self.url is not None:
            logs = topic_logs(self.url, partition.value)
        else:
            logs = [
                TopicLog(t, p, d, problem=NO_SEGMENTS) if end is None
                else topic_log(self.data_dir, t, p, d, end)
                for t, p, d, end in partition.value
            ]
        rows = []
        for t in logs:
            rows.append(
                {
                    "topic": t.topic,
                    "partition": t.partition,
                    "dirname": t.dirname,
                    "log_start_offset": t.log_start_offset,
                    "log_end_offset": t.log_end_offset,
                    "segment_bases": t.segments,
                    "problem": t.problem,
                }
            )
        if rows:
            yield pa.RecordBatch.from_pylist(rows, schema=TOPIC_LOG_SCHEMA)


def register(spark: Any) -> None:
    spark.dataSource.register(OffsetsLogSource)
    spark.dataSource.register(ShareStateLogSource)
    spark.dataSource.register(TopicLogsSource)


__all__ = ["OffsetsLogSource", "Problem", "ShareStateLogSource", "TopicLogsSource", "register"]
