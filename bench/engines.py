"""The files engine and the PostgreSQL engine side by side: the same broker, the same workloads,
one JSON.

For each engine a fresh broker (PostgreSQL: a throwaway server from Debian's packages started
by tests/pg_server.py, its default configuration, fsync and synchronous commit on; files: fsync
on, the default) and, one after the other:

* ``commit``: OffsetCommit of 64 partitions per request with 1 and 16 committers, one request
  in flight each (bench/compare.py's scenario): offsets/s, the round trip's percentiles, broker
  CPU per offset. Issue 27's target for PostgreSQL on a 2-core machine: at least 100,000
  offsets/s with p99 under 20 ms at 16 committers.
* ``heartbeat``: steady Heartbeats of joined members over 8 connections, 16 in flight each
  (bench/compare.py's ``raw``): broker CPU per request. Heartbeats write nothing, so the engine
  should not show here.
* ``produce_fetch``: confluent-kafka, acks=all, 1 KB messages over 3 partitions of the
  bench topic, then read back from the start (bench/produce_fetch.py).

``broker_cpu`` figures include the broker's database client work, not PostgreSQL's own CPU,
which is reported apart (``postgres_cpu_s``: the server's processes, over the whole run).

    .venv/bin/python bench/engines.py [--seconds 5] [--messages 100000] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent))
sys.path.insert(0, str(BENCH))

import compare  # noqa: E402
from _peers import cpu_seconds  # noqa: E402
from produce_fetch import measure  # noqa: E402

from tests.pg_server import PostgresServer, ensure_installed  # noqa: E402

PRODUCE_PARTITIONS = 3


def _tree_cpu(root_pid: int) -> float:
    """CPU seconds of ``root_pid`` (PostgreSQL's postmaster), of its children running (the
    backends) and of those it reaped (their times add to its own children's fields)."""
    total = 0.0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if int(entry.name) == root_pid:
                total += (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")
            if int(entry.name) == root_pid or int(fields[1]) == root_pid:
                total += cpu_seconds(int(entry.name))
        except (OSError, ValueError):
            continue
    return total


def run_engine(name: str, tmp: Path, args: argparse.Namespace, url: str | None) -> dict[str, Any]:
    settings: dict[str, object] = {"storage.url": url} if url else {}
    broker = compare.start("kcoord", tmp, name, settings)
    try:
        out: dict[str, Any] = {"commit": compare.commit(broker, args)}
        raw = argparse.Namespace(**{**vars(args), "apis": "Heartbeat", "conns": "8"})
        out["heartbeat"] = compare.raw(broker, raw)
        out["produce_fetch"] = measure(
            broker.bootstrap, broker.pid, args.messages, 1024, PRODUCE_PARTITIONS
        )
        return out
    finally:
        broker.stop()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=5.0, help="per commit / heartbeat measurement")
    p.add_argument("--messages", type=int, default=100_000, help="produced, then fetched")
    p.add_argument("--out", help="also write the JSON here")
    args = p.parse_args()
    # What compare.commit and compare.raw read.
    args.committers = "1,16"
    args.max_requests = 5_000_000
    args.depth = 16
    args.raw_session_timeout_ms = 30_000
    args.join_rebalance_timeout_ms = 1000

    bindir = ensure_installed()
    if isinstance(bindir, str):
        sys.exit(bindir)
    result: dict[str, Any] = {
        "benchmark": "engines",
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "engines": {},
    }
    with tempfile.TemporaryDirectory() as tmp:
        result["engines"]["files"] = run_engine("files", Path(tmp), args, None)
        server = PostgresServer(bindir)
        server.start()
        try:
            assert server.process is not None
            cpu0 = _tree_cpu(server.process.pid)
            pg = run_engine("postgresql", Path(tmp), args, server.database())
            pg["postgres_cpu_s"] = round(_tree_cpu(server.process.pid) - cpu0, 2)
            result["engines"]["postgresql"] = pg
        finally:
            server.stop()
    files, pg = result["engines"]["files"], result["engines"]["postgresql"]
    at16 = next(c for c in pg["commit"] if c["committers"] == 16)
    result["target_postgresql_commit_16"] = {
        "offsets_per_s": at16["offsets_per_s"],
        "p99_ms": (at16["latency_ms"] or {}).get("p99"),
        "met": at16["offsets_per_s"] >= 100_000 and ((at16["latency_ms"] or {}).get("p99") or 1e9) < 20,
    }
    result["heartbeat_cpu_us_per_request"] = {
        "files": files["heartbeat"][0]["broker_cpu_us_per_op"],
        "postgresql": pg["heartbeat"][0]["broker_cpu_us_per_op"],
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
