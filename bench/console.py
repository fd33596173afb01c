"""How fast the web console's groups page is with 1,000 groups over 10,000 partitions.

The broker starts from a data directory written directly in Kafka's format (as
bench/loop_stalls.py does): ``--groups`` Stable classic groups of two members each (long
sessions), each owning and committing ``--per-group`` partitions of its own, over topics of 100
partitions created through the Kafka protocol, with one record produced to every partition so
that every partition has lag 1 (and a lag in seconds to read). Then:

- ``api_ms``: round trips of ``GET /api/groups`` (the first, cold: record timestamps not yet
  read; then warm) and of one ``/api/groups/<group>``;
- in headless Chromium (Debian's chromium, chromedriver): ``first_paint_ms``, from navigation
  start to the frame after the groups table (every group) was rendered; then, for later polls,
  ``fetch_ms`` (request and JSON parse), ``render_ms`` (building the table) and ``paint_ms``
  (poll start to the painted frame); and a sort by lag (click to painted frame).

    .venv/bin/python bench/console.py [--groups 1000] [--per-group 10] [--out FILE]

Prints one JSON document. Wall-clock figures on a shared machine: orders of magnitude.
"""

from __future__ import annotations

import argparse
import json
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kcoord.coordinator.schemas import (  # noqa: E402
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    encode_group_metadata_value,
    encode_key,
    encode_offset_commit_value,
)
from kcoord.protocol.javahash import partition_for  # noqa: E402
from kcoord.protocol.record_encoding import build_batch  # noqa: E402
from kcoord.storage.log import PartitionLog  # noqa: E402
from tests.integration.browser import chromium  # noqa: E402
from tests.integration.harness import BrokerProcess, free_port, wait_for  # noqa: E402

TOPIC_PARTITIONS = 100


def group_name(i: int) -> str:
    return f"group-{i:05d}"


def owned(i: int, per_group: int) -> list[tuple[str, int]]:
    first = i * per_group
    return [(f"topic-{(first + k) // TOPIC_PARTITIONS:03d}", (first + k) % TOPIC_PARTITIONS) for k in range(per_group)]


def assignment(parts: list[tuple[str, int]]) -> bytes:
    by_topic: dict[str, list[int]] = {}
    for t, p in parts:
        by_topic.setdefault(t, []).append(p)
    out = struct.pack(">hi", 0, len(by_topic))
    for t, ps in by_topic.items():
        out += struct.pack(">h", len(t)) + t.encode() + struct.pack(f">i{len(ps)}i", len(ps), *ps)
    return out + struct.pack(">i", -1)


def subscription(topics: list[str]) -> bytes:
    out = struct.pack(">hi", 0, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    return out + struct.pack(">i", -1)


def write_groups(data_dir: Path, groups: int, per_group: int) -> None:
    logs = {
        p: PartitionLog.open(data_dir / f"__consumer_offsets-{p}", segment_bytes=100 << 20, fsync=False)
        for p in range(50)
    }
    now = int(time.time() * 1000)
    committed = encode_offset_commit_value(OffsetCommitValue(offset=0, metadata="", commit_timestamp=now))
    for i in range(groups):
        gid = group_name(i)
        parts = owned(i, per_group)
        half = len(parts) // 2
        members = tuple(
            MemberMetadata(
                member_id=f"{gid}-m{k}",
                group_instance_id=None,
                client_id=f"m{k}",
                client_host="/127.0.0.1",
                rebalance_timeout=300_000,
                session_timeout=1_800_000,
                subscription=subscription(sorted({t for t, _ in parts})),
                assignment=assignment(share),
            )
            for k, share in enumerate((parts[:half], parts[half:]))
        )
        value = GroupMetadataValue("consumer", 1, "range", members[0].member_id, now, members)
        records = [(encode_key(GroupMetadataKey(gid)), encode_group_metadata_value(value), (), now)]
        records += [(encode_key(OffsetCommitKey(gid, t, p)), committed, (), now) for t, p in parts]
        logs[partition_for(gid, 50)].append(build_batch(records))
    for plog in logs.values():
        plog.close()


def get(port: int, path: str) -> tuple[float, bytes]:
    started = time.perf_counter()
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=60) as r:
        body = r.read()
    return (time.perf_counter() - started) * 1000, body


def stats(values: list[float]) -> dict[str, float]:
    values = sorted(values)
    return {
        "n": len(values),
        "median": round(statistics.median(values), 1),
        "max": round(values[-1], 1),
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic
    from selenium.webdriver.common.by import By

    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=Path(__file__).parent
    ).stdout.strip()
    partitions = args.groups * args.per_group
    topics = [f"topic-{t:03d}" for t in range((partitions + TOPIC_PARTITIONS - 1) // TOPIC_PARTITIONS)]
    out: dict[str, Any] = {
        "benchmark": "console",
        "commit": commit,
        "groups": args.groups,
        "partitions": partitions,
        "members_per_group": 2,
    }
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        write_groups(data, args.groups, args.per_group)
        settings = {
            "max.broker.partitions": partitions + 1000,
            "max.partitions.per.request": partitions,
            "log.flush.interval.messages": 10_000,
            "log.cleaner.enable": "false",
        }
        broker = BrokerProcess(data, settings, metrics_port=free_port()).start(timeout=120)
        port = broker.metrics_port
        assert port is not None
        driver = None
        try:
            wait_for(lambda: "loaded __consumer_offsets:" in broker.log(), 600, what="load")
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            for f in admin.create_topics([NewTopic(t, TOPIC_PARTITIONS, 1) for t in topics]).values():
                f.result(120)
            producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 50})
            for t in topics:
                for p in range(TOPIC_PARTITIONS):
                    producer.produce(t, b"v", partition=p)
                producer.poll(0)
            assert producer.flush(120) == 0

            cold, body = get(port, "/api/groups")
            listed = json.loads(body)
            assert listed["total"] == args.groups and len(listed["groups"]) == args.groups
            # acknowledged means fsynced: every partition shows its record as lag
            assert all(g["lag"] == args.per_group and g["members"] == 2 for g in listed["groups"])
            warm = [get(port, "/api/groups")[0] for _ in range(10)]
            one = [get(port, f"/api/groups/{group_name(7)}")[0] for _ in range(10)]
            out["api_ms"] = {
                "groups_cold": round(cold, 1),
                "groups_warm": stats(warm),
                "groups_bytes": len(body),
                "one_group": stats(one),
            }
            print("api", json.dumps(out["api_ms"]), file=sys.stderr, flush=True)

            driver = chromium()
            driver.get(f"http://127.0.0.1:{port}/")

            def painted(n: int) -> list[dict[str, Any]]:
                t = driver.execute_script("return window.consoleTimings;") or []
                done = [x for x in t if "painted_ms" in x]
                return done if len(done) >= n else []

            wait_for(lambda: painted(1), 60, what="the first painted groups page")
            rows = len(driver.find_elements(By.CSS_SELECTOR, "#groups-table tbody tr"))
            assert rows == args.groups, rows
            first = painted(1)[0]
            wait_for(lambda: painted(6), 60, what="five more polls")
            later = painted(6)[1:6]
            header = driver.find_element(By.CSS_SELECTOR, 'th[data-key="lag"]')
            clicked = driver.execute_script(
                "const t0 = performance.now(); arguments[0].click();"
                "return new Promise(ok => requestAnimationFrame(() => setTimeout(() => ok(performance.now() - t0), 0)));",
                header,
            )
            out["browser_ms"] = {
                "first_paint_ms": round(first["painted_ms"], 1),
                "first_fetch_ms": round(first["fetch_ms"], 1),
                "first_render_ms": round(first["render_ms"], 1),
                "poll_fetch_ms": stats([x["fetch_ms"] for x in later]),
                "poll_render_ms": stats([x["render_ms"] for x in later]),
                "poll_paint_ms": stats([x["painted_ms"] - x["started_ms"] for x in later]),
                "sort_click_to_paint_ms": round(clicked, 1),
                "rows": rows,
            }
            out["browser"] = driver.capabilities.get("browserVersion")
            print("browser", json.dumps(out["browser_ms"]), file=sys.stderr, flush=True)
        finally:
            if driver is not None:
                driver.quit()
            broker.stop()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--groups", type=int, default=1000)
    parser.add_argument("--per-group", type=int, default=10)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    result = run(args)
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
