"""Offset commit throughput and __consumer_offsets load time, against a real kcoord broker.

1. Commit throughput (fsync on): C committers (1 and 16), each on its own connection with one
   request in flight, commit 64 partition offsets per OffsetCommit (v8, standalone group) for a
   fixed time; offsets/s and p50/p99 latency.
2. Start-up load: a data dir whose __consumer_offsets partitions hold 1,000,000 commit records
   over 10,000 keys, written directly in Kafka's format; the broker's load time (its own log
   line) before and after compacting the partitions.

    .venv/bin/python bench/offsets.py [--seconds 5] [--records 1000000] [--keys 10000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import struct
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kcoord.coordinator.schemas import (  # noqa: E402
    OffsetCommitKey,
    OffsetCommitValue,
    encode_key,
    encode_offset_commit_value,
)
from kcoord.protocol.codec import encode_body, request_type  # noqa: E402
from kcoord.protocol.javahash import partition_for  # noqa: E402
from kcoord.protocol.record_encoding import build_batch  # noqa: E402
from kcoord.protocol.responses import build  # noqa: E402
from kcoord.storage.compaction import compact  # noqa: E402
from kcoord.storage.log import PartitionLog  # noqa: E402
from tests.integration.clients import create_topic  # noqa: E402
from tests.integration.harness import BrokerProcess, wait_for  # noqa: E402

PARTITIONS_PER_COMMIT = 64


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _commit_frame(group: str, correlation: int) -> bytes:
    body = encode_body(
        build(
            request_type(8, 8),
            group_id=group,
            generation_id_or_member_epoch=-1,
            member_id="",
            group_instance_id=None,
            topics=[
                dict(
                    name="bench",
                    partitions=[
                        dict(partition_index=p, committed_offset=correlation * 100 + p,
                             committed_leader_epoch=-1, committed_metadata=None)
                        for p in range(PARTITIONS_PER_COMMIT)
                    ],
                )
            ],
        )
    )
    cid = b"bench"
    header = struct.pack(">hhih", 8, 8, correlation, len(cid)) + cid + b"\x00"
    return struct.pack(">i", len(header) + len(body)) + header + body


async def _committer(port: int, group: str, until: float, latencies: list[float]) -> int:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    frames = [_commit_frame(group, i) for i in range(1, 51)]  # pre-encoded: the client stays light
    done = 0
    try:
        while time.perf_counter() < until:
            frame = frames[done % len(frames)]
            start = time.perf_counter()
            writer.write(frame)
            size = struct.unpack(">i", await reader.readexactly(4))[0]
            payload = await reader.readexactly(size)
            latencies.append(time.perf_counter() - start)
            # every partition error code must be 0: the last 2 bytes of each partition entry
            assert payload.count(b"\x00\x00") > 0
            done += 1
    finally:
        writer.close()
    return done * PARTITIONS_PER_COMMIT


def commit_throughput(broker: BrokerProcess, committers: int, seconds: float) -> dict[str, object]:
    latencies: list[float] = []

    async def run() -> int:
        until = time.perf_counter() + seconds
        counts = await asyncio.gather(
            *(_committer(broker.port, f"bench-{committers}-{i}", until, latencies) for i in range(committers))
        )
        return sum(counts)

    started = time.perf_counter()
    total = asyncio.run(run())
    elapsed = time.perf_counter() - started
    return {
        "committers": committers,
        "partitions_per_commit": PARTITIONS_PER_COMMIT,
        "offsets_per_s": round(total / elapsed),
        "commits_per_s": round(len(latencies) / elapsed),
        "p50_ms": round(_percentile(latencies, 0.50) * 1000, 2),
        "p99_ms": round(_percentile(latencies, 0.99) * 1000, 2),
    }


def write_offsets_log(data_dir: Path, records: int, keys: int, segment_bytes: int) -> None:
    """1,000,000 commits over ``keys`` (group, topic, partition) keys, 100 records per batch."""
    groups = max(1, keys // 100)
    logs = {
        p: PartitionLog.open(data_dir / f"__consumer_offsets-{p}", segment_bytes=segment_bytes, fsync=False)
        for p in range(50)
    }
    pending: dict[int, list[tuple[bytes, bytes, tuple[()], int]]] = {p: [] for p in logs}
    now = int(time.time() * 1000)
    for i in range(records):
        k = i % keys
        group = f"group-{k % groups}"
        key = encode_key(OffsetCommitKey(group, "topic", k // groups))
        value = encode_offset_commit_value(OffsetCommitValue(offset=i, metadata="", commit_timestamp=now))
        part = partition_for(group, 50)
        pending[part].append((key, value, (), now))
        if len(pending[part]) == 100:
            logs[part].append(build_batch(pending[part]))
            pending[part] = []
    for part, rest in pending.items():
        if rest:
            logs[part].append(build_batch(rest))
    for plog in logs.values():
        plog.close()


def load_seconds(broker: BrokerProcess) -> float:
    line = wait_for(
        lambda: re.search(r"loaded __consumer_offsets: .* (\d+) records in ([0-9.]+) s", broker.log()),
        600,
        what="load line",
    )
    assert isinstance(line, re.Match)
    return float(line.group(2))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=10_000)
    args = parser.parse_args()
    out: dict[str, object] = {"benchmark": "offsets", "fsync": True}

    with tempfile.TemporaryDirectory() as tmp:
        broker = BrokerProcess(Path(tmp) / "commits").start()
        try:
            create_topic(broker.bootstrap, "bench", PARTITIONS_PER_COMMIT)
            commit_throughput(broker, 4, 1.0)  # warm-up: creates the offsets topic
            out["commit"] = [commit_throughput(broker, c, args.seconds) for c in (1, 16)]
        finally:
            broker.stop()

        data = Path(tmp) / "load"
        started = time.perf_counter()
        write_offsets_log(data, args.records, args.keys, segment_bytes=1 << 20)
        written = time.perf_counter() - started
        broker = BrokerProcess(data, {"log.cleaner.enable": "false"}).start()
        try:
            before = load_seconds(broker)
        finally:
            broker.stop()
        size_before = sum(f.stat().st_size for f in data.glob("__consumer_offsets-*/*.log"))
        started = time.perf_counter()
        for p in range(50):
            with PartitionLog.open(data / f"__consumer_offsets-{p}", segment_bytes=1 << 20) as plog:
                compact(plog, now_ms=int(time.time() * 1000))
        compaction_s = time.perf_counter() - started
        size_after = sum(f.stat().st_size for f in data.glob("__consumer_offsets-*/*.log"))
        broker = BrokerProcess(data, {"log.cleaner.enable": "false"})
        broker.log_path = Path(tmp) / "after.log"
        broker.start()
        try:
            after = load_seconds(broker)
        finally:
            broker.stop()
        out["load"] = {
            "records": args.records,
            "keys": args.keys,
            "write_s": round(written, 2),
            "before_compaction": {
                "bytes": size_before,
                "seconds": round(before, 3),
                "records_per_s": round(args.records / before),
            },
            "compaction_s": round(compaction_s, 2),
            "after_compaction": {
                "bytes": size_after,
                "seconds": round(after, 3),
                "equivalent_records_per_s": round(args.records / after),
            },
        }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
