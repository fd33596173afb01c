"""``kcoord offsets reset|delete``: which partitions, and the new offsets of a reset.

A reset (kafka-consumer-groups.sh --reset-offsets) is a dry run unless ``--execute``, and only
for a group with no members; the new offsets are kept within each partition's log. Its scope is
``--topic T[:P,...]``, ``--all-topics`` (what the group has committed) or the plan of
``--from-file``; its scenario one of ``--to-earliest``, ``--to-latest``, ``--to-current``,
``--to-offset``, ``--shift-by``, ``--to-datetime``, ``--by-duration`` (ISO 8601, ``PT30M``) and
``--from-file``. ``--export`` prints the plan as Kafka's CSV (``topic,partition,offset`` for one
group, ``group,topic,partition,offset`` for several), which ``--from-file`` reads back. A delete
is OffsetDelete, which the broker refuses for topics the group still consumes.
"""

from __future__ import annotations

import argparse
import re
import time
from datetime import datetime
from pathlib import Path

from .client import Admin, AdminError, Group
from .output import note, print_json, print_table

Plan = dict[tuple[str, int], int]
SCENARIOS = (
    "to_earliest", "to_latest", "to_current", "to_offset", "shift_by", "to_datetime", "by_duration",
    "from_file",
)  # fmt: skip


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


_DURATION = re.compile(
    r"([-+]?)P(?:([-+]?\d+)D)?(?:T(?:([-+]?\d+)H)?(?:([-+]?\d+)M)?(?:([-+]?\d+)(?:[.,](\d{0,9}))?S)?)?",
    re.IGNORECASE,
)


def parse_duration_ms(text: str) -> int:
    """An ISO 8601 duration as Java's Duration.parse reads it (``PnDTnHnMn.nS``, e.g. ``PT30M``,
    ``P1DT2H``) -> milliseconds."""
    m = _DURATION.fullmatch(text.strip())
    if m is None or not any(m.group(i) for i in (2, 3, 4, 5)) or text.strip().upper().endswith("T"):
        raise ValueError(f"--by-duration {text!r}: expected an ISO 8601 duration, e.g. PT30M or P1DT2H")
    sign, days, hours, minutes, seconds, fraction = m.groups()
    ms = (
        int(days or 0) * 86_400_000
        + int(hours or 0) * 3_600_000
        + int(minutes or 0) * 60_000
        + int(seconds or 0) * 1000
    )
    if fraction:
        part = int((fraction + "000")[:3])
        ms += -part if (seconds or "").startswith("-") else part
    return -ms if sign == "-" else ms


def read_reset_file(path: str, groups: list[str]) -> dict[str, Plan]:
    """Kafka's reset CSV: ``topic,partition,offset`` lines (for the one group given) or
    ``group,topic,partition,offset`` lines; the plan by group."""
    try:
        lines = [ln.strip() for ln in Path(path).read_text().splitlines() if ln.strip()]
    except OSError as e:
        raise ValueError(f"--from-file {path}: {e.strerror or e}") from None
    plans: dict[str, Plan] = {}
    for n, line in enumerate(lines, 1):
        fields = [f.strip() for f in line.split(",")]
        if len(fields) == 3 and len(groups) == 1:
            fields.insert(0, groups[0])
        if len(fields) != 4:
            raise ValueError(
                f"--from-file {path} line {n}: expected group,topic,partition,offset"
                + (" or topic,partition,offset" if len(groups) == 1 else "")
            )
        try:
            tp, offset = (fields[1], int(fields[2])), int(fields[3])
        except ValueError:
            raise ValueError(f"--from-file {path} line {n}: partition and offset must be numbers") from None
        plans.setdefault(fields[0], {})[tp] = offset
    return plans


def export_csv(plans: dict[str, Plan], with_group: bool) -> str:
    """The plans as Kafka's reset CSV (what :func:`read_reset_file` reads)."""
    return "".join(
        (f"{g}," if with_group else "") + f"{t},{p},{o}\n"
        for g, plan in plans.items()
        for (t, p), o in sorted(plan.items())
    )


def _selected_partitions(admin: Admin, specs: list[str]) -> list[tuple[str, int]]:
    out: set[tuple[str, int]] = set()
    for spec in specs:
        topic, parts = parse_topic(spec)
        if parts is None:
            parts = admin.topic_partitions(topic)
        out.update((topic, p) for p in parts)
    return sorted(out)


def check_reset_args(args: argparse.Namespace) -> None:
    """Usage errors of a reset, found before any call: one scenario, a scope, valid times."""
    # Not "in (None, False)": 0 == False, and --to-offset 0 / --shift-by 0 are scenarios.
    given = [s for s in SCENARIOS if getattr(args, s, None) is not None and getattr(args, s) is not False]
    if len(given) != 1:
        names = ", ".join("--" + s.replace("_", "-") for s in SCENARIOS)
        raise ValueError(f"a reset needs exactly one of {names}")
    if not (args.topic or getattr(args, "all_topics", False) or getattr(args, "from_file", None)):
        raise ValueError("a reset needs a scope: --topic, --all-topics or --from-file")
    if args.to_datetime is not None:
        parse_datetime_ms(args.to_datetime)
    if getattr(args, "by_duration", None) is not None:
        parse_duration_ms(args.by_duration)


def plan_reset(
    admin: Admin, group_id: str, args: argparse.Namespace, from_file: Plan | None = None
) -> Plan:
    """The new offset of every selected partition (kafka-consumer-groups.sh --reset-offsets);
    ``from_file`` is this group's plan of ``--from-file``."""
    from confluent_kafka.admin import OffsetSpec

    current = admin.committed(group_id) if _needs_committed(args) else {}
    if getattr(args, "all_topics", False):
        partitions = sorted(current)
    elif args.topic:
        partitions = _selected_partitions(admin, args.topic)
    else:
        partitions = sorted(from_file or {})
    earliest = admin.list_offsets(partitions, OffsetSpec.earliest())
    latest = admin.list_offsets(partitions, OffsetSpec.latest())

    def clamp(tp: tuple[str, int], offset: int) -> int:
        return min(max(offset, earliest[tp]), latest[tp])

    if args.to_earliest:
        return dict(earliest)
    if args.to_latest:
        return dict(latest)
    if getattr(args, "to_current", False):
        return {tp: current.get(tp, latest[tp]) for tp in partitions}
    if from_file is not None:
        return {tp: clamp(tp, from_file[tp]) for tp in partitions if tp in from_file}
    if args.to_offset is not None:
        return {tp: clamp(tp, args.to_offset) for tp in partitions}
    if args.shift_by is not None:
        missing = [tp for tp in partitions if tp not in current]
        if missing:
            t, p = missing[0]
            raise AdminError(
                f"cannot shift the offset of {t}-{p}: group '{group_id}' has no committed offset there"
            )
        return {tp: clamp(tp, current[tp] + args.shift_by) for tp in partitions}
    if getattr(args, "by_duration", None) is not None:
        ts = int(time.time() * 1000) - parse_duration_ms(args.by_duration)
    else:
        ts = parse_datetime_ms(args.to_datetime)
    found = admin.list_offsets(partitions, OffsetSpec.for_timestamp(ts))
    # No record at or after the time: the log end, as Kafka does.
    return {tp: found[tp] if found[tp] >= 0 else latest[tp] for tp in partitions}


def _needs_committed(args: argparse.Namespace) -> bool:
    return bool(
        getattr(args, "all_topics", False)
        or getattr(args, "to_current", False)
        or args.shift_by is not None
    )


def _require_inactive(group: Group, doing: str) -> None:
    if group.members or group.state not in ("Empty", "Dead", "Unknown"):
        raise AdminError(
            f"{doing} can only be done while the group '{group.group_id}' is inactive (no"
            f" members), but the current state is {group.state} with {len(group.members)}"
            " member(s). Stop its consumers first."
        )


def offsets_reset(admin: Admin, args: argparse.Namespace) -> int:
    check_reset_args(args)
    groups: list[str] = args.group
    files = read_reset_file(args.from_file, groups) if getattr(args, "from_file", None) else None
    plans: dict[str, Plan] = {}
    for gid in groups:
        _require_inactive(admin.describe(gid), "Offsets reset")
        if files is not None and gid not in files:
            note(f"Error: no reset plan for group {gid} found in {args.from_file}")
            continue
        plans[gid] = plan_reset(admin, gid, args, files[gid] if files is not None else None)
    if args.execute:
        for gid, plan in plans.items():
            if plan:
                admin.alter(gid, plan)
    else:
        note("Dry run: nothing changed. Add --execute to commit these offsets.")
    if getattr(args, "export", False):
        print(export_csv(plans, with_group=len(groups) != 1), end="")
    elif args.json:
        print_json(
            {
                "executed": bool(args.execute),
                "offsets": [
                    {"group": g, "topic": t, "partition": p, "new_offset": o}
                    for g, plan in plans.items()
                    for (t, p), o in sorted(plan.items())
                ],
            }
        )
    else:
        print_table(
            ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"],
            [[g, t, p, o] for g, plan in plans.items() for (t, p), o in sorted(plan.items())],
        )
    return 0


def offsets_delete(admin: Admin, args: argparse.Namespace) -> int:
    from kcoord.protocol.errors import ErrorCode

    if not args.topic:
        raise ValueError("deleting offsets needs --topic T[:P,...]")
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
