"""``kcoord groups``, ``kcoord offsets``, ``kcoord share``, ``kcoord topics``,
``kcoord transactions``, ``kcoord cluster``, ``kcoord produce`` and ``kcoord consume``: their
arguments, and running a parsed command.

:func:`add_parsers` is the hook ``kcoord/cli.py`` calls to add the subcommands to the
``kcoord`` parser, and :func:`run` runs one once parsed; :func:`main` is the entry point's fast
path for them. Output follows kafka-consumer-groups.sh:
the same columns (GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG CONSUMER-ID HOST
CLIENT-ID; ``--members``; ``--state``), ``-`` where there is no value, notes on stderr;
``--json`` prints the same rows as JSON instead. ``kcoord groups`` also takes
kafka-consumer-groups.sh's own flags (admin/group_flags.py).
Exit status: 0 done, 1 refused or failed, 2 bad usage; a failure is one line on stderr
(``Error: ...``), never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from .client import Admin, AdminError
from .cluster import add_cluster_parsers, cluster_describe
from .consume import add_consume_parser, consume
from .group_configs import add_group_config_parsers, groups_alter_config, groups_describe_config
from .group_flags import (
    GROUP_COMMANDS,
    add_group_selection,
    add_kafka_flags,
    add_reset_arguments,
    kafka_action,
    resolve_groups,
)
from .groups import groups_delete, groups_describe, groups_list
from .offsets import offsets_delete, offsets_reset
from .output import quiet_when_pipe_closes
from .produce import add_produce_parser, produce
from .security import read_command_config
from .shares import add_share_parsers, share_delete_offsets, share_reset_offsets
from .topic_commands import topics_add_partitions, topics_create, topics_delete, topics_list
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

    groups = sub.add_parser(
        "groups",
        parents=[common],
        help="list, describe and delete consumer and share groups (also as"
        " kafka-consumer-groups.sh: --describe --group G ...)",
        description="Consumer groups, by subcommand (kcoord groups describe G) or with"
        " kafka-consumer-groups.sh's flags (kcoord groups --describe --group G --members).",
    )
    add_kafka_flags(groups)
    gsub = groups.add_subparsers(dest="action", required=False)
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
    p.add_argument("group", nargs="*", metavar="GROUP")
    add_group_selection(p)
    what = p.add_mutually_exclusive_group()
    what.add_argument("--offsets", dest="view", action="store_const", const="offsets")
    what.add_argument("--members", dest="view", action="store_const", const="members")
    what.add_argument("--state", dest="view", action="store_const", const="state")
    p.add_argument(
        "--verbose", action="store_true", help="kafka-consumer-groups.sh's verbose columns"
    )
    p.set_defaults(view="offsets")
    p = gsub.add_parser("delete", parents=[common], help="delete empty consumer groups")
    p.add_argument("group", nargs="*", metavar="GROUP")
    add_group_selection(p)
    add_group_config_parsers(gsub, common)

    offsets = sub.add_parser("offsets", help="reset or delete a group's committed offsets")
    osub = offsets.add_subparsers(dest="action", required=True)
    p = osub.add_parser(
        "reset", parents=[common], help="reset committed offsets (a dry run unless --execute)"
    )
    p.add_argument("group", nargs="?", metavar="GROUP")
    add_group_selection(p)
    add_reset_arguments(p)
    p = osub.add_parser("delete", parents=[common], help="delete a group's offsets of a topic")
    p.add_argument("group", nargs="?", metavar="GROUP")
    add_group_selection(p, all_groups=False)
    p.add_argument("--topic", action="append", required=True, metavar="T[:P,P...]")
    add_produce_parser(sub, common)
    add_consume_parser(sub, common)
    add_share_parsers(sub, common)
    add_topic_parsers(sub, common)
    add_transaction_parsers(sub, common)
    add_cluster_parsers(sub, common)


COMMANDS: dict[tuple[str, str], Callable[[Admin, argparse.Namespace], int]] = {
    ("groups", "list"): groups_list,
    ("groups", "describe"): groups_describe,
    ("groups", "delete"): groups_delete,
    ("groups", "describe-config"): groups_describe_config,
    ("groups", "alter-config"): groups_alter_config,
    ("offsets", "reset"): offsets_reset,
    ("offsets", "delete"): offsets_delete,
    ("share", "reset-offsets"): share_reset_offsets,
    ("share", "delete-offsets"): share_delete_offsets,
    ("topics", "list"): topics_list,
    ("topics", "create"): topics_create,
    ("topics", "delete"): topics_delete,
    ("topics", "add-partitions"): topics_add_partitions,
    ("topics", "describe"): topics_describe,
    ("topics", "alter-config"): topics_alter_config,
    ("transactions", "list"): transactions_list,
    ("transactions", "describe"): transactions_describe,
    ("transactions", "abort"): transactions_abort,
    ("cluster", "describe"): cluster_describe,
}
CLIENTS = {"produce": produce, "consume": consume}
"""The commands that are a producer or a consumer rather than admin calls."""


def run(args: argparse.Namespace) -> int:
    """Run a parsed admin or client command (``groups``, ``offsets``, ``share``, ``topics``,
    ``transactions``, ``cluster``, ``produce``, ``consume``); returns the exit status. A
    failure is one line on stderr, never a traceback."""
    try:
        security = read_command_config(args.command_config) if args.command_config else None
        if args.command in CLIENTS:
            return CLIENTS[args.command](args, security or {})
        if args.command == "groups" and args.action is None:
            kafka_action(args)
        admin = Admin(args.bootstrap_server, args.timeout, security)
        if (args.command, args.action) in GROUP_COMMANDS:
            resolve_groups(admin, args)
        return COMMANDS[(args.command, args.action)](admin, args)
    except AdminError as e:
        print(f"Error: {e}", file=sys.stderr)
        return 1
    except ValueError as e:  # bad --topic, --to-datetime, --set, ...
        print(f"Error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        raise  # kcoord.cli closes the pipe quietly
    except Exception as e:  # librdkafka's or the system's: one line, no traceback
        print(f"Error: {_one_line(e)}", file=sys.stderr)
        return 1


def main(argv: list[str]) -> int:
    """``kcoord COMMAND ...`` for the commands of this package, without the broker's modules
    (the entry point's fast path: kcoord/entry.py)."""
    parser = argparse.ArgumentParser(prog="kcoord")
    add_parsers(parser.add_subparsers(dest="command", required=True))
    return quiet_when_pipe_closes(lambda: run(parser.parse_args(argv)))


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split()) or type(e).__name__
    return text
