"""Rebalance latency with real confluent-kafka consumers against a real kcoord broker.

For 1, 4, 16 and 64 consumers, classic eager (range), classic cooperative (cooperative-sticky)
and the KIP-848 consumer protocol (consumer:uniform, consumer:range: the broker assigns): the time
from subscribing until every partition is owned by exactly one member; then the rebalance after
one more consumer joins and after one leaves (clean close), measured until the assignment is
complete and disjoint again. group.initial.rebalance.delay.ms=0; heartbeat interval 500 ms
(heartbeat.interval.ms for classic members, group.consumer.heartbeat.interval.ms for the consumer
protocol). Prints JSON, including the broker's CPU seconds per rebalance and the targets:
classic, one interval + 200 ms; consumer protocol, two intervals + 200 ms after a join and one
interval + 200 ms after a leave.

    .venv/bin/python bench/rebalance.py [--sizes 1,4,16,64] [--partitions 128]
        [--strategies range,cooperative-sticky,consumer:uniform]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._peers import cpu_seconds  # noqa: E402
from tests.integration.clients import create_topic  # noqa: E402
from tests.integration.groups import ConfluentMember, Member, balanced  # noqa: E402
from tests.integration.harness import BrokerProcess  # noqa: E402

HEARTBEAT_MS = 500


def time_until_balanced(members: list[Member], partitions: int, timeout: float = 120.0) -> float:
    start = time.perf_counter()
    while time.perf_counter() - start < timeout:
        if balanced(members, partitions):
            return time.perf_counter() - start
        time.sleep(0.005)
    raise TimeoutError(f"no complete assignment after {timeout}s")


def run(broker: BrokerProcess, size: int, strategy: str, partitions: int, topic: str) -> dict[str, object]:
    assert broker.proc is not None
    pid = broker.proc.pid
    group = f"bench-{strategy}-{size}"
    extra = {"heartbeat.interval.ms": HEARTBEAT_MS}

    def member(i: int) -> ConfluentMember:
        name = f"{group}-{i}".replace(":", "-")
        if strategy.startswith("consumer:"):
            return ConfluentMember(
                broker.bootstrap, group, topic, name, strategy[9:], protocol="consumer"
            )
        return ConfluentMember(
            broker.bootstrap, group, topic, name, strategy, session_timeout_ms=30000, extra=extra
        )

    cpu0 = cpu_seconds(pid)
    members: list[Member] = [member(i) for i in range(size)]
    try:
        initial = time_until_balanced(members, partitions)
        time.sleep(2 * HEARTBEAT_MS / 1000)  # let follow-up rounds (cooperative) finish
        cpu1 = cpu_seconds(pid)
        members.append(member(size))
        after_join = time_until_balanced(members, partitions)
        time.sleep(2 * HEARTBEAT_MS / 1000)
        cpu2 = cpu_seconds(pid)
        leaving = members.pop(0)
        t0 = time.perf_counter()
        leaving.stop()  # close(): revoke, LeaveGroup
        # The leaver's partitions move once the others rejoin; timed from the close() call.
        time_until_balanced(members, partitions)
        after_leave = time.perf_counter() - t0
        cpu3 = cpu_seconds(pid)
    finally:
        for m in members:
            m.stop()
    return {
        "consumers": size,
        "strategy": strategy,
        "initial_assignment_s": round(initial, 3),
        "rebalance_after_join_s": round(after_join, 3),
        "rebalance_after_leave_s": round(after_leave, 3),
        "broker_cpu_s": {
            "initial": round(cpu1 - cpu0, 3),
            "join": round(cpu2 - cpu1, 3),
            "leave": round(cpu3 - cpu2, 3),
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="1,4,16,64")
    parser.add_argument("--partitions", type=int, default=128)
    parser.add_argument("--strategies", default="range,cooperative-sticky,consumer:uniform")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        broker = BrokerProcess(
            Path(tmp) / "data",
            {
                "group.initial.rebalance.delay.ms": 0,
                "group.min.session.timeout.ms": 1000,
                "group.consumer.heartbeat.interval.ms": HEARTBEAT_MS,
                "group.consumer.min.heartbeat.interval.ms": HEARTBEAT_MS,
                "group.consumer.session.timeout.ms": 30000,
                "group.consumer.min.session.timeout.ms": 1000,
            },
        ).start()
        try:
            create_topic(broker.bootstrap, "rebalance", args.partitions)
            for strategy in args.strategies.split(","):
                for size in sizes:
                    results.append(run(broker, size, strategy, args.partitions, "rebalance"))
                    print(json.dumps(results[-1]), file=sys.stderr)
        finally:
            broker.stop()
    interval = HEARTBEAT_MS / 1000
    for r in results:
        if str(r["strategy"]).startswith("consumer:"):
            r["target_join_s"], r["target_leave_s"] = 2 * interval + 0.2, interval + 0.2
        else:
            r["target_join_s"] = r["target_leave_s"] = interval + 0.2
        r["within_target"] = (
            r["rebalance_after_join_s"] <= r["target_join_s"]  # type: ignore[operator]
            and r["rebalance_after_leave_s"] <= r["target_leave_s"]  # type: ignore[operator]
        )
    print(
        json.dumps(
            {
                "benchmark": "rebalance",
                "client": "confluent-kafka",
                "heartbeat_interval_ms": HEARTBEAT_MS,
                "partitions": args.partitions,
                "results": results,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
