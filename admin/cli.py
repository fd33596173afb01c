"""``kcoord groups``, ``kcoord offsets``, ``kcoord share``, ``kcoord topics``,
``kcoord transactions`` and ``kcoord cluster``: their arguments, and running a parsed command.

:func:`add_parsers` is the hook ``kcoord/cli.py`` calls to add the subcommands to the
``kcoord`` parser, and :func:`run` runs one once parsed. Output follows kafka-consumer-groups.sh:
the same columns (GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG CONSUMER-ID HOST
CLIENT-ID; ``--members``; ``--state``), ``-`` where there is no value, notes on stderr;
``--json`` prints the same rows as JSON instead.
Exit status: 0 done, 1 refused or failed, 2 bad usage.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from .client import Admin, AdminError
from .cluster import add_cluster_parsers, cluster_describe
from .group_configs import add_group_config_parsers, groups_alter_config, groups_describe_config
from .groups import groups_delete, groups_describe, groups_list
from .offsets import offsets_delete, offsets_reset
from .security import read_command_config
from .shares import add_share_parsers, share_delete_offsets, share_reset_offsets
from .topics import add_topic_parsers, topics_alter_config, topics_describe
from .transactions import (
    add_transaction_parsers,
    transactions_abort,
    transactions_describe,
    transactions_list,
)

DEFAULT_BOOTSTRAP = "localhost:9092"


def add_parsers(sub: Any) -> None:
    """Add the ``groups`` and ``offsets`` subcommands to the ``kcoord`` parser."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--bootstrap-server",
        default=DEFAULT_BOOTSTRAP,
        metavar="H:P",
        help=f"a broker to connect to (default {DEFAULT_BOOTSTRAP})",
    )
    common.add_argument(
        "--command-config",
        metavar="FILE",
        default=None,
        help="client settings (security.protocol, sasl.*, ssl.*) in a properties file",
    )
    common.add_argument("--json", action="store_true", help="print JSON instead of a table")
    common.add_argument(
        "--timeout", type=float, default=30.0, help="seconds to wait for each answer (default 30)"
    )

    groups = sub.add_parser("groups", help="list, describe and delete consumer and share groups")
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
    p.add_argument(
        "--type",
        nargs="?",
        const="",
        default=None,
        metavar="T",
        help="show each group's type (classic, consumer, share); with a type, only groups of"
        " that type",
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
    add_group_config_parsers(gsub, common)

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
    add_share_parsers(sub, common)
    add_topic_parsers(sub, common)
    add_transaction_parsers(sub, common)
    add_cluster_parsers(sub, common)


def run(args: argparse.Namespace) -> int:
    """Run a parsed admin command (``groups``, ``offsets``, ``share``, ``topics``,
    ``transactions``, ``cluster``); returns the exit status."""
    try:
        security = read_command_config(args.command_config) if args.command_config else None
        admin = Admin(args.bootstrap_server, args.timeout, security)
        command = {
            ("groups", "list"): groups_list,
            ("groups", "describe"): groups_describe,
            ("groups", "delete"): groups_delete,
            ("groups", "describe-config"): groups_describe_config,
            ("groups", "alter-config"): groups_alter_config,
            ("offsets", "reset"): offsets_reset,
            ("offsets", "delete"): offsets_delete,
            ("share", "reset-offsets"): share_reset_offsets,
            ("share", "delete-offsets"): share_delete_offsets,
            ("topics", "describe"): topics_describe,
            ("topics", "alter-config"): topics_alter_config,
            ("transactions", "list"): transactions_list,
            ("transactions", "describe"): transactions_describe,
            ("transactions", "abort"): transactions_abort,
            ("cluster", "describe"): cluster_describe,
        }[(args.command, args.action)]
        return command(admin, args)
    except AdminError as e:
        print(f"Error: {e}", file=sys.stderr)
        return 1
    except ValueError as e:  # bad --topic, --to-datetime or --set
        print(f"Error: {e}", file=sys.stderr)
        return 2
