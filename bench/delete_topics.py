"""How long a DeleteTopics of many topics holds the broker's event loop (issue 32: while
librdkafka's test 0045 deleted 100 topics, a ConsumerGroupHeartbeat of another group waited
over a second).

A broker starts on a temp data dir; ``--topics`` topics of ``--partitions`` partitions are
created; one consumer-protocol member of another group (topic ``keep``) heartbeats in a loop
from its own connection through a raw client, one request in flight at a time, while one
DeleteTopics removes every topic. ``stall_ms`` is the slowest heartbeat round trip seen while
the deletion was under way, ``idle_ms`` the slowest before it, ``delete_ms`` the DeleteTopics
round trip.

    .venv/bin/python bench/delete_topics.py [--topics 100] [--partitions 4] [--rounds 3]

Prints one JSON document. Wall-clock figures on a shared machine: orders of magnitude.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kcoord.protocol.apis import ApiKey  # noqa: E402
from tests.integration.harness import BrokerProcess  # noqa: E402
from tests.integration.rawclient import RawClient  # noqa: E402


class Heartbeater(threading.Thread):
    """One member of group ``other`` heartbeating as fast as it is answered; records the
    slowest round trip since the last :meth:`reset`."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.client = RawClient(port, timeout=60)
        self.lock = threading.Lock()
        self.window_max = 0.0
        self.stop = threading.Event()
        self.beats = 0
        first = self._beat(member_id="bench-member", member_epoch=0, subscribed_topic_names=["keep"],
                           rebalance_timeout=30000, topic_partitions=[])
        self.epoch = first.member_epoch

    def _beat(self, **fields: Any) -> Any:
        r = self.client.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, 0, group_id="other", **fields)
        assert r.error_code == 0, r
        return r

    def run(self) -> None:
        while not self.stop.is_set():
            started = time.perf_counter()
            r = self._beat(member_id="bench-member", member_epoch=self.epoch, topic_partitions=None)
            rtt = time.perf_counter() - started
            self.epoch = r.member_epoch
            with self.lock:
                self.window_max = max(self.window_max, rtt)
                self.beats += 1

    def reset(self) -> None:
        with self.lock:
            self.window_max = 0.0

    def read(self) -> float:
        with self.lock:
            return self.window_max


def one_round(broker: BrokerProcess, hb: Heartbeater, topics: int, partitions: int) -> dict[str, float]:
    names = [f"del-{i:04d}" for i in range(topics)]
    with RawClient(broker.port, timeout=120) as c:
        r = c.request(ApiKey.CREATE_TOPICS, 5, timeout=60000, validate_only=False, topics=[
            {"name": n, "num_partitions": partitions, "replication_factor": 1, "assignments": [],
             "configs": []} for n in names
        ])
        assert all(t.error_code == 0 for t in r.topics), r
        time.sleep(0.5)  # a quiet window for the idle figure, nothing waited on
        idle = hb.read()
        hb.reset()
        started = time.perf_counter()
        r = c.request(ApiKey.DELETE_TOPICS, 4, topic_names=names, timeout=60000)
        delete_s = time.perf_counter() - started
        assert all(t.error_code == 0 for t in r.responses), r
        stall = hb.read()
        hb.reset()
    return {"idle_ms": idle * 1000, "stall_ms": stall * 1000, "delete_ms": delete_s * 1000}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--topics", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        broker = BrokerProcess(Path(tmp) / "data", {"group.consumer.session.timeout.ms": 45000}).start()
        try:
            with RawClient(broker.port) as c:
                c.request(ApiKey.CREATE_TOPICS, 5, timeout=30000, validate_only=False, topics=[
                    {"name": "keep", "num_partitions": 1, "replication_factor": 1, "assignments": [],
                     "configs": []}
                ])
            hb = Heartbeater(broker.port)
            hb.start()
            rounds = [one_round(broker, hb, args.topics, args.partitions) for _ in range(args.rounds)]
            hb.stop.set()
            hb.join(10)
        finally:
            broker.stop()
    print(json.dumps({
        "bench": "delete_topics",
        "topics": args.topics,
        "partitions": args.partitions,
        "rounds": rounds,
        "max_stall_ms": round(max(r["stall_ms"] for r in rounds), 1),
        "median_delete_ms": round(sorted(r["delete_ms"] for r in rounds)[len(rounds) // 2], 1),
    }, indent=1))


if __name__ == "__main__":
    main()
