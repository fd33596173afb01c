"""One consistent cut of the logs per pipeline run.

A broker keeps writing while the job runs, and the job reads its logs several times (once per
dataset, and Spark may read one again). So the end of every partition is fixed once, at the
start, and every read of the run stops there:

* a data directory: per partition directory, the base offset of its last segment and that
  segment's length in bytes (``pipeline.logs.partition_ends``); segments rolled since are not
  read, the last one is read up to that length (a batch cut off there is a write in flight,
  ignored as a torn tail is);
* a PostgreSQL database: every live partition's row, its log start and ``next_offset``, read
  in one statement (``pipeline.postgres.live_partitions``).

:attr:`Snapshot.taken_ms` is the clock read right after the ends were fixed: the run's "as
of". A snapshot is a small value (JSON, :meth:`Snapshot.to_json`) that the driver hands to the
Spark sources as an option; the executors get the parts they need inside their input
partitions, never an open handle.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

from .logs import PartitionEnd, partition_ends
from .postgres import PartitionRow, is_postgres_url, live_partitions

OPTION = "snapshot"  # the Spark sources' option holding Snapshot.to_json()


@dataclass(frozen=True, slots=True)
class Snapshot:
    taken_ms: int
    ends: dict[str, PartitionEnd | None] = field(default_factory=dict)  # data directory
    rows: list[PartitionRow] = field(default_factory=list)  # PostgreSQL

    def to_json(self) -> str:
        return json.dumps({"taken_ms": self.taken_ms, "ends": self.ends, "rows": self.rows})

    @classmethod
    def from_json(cls, text: str) -> Snapshot:
        d = json.loads(text)
        ends = {k: None if v is None else (int(v[0]), int(v[1])) for k, v in d["ends"].items()}
        rows = [(str(t), int(p), int(i), int(s), int(e)) for t, p, i, s, e in d["rows"]]
        return cls(int(d["taken_ms"]), ends, rows)


def take(source: str) -> Snapshot:
    """Fix the end of every partition of ``source`` (a data directory or a PostgreSQL URL)."""
    if is_postgres_url(source):
        rows, ends = live_partitions(source), {}
    else:
        rows, ends = [], partition_ends(source)
    return Snapshot(int(time.time() * 1000), ends, rows)


def given_or_taken(text: str | None, source: str) -> Snapshot:
    """The snapshot a Spark source was given (its :data:`OPTION`), or one taken now."""
    return Snapshot.from_json(text) if text else take(source)
