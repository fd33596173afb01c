"""Spark Python Data Sources over kcoord's (and Kafka's) partition logs.

``kcoord_offsets``: the ``__consumer_offsets-N`` segments, one input partition per segment
file, so the decoding spreads over the executors::

    spark.dataSource.register(OffsetsLogSource)
    spark.read.format("kcoord_offsets").option("view", "commits").load(data_dir)

``view`` is ``commits`` (every offset commit, :data:`pipeline.decode.COMMIT_SCHEMA`) or
``state`` (per-segment compacted offsets, group records, KIP-848 consumer-group records,
segment statistics and problems, :data:`pipeline.decode.STATE_SCHEMA`). The segment files are listed here, not by Spark: Spark's
file sources hide directories whose names start with ``_``.

``kcoord_topic_logs``: log start and end offset of every topic partition directory (internal
``__*`` topics excluded), a few directories per input partition.
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
    SegmentError,
    problem_row,
    segment_commits,
    segment_state,
    spark_ddl,
    state_batch,
)
from .logs import OFFSETS_TOPIC, Problem, SegmentRef, offsets_segments, partition_dirs, topic_log

VIEWS = ("commits", "state")
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


def _path(options: Any) -> str:
    path = options.get("path")
    if not path:
        raise ValueError("load(<data dir>) or .option('path', <data dir>) is required")
    return str(path)


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
        return OffsetsLogReader(
            _path(self.options),
            self.options.get("view", "commits"),
            self.options.get("topic", OFFSETS_TOPIC),
        )


class OffsetsLogReader(DataSourceReader):
    def __init__(self, data_dir: str, view: str, topic: str) -> None:
        self.data_dir = data_dir
        self.view = view
        self.topic = topic

    def partitions(self) -> Sequence[InputPartition]:
        refs, problems = offsets_segments(self.data_dir, self.topic)
        # Empty files (every partition starts with one) hold nothing: no task for them.
        parts: list[InputPartition] = [InputPartition(r) for r in refs if r.size > 0]
        if problems:
            parts.append(InputPartition(problems))
        return parts or [InputPartition([])]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        value = partition.value
        if isinstance(value, list):  # listing problems (reported by the state view only)
            if self.view == "state" and value:
                yield state_batch([problem_row(p) for p in value])
            return
        ref: SegmentRef = value
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


class TopicLogsSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "kcoord_topic_logs"

    def schema(self) -> str:
        return spark_ddl(TOPIC_LOG_SCHEMA)

    def reader(self, schema: StructType) -> DataSourceReader:
        return TopicLogsReader(_path(self.options))


class TopicLogsReader(DataSourceReader):
    def __init__(self, data_dir: str) -> None:
        self.data_dir = data_dir

    def partitions(self) -> Sequence[InputPartition]:
        dirs = [d for d in partition_dirs(self.data_dir) if not d[0].startswith("__")]
        step = TOPIC_DIRS_PER_PARTITION
        return [InputPartition(dirs[i : i + step]) for i in range(0, len(dirs), step)] or [
            InputPartition([])
        ]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        rows = []
        for topic, p, dirname in partition.value:
            t = topic_log(self.data_dir, topic, p, dirname)
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
    spark.dataSource.register(TopicLogsSource)


__all__ = ["OffsetsLogSource", "Problem", "TopicLogsSource", "register"]
