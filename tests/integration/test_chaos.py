"""The no-loss chaos test: consumers come, go and crash, the broker is SIGKILLed twice.

Short form in CI; the long form (more messages, more events, both assignors) runs by hand:

    KCOORD_CHAOS_LONG=1 .venv/bin/pytest -m chaos tests/integration/test_chaos.py
"""

from __future__ import annotations

import os
import random
import signal
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer

from kcoord.coordinator.schemas import (
    GroupMetadataKey,
    OffsetCommitKey,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
)
from kcoord.protocol.apis import ApiKey
from kcoord.protocol.javahash import partition_for
from kcoord.protocol.records import decode_batches

from .clients import create_topic
from .harness import ROOT, BrokerProcess, wait_for
from .rawclient import RawClient

LONG = os.environ.get("KCOORD_CHAOS_LONG") == "1"
PARTITIONS = 24
MESSAGES = 40_000 if LONG else 4_800
ROUNDS = 4 if LONG else 1
SCRIPT = Path(__file__).parent / "scripts" / "chaos_consumer.py"
TOPIC = "chaos"

pytestmark = pytest.mark.chaos


class ConsumerProc:
    def __init__(self, broker: BrokerProcess, group: str, out: Path, assignor: str) -> None:
        self.out = out
        self.proc = subprocess.Popen(
            [sys.executable, str(SCRIPT), broker.bootstrap, group, TOPIC, str(out), assignor],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            cwd=ROOT,
        )
        assert self.proc.stdout is not None
        assert self.proc.stdout.readline().strip() == b"started"

    def terminate(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(30)

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(10)


def _processed(outs: list[Path]) -> set[tuple[int, int]]:
    seen: set[tuple[int, int]] = set()
    for path in outs:
        if path.exists():
            for line in path.read_text().splitlines():
                parts = line.split()
                if len(parts) == 2:
                    seen.add((int(parts[0]), int(parts[1])))
    return seen


def _end_offsets(port: int) -> dict[int, int]:
    with RawClient(port) as c:
        r = c.request(
            ApiKey.LIST_OFFSETS, 7, replica_id=-1, isolation_level=0,
            topics=[dict(name=TOPIC, partitions=[
                dict(partition_index=p, current_leader_epoch=-1, timestamp=-1) for p in range(PARTITIONS)])],
        )
    return {p.partition_index: p.offset for p in r.topics[0].partitions}


def _committed(port: int, group: str) -> dict[int, int]:
    with RawClient(port) as c:
        r = c.request(ApiKey.OFFSET_FETCH, 7, group_id=group,
                      topics=[dict(name=TOPIC, partition_indexes=list(range(PARTITIONS)))],
                      require_stable=True)
    assert r.error_code == 0, r.error_code
    return {p.partition_index: p.committed_offset for p in r.topics[0].partitions}


def _parse_assignment(data: bytes) -> set[tuple[str, int]]:
    """ConsumerProtocol Assignment: version, [topic, [partition]], user data."""
    if not data:
        return set()
    pos = 2
    (n_topics,) = struct.unpack_from(">i", data, pos)
    pos += 4
    out = set()
    for _ in range(n_topics):
        (n,) = struct.unpack_from(">h", data, pos)
        topic = data[pos + 2 : pos + 2 + n].decode()
        pos += 2 + n
        (count,) = struct.unpack_from(">i", data, pos)
        pos += 4
        for p in struct.unpack_from(f">{count}i", data, pos):
            out.add((topic, p))
        pos += 4 * count
    return out


def _log_history(data_dir: Path, group: str) -> tuple[dict[int, list[int]], list[object]]:
    """Every committed offset per partition and every group record, in log order."""
    part_dir = data_dir / f"__consumer_offsets-{partition_for(group)}"
    commits: dict[int, list[int]] = {}
    groups: list[object] = []
    for segment in sorted(part_dir.glob("*.log")):
        for batch in decode_batches(segment.read_bytes()):
            for r in batch.records:
                assert r.key is not None
                key = decode_key(r.key)
                if r.value is None:
                    continue
                if isinstance(key, OffsetCommitKey) and key.group == group and key.topic == TOPIC:
                    commits.setdefault(key.partition, []).append(decode_offset_commit_value(r.value).offset)
                elif isinstance(key, GroupMetadataKey) and key.group == group:
                    groups.append(decode_group_metadata_value(r.value))
    return commits, groups


@pytest.mark.parametrize("assignor", ["cooperative-sticky", "range"] if LONG else ["cooperative-sticky"])
def test_chaos_no_message_lost_no_commit_backwards(
    broker_factory: object, tmp_path: Path, assignor: str
) -> None:
    rng = random.Random(7)
    broker: BrokerProcess = broker_factory(  # type: ignore[operator]
        {"group.initial.rebalance.delay.ms": 0, "group.min.session.timeout.ms": 1000,
         "log.cleaner.enable": "false"}
    )
    create_topic(broker.bootstrap, TOPIC, PARTITIONS)
    group = f"chaos-{assignor}"
    acked: set[tuple[int, int]] = set()
    producer_errors: list[str] = []
    done_producing = threading.Event()

    def produce() -> None:
        p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 5,
                      "message.timeout.ms": 120000, "retries": 1000000})

        def on_delivery(err: object, msg: object) -> None:
            if err is None:
                acked.add((msg.partition(), msg.offset()))  # type: ignore[attr-defined]
            else:
                producer_errors.append(str(err))

        for i in range(MESSAGES):
            p.produce(TOPIC, value=b"m%d" % i, partition=i % PARTITIONS, on_delivery=on_delivery)
            p.poll(0)
            if i % 10 == 9:
                time.sleep(0.05)  # pacing, about 200 messages a second: the run spans the chaos
        p.flush(180)
        done_producing.set()

    outs: list[Path] = []
    consumers: list[ConsumerProc] = []

    def add() -> ConsumerProc:
        out = tmp_path / f"consumer-{len(outs)}.txt"
        outs.append(out)
        c = ConsumerProc(broker, group, out, assignor)
        consumers.append(c)
        return c

    def progress(more: int) -> None:
        target = len(_processed(outs)) + more
        wait_for(lambda: len(_processed(outs)) >= target, 60, what=f"{more} more messages processed")

    producer = threading.Thread(target=produce)
    try:
        for _ in range(rng.randint(4, 6)):
            add()
        producer.start()
        for _ in range(ROUNDS):
            progress(300)
            add()  # a consumer joins
            progress(300)
            consumers.pop(rng.randrange(len(consumers))).kill()  # a consumer crashes
            progress(300)
            broker.kill()  # the broker crashes ...
            broker.restart()  # ... and comes back on the same data
            progress(300)
            consumers.pop(rng.randrange(len(consumers))).terminate()  # a clean close
            add()
            progress(300)
            broker.kill()
            broker.restart()
        producer.join(240)
        assert done_producing.is_set() and not producer_errors, producer_errors

        # Everyone left settles: committed offsets reach the end offsets.
        end = _end_offsets(broker.port)
        assert sum(end.values()) >= MESSAGES
        wait_for(lambda: _committed(broker.port, group) == end, 120, what="commits reach the end")
    finally:
        for c in consumers:
            if c.proc.poll() is None:
                c.terminate()
    # Every acknowledged message was processed at least once.
    missing = acked - _processed(outs)
    assert not missing, f"{len(missing)} acknowledged messages never processed, e.g. {sorted(missing)[:5]}"
    assert len(acked) == MESSAGES

    broker.stop()
    commits, generations = _log_history(broker.data_dir, group)
    for partition, offsets in commits.items():
        assert offsets == sorted(offsets), f"commits of partition {partition} moved backwards"
    if assignor == "cooperative-sticky":
        # No partition is owned by two members of the same generation.
        for value in generations:
            owned: list[tuple[str, int]] = []
            for member in value.members:  # type: ignore[attr-defined]
                owned.extend(_parse_assignment(member.assignment))
            assert len(owned) == len(set(owned)), f"generation {value.generation} double-assigns"  # type: ignore[attr-defined]
    assert len(generations) >= 4  # the membership changes really caused rebalances
