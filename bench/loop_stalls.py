"""How long one big request holds the broker's event loop.

Every other connection waits while one request is decoded and handled on the loop, so the
figure that matters is the longest time the loop is not serving anyone. It is measured from
outside: a pinger thread keeps one ApiVersions request in flight on its own connection (answered
by the direct handler, a fraction of a millisecond when the loop is free) and records the
slowest round trip seen while the big request is under way. That is the stall (``stall_ms``);
``latency_ms`` is the big request's own round trip.

The broker starts from a data directory written directly in Kafka's format (as bench/offsets.py
does): ``--groups`` standalone groups with one offset each (topic ``t``, 16 partitions), and one
group ``wide`` with ``--wide`` offsets (a topic that does not exist: the coordinator stores
offsets for any name). Then, each at a few sizes: OffsetCommit (partition entries cycling over
``t``'s 16 partitions, a standalone group), OffsetFetch of every offset of ``wide`` (v7: the direct
path, v8: the generic one), OffsetFetch v8 / DescribeGroups / DeleteGroups of many groups,
ListGroups of all groups, OffsetDelete of many partitions, JoinGroup with big metadata, Metadata
of many absent topics, Fetch and ListOffsets of many partition entries; then one client's bursts
and wide requests (issue 34, finding 11): 1,000 JoinGroups pipelined on one connection (to new
groups, then to one group), 1,000 KIP-848 members joining one group by pipelined
ConsumerGroupHeartbeats (each join recomputes the target assignment over every member and
partition), a subscription flipping back and forth in that group, AddPartitionsToTxn of 99,000
partition entries and the EndTxn of that transaction over 8,000 partitions (a marker each);
and last one ``/metrics`` scrape.

    .venv/bin/python bench/loop_stalls.py [--groups 400000] [--wide 100000] [--quick]

``--only joins,first-txn`` runs only those cases, each on a fresh broker (``--repeat`` times):
the pipelined JoinGroups above, and a fresh broker's first InitProducerId of a transactional id
(``__transaction_state`` created on that first use: the answers until it is served, and the
stall meanwhile).

``--restart`` measures instead the restart of issue 34's finding 10: a data directory holding
one KIP-848 group of ``--members`` (1,000) members over a topic of ``--partitions`` (10,000)
partitions and its history (tests/integration/big_group.py), a broker started on it, killed
with SIGKILL and started again; for each start the seconds until ApiVersions is answered, until
a member's ConsumerGroupHeartbeat is first answered (COORDINATOR_LOAD_IN_PROGRESS while its
partition loads) and until it is served, the event loop's longest stall meanwhile (an
ApiVersions pinger, as above), the load of the group's partition as logged, and the opening of
the topic's partitions (done before the port serves).

``--kip1263`` measures instead one group of ``--members`` members over ``--partitions``
partitions (say 5,000 and 10,000) loaded from a data directory: the stall while one member
joins, ``--joins`` members join pipelined, and a subscription flips (issue 32's KIP-1263 and
issue 34's finding 11), each window held ``--settle`` seconds past the answer.

Prints one JSON document. Figures are wall-clock on a shared machine: read them as orders of
magnitude (is it 5 ms or 5 s?), not to the millisecond.
"""

from __future__ import annotations

import argparse
import gc
import json
import re
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _wire import decode, frame  # noqa: E402

from kcoord.coordinator.messages import OffsetCommitPartition  # noqa: E402
from kcoord.coordinator.schemas import (  # noqa: E402
    OffsetCommitKey,
    OffsetCommitValue,
    encode_key,
    encode_offset_commit_value,
)
from kcoord.coordinator.write_size import offset_commit_floor, tombstones_batch_size  # noqa: E402
from kcoord.protocol.javahash import partition_for  # noqa: E402
from kcoord.protocol.record_encoding import build_batch  # noqa: E402
from kcoord.storage.log import PartitionLog  # noqa: E402
from tests.integration.big_group import BigGroup, write_big_group  # noqa: E402
from tests.integration.clients import create_topic  # noqa: E402
from tests.integration.harness import BrokerProcess, free_port, wait_for  # noqa: E402
from tests.integration.rawclient import RawClient  # noqa: E402

_SIZE = struct.Struct(">i")
TOPIC_PARTITIONS = 16
EMPTY_PROTOCOL = b"\x00\x00" + b"\x00\x00\x00\x00" + b"\xff\xff\xff\xff"


def group_name(i: int) -> str:
    return f"g-{i:07d}"


MESSAGE_MAX_BYTES = 1_048_588  # the broker's default message.max.bytes


def largest(fits: Callable[[int], bool]) -> int:
    """The largest n in [0, 1,000,000] with fits(n), fits being monotone."""
    lo, hi = 0, 1_000_000
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
    return lo


def largest_commit(group: str) -> int:
    """Most partition entries of an OffsetCommit (no metadata) that fit in one batch."""

    def fits(n: int) -> bool:
        parts = tuple(OffsetCommitPartition(i % TOPIC_PARTITIONS, i, -1, None) for i in range(n))
        return offset_commit_floor(group, (("t", parts),), 4096) <= MESSAGE_MAX_BYTES

    return largest(fits)


def largest_offset_delete(group: str, topic: str) -> int:
    """Most offsets one OffsetDelete can remove (their tombstones in one batch)."""
    return largest(
        lambda n: tombstones_batch_size([(group, [(topic, p) for p in range(n)], False)])
        <= MESSAGE_MAX_BYTES
    )


def write_offsets(data_dir: Path, groups: int, wide: int) -> None:
    """``groups`` standalone groups with one offset of ``t`` each, and ``wide`` offsets of
    group ``wide`` (topic ``wide-topic``), straight into __consumer_offsets."""
    logs = {
        p: PartitionLog.open(data_dir / f"__consumer_offsets-{p}", segment_bytes=100 << 20, fsync=False)
        for p in range(50)
    }
    now = int(time.time() * 1000)
    value = encode_offset_commit_value(OffsetCommitValue(offset=0, metadata="", commit_timestamp=now))
    pending: dict[int, list[tuple[bytes, bytes, tuple[()], int]]] = {p: [] for p in logs}

    def add(group: str, topic: str, partition: int) -> None:
        part = partition_for(group, 50)
        batch = pending[part]
        batch.append((encode_key(OffsetCommitKey(group, topic, partition)), value, (), now))
        if len(batch) == 500:
            logs[part].append(build_batch(batch))
            batch.clear()

    for i in range(groups):
        add(group_name(i), "t", i % TOPIC_PARTITIONS)
    for p in range(wide):
        add("wide", "wide-topic", p)
    for part, rest in pending.items():
        if rest:
            logs[part].append(build_batch(rest))
    for plog in logs.values():
        plog.close()


class Pinger(threading.Thread):
    """One ApiVersions v0 in flight at a time; the slowest round trip within a window."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.request = frame(18, 0, 1)
        self.lock = threading.Lock()
        self.window_max = 0.0
        self.stop = threading.Event()

    def _round_trip(self) -> float:
        started = time.perf_counter()
        self.sock.sendall(self.request)
        size = _SIZE.unpack(_exact(self.sock, 4))[0]
        _exact(self.sock, size)
        return time.perf_counter() - started

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                rtt = self._round_trip()
                with self.lock:
                    self.window_max = max(self.window_max, rtt)
        except OSError:
            pass  # the broker went away: the bench is over

    def reset(self) -> None:
        """Open a window: the bench's own garbage collector stays off until :meth:`read`. A
        full collection of the bench's objects (the requests and answers of tens of thousands
        of entries it builds) holds its GIL, and the pinger with it, for 100-500 ms on a busy
        machine: the bench measured its own collections as stalls of the broker."""
        gc.disable()
        with self.lock:
            self.window_max = 0.0

    def read(self) -> float:
        """The slowest round trip since :meth:`reset`; the bench's collector on again."""
        with self.lock:
            slowest = self.window_max
        gc.enable()
        return slowest


def _exact(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(min(n - len(out), 1 << 20))
        if not chunk:
            raise ConnectionError("closed by the broker")
        out += chunk
    return bytes(out)


class Bench:
    def __init__(self, broker: BrokerProcess) -> None:
        self.broker = broker
        self.sock = socket.create_connection(("127.0.0.1", broker.port), timeout=600)
        self.pinger = Pinger(broker.port)
        self.pinger.start()
        self.correlation = 100

    def measure(self, api_key: int, version: int, **fields: Any) -> tuple[dict[str, Any], Any]:
        self.correlation += 1
        data = frame(api_key, version, self.correlation, **fields)
        time.sleep(0.2)  # let the pinger settle
        self.pinger.reset()
        started = time.perf_counter()
        self.sock.sendall(data)
        size = _SIZE.unpack(_exact(self.sock, 4))[0]
        payload = _exact(self.sock, size)
        latency = time.perf_counter() - started
        time.sleep(0.05)  # a stall right at the end shows in the next ping
        stall = self.pinger.read()
        response = decode(api_key, version, payload)
        return {
            "request_bytes": len(data),
            "response_bytes": len(payload),
            "latency_ms": round(latency * 1000, 1),
            "stall_ms": round(stall * 1000, 1),
        }, response

    def burst(self, frames: list[bytes], api_key: int, version: int) -> tuple[dict[str, Any], list[Any]]:
        """Like :meth:`measure` for many requests pipelined on the one connection: all sent
        at once, every answer read; ``latency_ms`` is until the last answer."""
        data = b"".join(frames)
        time.sleep(0.2)
        self.pinger.reset()
        started = time.perf_counter()
        self.sock.sendall(data)
        payloads = []
        for _ in frames:
            size = _SIZE.unpack(_exact(self.sock, 4))[0]
            payloads.append(_exact(self.sock, size))
        latency = time.perf_counter() - started
        time.sleep(0.05)
        stall = self.pinger.read()
        return {
            "request_bytes": len(data),
            "response_bytes": sum(len(x) for x in payloads),
            "latency_ms": round(latency * 1000, 1),
            "stall_ms": round(stall * 1000, 1),
        }, [decode(api_key, version, x) for x in payloads]

    def frames(self, api_key: int, version: int, each: list[dict[str, Any]]) -> list[bytes]:
        out = []
        for fields in each:
            self.correlation += 1
            out.append(frame(api_key, version, self.correlation, **fields))
        return out

    def scrape(self) -> dict[str, Any]:
        time.sleep(0.2)
        self.pinger.reset()
        started = time.perf_counter()
        with urllib.request.urlopen(f"http://127.0.0.1:{self.broker.metrics_port}/metrics", timeout=600) as r:
            body = r.read()
        latency = time.perf_counter() - started
        time.sleep(0.05)
        return {
            "response_bytes": len(body),
            "latency_ms": round(latency * 1000, 1),
            "stall_ms": round(self.pinger.read() * 1000, 1),
            "other_series": body.count(b'consumergroup="__other__"'),
        }


def _codes(resp: Any) -> dict[int, int]:
    """Error code -> how many times it occurs, over the whole response."""
    out: dict[int, int] = {}
    if isinstance(resp, list):  # the answers of a burst
        for one in resp:
            for code, n in _codes(one).items():
                out[code] = out.get(code, 0) + n
        return out

    def add(code: Any) -> None:
        out[int(code)] = out.get(int(code), 0) + 1

    if getattr(resp, "error_code", None) is not None:
        add(resp.error_code)
    for t in getattr(resp, "topics", ()) or ():
        for p in t.partitions:
            add(p.error_code)
    for g in getattr(resp, "groups", ()) or ():
        if getattr(g, "error_code", None) is not None:
            add(g.error_code)
    for r in getattr(resp, "results", ()) or ():
        add(r.error_code)
    for t in getattr(resp, "results_by_topic_v3_and_below", ()) or ():
        for p in t.results_by_partition:
            add(p.partition_error_code)
    return out


Record = Callable[[str, int, Callable[[], tuple[dict[str, Any], Any]]], None]


def pipelined_joins(bench: Bench, record: Record, n: int) -> None:
    """``n`` JoinGroup v3 requests pipelined on one connection: to ``n`` new groups, then ``n``
    new members of one group (each join of the burst rebalances the group again)."""
    def join(group: str) -> dict[str, Any]:
        return dict(group_id=group, session_timeout=10000, rebalance_timeout=10000, member_id="",
                    group_instance_id=None, protocol_type="consumer",
                    protocols=[dict(name="range", metadata=EMPTY_PROTOCOL)])

    burst = bench.frames(11, 3, [join(f"burst-{i}") for i in range(n)])
    record("JoinGroup v3 pipelined (distinct new groups)", n, lambda: bench.burst(burst, 11, 3))
    burst = bench.frames(11, 3, [join("burst-one") for _ in range(n)])
    record("JoinGroup v3 pipelined (one group)", n, lambda: bench.burst(burst, 11, 3))


def subscription_flips(bench: Bench, record: Record, broker: BrokerProcess, members: int,
                       partitions: int) -> None:
    """A KIP-848 group of ``members`` members subscribed to a topic of ``partitions``
    partitions; one member then subscribes to a second topic as big, and back, so the target
    assignment is computed over every member and partition at each flip."""
    create_topic(broker.bootstrap, "flip-a", partitions, timeout=300)
    create_topic(broker.bootstrap, "flip-b", partitions, timeout=300)

    def beat(i: int, epoch: int, topics: list[str] | None) -> dict[str, Any]:
        return dict(group_id="flips", member_id=f"member-{i:05d}-{'x' * 10}", member_epoch=epoch,
                    instance_id=None, rack_id=None, rebalance_timeout=60000,
                    subscribed_topic_names=topics, subscribed_topic_regex=None,
                    server_assignor=None, topic_partitions=[] if epoch == 0 else None)

    joins = bench.frames(68, 1, [beat(i, 0, ["flip-a"]) for i in range(members)])
    figures, answers = bench.burst(joins, 68, 1)
    record("ConsumerGroupHeartbeat v1 joins pipelined (one group)", members,
           lambda: ({"partitions": partitions, **figures}, answers))
    epoch = int(answers[0].member_epoch)
    for topics in (["flip-a", "flip-b"], ["flip-a"], ["flip-a", "flip-b"], ["flip-a"]):
        figures, resp = bench.measure(68, 1, **beat(0, epoch, topics))
        record("ConsumerGroupHeartbeat v1 subscription flip (members)", members,
               lambda f={"partitions": 2 * partitions, **figures}, r=resp: (f, r))
        epoch = int(resp.member_epoch) if resp.member_epoch > 0 else epoch


def wide_transactions(bench: Bench, record: Record, broker: BrokerProcess, partitions: int,
                      entries: int) -> None:
    """AddPartitionsToTxn of ``entries`` partition entries cycling over ``partitions``
    partitions, then EndTxn of that transaction (a marker written to each partition)."""
    per_topic = 4_000  # max.partitions.per.request
    wide: list[tuple[str, int]] = []  # (topic, partitions) over which the transaction runs
    for k in range(0, partitions, per_topic):
        wide.append((f"txn-wide-{k // per_topic}", min(per_topic, partitions - k)))
        create_topic(broker.bootstrap, *wide[-1], timeout=300)
    # As a client does: find the transaction coordinator first (FindCoordinator waits for
    # __transaction_state, created at its first use), then InitProducerId, sent again while
    # the coordinator is not available.
    with RawClient(broker.port, timeout=600) as client:
        found = client.request_coordinated(10, 4, key_type=1, coordinator_keys=["wide-txn"])
        assert all(int(c.error_code) == 0 for c in found.coordinators), found
        init = client.request_coordinated(22, 4, transactional_id="wide-txn",
                                          transaction_timeout=60000, producer_id=-1, producer_epoch=-1)
    assert int(init.error_code) == 0, init
    pid, epoch = int(init.producer_id), int(init.producer_epoch)

    def add(n: int) -> tuple[dict[str, Any], Any]:
        topics = [dict(name=name, partitions=[i % size for i in range(n * size // partitions)])
                  for name, size in wide]
        return bench.measure(24, 3, v3_and_below_transactional_id="wide-txn",
                             v3_and_below_producer_id=pid, v3_and_below_producer_epoch=epoch,
                             v3_and_below_topics=topics)

    def end() -> tuple[dict[str, Any], Any]:
        return bench.measure(26, 3, transactional_id="wide-txn", producer_id=pid,
                             producer_epoch=epoch, committed=True)

    record("AddPartitionsToTxn v3 (partition entries)", entries, lambda: add(entries))
    record("EndTxn v3 commit (partitions in the transaction)", partitions, end)


def run(args: argparse.Namespace) -> dict[str, Any]:
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=Path(__file__).parent
    ).stdout.strip()
    out: dict[str, Any] = {
        "benchmark": "loop_stalls",
        "commit": commit,
        "groups": args.groups,
        "wide_offsets": args.wide,
    }
    # 99,999: with its one topic (or group list), the most array entries a request may carry
    # (socket.request.max.elements); one more closes the connection.
    sizes = [1_000, 10_000] if args.quick else [1_000, 10_000, 99_999]
    many = [1_000] if args.quick else [1_000, 10_000, 99_999]
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        started = time.perf_counter()
        write_offsets(data, args.groups, args.wide)
        out["setup_write_s"] = round(time.perf_counter() - started, 1)
        settings = {
            "group.initial.rebalance.delay.ms": 0,
            "log.cleaner.enable": "false",
            # The flipping group's members join and never heartbeat again: they must last
            # through the bench.
            "group.consumer.session.timeout.ms": 3_600_000,
            "group.consumer.max.session.timeout.ms": 3_600_000,
            "max.broker.partitions": 20_000,  # the wide transaction's and the flips' topics
        }
        broker = BrokerProcess(data, settings, metrics_port=free_port()).start()
        try:
            wait_for(lambda: "loaded __consumer_offsets:" in broker.log(), 600, what="load")
            create_topic(broker.bootstrap, "t", TOPIC_PARTITIONS)
            bench = Bench(broker)
            results: dict[str, list[dict[str, Any]]] = {}

            def record(kind: str, size: int, fn: Callable[[], tuple[dict[str, Any], Any]]) -> None:
                figures, resp = fn()
                figures = {"size": size, **figures, "codes": _codes(resp)}
                results.setdefault(kind, []).append(figures)
                print(kind, json.dumps(figures), file=sys.stderr, flush=True)

            at_bound = largest_commit("commit-bound")
            for n in sorted([*sizes, at_bound, at_bound + 1]):
                group = "commit-bound" if n in (at_bound, at_bound + 1) else f"commit-{n}"
                parts = [
                    dict(partition_index=i % TOPIC_PARTITIONS, committed_offset=i,
                         committed_leader_epoch=-1, committed_metadata=None)
                    for i in range(n)
                ]
                record("OffsetCommit v8 (partitions)", n, lambda p=parts, g=group: bench.measure(
                    8, 8, group_id=g, generation_id_or_member_epoch=-1, member_id="",
                    group_instance_id=None, topics=[dict(name="t", partitions=p)]))
            record("OffsetFetch v7 all offsets (offsets)", args.wide, lambda: bench.measure(
                9, 7, group_id="wide", topics=None, require_stable=False))
            record("OffsetFetch v8 all offsets (offsets)", args.wide, lambda: bench.measure(
                9, 8, groups=[dict(group_id="wide", topics=None)], require_stable=False))
            for n in many:
                ids = [group_name(i) for i in range(n)]
                record("OffsetFetch v8 (groups)", n, lambda ids=ids: bench.measure(
                    9, 8, groups=[dict(group_id=g, topics=None) for g in ids], require_stable=False))
                record("DescribeGroups v5 (groups)", n, lambda ids=ids: bench.measure(
                    15, 5, groups=ids, include_authorized_operations=False))
            record("ListGroups v4 (groups held)", args.groups, lambda: bench.measure(
                16, 4, states_filter=[]))
            off = 0
            for n in many:
                ids = [group_name(off + i) for i in range(n)]
                off += n
                record("DeleteGroups v2 (groups)", n, lambda ids=ids: bench.measure(
                    42, 2, groups_names=ids))
            most = min(args.wide, 99_999)
            bound = min(largest_offset_delete("wide", "wide-topic"), most)
            for n in [bound, most] if most > bound else [most]:
                record("OffsetDelete v0 (partitions)", n, lambda n=n: bench.measure(
                    47, 0, group_id="wide",
                    topics=[dict(name="wide-topic", partitions=[dict(partition_index=i) for i in range(n)])]))
            for mib in [1, 10] if args.quick else [1, 10, 94]:
                metadata = b"\x00" * (mib << 20)
                record("JoinGroup v3 (MiB of metadata)", mib, lambda metadata=metadata, mib=mib: bench.measure(
                    11, 3, group_id=f"join-{mib}", session_timeout=10000, rebalance_timeout=10000,
                    member_id="", group_instance_id=None, protocol_type="consumer",
                    protocols=[dict(name="range", metadata=metadata)]))
            # The data plane: requests whose work grows with their own size.
            for n in many:
                names = [dict(name=f"absent-{i}", topic_id=None) for i in range(n)]
                record("Metadata v12 (topics)", n, lambda names=names: bench.measure(
                    3, 12, topics=names, allow_auto_topic_creation=False,
                    include_topic_authorized_operations=False))
                parts = [dict(partition=i % TOPIC_PARTITIONS, current_leader_epoch=-1, fetch_offset=0,
                              last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=1024)
                         for i in range(n)]
                record("Fetch v12 (partitions)", n, lambda parts=parts: bench.measure(
                    1, 12, cluster_id=None, replica_id=-1, max_wait=0, min_bytes=0,
                    max_bytes=1 << 20, isolation_level=0, session_id=0, session_epoch=-1,
                    topics=[dict(topic="t", partitions=parts)], forgotten_topics_data=[],
                    rack_id=""))
                lparts = [dict(partition_index=i % TOPIC_PARTITIONS, current_leader_epoch=-1,
                               timestamp=-1) for i in range(n)]
                record("ListOffsets v7 (partitions)", n, lambda lparts=lparts: bench.measure(
                    2, 7, replica_id=-1, isolation_level=0,
                    topics=[dict(name="t", partitions=lparts)]))
            # One client's burst or one request over many partitions (issue 34, finding 11).
            pipelined_joins(bench, record, args.joins)
            subscription_flips(bench, record, broker, args.members, args.flip_partitions)
            wide_transactions(bench, record, broker, args.txn_partitions, 99_000)
            figures = bench.scrape()
            results.setdefault("/metrics (groups held)", []).append({"size": args.groups - off, **figures})
            print("/metrics", json.dumps(figures), file=sys.stderr, flush=True)
            out["results"] = results
            out["broker_alive"] = broker.alive()
            bench.pinger.stop.set()
            bench.pinger.join(timeout=10)
        finally:
            broker.stop()
    return out


def first_transaction() -> dict[str, Any]:
    """A fresh broker's first InitProducerId of a transactional id (``__transaction_state``
    is created on that first use), retried every 10 ms while COORDINATOR_NOT_AVAILABLE or
    COORDINATOR_LOAD_IN_PROGRESS; the pinger's slowest round trip meanwhile is the stall."""
    with tempfile.TemporaryDirectory() as tmp:
        broker = BrokerProcess(Path(tmp) / "data", {}).start()
        try:
            bench = Bench(broker)
            time.sleep(0.5)  # the broker's start-up is over, the pinger settled
            bench.pinger.reset()
            started = time.perf_counter()
            codes: dict[int, int] = {}
            while True:
                bench.correlation += 1
                bench.sock.sendall(frame(22, 4, bench.correlation, transactional_id="first",
                                         transaction_timeout=60000, producer_id=-1, producer_epoch=-1))
                resp = decode(22, 4, _exact(bench.sock, _SIZE.unpack(_exact(bench.sock, 4))[0]))
                codes[int(resp.error_code)] = codes.get(int(resp.error_code), 0) + 1
                if int(resp.error_code) not in (14, 15):
                    break
                time.sleep(0.01)
            served = time.perf_counter() - started
            time.sleep(0.05)
            out = {"served_ms": round(served * 1000, 1), "stall_ms": round(bench.pinger.read() * 1000, 1),
                   "codes": codes}
            bench.pinger.stop.set()
            bench.pinger.join(timeout=10)
            return out
        finally:
            broker.stop()


def only(args: argparse.Namespace) -> dict[str, Any]:
    """``--only``: the cases named, each on a fresh broker of its own (no data written first)."""
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=Path(__file__).parent).stdout.strip()
    out: dict[str, Any] = {"benchmark": "loop_stalls --only", "commit": commit}
    for case in args.only.split(","):
        for _ in range(args.repeat):
            if case == "first-txn":
                figures = first_transaction()
                out.setdefault("InitProducerId v4, first use (fresh broker)", []).append(figures)
                print(case, json.dumps(figures), file=sys.stderr, flush=True)
                continue
            assert case == "joins", case
            with tempfile.TemporaryDirectory() as tmp:
                broker = BrokerProcess(Path(tmp) / "data", {"group.initial.rebalance.delay.ms": 0}).start()
                try:
                    bench = Bench(broker)

                    def record(kind: str, size: int, fn: Callable[[], tuple[dict[str, Any], Any]]) -> None:
                        figures, resp = fn()
                        figures = {"size": size, **figures, "codes": _codes(resp)}
                        out.setdefault(kind, []).append(figures)
                        print(kind, json.dumps(figures), file=sys.stderr, flush=True)

                    pipelined_joins(bench, record, args.joins)
                    bench.pinger.stop.set()
                    bench.pinger.join(timeout=10)
                finally:
                    broker.stop()
    return out


# The restart of finding 10 (issue 34) ------------------------------------------------------------
COORDINATOR_LOAD_IN_PROGRESS = 14


def _answer(port: int, api_key: int, version: int, **fields: Any) -> Any:
    """One request on a new connection, its decoded response; OSError while not served."""
    with RawClient(port, timeout=600) as client:
        return client.request(api_key, version, **fields)


def _timed_start(broker: BrokerProcess, group: BigGroup) -> dict[str, Any]:
    """Start ``broker``; seconds to ApiVersions answered and to one member's heartbeat answered
    (first at all, and first without COORDINATOR_LOAD_IN_PROGRESS)."""
    mark = broker.log_path.stat().st_size if broker.log_path.exists() else 0
    started = time.perf_counter()
    broker.launch()
    out: dict[str, Any] = {}
    while True:
        try:
            _answer(broker.port, 18, 0)
            break
        except OSError:
            if not broker.alive():
                raise RuntimeError(broker.log()) from None
            time.sleep(0.01)
    out["port_answers_s"] = round(time.perf_counter() - started, 2)
    pinger = Pinger(broker.port)  # the loop's longest stall while the group loads
    pinger.start()
    codes: dict[int, int] = {}
    while True:
        resp = _answer(
            broker.port, 68, 1, group_id=group.group_id, member_id=group.member_ids[0],
            member_epoch=group.epoch, instance_id=None, rack_id=None, rebalance_timeout=-1,
            subscribed_topic_names=None, subscribed_topic_regex=None, server_assignor=None,
            topic_partitions=None,
        )
        code = int(resp.error_code)
        if not codes:
            out["first_heartbeat_answer_s"] = round(time.perf_counter() - started, 2)
        codes[code] = codes.get(code, 0) + 1
        if code != COORDINATOR_LOAD_IN_PROGRESS:
            break
        time.sleep(0.05)
    out["heartbeat_served_s"] = round(time.perf_counter() - started, 2)
    out["heartbeat_codes"] = codes
    out["stall_while_loading_ms"] = round(pinger.read() * 1000, 1)
    pinger.stop.set()
    pinger.join(timeout=10)
    pinger.sock.close()
    line = wait_for(
        lambda: re.search(
            rf"partition {group.offsets_partition} loaded .*? (\d+) records in ([\d.]+) s",
            broker.log_path.read_bytes()[mark:].decode(errors="replace"),
        ),
        600,
        what="the group's partition loaded",
    )
    out["group_partition_records"], out["group_partition_load_s"] = int(line[1]), float(line[2])
    text = broker.log_path.read_bytes()[mark:].decode(errors="replace")
    out["topic_open_s"] = round(
        _logged_at(text, f"loaded topic {group.topic} ") - _logged_at(text, "storage: "), 2
    )
    return out


def _logged_at(text: str, what: str) -> float:
    """The time (s) of the first log line saying ``what``."""
    found = re.search(rf"^\S+ (\d\d):(\d\d):(\d\d),(\d\d\d) .*{re.escape(what)}", text, re.M)
    assert found is not None, what
    h, m, sec, ms = (int(x) for x in found.groups())
    return h * 3600 + m * 60 + sec + ms / 1000


def restart(args: argparse.Namespace) -> dict[str, Any]:
    """Finding 10: a broker started on a data directory holding one KIP-848 group of
    ``--members`` members over ``--partitions`` partitions, then killed (-9) and started again:
    each start's time to the Kafka port answering and to a member's heartbeat answered."""
    out: dict[str, Any] = {"benchmark": "loop_stalls --restart", "members": args.members,
                           "partitions": args.partitions}
    with tempfile.TemporaryDirectory(dir=args.tmp) as tmp:
        data = Path(tmp) / "data"
        started = time.perf_counter()
        group = write_big_group(data, members=args.members, partitions=args.partitions)
        out["setup_write_s"] = round(time.perf_counter() - started, 1)
        out["records"] = group.records
        settings = {"log.cleaner.enable": "false"}
        broker = BrokerProcess(data, settings)
        try:
            out["first_start"] = _timed_start(broker, group)
            broker.kill()
            broker.proc.wait()  # type: ignore[union-attr]
            out["after_kill_9"] = _timed_start(broker, group)
        finally:
            broker.stop()
    return out


def _settled(bench: Bench, settle: float, send: Callable[[], tuple[dict[str, Any], Any]]
             ) -> tuple[dict[str, Any], Any]:
    """``send`` (a measure or a burst), with the pinger's window held open ``settle`` seconds
    past the answer: an offloaded or batched target is computed after the heartbeat is answered,
    and its stall counts too."""
    figures, resp = send()
    time.sleep(settle)
    figures["stall_ms"] = max(figures["stall_ms"], round(bench.pinger.read() * 1000, 1))
    figures["settle_s"] = settle
    return figures, resp


def kip1263(args: argparse.Namespace) -> dict[str, Any]:
    """Issue 32 (KIP-1263) and issue 34 finding 11's subscription flips at scale: one KIP-848
    group of ``--members`` (5,000) members over ``--partitions`` (10,000) partitions, loaded
    from a data directory (tests/integration/big_group.py; its members never heartbeat, so
    sessions last an hour); then the loop's longest stall seen by the pinger during one new
    member's join, ``--joins`` new members' pipelined joins, and member 0's subscription
    flipping to the big topic plus a small one and back, each window held open ``--settle``
    seconds past the answer (a batched or offloaded target is computed after it)."""
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=Path(__file__).parent
    ).stdout.strip()
    out: dict[str, Any] = {"benchmark": "loop_stalls --kip1263", "commit": commit,
                           "members": args.members, "partitions": args.partitions,
                           "extra_settings": dict(args.set)}
    with tempfile.TemporaryDirectory(dir=args.tmp) as tmp:
        data = Path(tmp) / "data"
        started = time.perf_counter()
        group = write_big_group(data, members=args.members, partitions=args.partitions)
        out["setup_write_s"] = round(time.perf_counter() - started, 1)
        settings: dict[str, object] = {
            "log.cleaner.enable": "false",
            "group.consumer.session.timeout.ms": 3_600_000,
            "group.consumer.max.session.timeout.ms": 3_600_000,
            "max.broker.partitions": args.partitions + 1_000,
            **dict(args.set),
        }
        broker = BrokerProcess(data, settings)
        if not args.set:  # the broker's own defaults (the harness sets the interval to 0)
            broker.settings.pop("group.consumer.assignment.interval.ms", None)
        broker.start(timeout=600)
        try:
            wait_for(lambda: "loaded __consumer_offsets:" in broker.log(), 1200, what="load")
            create_topic(broker.bootstrap, "flip-small", 16, timeout=120)
            bench = Bench(broker)
            results: dict[str, list[dict[str, Any]]] = {}

            def record(kind: str, size: int, fn: Callable[[], tuple[dict[str, Any], Any]]) -> None:
                figures, resp = fn()
                figures = {"size": size, **figures, "codes": _codes(resp)}
                results.setdefault(kind, []).append(figures)
                print(kind, json.dumps(figures), file=sys.stderr, flush=True)

            def beat(mid: str, epoch: int, topics: list[str] | None) -> dict[str, Any]:
                return dict(group_id=group.group_id, member_id=mid, member_epoch=epoch,
                            instance_id=None, rack_id=None, rebalance_timeout=60000,
                            subscribed_topic_names=topics, subscribed_topic_regex=None,
                            server_assignor=None, topic_partitions=[] if epoch == 0 else None)

            # The first heartbeat after the load serves the group (no stall measured here).
            first = _answer(broker.port, 68, 1, **beat(group.member_ids[0], group.epoch, None))
            out["first_heartbeat_code"] = int(first.error_code)
            record("ConsumerGroupHeartbeat v1 join (one new member)", args.members + 1,
                   lambda: _settled(bench, args.settle, lambda: bench.measure(
                       68, 1, **beat("joiner-00000", 0, [group.topic]))))
            joins = bench.frames(68, 1, [beat(f"joiner-{i:05d}", 0, [group.topic])
                                         for i in range(1, args.joins + 1)])
            record("ConsumerGroupHeartbeat v1 joins pipelined (new members)", args.joins,
                   lambda: _settled(bench, args.settle, lambda: bench.burst(joins, 68, 1)))
            epoch = group.epoch
            for topics in ([group.topic, "flip-small"], [group.topic]) * 2:
                figures, resp = _settled(bench, args.settle, lambda t=topics, e=epoch: bench.measure(
                    68, 1, **beat(group.member_ids[0], e, t)))
                record("ConsumerGroupHeartbeat v1 subscription flip (members)", args.members,
                       lambda f=figures, r=resp: (f, r))
                epoch = int(resp.member_epoch) if resp.member_epoch > 0 else epoch
            out["results"] = results
            out["broker_alive"] = broker.alive()
            bench.pinger.stop.set()
            bench.pinger.join(timeout=10)
        finally:
            broker.stop()
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--groups", type=int, default=400_000)
    parser.add_argument("--wide", type=int, default=100_000)
    parser.add_argument("--quick", action="store_true", help="smaller sizes (a minute or so)")
    parser.add_argument("--joins", type=int, default=1_000, help="JoinGroups of a burst")
    parser.add_argument("--members", type=int, default=1_000,
                        help="members of the flipping group (with --restart: of its group)")
    parser.add_argument("--flip-partitions", type=int, default=1_000,
                        help="partitions of each topic the flipping group subscribes to")
    parser.add_argument("--txn-partitions", type=int, default=8_000,
                        help="partitions of the wide transaction")
    parser.add_argument("--restart", action="store_true", help="only the restart of finding 10")
    parser.add_argument("--partitions", type=int, default=10_000, help="--restart: its partitions")
    parser.add_argument("--tmp", default=None, help="where the data directory goes (e.g. /dev/shm)")
    parser.add_argument("--only", default=None,
                        help="only these cases, comma-separated: joins (the pipelined JoinGroups),"
                             " first-txn (a fresh broker's first InitProducerId)")
    parser.add_argument("--repeat", type=int, default=1, help="--only: runs of each case")
    parser.add_argument("--kip1263", action="store_true",
                        help="only the big group's joins and subscription flips (KIP-1263)")
    parser.add_argument("--settle", type=float, default=3.0,
                        help="--kip1263: seconds the stall window stays open past each answer")
    parser.add_argument("--set", action="append", default=[], type=lambda x: tuple(x.split("=", 1)),
                        help="--kip1263: a broker setting NAME=VALUE (repeatable)")
    args = parser.parse_args()
    if args.kip1263:
        result = kip1263(args)
    else:
        result = restart(args) if args.restart else only(args) if args.only else run(args)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
