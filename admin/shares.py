"""Share groups (KIP-932) in the commands: ``kcoord groups describe`` of a share group, and
``kcoord share reset-offsets|delete-offsets``, as kafka-share-groups.sh does them.

- ``groups describe`` of a share group prints, per partition with share state, its
  share-partition start offset and lag (KIP-1226) (``--offsets``, the default: GROUP TOPIC
  PARTITION START-OFFSET LAG); its members and their assignments (``--members``); or its
  coordinator, state and epochs (``--state``).
- ``share reset-offsets`` sets the start offset of the selected partitions
  (AlterShareGroupOffsets): a dry run that prints the plan unless ``--execute``, refused while
  the group has members ("Share group 'G' is not empty."). A group that does not exist yet is
  created by the broker, so that its first consumers start where the reset says.
- ``share delete-offsets`` forgets the share state of whole topics (DeleteShareGroupOffsets):
  their next consumers start from ``share.auto.offset.reset``.
"""

from __future__ import annotations

import argparse
from typing import Any

from .client import Admin, AdminError
from .offsets import parse_datetime_ms, plan_reset
from .output import format_assignment, note, print_json, print_table
from .share_client import (
    ShareGroup,
    alter_share_offsets,
    delete_share_offsets,
    describe_share_group,
    share_offsets,
)


def add_share_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    """The ``share`` subcommands."""
    share = sub.add_parser("share", help="reset or delete a share group's offsets")
    ssub = share.add_subparsers(dest="action", required=True)
    p = ssub.add_parser(
        "reset-offsets",
        parents=[common],
        help="set the start offset of a share group's partitions (a dry run unless --execute)",
    )
    p.add_argument("--group", required=True, metavar="GROUP")
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
    to.add_argument(
        "--to-datetime",
        metavar="ISO",
        help="e.g. 2024-05-01T12:00:00 (local time) or 2024-05-01T12:00:00+00:00",
    )
    p.add_argument("--execute", action="store_true", help="apply the new start offsets")
    p.set_defaults(shift_by=None)
    p = ssub.add_parser(
        "delete-offsets", parents=[common], help="forget a share group's state of whole topics"
    )
    p.add_argument("--group", required=True, metavar="GROUP")
    p.add_argument(
        "--topic", action="append", required=True, metavar="T", help="a topic (repeatable)"
    )


# ---- groups describe ----------------------------------------------------------------------------


def describe_share(
    admin: Admin, group: ShareGroup, view: str
) -> tuple[list[dict[str, Any]], list[str], list[list[Any]]]:
    """A share group's JSON rows and table for ``groups describe`` (``view``: offsets, members
    or state)."""
    gid = group.group_id
    if view == "state":
        cid, host, port = group.coordinator
        row = {
            "group": gid,
            "coordinator": {"id": cid, "host": host, "port": port},
            "state": group.state,
            "type": "share",
            "group_epoch": group.group_epoch,
            "assignment_epoch": group.assignment_epoch,
            "members": len(group.members),
        }
        headers = [
            "GROUP",
            "COORDINATOR (ID)",
            "STATE",
            "GROUP-EPOCH",
            "ASSIGNMENT-EPOCH",
            "#MEMBERS",
        ]
        state = [
            gid,
            f"{host}:{port} ({cid})",
            group.state,
            group.group_epoch,
            group.assignment_epoch,
            len(group.members),
        ]
        return [row], headers, [state]
    if not group.members:
        note(f"Share group '{gid}' has no active members.")
    rows: list[dict[str, Any]]
    cells: list[list[Any]]
    if view == "members":
        rows = [
            {
                "group": gid,
                "consumer_id": m.member_id,
                "host": m.host,
                "client_id": m.client_id,
                "partitions": len(m.assignment),
                "member_epoch": m.member_epoch,
                "assignment": [{"topic": t, "partition": p} for t, p in m.assignment],
            }
            for m in group.members
        ]
        headers = [
            "GROUP",
            "CONSUMER-ID",
            "HOST",
            "CLIENT-ID",
            "#PARTITIONS",
            "MEMBER-EPOCH",
            "ASSIGNMENT",
        ]
        cells = [
            [
                gid,
                m.member_id,
                m.host,
                m.client_id,
                len(m.assignment),
                m.member_epoch,
                format_assignment(m.assignment),
            ]
            for m in group.members
        ]
        return rows, headers, cells
    offsets = share_offsets(admin, group)
    rows = [
        {
            "group": gid,
            "topic": t,
            "partition": p,
            "start_offset": o.start_offset if o.start_offset >= 0 else None,
            "leader_epoch": o.leader_epoch,
            "lag": o.lag if o.lag >= 0 else None,
            "error": o.error,
        }
        for (t, p), o in sorted(offsets.items())
    ]
    headers = ["GROUP", "TOPIC", "PARTITION", "START-OFFSET", "LAG"]
    return (
        rows,
        headers,
        [[r["group"], r["topic"], r["partition"], r["start_offset"], r["lag"]] for r in rows],
    )


# ---- share reset-offsets / delete-offsets -------------------------------------------------


def _share_group_or_none(admin: Admin, group_id: str) -> ShareGroup | None:
    """The share group, None if it does not exist yet; AdminError if it is another type's."""
    group = describe_share_group(admin, group_id)
    if group is None and any(g == group_id for g, _s, _t in admin.list_groups()):
        raise AdminError(f"Group '{group_id}' is not a share group.")
    return group


def share_reset_offsets(admin: Admin, args: argparse.Namespace) -> int:
    if args.to_datetime is not None:
        parse_datetime_ms(args.to_datetime)  # a bad date is a usage error, found before any call
    if not args.group:
        raise ValueError("--group: the group id is empty")
    group = _share_group_or_none(admin, args.group)
    if group is not None and group.members:
        raise AdminError(f"Share group '{args.group}' is not empty.")
    plan = plan_reset(admin, args.group, args)
    failed: dict[tuple[str, int], str | None] = {}
    if args.execute:
        failed = {tp: e for tp, e in alter_share_offsets(admin, args.group, plan).items() if e}
    else:
        note("Dry run: nothing changed. Add --execute to set these start offsets.")
    if args.json:
        print_json(
            {
                "executed": bool(args.execute),
                "offsets": [
                    {
                        "group": args.group,
                        "topic": t,
                        "partition": p,
                        "new_offset": o,
                        "error": failed.get((t, p)),
                    }
                    for (t, p), o in sorted(plan.items())
                ],
            }
        )
    else:
        print_table(
            ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"],
            [[args.group, t, p, o] for (t, p), o in sorted(plan.items())],
        )
        for (t, p), error in sorted(failed.items()):
            note(f"Error: {t}-{p}: {error}")
    return 1 if failed else 0


def share_delete_offsets(admin: Admin, args: argparse.Namespace) -> int:
    if not args.group:
        raise ValueError("--group: the group id is empty")
    results = delete_share_offsets(admin, args.group, list(dict.fromkeys(args.topic)))
    if args.json:
        print_json(
            [
                {"group": args.group, "topic": t, "deleted": e is None, "error": e}
                for t, e in sorted(results.items())
            ]
        )
    else:
        print_table(
            ["TOPIC", "STATUS"],
            [[t, "Successful" if e is None else f"Error: {e}"] for t, e in sorted(results.items())],
        )
    return 1 if any(results.values()) else 0
