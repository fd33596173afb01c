"""``kcoord groups list|describe|delete``, and the rows ``describe`` shows.

``list`` shows share groups (type ``share``) beside the classic and consumer groups.
``describe`` shows, like kafka-consumer-groups.sh, committed offsets and lag (``--offsets``, the
default: one row per partition the group is assigned or has an offset for; lag counts from the
log start offset when the committed offset is below it), members and their
assignments (``--members``), or the group's coordinator, assignor and state (``--state``); a
share group is described as kafka-share-groups.sh does (admin/shares.py).
"""

from __future__ import annotations

import argparse
from typing import Any

from .client import KAFKA_STATES, Admin, AdminError, Group, Member
from .output import format_assignment, note, print_json, print_table

GROUP_TYPES = ("classic", "consumer", "share")


def groups_list(admin: Admin, args: argparse.Namespace) -> int:
    from .share_client import SHARE_TYPE, list_share_groups

    if args.type and args.type.lower() not in GROUP_TYPES:
        raise ValueError(f"--type {args.type!r}: one of {', '.join(GROUP_TYPES)}")
    groups = admin.list_groups()
    try:
        shares = list_share_groups(admin)
    except AdminError as e:  # a broker without share groups (Kafka before 4.0)
        note(f"Share groups not listed: {e}")
        shares = {}
    groups = [g for g in groups if g[0] not in shares]
    groups = sorted(groups + [(g, s, SHARE_TYPE) for g, s in shares.items()])
    if args.state:
        wanted = {s.lower(): s for s in KAFKA_STATES}.get(args.state.lower())
        if wanted is None:
            raise ValueError(f"--state {args.state!r}: one of {', '.join(KAFKA_STATES)}")
        groups = [g for g in groups if g[1] == wanted]
    if args.type:
        groups = [g for g in groups if g[2] == args.type.lower()]
    if args.json:
        print_json([{"group": g, "state": s, "type": t} for g, s, t in groups])
    elif args.state is not None or args.type is not None:
        headers = ["GROUP"]
        headers += ["TYPE"] if args.type is not None else []
        headers += ["STATE"] if args.state is not None else []
        print_table(
            headers,
            [
                [g, *([t] if args.type is not None else []), *([s] if args.state is not None else [])]
                for g, s, t in groups
            ],
        )
    else:
        for g, _s, _t in groups:
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
    starts = admin.log_start_offsets(partitions) if committed else {}
    rows = []
    for tp in partitions:
        current = committed.get(tp)
        end = ends.get(tp)
        o = owner.get(tp)
        # records below the log start (DeleteRecords, retention) are gone: they are no lag
        behind = max(current, starts.get(tp, -1)) if current is not None else None
        rows.append(
            {
                "group": group.group_id,
                "topic": tp[0],
                "partition": tp[1],
                "current_offset": current,
                "log_end_offset": end,
                "lag": end - behind if behind is not None and end is not None and end >= 0 else None,
                "consumer_id": o.member_id if o else None,
                "host": o.host if o else None,
                "client_id": o.client_id if o else None,
            }
        )
    return rows


def member_rows(group: Group) -> list[dict[str, Any]]:
    rows = []
    for m in group.members:
        row: dict[str, Any] = {
            "group": group.group_id,
            "consumer_id": m.member_id,
            "group_instance_id": m.group_instance_id,
            "host": m.host,
            "client_id": m.client_id,
            "partitions": len(m.assignment),
            "assignment": [{"topic": t, "partition": p} for t, p in m.assignment],
        }
        if group.type == "consumer":  # KIP-848: where the member is and where it goes
            row["epoch"] = m.epoch
            row["target_assignment"] = [{"topic": t, "partition": p} for t, p in m.target or ()]
        rows.append(row)
    return rows


def _assignment(parts: list[dict[str, Any]]) -> str:
    return format_assignment((a["topic"], a["partition"]) for a in parts)


def state_row(group: Group) -> dict[str, Any]:
    cid, host, port = group.coordinator
    return {
        "group": group.group_id,
        "coordinator": {"id": cid, "host": host, "port": port},
        "assignment_strategy": group.assignor or None,
        "state": group.state,
        "type": group.type,
        "group_epoch": group.group_epoch,
        "assignment_epoch": group.assignment_epoch,
        "members": len(group.members),
    }


def groups_describe(admin: Admin, args: argparse.Namespace) -> int:
    from .share_client import describe_share_group
    from .shares import describe_share

    out: list[dict[str, Any]] = []
    status = 0
    verbose = bool(getattr(args, "verbose", False))
    kafka = verbose or bool(getattr(args, "kafka_layout", False))  # Kafka 4's columns
    tables: list[tuple[list[str], list[list[Any]]]] = []
    for gid in args.group:
        group = admin.describe(gid)
        share = None
        if group.state in ("Dead", "Unknown"):  # what a share group looks like to DescribeGroups
            try:
                share = describe_share_group(admin, gid)
            except AdminError:  # a broker without share groups
                share = None
        if share is not None:
            rows, headers, cells = describe_share(admin, share, args.view)
            out.extend(rows)
            tables.append((headers, cells))
            continue
        if group.state in ("Dead", "Unknown") and not group.members and not admin.committed(gid):
            note(f"Error: Consumer group '{gid}' does not exist.")
            status = 1
            continue
        if args.view == "state":
            row = state_row(group)
            out.append(row)
            c = row["coordinator"]
            if kafka:
                tables.append(kafka_state_table(group, verbose))
            elif group.type == "consumer":
                tables.append(
                    (
                        ["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "GROUP-EPOCH",
                         "TARGET-ASSIGNMENT-EPOCH", "#MEMBERS"],
                        [[gid, f"{c['host']}:{c['port']} ({c['id']})", group.assignor, group.state,
                          group.group_epoch, group.assignment_epoch, len(group.members)]],
                    )
                )
            else:
                tables.append(
                    (
                        ["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"],
                        [[gid, f"{c['host']}:{c['port']} ({c['id']})", group.assignor, group.state,
                          len(group.members)]],
                    )
                )
            continue
        if group.state in ("PreparingRebalance", "CompletingRebalance", "Assigning", "Reconciling"):
            note(f"Warning: Consumer group '{gid}' is rebalancing.")
        elif not group.members:
            note(f"Consumer group '{gid}' has no active members.")
        if args.view == "members":
            rows = member_rows(group)
            out.extend(rows)
            if kafka:
                tables.append(kafka_member_table(group, verbose))
                continue
            headers = ["GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID",
                       "#PARTITIONS", "ASSIGNMENT"]
            if group.type == "consumer":
                headers += ["EPOCH", "TARGET-ASSIGNMENT"]
            tables.append(
                (
                    headers,
                    [[r["group"], r["consumer_id"], r["group_instance_id"], r["host"], r["client_id"],
                      r["partitions"], _assignment(r["assignment"])]
                     + ([r["epoch"], _assignment(r["target_assignment"])]
                        if group.type == "consumer" else [])
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
        print_json(out)
    else:
        for i, (headers, cells) in enumerate(tables):
            if i:
                print()
            print_table(headers, cells)
    return status


def kafka_assignment(assignment: tuple[tuple[str, int], ...] | None) -> str:
    """``topic:0,1;other:2`` as Kafka 4's --members --verbose prints an assignment."""
    by_topic: dict[str, list[int]] = {}
    for t, p in assignment or ():
        by_topic.setdefault(t, []).append(p)
    text = ";".join(f"{t}:{','.join(map(str, sorted(ps)))}" for t, ps in sorted(by_topic.items()))
    return text or "-"


def kafka_member_table(group: Group, verbose: bool) -> tuple[list[str], list[list[Any]]]:
    """kafka-consumer-groups.sh --describe --members [--verbose]: GROUP-INSTANCE-ID only when a
    member has one; with --verbose each member's epoch and assignment, current and target."""
    instance = any(m.group_instance_id for m in group.members)
    headers = ["GROUP", "CONSUMER-ID", *(["GROUP-INSTANCE-ID"] if instance else []), "HOST",
               "CLIENT-ID", "#PARTITIONS"]  # fmt: skip
    if verbose:
        headers += ["CURRENT-EPOCH", "CURRENT-ASSIGNMENT", "TARGET-EPOCH", "TARGET-ASSIGNMENT"]
    cells = []
    for m in group.members:
        row: list[Any] = [group.group_id, m.member_id]
        row += [m.group_instance_id] if instance else []
        row += [m.host, m.client_id, len(m.assignment)]
        if verbose:
            target_epoch = group.assignment_epoch if m.target is not None else None
            row += [m.epoch, kafka_assignment(m.assignment), target_epoch, kafka_assignment(m.target)]
        cells.append(row)
    return headers, cells


def kafka_state_table(group: Group, verbose: bool) -> tuple[list[str], list[list[Any]]]:
    """kafka-consumer-groups.sh --describe --state [--verbose]."""
    cid, host, port = group.coordinator
    headers = ["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE"]
    row: list[Any] = [group.group_id, f"{host}:{port}  ({cid})", group.assignor, group.state]
    if verbose:
        headers += ["GROUP-EPOCH", "TARGET-ASSIGNMENT-EPOCH"]
        row += [group.group_epoch, group.assignment_epoch]
    return [*headers, "#MEMBERS"], [[*row, len(group.members)]]


def groups_delete(admin: Admin, args: argparse.Namespace) -> int:
    results = admin.delete_groups(list(args.group))
    if args.json:
        print_json([{"group": g, "deleted": e is None, "error": e} for g, e in results.items()])
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
