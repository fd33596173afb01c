"""The group side of a transaction against an in-process kcoord broker with fsync on: a
TxnOffsetCommit of 64 offsets (raw, v4, over TCP) followed by its COMMIT marker through
``GroupRuntime.write_txn_marker`` (in process, as the transaction coordinator calls it), against
a plain OffsetCommit (v8) of the same 64 offsets. One committer, one request in flight, for a
fixed time each; transactions (or commits) per second and p50/p99 latency.

This measures the offsets coordinator's share of a transaction only (no InitProducerId,
AddOffsetsToTxn or EndTxn round trips, no data-partition markers).

    .venv/bin/python bench/txn_offsets.py [--seconds 5] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kcoord.broker.app import Broker  # noqa: E402
from kcoord.broker.config import Config  # noqa: E402
from tests.integration.rawclient import RawClient  # noqa: E402

PARTITIONS = 64
GROUP = "bench-txn"


def _partitions(offset: int) -> list[dict[str, Any]]:
    return [
        dict(partition_index=p, committed_offset=offset, committed_leader_epoch=-1, committed_metadata="")
        for p in range(PARTITIONS)
    ]


def _plain(client: RawClient, offset: int) -> None:
    r = client.request(8, 8, group_id=GROUP, generation_id_or_member_epoch=-1, member_id="",
                       group_instance_id=None, topics=[dict(name="bench", partitions=_partitions(offset))])
    assert all(p.error_code == 0 for t in r.topics for p in t.partitions)


def _txn(client: RawClient, offset: int) -> None:
    r = client.request(28, 4, transactional_id="bench", group_id=GROUP, producer_id=1, producer_epoch=0,
                       generation_id=-1, member_id="", group_instance_id=None,
                       topics=[dict(name="bench", partitions=_partitions(offset))])
    assert all(p.error_code == 0 for t in r.topics for p in t.partitions)


def _summary(latencies: list[float], seconds: float) -> dict[str, float]:
    ordered = sorted(latencies)
    return {
        "per_second": round(len(ordered) / seconds, 1),
        "p50_ms": round(ordered[len(ordered) // 2] * 1000, 3),
        "p99_ms": round(ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] * 1000, 3),
    }


async def run(seconds: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        config = Config.load(port=0, data_dir=Path(tmp) / "data", environ={}, overrides=[])
        broker = Broker(config)
        await broker.start()
        try:
            broker.topics.create("bench", PARTITIONS)
            client = await asyncio.to_thread(RawClient, broker.bound_port)
            groups = broker.groups
            partition = groups.partition_of(GROUP)
            results: dict[str, Any] = {}
            for kind in ("plain", "txn"):
                latencies: list[float] = []
                started = time.perf_counter()
                n = 0
                while time.perf_counter() - started < seconds:
                    t0 = time.perf_counter()
                    if kind == "plain":
                        await asyncio.to_thread(_plain, client, n)
                    else:
                        await asyncio.to_thread(_txn, client, n)
                        error = await groups.write_txn_marker(partition, 1, 0, True, 0)
                        assert error == 0
                    latencies.append(time.perf_counter() - t0)
                    n += 1
                results[kind] = _summary(latencies, time.perf_counter() - started)
            client.close()
            results["added_p50_ms"] = round(results["txn"]["p50_ms"] - results["plain"]["p50_ms"], 3)
            return results
        finally:
            await broker.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    results = asyncio.run(run(args.seconds))
    text = json.dumps({"partitions_per_commit": PARTITIONS, **results}, indent=2)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
