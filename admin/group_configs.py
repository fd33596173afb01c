"""``kcoord groups describe-config|alter-config``: a group's configs (Kafka's GROUP config
resource), as DescribeConfigs reports them, and changing them with IncrementalAlterConfigs (like
``kafka-configs.sh --entity-type groups``).

``describe-config`` prints each group config's value and where it comes from (``group``: set on
the group; ``default``: the broker's setting it falls back to). ``alter-config`` takes
``--set NAME=VALUE`` and ``--delete NAME`` (back to the broker's), each repeatable, all sent in
one request; the broker checks them together and refuses the whole change if one is not valid.
Any group id may have configs, whether or not the group exists yet.
"""

from __future__ import annotations

import argparse
from typing import Any

from .client import Admin
from .group_flags import add_group_selection
from .output import print_json, print_table
from .topics import config_changes

_SOURCES = {"GROUP_CONFIG": "group", "DEFAULT_CONFIG": "default"}


def add_group_config_parsers(gsub: Any, common: argparse.ArgumentParser) -> None:
    """Add ``describe-config`` and ``alter-config`` to the ``groups`` subcommands."""
    p = gsub.add_parser(
        "describe-config", parents=[common], help="a group's configs (set on it, or the broker's)"
    )
    p.add_argument("group", nargs="?", metavar="GROUP")
    add_group_selection(p, all_groups=False)
    p = gsub.add_parser("alter-config", parents=[common], help="change a group's configs")
    p.add_argument("group", nargs="?", metavar="GROUP")
    add_group_selection(p, all_groups=False)
    p.add_argument(
        "--set", action="append", default=[], metavar="NAME=VALUE", help="set a config (repeatable)"
    )
    p.add_argument(
        "--delete",
        action="append",
        default=[],
        metavar="NAME",
        help="remove the group's own value: the broker's applies (repeatable)",
    )


def groups_describe_config(admin: Admin, args: argparse.Namespace) -> int:
    rows = [
        {"name": name, "value": value, "source": _SOURCES.get(source, source.lower())}
        for name, value, source in admin.group_configs(args.group)
    ]
    if args.json:
        print_json({"group": args.group, "configs": rows})
    else:
        print_table(["CONFIG", "VALUE", "SOURCE"], [list(r.values()) for r in rows])
    return 0


def groups_alter_config(admin: Admin, args: argparse.Namespace) -> int:
    changes = config_changes(args, ("set",))
    admin.alter_group_configs(args.group, changes)
    if args.json:
        print_json({"group": args.group, "changed": [c[1] for c in changes]})
    else:
        print(f"Completed updating config for group {args.group}.")
    return 0
