"""``kcoord groups`` and ``kcoord offsets``: consumer-group administration over the Kafka protocol.

The commands are ordinary Kafka admin clients (librdkafka's AdminClient: ListGroups,
DescribeGroups, OffsetFetch, ListOffsets, OffsetCommit, DeleteGroups, Metadata), so they work
against Apache Kafka as well as kcoord. OffsetDelete, which the AdminClient of confluent-kafka
does not expose, is sent directly to the group's coordinator with the codecs of ``protocol/``.

Output follows kafka-consumer-groups.sh: the same columns (GROUP TOPIC PARTITION CURRENT-OFFSET
LOG-END-OFFSET LAG CONSUMER-ID HOST CLIENT-ID; ``--members``; ``--state``), ``-`` where there is
no value, notes on stderr; ``--json`` prints the same rows as JSON instead.
Exit status: 0 done, 1 refused or failed, 2 bad usage.
"""

from __future__ import annotations

import argparse
import json
import socket
import struct
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

DEFAULT_BOOTSTRAP = "localhost:9092"

# librdkafka's ConsumerGroupState names -> Kafka's state names (as ListGroups reports them).
_STATE_NAMES = {
    "UNKNOWN": "Unknown",
    "PREPARING_REBALANCING": "PreparingRebalance",
    "COMPLETING_REBALANCING": "CompletingRebalance",
    "STABLE": "Stable",
    "DEAD": "Dead",
    "EMPTY": "Empty",
}
KAFKA_STATES = ("Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead")


class AdminError(Exception):
    """A refusal or failure to report as ``Error: ...`` with exit status 1."""


# argument parsing ---------------------------------------------------------------------------------
def add_parsers(sub: Any) -> None:
    """Add the ``groups`` and ``offsets`` subcommands to the ``kcoord`` parser."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--bootstrap-server",
        default=DEFAULT_BOOTSTRAP,
        metavar="H:P",
        help=f"a broker to connect to (default {DEFAULT_BOOTSTRAP})",
    )
    common.add_argument("--json", action="store_true", help="print JSON instead of a table")
    common.add_argument(
        "--timeout", type=float, default=30.0, help="seconds to wait for each answer (default 30)"
    )

    groups = sub.add_parser("groups", help="list, describe and delete consumer groups")
    gsub = groups.add_subparsers(dest="action", required=True)
    p = gsub.add_parser("list", parents=[common], help="list the consumer groups")
    p.add_argument(
        "--state",
        nargs="?",
        const="",
        default=None,
        metavar="S",
        help="show each group's state; with a state name, only groups in that state",
    )
    p = gsub.add_parser(
        "describe", parents=[common], help="committed offsets and lag, members, or state"
    )
    p.add_argument("group", nargs="+", metavar="GROUP")
    what = p.add_mutually_exclusive_group()
    what.add_argument("--offsets", dest="view", action="store_const", const="offsets")
    what.add_argument("--members", dest="view", action="store_const", const="members")
    what.add_argument("--state", dest="view", action="store_const", const="state")
    p.set_defaults(view="offsets")
    p = gsub.add_parser("delete", parents=[common], help="delete empty consumer groups")
    p.add_argument("group", nargs="+", metavar="GROUP")

    offsets = sub.add_parser("offsets", help="reset or delete a group's committed offsets")
    osub = offsets.add_subparsers(dest="action", required=True)
    p = osub.add_parser(
        "reset", parents=[common], help="reset committed offsets (a dry run unless --execute)"
    )
    p.add_argument("group", metavar="GROUP")
    p.add_argument(
        "--topic",
        action="append",
        required=True,
        metavar="T[:P,P...]",
        help="a topic, or some of its partitions (repeatable)",
    )
    to = p.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true")
    to.add_argument("--to-latest", action="store_true")
    to.add_argument("--to-offset", type=int, metavar="N")
    to.add_argument("--shift-by", type=int, metavar="N")
    to.add_argument(
        "--to-datetime",
        metavar="ISO",
        help="e.g. 2024-05-01T12:00:00 (local time) or 2024-05-01T12:00:00+00:00",
    )
    p.add_argument("--execute", action="store_true", help="apply the new offsets")
    p = osub.add_parser("delete", parents=[common], help="delete a group's offsets of a topic")
    p.add_argument("group", metavar="GROUP")
    p.add_argument("--topic", action="append", required=True, metavar="T[:P,P...]")


def run(args: argparse.Namespace) -> int:
    """Run a parsed ``groups`` or ``offsets`` command; returns the exit status."""
    try:
        admin = Admin(args.bootstrap_server, args.timeout)
        command = {
            ("groups", "list"): _groups_list,
            ("groups", "describe"): _groups_describe,
            ("groups", "delete"): _groups_delete,
            ("offsets", "reset"): _offsets_reset,
            ("offsets", "delete"): _offsets_delete,
        }[(args.command, args.action)]
        return command(admin, args)
    except AdminError as e:
        print(f"Error: {e}", file=sys.stderr)
        return 1
    except ValueError as e:  # bad --topic or --to-datetime
        print(f"Error: {e}", file=sys.stderr)
        return 2


# the client ---------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    host: str
    assignment: tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True)
class Group:
    group_id: str
    state: str
    assignor: str
    coordinator: tuple[int, str, int]  # id, host, port
    members: tuple[Member, ...]


class Admin:
    """The few admin calls the commands need, over confluent-kafka's AdminClient."""

    def __init__(self, bootstrap: str, timeout: float) -> None:
        from confluent_kafka.admin import AdminClient

        self.timeout = timeout
        self.bootstrap = bootstrap
        self.client = AdminClient(
            {
                "bootstrap.servers": bootstrap,
                "socket.timeout.ms": int(timeout * 1000),
                "log_level": 2,  # librdkafka's own connection chatter stays out of the output
            }
        )

    def _wait(self, future: Any, what: str) -> Any:
        try:
            return future.result(timeout=self.timeout)
        except Exception as e:
            raise AdminError(f"{what}: {_reason(e)}") from None

    def list_groups(self) -> list[tuple[str, str]]:
        result = self._wait(
            self.client.list_consumer_groups(request_timeout=self.timeout), "listing groups"
        )
        if result.errors:
            raise AdminError(f"listing groups: {_reason(result.errors[0])}")
        return sorted((g.group_id, _state_name(g.state)) for g in result.valid)

    def describe(self, group_id: str) -> Group:
        futures = self.client.describe_consumer_groups([group_id], request_timeout=self.timeout)
        d = self._wait(futures[group_id], f"describing group {group_id!r}")
        members = tuple(
            Member(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                host=m.host,
                assignment=tuple(
                    sorted((tp.topic, tp.partition) for tp in m.assignment.topic_partitions)
                )
                if m.assignment is not None
                else (),
            )
            for m in d.members
        )
        c = d.coordinator
        return Group(
            group_id,
            _state_name(d.state),
            d.partition_assignor or "",
            (c.id, c.host, c.port) if c is not None else (-1, "", -1),
            members,
        )

    def committed(self, group_id: str) -> dict[tuple[str, int], int]:
        from confluent_kafka import ConsumerGroupTopicPartitions

        futures = self.client.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group_id)], request_timeout=self.timeout
        )
        result = self._wait(futures[group_id], f"fetching offsets of group {group_id!r}")
        return {
            (tp.topic, tp.partition): tp.offset
            for tp in result.topic_partitions or []
            if tp.offset >= 0 and tp.error is None
        }

    def list_offsets(self, partitions: Iterable[tuple[str, int]], spec: Any) -> dict[tuple[str, int], int]:
        """Offsets by ListOffsets: ``spec`` is an OffsetSpec (earliest, latest, a timestamp)."""
        from confluent_kafka import TopicPartition

        request = {TopicPartition(t, p): spec for t, p in partitions}
        if not request:
            return {}
        futures = self.client.list_offsets(request, request_timeout=self.timeout)
        return {
            (tp.topic, tp.partition): self._wait(f, f"listing offsets of {tp.topic}-{tp.partition}").offset
            for tp, f in futures.items()
        }

    def log_end_offsets(self, partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], int]:
        from confluent_kafka.admin import OffsetSpec

        return self.list_offsets(partitions, OffsetSpec.latest())

    def topic_partitions(self, topic: str) -> list[int]:
        from confluent_kafka import TopicCollection

        futures = self.client.describe_topics(TopicCollection([topic]), request_timeout=self.timeout)
        d = self._wait(futures[topic], f"describing topic {topic!r}")
        return sorted(p.id for p in d.partitions)

    def alter(self, group_id: str, offsets: dict[tuple[str, int], int]) -> None:
        from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

        request = ConsumerGroupTopicPartitions(
            group_id, [TopicPartition(t, p, o) for (t, p), o in sorted(offsets.items())]
        )
        futures = self.client.alter_consumer_group_offsets(
            [request], request_timeout=self.timeout
        )
        result = self._wait(futures[group_id], f"committing offsets of group {group_id!r}")
        failed = [tp for tp in result.topic_partitions or [] if tp.error is not None]
        if failed:
            tp = failed[0]
            raise AdminError(f"committing {tp.topic}-{tp.partition}: {_reason(tp.error)}")

    def delete_groups(self, group_ids: list[str]) -> dict[str, str | None]:
        """Group id -> None if deleted, else the reason."""
        futures = self.client.delete_consumer_groups(group_ids, request_timeout=self.timeout)
        out: dict[str, str | None] = {}
        for gid, f in futures.items():
            try:
                f.result(timeout=self.timeout)
                out[gid] = None
            except Exception as e:
                out[gid] = _reason(e)
        return out

    def delete_offsets(
        self, group: Group, partitions: Sequence[tuple[str, int]]
    ) -> tuple[int, dict[tuple[str, int], int]]:
        """OffsetDelete v0 to the group's coordinator: (group error, per-partition errors)."""
        from protocol.apis import ApiKey

        _cid, host, port = group.coordinator
        if port < 0:
            raise AdminError(f"no coordinator known for group {group.group_id!r}")
        by_topic: dict[str, list[int]] = {}
        for t, p in partitions:
            by_topic.setdefault(t, []).append(p)
        r = _wire_request(
            host,
            port,
            self.timeout,
            ApiKey.OFFSET_DELETE,
            0,
            group_id=group.group_id,
            topics=[
                dict(name=t, partitions=[dict(partition_index=p) for p in ps])
                for t, ps in by_topic.items()
            ],
        )
        errors = {(t.name, p.partition_index): int(p.error_code) for t in r.topics for p in t.partitions}
        return int(r.error_code), errors


def _wire_request(host: str, port: int, timeout: float, api_key: int, version: int, **fields: Any) -> Any:
    """One request/response on a fresh connection (non-flexible versions only)."""
    from kio.serial import entity_reader

    from protocol.codec import encode_body, request_type, response_type
    from protocol.responses import build

    body = encode_body(build(request_type(api_key, version), **fields))
    client_id = b"kcoord-admin"
    header = struct.pack(">hhih", api_key, version, 1, len(client_id)) + client_id
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(struct.pack(">i", len(header) + len(body)) + header + body)
            size = struct.unpack(">i", _recv_exact(sock, 4))[0]
            frame = _recv_exact(sock, size)
    except OSError as e:
        raise AdminError(f"coordinator {host}:{port}: {e}") from None
    reader: Any = entity_reader(response_type(api_key, version))
    return reader(frame, 4)[0]  # the body starts after the correlation id


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError("connection closed by the broker")
        out += chunk
    return bytes(out)


def _reason(e: Any) -> str:
    """A KafkaError (or an exception carrying one) as NAME: message."""
    err = e.args[0] if isinstance(e, Exception) and e.args else e
    if hasattr(err, "name") and hasattr(err, "str"):
        return f"{err.name()}: {err.str()}"
    return str(e)


def _state_name(state: Any) -> str:
    name = getattr(state, "name", str(state))
    return _STATE_NAMES.get(name, name)


# output -------------------------------------------------------------------------------------------
def _cell(value: Any) -> str:
    return "-" if value is None or value == "" else str(value)


def print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    for row in [list(headers), *cells]:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=2))


def _note(text: str) -> None:
    print(text, file=sys.stderr)


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


# groups ---------------------------------------------------------------------------------------------
def _groups_list(admin: Admin, args: argparse.Namespace) -> int:
    groups = admin.list_groups()
    if args.state:
        wanted = {s.lower(): s for s in KAFKA_STATES}.get(args.state.lower())
        if wanted is None:
            raise ValueError(f"--state {args.state!r}: one of {', '.join(KAFKA_STATES)}")
        groups = [g for g in groups if g[1] == wanted]
    if args.json:
        _print_json([{"group": g, "state": s} for g, s in groups])
    elif args.state is not None:
        print_table(["GROUP", "STATE"], groups)
    else:
        for g, _s in groups:
            print(g)
    return 0


def offset_rows(admin: Admin, group: Group) -> list[dict[str, Any]]:
    """kafka-consumer-groups.sh --describe --offsets: one row per assigned or committed partition."""
    committed = admin.committed(group.group_id)
    owner: dict[tuple[str, int], Member] = {}
    for m in group.members:
        for tp in m.assignment:
            owner[tp] = m
    partitions = sorted(set(committed) | set(owner))
    ends = admin.log_end_offsets(partitions)
    rows = []
    for tp in partitions:
        current = committed.get(tp)
        end = ends.get(tp)
        o = owner.get(tp)
        rows.append(
            {
                "group": group.group_id,
                "topic": tp[0],
                "partition": tp[1],
                "current_offset": current,
                "log_end_offset": end,
                "lag": end - current if current is not None and end is not None and end >= 0 else None,
                "consumer_id": o.member_id if o else None,
                "host": o.host if o else None,
                "client_id": o.client_id if o else None,
            }
        )
    return rows


def member_rows(group: Group) -> list[dict[str, Any]]:
    return [
        {
            "group": group.group_id,
            "consumer_id": m.member_id,
            "group_instance_id": m.group_instance_id,
            "host": m.host,
            "client_id": m.client_id,
            "partitions": len(m.assignment),
            "assignment": [{"topic": t, "partition": p} for t, p in m.assignment],
        }
        for m in group.members
    ]


def format_assignment(assignment: Iterable[tuple[str, int]]) -> str:
    """``topic(0,1),other(2)`` as kafka-consumer-groups.sh --members --verbose prints it."""
    by_topic: dict[str, list[int]] = {}
    for t, p in assignment:
        by_topic.setdefault(t, []).append(p)
    return ",".join(f"{t}({','.join(map(str, sorted(ps)))})" for t, ps in sorted(by_topic.items()))


def state_row(group: Group) -> dict[str, Any]:
    cid, host, port = group.coordinator
    return {
        "group": group.group_id,
        "coordinator": {"id": cid, "host": host, "port": port},
        "assignment_strategy": group.assignor or None,
        "state": group.state,
        "members": len(group.members),
    }


def _groups_describe(admin: Admin, args: argparse.Namespace) -> int:
    out: list[dict[str, Any]] = []
    status = 0
    tables: list[tuple[list[str], list[list[Any]]]] = []
    for gid in args.group:
        group = admin.describe(gid)
        if group.state in ("Dead", "Unknown") and not group.members and not admin.committed(gid):
            _note(f"Error: Consumer group '{gid}' does not exist.")
            status = 1
            continue
        if args.view == "state":
            row = state_row(group)
            out.append(row)
            c = row["coordinator"]
            tables.append(
                (
                    ["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"],
                    [[gid, f"{c['host']}:{c['port']} ({c['id']})", group.assignor, group.state,
                      len(group.members)]],
                )
            )
            continue
        if group.state in ("PreparingRebalance", "CompletingRebalance"):
            _note(f"Warning: Consumer group '{gid}' is rebalancing.")
        elif not group.members:
            _note(f"Consumer group '{gid}' has no active members.")
        if args.view == "members":
            rows = member_rows(group)
            out.extend(rows)
            tables.append(
                (
                    ["GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID",
                     "#PARTITIONS", "ASSIGNMENT"],
                    [[r["group"], r["consumer_id"], r["group_instance_id"], r["host"], r["client_id"],
                      r["partitions"], format_assignment((a["topic"], a["partition"])
                                                         for a in r["assignment"])]
                     for r in rows],
                )
            )
        else:
            rows = offset_rows(admin, group)
            out.extend(rows)
            tables.append(
                (
                    ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                     "CONSUMER-ID", "HOST", "CLIENT-ID"],
                    [[r["group"], r["topic"], r["partition"], r["current_offset"],
                      r["log_end_offset"], r["lag"], r["consumer_id"], r["host"], r["client_id"]]
                     for r in rows],
                )
            )
    if args.json:
        _print_json(out)
    else:
        for i, (headers, cells) in enumerate(tables):
            if i:
                print()
            print_table(headers, cells)
    return status


def _groups_delete(admin: Admin, args: argparse.Namespace) -> int:
    results = admin.delete_groups(list(args.group))
    if args.json:
        _print_json([{"group": g, "deleted": e is None, "error": e} for g, e in results.items()])
    ok = [g for g, e in results.items() if e is None]
    failed = {g: e for g, e in results.items() if e is not None}
    if not args.json:
        if ok:
            print(
                "Deletion of requested consumer groups ("
                + ", ".join(f"'{g}'" for g in ok)
                + ") was successful."
            )
        if failed:
            print("Deletion of some consumer groups failed:")
            for g, e in failed.items():
                print(f"* Group '{g}' could not be deleted due to: {e}")
    return 1 if failed else 0


# offsets --------------------------------------------------------------------------------------------
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


def _offsets_reset(admin: Admin, args: argparse.Namespace) -> int:
    if args.to_datetime is not None:
        parse_datetime_ms(args.to_datetime)  # a bad date is a usage error, found before any call
    group = admin.describe(args.group)
    _require_inactive(group, "Offsets reset")
    plan = plan_reset(admin, args.group, args)
    if args.execute:
        admin.alter(args.group, plan)
    else:
        _note("Dry run: nothing changed. Add --execute to commit these offsets.")
    if args.json:
        _print_json(
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


def _offsets_delete(admin: Admin, args: argparse.Namespace) -> int:
    from protocol.errors import ErrorCode

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
        _print_json(
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
