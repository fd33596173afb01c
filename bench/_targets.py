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
    for row in rows("commit"):
        if row["case"].get("committers") == 16:
            k = row.get("kcoord") or {}
            a, p99 = _num(k.get("offsets_per_s")), _num((k.get("latency_ms") or {}).get("p99"))
            out.append(_target("durable commits (16 committers) >= 500,000 offsets/s with p99 < 10 ms", a,
                               None if a is None or p99 is None else a >= 500_000 and p99 < 10,
                               p99_ms=p99, mock=_num((row.get("mock") or {}).get("offsets_per_s"))))
    scale_rows = rows("scale")
    if scale_rows:
        row = max(scale_rows, key=lambda r: r["case"].get("groups") or 0)
        k = row.get("kcoord") or {}
        create, per = _num(k.get("broker_cpu_us_per_group_create")), _num(k.get("rss_per_member_bytes"))
        out.append(_target("<= 100 us broker CPU to create a one-member group", create,
                           None if create is None else create <= 100, groups=row["case"].get("groups")))
        out.append(_target("<= 1 KB broker RSS per idle member", per, None if per is None else per <= 1024,
                           groups=row["case"].get("groups")))
    restart_kcoord = (results.get("restart") or {}).get("kcoord")
    if isinstance(restart_kcoord, dict):
        rate = _num(restart_kcoord.get("records_per_s"))
        out.append(_target("offsets load at start-up >= 3,000,000 records/s", rate,
                           None if rate is None else rate >= 3_000_000))
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
    out += _issue_33(results, rows("raw"), rows("commit"), rows("scale"))
    return out


def _issue_33(results: dict[str, Any], raw: list[dict[str, Any]], commit: list[dict[str, Any]],
              scale: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Issue 33's goals (the JVM coordinator's own benchmarks as the bar)."""
    out: list[dict[str, Any]] = []
    for row in raw:
        if row["case"].get("api") == "OffsetFetch" and row["case"].get("connections") == 8:
            k, mock = row.get("kcoord") or {}, row.get("mock") or {}
            a, b = _num(k.get("requests_per_s")), _num(mock.get("requests_per_s"))
            cpu = _num(k.get("broker_cpu_us_per_op"))
            out.append(_target("issue 33: OffsetFetch at 8 connections >= 2x mock at <= 4 us broker CPU", a,
                               None if not (a and b and cpu) else a >= 2 * b and cpu <= 4, mock=b, cpu_us=cpu))
    for row in commit:
        if row["case"].get("committers") == 16:
            k = row.get("kcoord") or {}
            a, p99 = _num(k.get("offsets_per_s")), _num((k.get("latency_ms") or {}).get("p99"))
            cpu = _num(k.get("broker_cpu_us_per_offset"))
            out.append(_target("issue 33: durable commits (16 committers) >= 500,000 offsets/s, p99 < 10 ms, "
                               "<= 1.5 us broker CPU per offset", a,
                               None if a is None or p99 is None or cpu is None
                               else a >= 500_000 and p99 < 10 and cpu <= 1.5,
                               p99_ms=p99, cpu_us=cpu))
    if scale:
        row = max(scale, key=lambda r: r["case"].get("groups") or 0)
        k = row.get("kcoord") or {}
        create, per = _num(k.get("broker_cpu_us_per_group_create")), _num(k.get("rss_per_member_bytes"))
        out.append(_target("issue 33: <= 150 us broker CPU to create a one-member group", create,
                           None if create is None else create <= 150, groups=row["case"].get("groups")))
        out.append(_target("issue 33: <= 700 bytes broker RSS per idle member", per,
                           None if per is None else per <= 700, groups=row["case"].get("groups")))
    restart_kcoord = (results.get("restart") or {}).get("kcoord")
    if isinstance(restart_kcoord, dict):
        rate = _num(restart_kcoord.get("records_per_s"))
        out.append(_target("issue 33: offsets load at start-up >= 5,000,000 records/s", rate,
                           None if rate is None else rate >= 5_000_000))
    return out
