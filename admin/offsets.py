"""``kcoord offsets reset|delete``: which partitions, and the new offsets of a reset.

A reset (kafka-consumer-groups.sh --reset-offsets) is a dry run unless ``--execute``, and only
for a group with no members; the new offsets are kept within each partition's log. A delete is
OffsetDelete, which the broker refuses for topics the group still consumes.
"""

from __future__ import annotations

import argparse
from datetime import datetime

from .client import Admin, AdminError, Group
from .output import note, print_json, print_table


def parse_topic(spec: str) -> tuple[str, list[int] | None]:
    """``T`` (every partition) or ``T:0,1``."""
    topic, sep, parts = spec.partition(":")
    if not topic:
        raise ValueError(f"--topic {spec!r}: no topic name")
    if not sep:
        return topic, None
    try:
        return topic, sorted({int(p) for p in parts.split(",") if p.strip()})
    except ValueError:
        raise ValueError(f"--topic {spec!r}: partitions must be numbers, e.g. {topic}:0,1") from None


def parse_datetime_ms(text: str) -> int:
    """ISO 8601 (``Z`` or an offset allowed; without one, local time) -> epoch milliseconds."""
    try:
        dt = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(
            f"--to-datetime {text!r}: expected ISO 8601, e.g. 2024-05-01T12:00:00 or"
            " 2024-05-01T12:00:00.000+00:00"
        ) from None
    if dt.tzinfo is None:
        dt = dt.astimezone()  # local time, as kafka-consumer-groups.sh assumes
    return int(dt.timestamp() * 1000)


def _selected_partitions(admin: Admin, specs: list[str]) -> list[tuple[str, int]]:
    out: set[tuple[str, int]] = set()
    for spec in specs:
        topic, parts = parse_topic(spec)
        if parts is None:
            parts = admin.topic_partitions(topic)
        out.update((topic, p) for p in parts)
    return sorted(out)


def plan_reset(admin: Admin, group_id: str, args: argparse.Namespace) -> dict[tuple[str, int], int]:
    """The new offset of every selected partition (kafka-consumer-groups.sh --reset-offsets)."""
    from confluent_kafka.admin import OffsetSpec

    partitions = _selected_partitions(admin, args.topic)
    earliest = admin.list_offsets(partitions, OffsetSpec.earliest())
    latest = admin.list_offsets(partitions, OffsetSpec.latest())

    def clamp(tp: tuple[str, int], offset: int) -> int:
        return min(max(offset, earliest[tp]), latest[tp])

    if args.to_earliest:
        return dict(earliest)
    if args.to_latest:
        return dict(latest)
    if args.to_offset is not None:
        return {tp: clamp(tp, args.to_offset) for tp in partitions}
    if args.shift_by is not None:
        current = admin.committed(group_id)
        missing = [tp for tp in partitions if tp not in current]
        if missing:
            t, p = missing[0]
            raise AdminError(
                f"cannot shift the offset of {t}-{p}: group '{group_id}' has no committed offset there"
            )
        return {tp: clamp(tp, current[tp] + args.shift_by) for tp in partitions}
    ts = parse_datetime_ms(args.to_datetime)
    found = admin.list_offsets(partitions, OffsetSpec.for_timestamp(ts))
    # No record at or after the time: the log end, as Kafka does.
    return {tp: found[tp] if found[tp] >= 0 else latest[tp] for tp in partitions}


def _require_inactive(group: Group, doing: str) -> None:
    if group.members or group.state not in ("Empty", "Dead", "Unknown"):
        raise AdminError(
            f"{doing} can only be done while the group '{group.group_id}' is inactive (no"
            f" members), but the current state is {group.state} with {len(group.members)}"
            " member(s). Stop its consumers first."
        )


def offsets_reset(admin: Admin, args: argparse.Namespace) -> int:
    if args.to_datetime is not None:
        parse_datetime_ms(args.to_datetime)  # a bad date is a usage error, found before any call
    group = admin.describe(args.group)
    _require_inactive(group, "Offsets reset")
    plan = plan_reset(admin, args.group, args)
    if args.execute:
        admin.alter(args.group, plan)
    else:
        note("Dry run: nothing changed. Add --execute to commit these offsets.")
    if args.json:
        print_json(
            {
                "executed": bool(args.execute),
                "offsets": [
                    {"group": args.group, "topic": t, "partition": p, "new_offset": o}
                    for (t, p), o in sorted(plan.items())
                ],
            }
        )
    else:
        print_table(
            ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"],
            [[args.group, t, p, o] for (t, p), o in sorted(plan.items())],
        )
    return 0


def offsets_delete(admin: Admin, args: argparse.Namespace) -> int:
    from kcoord.protocol.errors import ErrorCode

    group = admin.describe(args.group)
    committed = admin.committed(args.group)
    partitions: set[tuple[str, int]] = set()
    for spec in args.topic:
        topic, parts = parse_topic(spec)
        if parts is None:
            parts = sorted(p for t, p in committed if t == topic)
            if not parts:
                raise AdminError(f"group '{args.group}' has no committed offsets for topic '{topic}'")
        partitions.update((topic, p) for p in parts)
    error, results = admin.delete_offsets(group, sorted(partitions))
    if error:
        raise AdminError(f"deleting offsets of group '{args.group}': {ErrorCode(error).name}")

    def status(code: int) -> str:
        return "Successful" if code == 0 else ErrorCode(code).name.upper()

    rows = sorted(results.items())
    if args.json:
        print_json(
            [{"group": args.group, "topic": t, "partition": p, "status": status(c)} for (t, p), c in rows]
        )
    else:
        failed = any(c for _tp, c in rows)
        topics = ", ".join(sorted({t for (t, _p), _c in rows}))
        verb = "failed" if failed else "succeed"
        print(f"Request {verb} for deleting offsets with topic {topics} group {args.group}")
        print()
        print_table(["TOPIC", "PARTITION", "STATUS"], [[t, p, status(c)] for (t, p), c in rows])
    return 1 if any(c for _tp, c in rows) else 0
