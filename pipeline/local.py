"""The five ``__consumer_offsets`` tables in one Python process, without Spark (the benchmark's
baseline; the share-group tables are Spark's only).

It reads the same segments with the same functions as the Spark executors
(:func:`pipeline.decode.segment_commits` / :func:`pipeline.decode.segment_state`), then does the
"shuffle" in dictionaries and writes Parquet with pyarrow. On one machine with a few cores this
is faster than Spark; it cannot go beyond one machine.
"""

from __future__ import annotations

import os
import time
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from . import fs
from .consumer_groups import EPOCHS_SCHEMA, replay_epochs
from .decode import COMMIT_SCHEMA, SegmentError, segment_commits, segment_state
from .logs import (
    OFFSETS_TOPIC,
    Problem,
    first_record_at_or_after,
    offsets_segments,
    parse_partition_dir,
    topic_log,
    topic_names,
)
from .snapshot import Snapshot, take


def python_pass(
    data_dir: str, out: str | None = None, *, as_of_ms: int | None = None,
    snapshot: Snapshot | None = None,
) -> dict[str, Any]:
    """Compute the tables from ``snapshot`` (``pipeline.snapshot``; taken now if not given);
    write them as ``<out>/<table>.parquet`` if ``out`` is given.

    Returns row counts, problems and timings; ``as_of_ms`` is the snapshot's time unless given.
    """
    started = time.monotonic()
    snapshot = take(data_dir) if snapshot is None else snapshot
    as_of_ms = snapshot.taken_ms if as_of_ms is None else as_of_ms
    refs, problems = offsets_segments(data_dir, OFFSETS_TOPIC, snapshot.ends)
    if out is not None and fs.is_local(out):
        os.makedirs(out, exist_ok=True)
    writer = None
    commit_rows = 0
    newest: dict[tuple[str, str, int], dict[str, Any]] = {}
    groups: list[dict[str, Any]] = []
    consumer: list[dict[str, Any]] = []
    deleted_at: dict[str, int] = {}
    records = 0
    try:
        for ref in refs:
            if ref.size == 0:
                continue
            try:
                batches, _ = segment_commits(ref)
                rows, stats = segment_state(ref)
            except SegmentError as e:
                problems.append(e.problem)
                continue
            records += stats.records
            for b in batches:
                commit_rows += b.num_rows
                if out is not None:
                    if writer is None:
                        writer = pq.ParquetWriter(fs.join(out, "offset_commits.parquet"), COMMIT_SCHEMA)
                    writer.write_batch(b)
            for r in rows:
                if r["kind"] == "offset":
                    key = (r["group"], r["topic"], r["partition"])
                    old = newest.get(key)
                    if old is None or old["log_offset"] < r["log_offset"]:
                        newest[key] = r
                elif r["kind"] == "group":
                    if r["tombstone"]:
                        deleted_at[r["group"]] = max(deleted_at.get(r["group"], -1), r["log_offset"])
                    else:
                        groups.append(r)
                elif r["kind"] == "consumer":
                    consumer.append(r)
    finally:
        if writer is not None:
            writer.close()
    latest = [r for r in newest.values() if not r["tombstone"]]
    generations = [g for g in groups if g["log_offset"] > deleted_at.get(g["group"], -1)]
    consumer.sort(key=lambda r: (r["log_partition"], r["group"], r["log_offset"]))
    epochs = list(replay_epochs(consumer, topic_names(data_dir)))

    logs = {
        parsed: topic_log(data_dir, *parsed, d, end)
        for d, end in snapshot.ends.items()
        if end is not None and (parsed := parse_partition_dir(d)) and not parsed[0].startswith("__")
    }
    lag_rows = []
    found_at: dict[tuple[str, int], tuple[int, int] | None] = {}
    for r in latest:
        tl = logs.get((r["topic"], r["partition"]))
        row = {"group": r["group"], "topic": r["topic"], "partition": r["partition"],
               "committed_offset": r["offset"], "log_start_offset": None, "log_end_offset": None,
               "lag": None, "oldest_unconsumed_timestamp": None}
        if tl is not None and tl.log_end_offset is not None and tl.log_start_offset is not None:
            effective = max(r["offset"], tl.log_start_offset)
            row.update(log_start_offset=tl.log_start_offset, log_end_offset=tl.log_end_offset,
                       lag=max(tl.log_end_offset - effective, 0))
            if effective < tl.log_end_offset:
                where = (tl.dirname, effective)
                if where not in found_at:
                    found_at[where] = first_record_at_or_after(data_dir, tl.dirname, tl.segments, effective)
                found = found_at[where]
                if found is not None and found[0] < tl.log_end_offset:
                    row["oldest_unconsumed_timestamp"] = found[1]
        lag_rows.append(row)

    if out is not None:
        pq.write_table(pa.Table.from_pylist(latest), fs.join(out, "offsets_latest.parquet"))
        pq.write_table(pa.Table.from_pylist(generations), fs.join(out, "group_generations.parquet"))
        pq.write_table(
            pa.Table.from_pylist(epochs, schema=EPOCHS_SCHEMA),
            fs.join(out, "consumer_group_epochs.parquet"),
        )
        pq.write_table(pa.Table.from_pylist(lag_rows), fs.join(out, "consumer_lag.parquet"))
    return {
        "segments": sum(1 for r in refs if r.size > 0),
        "records": records,
        "rows": {
            "offset_commits": commit_rows,
            "offsets_latest": len(latest),
            "group_generations": len(generations),
            "consumer_group_epochs": len(epochs),
            "consumer_lag": len(lag_rows),
        },
        "problems": [{"name": p.name, "message": p.message} for p in problems if isinstance(p, Problem)],
        "seconds": round(time.monotonic() - started, 3),
        "as_of_ms": as_of_ms,
    }
