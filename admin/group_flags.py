"""kafka-consumer-groups.sh's flags beside kcoord's subcommands.

``kcoord groups`` takes Kafka's form as well as its own subcommands: an action flag (``--list``,
``--describe``, ``--delete``, ``--reset-offsets``, ``--delete-offsets``) with ``--group G``
(repeatable) or ``--all-groups``, ``--members``/``--state``/``--offsets`` and ``--verbose`` for
``--describe``, and a reset's scope, scenario and mode. Kafka's form is turned here into the
subcommand it names (:func:`kafka_action`), so that each command is written once.
``--group G`` is accepted too wherever a subcommand takes a group name (:func:`resolve_groups`).
"""

from __future__ import annotations

import argparse

from .client import Admin

KAFKA_ACTIONS = {
    "list": ("groups", "list"),
    "describe": ("groups", "describe"),
    "delete": ("groups", "delete"),
    "reset-offsets": ("offsets", "reset"),
    "delete-offsets": ("offsets", "delete"),
}
GROUP_COMMANDS = {
    ("groups", "describe"),
    ("groups", "delete"),
    ("groups", "describe-config"),
    ("groups", "alter-config"),
    ("offsets", "reset"),
    ("offsets", "delete"),
}
"""The commands that take group names (by position, ``--group`` or ``--all-groups``)."""
SINGLE_GROUP = {("groups", "describe-config"), ("groups", "alter-config"), ("offsets", "delete")}
"""The commands about one group (the others take several)."""


def add_group_selection(p: argparse.ArgumentParser, *, all_groups: bool = True) -> None:
    """``--group G`` (repeatable), beside a positional group name, and ``--all-groups``."""
    p.add_argument(
        "--group", dest="group_flag", action="append", default=[], metavar="GROUP",
        help="a group (repeatable), as kafka-consumer-groups.sh takes it",
    )  # fmt: skip
    if all_groups:
        p.add_argument("--all-groups", action="store_true", help="every consumer group")


def add_reset_arguments(p: argparse.ArgumentParser, *, topic: bool = True) -> None:
    """A reset's scope (``--topic``, ``--all-topics``, or the plan of ``--from-file``), its
    scenario (exactly one), ``--dry-run`` (the default) or ``--execute``, and ``--export``."""
    if topic:
        p.add_argument(
            "--topic", action="append", default=[], metavar="T[:P,P...]",
            help="a topic, or some of its partitions (repeatable)",
        )  # fmt: skip
    p.add_argument(
        "--all-topics", action="store_true", help="every topic the group has committed offsets of"
    )
    to = p.add_mutually_exclusive_group()
    to.add_argument("--to-earliest", action="store_true", help="the log start offset")
    to.add_argument("--to-latest", action="store_true", help="the log end offset")
    to.add_argument(
        "--to-current", action="store_true", help="the committed offset (else the log end offset)"
    )
    to.add_argument("--to-offset", type=int, metavar="N", help="an offset (kept within the log)")
    to.add_argument("--shift-by", type=int, metavar="N", help="the committed offset plus N (or minus)")
    to.add_argument(
        "--to-datetime", metavar="ISO",
        help="the first offset at or after a time, e.g. 2024-05-01T12:00:00 (local time) or"
        " 2024-05-01T12:00:00+00:00",
    )  # fmt: skip
    to.add_argument(
        "--by-duration", metavar="PnDTnHnMnS",
        help="the first offset at or after that long ago, e.g. PT30M or P1DT2H",
    )  # fmt: skip
    to.add_argument(
        "--from-file", metavar="CSV",
        help="the offsets of a CSV file (topic,partition,offset or group,topic,partition,offset)",
    )  # fmt: skip
    mode = p.add_mutually_exclusive_group()
    mode.add_argument(
        "--dry-run", action="store_true", help="print the new offsets only (the default)"
    )
    mode.add_argument("--execute", action="store_true", help="commit the new offsets")
    p.add_argument(
        "--export", action="store_true", help="print the new offsets as CSV (for --from-file)"
    )


def add_kafka_flags(groups: argparse.ArgumentParser) -> None:
    """kafka-consumer-groups.sh's flags on the ``groups`` parser itself."""
    action = groups.add_mutually_exclusive_group()
    for name, text in (
        ("list", "list the groups (with --state [S], --type [T])"),
        ("describe", "describe groups: --offsets (the default), --members or --state"),
        ("delete", "delete empty groups"),
        ("reset-offsets", "reset committed offsets (a dry run unless --execute)"),
        ("delete-offsets", "delete a group's offsets of --topic"),
    ):
        action.add_argument(
            f"--{name}", dest="kafka_action", action="store_const", const=name, help=text
        )
    add_group_selection(groups)
    groups.add_argument("--offsets", action="store_true", help="with --describe: offsets and lag")
    groups.add_argument("--members", action="store_true", help="with --describe: the members")
    groups.add_argument(
        "--state", dest="kafka_state", nargs="?", const="", default=None, metavar="S",
        help="with --describe: the group's state; with --list: each group's (or those in S)",
    )  # fmt: skip
    groups.add_argument(
        "--type", dest="kafka_type", nargs="?", const="", default=None, metavar="T",
        help="with --list: each group's type (or those of type T)",
    )  # fmt: skip
    groups.add_argument(
        "--verbose", action="store_true", help="with --describe --members/--state: more columns"
    )
    add_reset_arguments(groups)


def kafka_action(args: argparse.Namespace) -> None:
    """Turn ``kcoord groups --ACTION ...`` into the subcommand it names, in place."""
    if args.kafka_action is None:
        raise ValueError(
            "give a subcommand or exactly one action: "
            + ", ".join(f"--{a}" for a in KAFKA_ACTIONS)
        )
    views = [v for v, on in (("members", args.members), ("state", args.kafka_state is not None),
                             ("offsets", args.offsets)) if on]  # fmt: skip
    if args.kafka_action == "describe" and len(views) > 1:
        raise ValueError("--describe takes one of --members, --state, --offsets")
    args.command, args.action = KAFKA_ACTIONS[args.kafka_action]
    args.group = []
    args.kafka_layout = True
    args.view = views[0] if views else "offsets"
    args.state = args.kafka_state
    args.type = args.kafka_type


def resolve_groups(admin: Admin, args: argparse.Namespace) -> None:
    """Put the group(s) named by position, ``--group`` or ``--all-groups`` in ``args.group``:
    a name for the commands about one group, else a list. ValueError if none is named."""
    given = args.group if isinstance(args.group, list) else [args.group] if args.group else []
    names = list(dict.fromkeys([*given, *args.group_flag]))
    if getattr(args, "all_groups", False):
        if names:
            raise ValueError("--all-groups and a group name: give one or the other")
        names = [g for g, _state, _type in admin.list_groups()]
    elif not names:
        raise ValueError("no group given: GROUP, --group GROUP or --all-groups")
    if (args.command, args.action) in SINGLE_GROUP:
        if len(names) != 1:
            raise ValueError(f"one group only, got {len(names)}")
        args.group = names[0]
    else:
        args.group = names


__all__ = [
    "GROUP_COMMANDS",
    "add_group_selection",
    "add_kafka_flags",
    "add_reset_arguments",
    "kafka_action",
    "resolve_groups",
]
