"""The goals bench/compare.py checks its figures against: issue 20's (throughput against
librdkafka's mock, durable commits, group creation, memory per member, start-up load, KIP-848
against classic heartbeats), the rebalance ones before them, and issue 33's, stricter (names
starting "issue 33:"). Each is met, missed, or None when a figure it needs was not measured."""

from __future__ import annotations

from typing import Any

HEARTBEAT_MS = 500
"""The rebalance scenario's consumers' heartbeat.interval.ms (compare.py uses it too)."""


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def _beaten(mine: float | None, peer: Any) -> bool:
    """kcoord's time is below the peer's (a peer that timed out counts as slower)."""
    if mine is None:
        return False
    if isinstance(peer, str) and peer.startswith("timeout"):
        return True
    other = _num(peer)
    return other is not None and mine < other


def _target(name: str, mine: float | None, met: bool | None, **more: Any) -> dict[str, Any]:
    return {"target": name, "kcoord": mine, **more, "met": met}


def targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Issue 20's goals, each met, missed, or None when its figures are missing."""
    out: list[dict[str, Any]] = []

    def rows(scenario: str) -> list[dict[str, Any]]:
        r = results.get(scenario)
        return r if isinstance(r, list) else []

    def raw8(api: str, broker: str) -> float | None:
        for row in rows("raw"):
            if row["case"].get("api") == api and row["case"].get("connections") == 8:
                return _num((row.get(broker) or {}).get("requests_per_s"))
        return None

    for api, times in (("Heartbeat", 1.5), ("OffsetFetch", 1.0)):
        a, b = raw8(api, "kcoord"), raw8(api, "mock")
        out.append(_target(f"{api} requests/s at 8 connections >= {times}x mock", a,
                           None if not (a and b) else a >= times * b,
                           mock=b, ratio=round(a / b, 3) if a and b else None))
    a, b = raw8("ConsumerGroupHeartbeat", "kcoord"), raw8("Heartbeat", "kcoord")
    out.append(_target("KIP-848 ConsumerGroupHeartbeat requests/s at 8 connections >= classic Heartbeat's",
                       a, None if not (a and b) else a >= b, classic=b, ratio=round(a / b, 3) if a and b else None))
    commit, scale, rate = _commit_16(rows("commit")), _largest_scale(rows("scale")), _load_rate(results)
    if commit is not None:
        a, p99, _, mock = commit
        out.append(_target("durable commits (16 committers) >= 500,000 offsets/s with p99 < 10 ms", a,
                           None if a is None or p99 is None else a >= 500_000 and p99 < 10,
                           p99_ms=p99, mock=mock))
    if scale is not None:
        create, per, groups = scale
        out.append(_target("<= 100 us broker CPU to create a one-member group", create,
                           None if create is None else create <= 100, groups=groups))
        out.append(_target("<= 1 KB broker RSS per idle member", per, None if per is None else per <= 1024,
                           groups=groups))
    if rate is not None:
        out.append(_target("offsets load at start-up >= 3,000,000 records/s", rate[0],
                           None if rate[0] is None else rate[0] >= 3_000_000))
    limit = HEARTBEAT_MS / 1000 + 0.2
    sizes = [r["case"].get("consumers") for r in rows("rebalance")]
    for row in rows("rebalance"):
        if row["case"].get("consumers") != max(sizes):
            continue
        for what in ("rebalance_after_join_s", "rebalance_after_leave_s"):
            mine = _num((row.get("kcoord") or {}).get(what))
            peers = {b: (row.get(b) or {}).get(what) if isinstance(row.get(b), dict) else None
                     for b in ("mock", "tansu")}
            out.append(_target(f"{what} with {max(sizes)} consumers ({row['case'].get('strategy')}) "
                               f"<= {limit:.1f}s and faster than both peers", mine,
                               None if mine is None or any(p is None for p in peers.values())
                               else mine <= limit and all(_beaten(mine, p) for p in peers.values()),
                               **peers))
    out += _issue_33(rows("raw"), commit, scale, rate)
    return out


def _commit_16(rows: list[dict[str, Any]]) -> tuple[float | None, ...] | None:
    """The commit scenario at 16 committers: kcoord's offsets/s, p99 ms and CPU us an offset,
    and the mock's offsets/s; None if not measured."""
    for row in rows:
        if row["case"].get("committers") == 16:
            k = row.get("kcoord") or {}
            return (_num(k.get("offsets_per_s")), _num((k.get("latency_ms") or {}).get("p99")),
                    _num(k.get("broker_cpu_us_per_offset")), _num((row.get("mock") or {}).get("offsets_per_s")))
    return None


def _largest_scale(rows: list[dict[str, Any]]) -> tuple[float | None, float | None, Any] | None:
    """kcoord's CPU us to create a group and RSS bytes a member at the most groups, and that
    number of groups; None if not measured."""
    if not rows:
        return None
    row = max(rows, key=lambda r: r["case"].get("groups") or 0)
    k = row.get("kcoord") or {}
    return (_num(k.get("broker_cpu_us_per_group_create")), _num(k.get("rss_per_member_bytes")),
            row["case"].get("groups"))


def _load_rate(results: dict[str, Any]) -> tuple[float | None] | None:
    """kcoord's offset records loaded a second at start-up; None if not measured."""
    restart_kcoord = (results.get("restart") or {}).get("kcoord")
    return (_num(restart_kcoord.get("records_per_s")),) if isinstance(restart_kcoord, dict) else None


def _issue_33(raw: list[dict[str, Any]], commit: tuple[float | None, ...] | None,
              scale: tuple[float | None, float | None, Any] | None,
              rate: tuple[float | None] | None) -> list[dict[str, Any]]:
    """Issue 33's goals (the JVM coordinator's own benchmarks as the bar), from the figures
    :func:`targets` took out."""
    out: list[dict[str, Any]] = []
    for row in raw:
        if row["case"].get("api") == "OffsetFetch" and row["case"].get("connections") == 8:
            k, mock = row.get("kcoord") or {}, row.get("mock") or {}
            a, b = _num(k.get("requests_per_s")), _num(mock.get("requests_per_s"))
            cpu = _num(k.get("broker_cpu_us_per_op"))
            out.append(_target("issue 33: OffsetFetch at 8 connections >= 2x mock at <= 4 us broker CPU", a,
                               None if not (a and b and cpu) else a >= 2 * b and cpu <= 4, mock=b, cpu_us=cpu))
    if commit is not None:
        a, p99, cpu, _ = commit
        out.append(_target("issue 33: durable commits (16 committers) >= 500,000 offsets/s, p99 < 10 ms, "
                           "<= 1.5 us broker CPU per offset", a,
                           None if a is None or p99 is None or cpu is None
                           else a >= 500_000 and p99 < 10 and cpu <= 1.5,
                           p99_ms=p99, cpu_us=cpu))
    if scale is not None:
        create, per, groups = scale
        out.append(_target("issue 33: <= 150 us broker CPU to create a one-member group", create,
                           None if create is None else create <= 150, groups=groups))
        out.append(_target("issue 33: <= 700 bytes broker RSS per idle member", per,
                           None if per is None else per <= 700, groups=groups))
    if rate is not None:
        out.append(_target("issue 33: offsets load at start-up >= 5,000,000 records/s", rate[0],
                           None if rate[0] is None else rate[0] >= 5_000_000))
    return out
