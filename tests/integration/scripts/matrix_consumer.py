"""One consumer-group member of the client matrix, run as its own process, for any Python client.

Prints JSON lines on stdout: {"event": "started"} once, then {"event": "assigned", "partitions":
[...]} whenever its assignment changes. Appends "partition offset" per processed message to
--out (flushed before committing), commits synchronously after each poll that processed
something. SIGTERM closes it cleanly (LeaveGroup); SIGKILL is a crash.

    python matrix_consumer.py --client confluent|kafka-python|aiokafka --bootstrap B --group G
        --topic T --assignor A --out FILE [--instance-id I] [--session-ms MS]

For confluent, ``--assignor consumer:uniform`` (or ``consumer:range``) uses the KIP-848
consumer protocol with that server assignor.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import sys
import traceback
from typing import Any

stopping = False


def _on_term(_signum: int, _frame: object) -> None:
    global stopping
    stopping = True


def _say(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


class Reporter:
    def __init__(self, out_path: str) -> None:
        self.out = open(out_path, "a")  # noqa: SIM115 - lives as long as the process
        self.assignment: list[int] | None = None

    def assigned(self, partitions: list[int]) -> None:
        partitions = sorted(partitions)
        if partitions != self.assignment:
            self.assignment = partitions
            _say("assigned", partitions=partitions)

    def processed(self, partition: int, offset: int) -> None:
        self.out.write(f"{partition} {offset}\n")


def run_confluent(a: argparse.Namespace, rep: Reporter) -> None:
    from confluent_kafka import Consumer, KafkaException

    conf: dict[str, Any] = {
        "bootstrap.servers": a.bootstrap,
        "group.id": a.group,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
    }
    if a.assignor.startswith("consumer:"):  # KIP-848: the broker's assignor, session, heartbeat
        conf.update({"group.protocol": "consumer", "group.remote.assignor": a.assignor[9:]})
    else:
        conf.update(
            {
                "partition.assignment.strategy": a.assignor,
                "session.timeout.ms": a.session_ms,
                "heartbeat.interval.ms": 300,
            }
        )
    if a.instance_id:
        conf["group.instance.id"] = a.instance_id
    c = Consumer(conf)
    c.subscribe([a.topic])
    _say("started")
    while not stopping:
        messages = c.consume(num_messages=100, timeout=0.1)
        done = False
        for m in messages:
            if not m.error():
                rep.processed(m.partition(), m.offset())
                done = True
        rep.assigned([tp.partition for tp in c.assignment()])
        if done:
            rep.out.flush()
            with contextlib.suppress(KafkaException):
                c.commit(asynchronous=False)
    c.close()


def run_kafka_python(a: argparse.Namespace, rep: Reporter) -> None:
    from kafka import KafkaConsumer
    from kafka.coordinator.assignors.range import RangePartitionAssignor
    from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
    from kafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor

    assignors = {
        "range": RangePartitionAssignor,
        "roundrobin": RoundRobinPartitionAssignor,
        "sticky": StickyPartitionAssignor,
    }
    c = KafkaConsumer(
        bootstrap_servers=a.bootstrap,
        group_id=a.group,
        partition_assignment_strategy=[assignors[a.assignor]],
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        session_timeout_ms=a.session_ms,
        heartbeat_interval_ms=300,
    )
    # Learn the topic's partitions before joining: kafka-python 3.0.12 otherwise assigns
    # nothing, rejoins at once, and now and then hangs in that rejoin (a client race).
    c.partitions_for_topic(a.topic)
    c.subscribe([a.topic])
    _say("started")
    while not stopping:
        try:
            batches = c.poll(timeout_ms=1000)  # over fetch.max.wait.ms: see KAFKA_PYTHON_POLL_MS in ../clients.py
        except Exception:  # a resilient consumer logs and polls again
            traceback.print_exc()
            continue
        done = False
        for records in batches.values():
            for r in records:
                rep.processed(r.partition, r.offset)
                done = True
        rep.assigned([tp.partition for tp in c.assignment()])
        if done:
            rep.out.flush()
            with contextlib.suppress(Exception):  # CommitFailedError during a rebalance
                c.commit()
    c.close()


def run_aiokafka(a: argparse.Namespace, rep: Reporter) -> None:
    async def main() -> None:
        from aiokafka import AIOKafkaConsumer
        from aiokafka.coordinator.assignors.range import RangePartitionAssignor
        from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

        assignors = {"range": RangePartitionAssignor, "roundrobin": RoundRobinPartitionAssignor}
        c = AIOKafkaConsumer(
            a.topic,
            bootstrap_servers=a.bootstrap,
            group_id=a.group,
            partition_assignment_strategy=(assignors[a.assignor],),
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            session_timeout_ms=a.session_ms,
            heartbeat_interval_ms=300,
        )
        await c.start()
        _say("started")
        while not stopping:
            try:
                batches = await c.getmany(timeout_ms=100)
            except Exception:  # a resilient consumer logs and polls again
                traceback.print_exc()
                continue
            done = False
            for records in batches.values():
                for r in records:
                    rep.processed(r.partition, r.offset)
                    done = True
            rep.assigned([tp.partition for tp in c.assignment()])
            if done:
                rep.out.flush()
                with contextlib.suppress(Exception):  # CommitFailedError during a rebalance
                    await c.commit()
        await c.stop()

    asyncio.run(main())


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--client", required=True)
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--group", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--assignor", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--instance-id", default=None)
    p.add_argument("--session-ms", type=int, default=3000)
    a = p.parse_args()
    signal.signal(signal.SIGTERM, _on_term)
    rep = Reporter(a.out)
    {"confluent": run_confluent, "kafka-python": run_kafka_python, "aiokafka": run_aiokafka}[
        a.client
    ](a, rep)
    rep.out.close()
    sys.exit(0)


if __name__ == "__main__":
    main()
