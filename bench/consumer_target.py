"""How long a consumer group (KIP-848) holds the coordinator when its target is recomputed.

The assignor alone is ``bench/assignors.py``; this times whole ConsumerGroupHeartbeats
through a GroupShard (sans-IO, no broker): the member update, the epoch bump, the assignor
over every member, the target records of the members whose target changed, and the
reconciliation. For 1,000 members over 10,000 partitions (100 topics of 100, and one topic of
10,000), all subscribed to every topic: the heartbeat of a 1,001st member joining, the leave
of a member, and the next heartbeat (which computes the target after the leave); each the best
and the median of ``--repeat`` runs, with the records written.

    .venv/bin/python bench/consumer_target.py [--repeat 5] [--members 1000]

Prints one JSON document. Figures are wall-clock on a shared machine.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kcoord.coordinator.config import GroupConfig  # noqa: E402
from kcoord.coordinator.consumer.messages import ConsumerGroupHeartbeatRequest as Heartbeat  # noqa: E402
from kcoord.coordinator.consumer.topics import StaticTopics  # noqa: E402
from kcoord.coordinator.shard import GroupShard  # noqa: E402


def one_run(topics: dict[str, int], members: int) -> dict[str, tuple[float, int]]:
    view = StaticTopics(topics)
    shard = GroupShard(0, GroupConfig(consumer_session_timeout_ms=10**9), topics=view)
    shard.finish_loading(0)
    names = tuple(topics)

    def join(member: str) -> tuple[float, int]:
        req = Heartbeat("g", member, 0, rebalance_timeout_ms=1000, subscribed_topic_names=names, topic_partitions=())
        started = time.perf_counter()
        out = shard.consumer_group_heartbeat(member, req, 0)
        return (time.perf_counter() - started) * 1000, len(out.records)

    for i in range(members):
        join(f"member-{i:05d}")
    out: dict[str, tuple[float, int]] = {"join": join("late")}
    started = time.perf_counter()
    left = shard.consumer_group_heartbeat("leave", Heartbeat("g", "late", -1), 0)
    out["leave"] = ((time.perf_counter() - started) * 1000, len(left.records))
    group = shard.consumer_group("g")
    assert group is not None
    first = group.members["member-00000"]
    owned = tuple((t, tuple(ps)) for t, ps in first.assigned.items())
    req = Heartbeat("g", first.member_id, first.member_epoch, topic_partitions=owned)
    started = time.perf_counter()
    after = shard.consumer_group_heartbeat("next", req, 0)
    out["heartbeat_after_leave"] = ((time.perf_counter() - started) * 1000, len(after.records))
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--members", type=int, default=1000)
    args = parser.parse_args()
    shapes = {
        "100 topics x 100 partitions": {f"topic-{i:03d}": 100 for i in range(100)},
        "1 topic x 10000 partitions": {"topic": 10000},
    }
    results = []
    for shape, topics in shapes.items():
        runs = [one_run(topics, args.members) for _ in range(args.repeat)]
        for event in ("join", "leave", "heartbeat_after_leave"):
            times = [r[event][0] for r in runs]
            results.append(
                {
                    "shape": shape,
                    "members": args.members,
                    "event": event,
                    "best_ms": round(min(times), 2),
                    "median_ms": round(statistics.median(times), 2),
                    "records": runs[0][event][1],
                }
            )
    print(
        json.dumps(
            {
                "benchmark": "consumer_target",
                "date": datetime.date.today().isoformat(),
                "repeat": args.repeat,
                "results": results,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
