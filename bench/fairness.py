"""A healthy member's Heartbeat latency while another client floods the broker.

Starts a kcoord broker on a free loopback port with a temporary data dir. A member joins a group
(raw JoinGroup + SyncGroup) and heartbeats every 5 ms on its own connection, timing each round
trip. Meanwhile, in another process, a flooding client runs one scenario at a time:

* ``idle``: no flood (the baseline);
* ``pipelined_read``: 100,000 Metadata requests written at once, answers read as they come;
* ``pipelined_unread``: 100,000 Metadata requests written at once, nothing read for 10 s
  (then all answers read and counted);
* ``fetch_unread``: 2,000 pipelined 1 MB Fetches, nothing read for 10 s.

Prints JSON: per scenario the heartbeat latency (p50, p99, max in ms, count), how long the flood
took, the answers it got, and the broker's resident memory (peak so far and now).

    .venv/bin/python bench/fairness.py [--requests 100000] [--hold 10]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import socket
import statistics
import struct
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._wire import Conn, frame, join, run  # noqa: E402
from tests.integration.clients import create_topic, produce_confluent  # noqa: E402
from tests.integration.harness import BrokerProcess  # noqa: E402

HEARTBEAT_EVERY = 0.005


def _status_mb(pid: int, field: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return round(int(line.split()[1]) / 1024, 1)
    return -1.0


def _metadata_frames(count: int) -> bytes:
    return b"".join(
        frame(3, 12, i, topics=[dict(name="bulk", topic_id=None)], allow_auto_topic_creation=False,
              include_topic_authorized_operations=False)
        for i in range(count)
    )


def _fetch_frames(count: int) -> bytes:
    one = [
        dict(topic="bulk", partitions=[dict(partition=0, current_leader_epoch=-1, fetch_offset=0,
                                            last_fetched_epoch=-1, log_start_offset=-1,
                                            partition_max_bytes=1 << 20)])
    ]
    return b"".join(
        frame(1, 12, i, cluster_id=None, replica_id=-1, max_wait=0, min_bytes=0, max_bytes=1 << 20,
              isolation_level=0, session_id=0, session_epoch=-1, topics=one,
              forgotten_topics_data=[], rack_id="")
        for i in range(count)
    )


def _read_answers(sock: socket.socket, count: int, timeout: float) -> int:
    sock.settimeout(timeout)
    got = 0
    buf = bytearray()
    try:
        while got < count:
            chunk = sock.recv(1 << 20)
            if not chunk:
                break
            buf += chunk
            pos = 0
            while len(buf) - pos >= 4:
                (size,) = struct.unpack_from(">i", buf, pos)
                if len(buf) - pos - 4 < size:
                    break
                pos += 4 + size
                got += 1
            del buf[:pos]
    except TimeoutError:
        pass
    return got


def _send_quietly(sock: socket.socket, data: bytes) -> None:
    with contextlib.suppress(OSError):  # closed once the flood is over
        sock.sendall(data)


def flood(port: int, scenario: str, requests: int, hold: float, result: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    """The flooding client (runs in its own process)."""
    if scenario == "fetch_unread":
        data, count = _fetch_frames(2000), 2000
    else:
        data, count = _metadata_frames(requests), requests
    sock = socket.create_connection(("127.0.0.1", port))
    started = time.perf_counter()
    threading.Thread(target=_send_quietly, args=(sock, data), daemon=True).start()
    if scenario == "pipelined_read":
        got = _read_answers(sock, count, 120)
    else:
        time.sleep(hold)  # reading nothing: the broker must stop and wait, not pile up
        got = _read_answers(sock, count, 120 if scenario == "pipelined_unread" else 5)
    elapsed = time.perf_counter() - started
    sock.close()
    result.put({"flood_seconds": round(elapsed, 3), "answers": got, "requests": count})


async def heartbeats(port: int, group: str, stop: asyncio.Event) -> list[float]:
    conn = await Conn.open(port)
    member = await join(conn, group, 30000, 30000)
    latencies: list[float] = []
    correlation = 1000
    try:
        while not stop.is_set():
            correlation += 1
            t0 = time.perf_counter()
            conn.writer.write(member.heartbeat_frame(correlation))
            size = struct.unpack(">i", await conn.reader.readexactly(4))[0]
            await conn.reader.readexactly(size)
            latencies.append((time.perf_counter() - t0) * 1000)
            await asyncio.sleep(HEARTBEAT_EVERY)
    finally:
        conn.close()
    return latencies


async def scenario(broker: BrokerProcess, name: str, requests: int, hold: float) -> dict[str, object]:
    stop = asyncio.Event()
    hb = asyncio.ensure_future(heartbeats(broker.port, f"fair-{name}", stop))
    await asyncio.sleep(0.5)
    flood_result: dict[str, object] = {}
    if name == "idle":
        await asyncio.sleep(3)
    else:
        spawn = multiprocessing.get_context("spawn")
        queue: multiprocessing.Queue = spawn.Queue()  # type: ignore[type-arg]
        proc = spawn.Process(target=flood, args=(broker.port, name, requests, hold, queue))
        proc.start()
        while proc.is_alive():
            await asyncio.sleep(0.1)
        flood_result = queue.get(timeout=5)
    stop.set()
    lat = sorted(await hb)
    assert broker.proc is not None
    return {
        "scenario": name,
        "heartbeats": len(lat),
        "heartbeat_p50_ms": round(statistics.median(lat), 2),
        "heartbeat_p99_ms": round(lat[min(len(lat) - 1, int(len(lat) * 0.99))], 2),
        "heartbeat_max_ms": round(lat[-1], 2),
        **flood_result,
        "broker_rss_peak_mb": _status_mb(broker.proc.pid, "VmHWM"),
        "broker_rss_mb": _status_mb(broker.proc.pid, "VmRSS"),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=100_000)
    parser.add_argument("--hold", type=float, default=10.0, help="seconds the unread floods wait")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        broker = BrokerProcess(Path(tmp) / "data", {"group.initial.rebalance.delay.ms": 0}).start()
        try:
            create_topic(broker.bootstrap, "bulk", 1)
            produce_confluent(broker.bootstrap, "bulk", [(0, b"k", b"x" * 100_000)] * 12, "none")
            results = [
                run(scenario(broker, name, args.requests, args.hold))
                for name in ("idle", "pipelined_read", "pipelined_unread", "fetch_unread")
            ]
        finally:
            broker.stop()
    print(json.dumps({"benchmark": "fairness", "requests": args.requests, "results": results}, indent=1))


if __name__ == "__main__":
    main()
