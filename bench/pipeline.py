"""The Spark pipeline against a single-process Python pass over the same files; prints JSON.

For each size (default 1,000,000 and 10,000,000 offset commit records) a data directory is
written directly in Kafka's format with the project's own encoders and ``PartitionLog``: 50
``__consumer_offsets`` partitions (8 MiB segments), 1,000 groups each committing the 10
partitions of one of 10 topics, one rebalance (group record) per 1,000 commit batches, and
small topic logs so that consumer_lag has real work. Then:

* ``spark``: ``pipeline.job.run_job`` (all its tables, no report) on ``local[2]``, with the
  session already started;
* ``python``: ``pipeline.local.python_pass`` (the same tables with pyarrow, one process).

``startup`` is the fixed cost: starting the SparkSession, and the same job over a tiny data
directory (first run, and again warm). It takes minutes; use ``--records`` for smaller runs.

    .venv/bin/python bench/pipeline.py [--records 1000000,10000000] [--master local[2]]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kcoord.coordinator.schemas import (  # noqa: E402
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitValue,
    encode_group_metadata_value,
    encode_key,
    encode_offset_commit_value,
    offset_commit_key_prefix,
)
from kcoord.protocol.javahash import partition_for  # noqa: E402
from kcoord.protocol.record_encoding import build_batch, encode_kv_batch  # noqa: E402
from kcoord.storage.log import PartitionLog  # noqa: E402

GROUPS = 1000
TOPICS = 10
PARTITIONS = 10
TOPIC_RECORDS = 2000  # per topic partition
SEGMENT_BYTES = 8 << 20
T0 = 1_700_000_000_000


def _assignment(topic: str, partitions: list[int]) -> bytes:
    t = topic.encode()
    body = len(t).to_bytes(2, "big") + t + len(partitions).to_bytes(4, "big")
    body += b"".join(p.to_bytes(4, "big") for p in partitions)
    return b"\x00\x00" + (1).to_bytes(4, "big") + body + (0xFFFFFFFF).to_bytes(4, "big")


def _group_record(group: str, topic: str, generation: int, ts: int) -> tuple[bytes, bytes]:
    members = []
    for m in range(3):
        parts = [p for p in range(PARTITIONS) if p % 3 == m]
        members.append(
            MemberMetadata(f"{group}-m{m}-{generation}", None, f"c{m}", "/127.0.0.1", 45000, 10000,
                           b"", _assignment(topic, parts))
        )
    value = GroupMetadataValue("consumer", generation, "range", members[0].member_id, ts, tuple(members))
    return encode_key(GroupMetadataKey(group)), encode_group_metadata_value(value)


def generate(data_dir: Path, records: int) -> dict[str, int]:
    """Write ``records`` offset commit records (plus group records and topic logs)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    logs = {
        p: PartitionLog.open(data_dir / f"__consumer_offsets-{p}", segment_bytes=SEGMENT_BYTES, fsync=False)
        for p in range(50)
    }
    pending: dict[int, list[bytes]] = {p: [] for p in range(50)}
    groups = [f"bench-group-{g}" for g in range(GROUPS)]
    topic_of = [f"bench-topic-{g % TOPICS}" for g in range(GROUPS)]
    part_of = [partition_for(g, 50) for g in groups]
    prefixes = [offset_commit_key_prefix(groups[g], topic_of[g]) for g in range(GROUPS)]
    keys = [[prefixes[g] + p.to_bytes(4, "big") for p in range(PARTITIONS)] for g in range(GROUPS)]
    batches = records // PARTITIONS
    step = max(3_600_000 // max(batches, 1), 1)
    generation = [0] * GROUPS

    def add(part: int, batch: bytes) -> None:
        pending[part].append(batch)
        if len(pending[part]) >= 200:
            logs[part].append(b"".join(pending[part]))
            pending[part].clear()

    for g in range(GROUPS):
        generation[g] = 1
        add(part_of[g], encode_kv_batch([_group_record(groups[g], topic_of[g], 1, T0)], T0))
    for i in range(batches):
        g = i % GROUPS
        ts = T0 + i * step
        n = i // GROUPS  # how many times this group committed before
        offset = min(n * 5, TOPIC_RECORDS)
        value = encode_offset_commit_value(OffsetCommitValue(offset, "", ts))
        pairs: list[tuple[bytes, bytes | None]] = [(keys[g][p], value) for p in range(PARTITIONS)]
        add(part_of[g], encode_kv_batch(pairs, ts))
        if i % 1000 == 999:
            r = (i // 1000) % GROUPS
            generation[r] += 1
            add(part_of[r], encode_kv_batch([_group_record(groups[r], topic_of[r], generation[r], ts)], ts))
    for part, items in pending.items():
        if items:
            logs[part].append(b"".join(items))
    for log in logs.values():
        log.close()

    for t in range(TOPICS):
        for p in range(PARTITIONS):
            with PartitionLog.open(data_dir / f"bench-topic-{t}-{p}", fsync=False) as log:
                for b in range(0, TOPIC_RECORDS, 100):
                    entries = [(None, b"x" * 20, (), T0 + (b + k) * 1000) for k in range(100)]
                    log.append(build_batch(entries))
    return {"commit_records": batches * PARTITIONS, "group_records": GROUPS + batches // 1000}


def _size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*.log"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", default="1000000,10000000", help="comma-separated sizes")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--shuffle-partitions", type=int, default=4)
    ap.add_argument("--work-dir", default=None, help="where to write (default: a temp dir, removed)")
    args = ap.parse_args()
    sizes = [int(s) for s in args.records.split(",") if s]

    from kcoord.pipeline.job import run_job
    from kcoord.pipeline.local import python_pass
    from kcoord.pipeline.session import build_session, java_version

    work = Path(args.work_dir or tempfile.mkdtemp(prefix="kcoord-bench-pipeline-"))
    result: dict[str, object] = {
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "java": java_version(),
            "master": args.master,
            "shuffle_partitions": args.shuffle_partitions,
        }
    }
    try:
        tiny = work / "tiny"
        generate(tiny, 1000)
        t = time.monotonic()
        spark = build_session(args.master, shuffle_partitions=args.shuffle_partitions,
                              conf={"spark.ui.enabled": "false"})
        spark.sparkContext.setLogLevel("ERROR")
        import pyspark

        result["machine"]["pyspark"] = pyspark.__version__  # type: ignore[index]
        session_s = time.monotonic() - t
        t = time.monotonic()
        run_job(spark, str(tiny), str(work / "tiny-out-1"), report=False)
        first_s = time.monotonic() - t
        t = time.monotonic()
        run_job(spark, str(tiny), str(work / "tiny-out-2"), report=False)
        warm_s = time.monotonic() - t
        result["startup"] = {
            "session_start_s": round(session_s, 2),
            "tiny_job_first_s": round(first_s, 2),
            "tiny_job_warm_s": round(warm_s, 2),
            "note": "session start + first tiny job = the fixed cost of a run; warm = per-job overhead",
        }
        runs = []
        for n in sizes:
            data = work / f"data-{n}"
            t = time.monotonic()
            generated = generate(data, n)
            gen_s = time.monotonic() - t
            commits = generated["commit_records"]
            t = time.monotonic()
            summary = run_job(spark, str(data), str(work / f"spark-out-{n}"), report=False)
            spark_s = time.monotonic() - t
            t = time.monotonic()
            py = python_pass(str(data), str(work / f"python-out-{n}"))
            py_s = time.monotonic() - t
            assert summary.rows == py["rows"], (summary.rows, py["rows"])
            runs.append(
                {
                    "commit_records": commits,
                    "segments": len(summary.segments),
                    "log_bytes": _size(data),
                    "generate_s": round(gen_s, 1),
                    "rows": summary.rows,
                    "spark": {"seconds": round(spark_s, 2), "records_per_s": round(commits / spark_s)},
                    "python_single_process": {"seconds": round(py_s, 2), "records_per_s": round(commits / py_s)},
                    "spark_over_python": round(py_s / spark_s, 2),
                }
            )
            shutil.rmtree(data, ignore_errors=True)
        result["runs"] = runs
        spark.stop()
    finally:
        if args.work_dir is None:
            shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
