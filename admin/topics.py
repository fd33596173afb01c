"""``kcoord topics describe|alter-config``: a topic's configs, as DescribeConfigs reports them,
and changing them with IncrementalAlterConfigs (like ``kafka-configs.sh --entity-type topics``);
the ``topics`` parser, whose other subcommands are in admin/topic_commands.py.

``describe`` prints kafka-topics.sh --describe's lines (the topic: id, partition count,
replication factor, configs not at their default; a line per partition: leader, replicas,
in-sync replicas, and its log start and end offsets), then each config's value and where it
comes from (``topic``: the topic's own override; ``broker``: a broker setting; ``default``: the
built-in default). ``alter-config`` takes ``--set NAME=VALUE``, ``--delete NAME`` (back
to the broker's default), ``--append NAME=V`` and ``--subtract NAME=V`` (list configs such as
``cleanup.policy``), each repeatable, all sent in one request.
"""

from __future__ import annotations

import argparse
from typing import Any

from .client import Admin, AdminError
from .output import print_json, print_table
from .topic_commands import add_topic_workflow_parsers, describe_topics

_SOURCES = {
    "DYNAMIC_TOPIC_CONFIG": "topic",
    "STATIC_BROKER_CONFIG": "broker",
    "DYNAMIC_BROKER_CONFIG": "broker",
    "DYNAMIC_DEFAULT_BROKER_CONFIG": "broker",
    "DEFAULT_CONFIG": "default",
}


def add_topic_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    topics = sub.add_parser(
        "topics", help="list, create, delete and describe topics, add partitions, change configs"
    )
    tsub = topics.add_subparsers(dest="action", required=True)
    add_topic_workflow_parsers(tsub, common)
    p = tsub.add_parser(
        "describe", parents=[common], help="a topic's partitions, offsets and configs"
    )
    p.add_argument("topic", metavar="TOPIC")
    p = tsub.add_parser("alter-config", parents=[common], help="change a topic's configs")
    p.add_argument("topic", metavar="TOPIC")
    for flag, meta, text in (
        ("--set", "NAME=VALUE", "set a config"),
        ("--delete", "NAME", "remove the topic's own value (the broker's default applies)"),
        ("--append", "NAME=VALUE", "add to a list config (cleanup.policy)"),
        ("--subtract", "NAME=VALUE", "remove from a list config"),
    ):
        p.add_argument(flag, action="append", default=[], metavar=meta, help=text)


def topics_describe(admin: Admin, args: argparse.Namespace) -> int:
    [info] = describe_topics(admin, [args.topic])
    configs = admin.topic_configs(args.topic)
    partitions = [(args.topic, p.partition) for p in info.partitions]
    starts = admin.log_start_offsets(partitions)
    ends = admin.log_end_offsets(partitions)
    config_rows = [
        {"name": name, "value": value, "source": _SOURCES.get(source, source.lower())}
        for name, value, source in configs
    ]
    partition_rows: list[dict[str, Any]] = [
        {
            "partition": p.partition,
            "leader": p.leader,
            "replicas": list(p.replicas),
            "isr": list(p.isr),
            "log_start_offset": starts.get((args.topic, p.partition)),
            "log_end_offset": ends.get((args.topic, p.partition)),
        }
        for p in info.partitions
    ]
    if args.json:
        print_json(
            {
                "topic": args.topic,
                "topic_id": info.topic_id,
                "internal": info.internal,
                "configs": config_rows,
                "partitions": partition_rows,
            }
        )
        return 0
    replication = max((len(p.replicas) for p in info.partitions), default=0)
    overrides = ",".join(
        f"{name}={value}" for name, value, source in configs if source != "DEFAULT_CONFIG"
    )
    print(
        f"Topic: {args.topic}"
        + (f"\tTopicId: {info.topic_id}" if info.topic_id else "")
        + f"\tPartitionCount: {len(info.partitions)}\tReplicationFactor: {replication}"
        + f"\tConfigs: {overrides}"
    )
    for r in partition_rows:
        print(
            f"\tTopic: {args.topic}\tPartition: {r['partition']}"
            f"\tLeader: {'none' if r['leader'] is None else r['leader']}"
            f"\tReplicas: {_ids(r['replicas'])}\tIsr: {_ids(r['isr'])}"
            f"\tLogStartOffset: {_cell(r['log_start_offset'])}"
            f"\tLogEndOffset: {_cell(r['log_end_offset'])}"
        )
    print()
    print_table(["CONFIG", "VALUE", "SOURCE"], [list(r.values()) for r in config_rows])
    return 0


def _ids(ids: list[int]) -> str:
    return ",".join(map(str, ids))


def _cell(value: int | None) -> str:
    return "-" if value is None else str(value)


def config_changes(
    args: argparse.Namespace, ops: tuple[str, ...] = ("set", "append", "subtract")
) -> list[tuple[str, str, str | None]]:
    """(operation, name, value) of each ``--OP NAME=VALUE`` and ``--delete NAME`` given;
    ValueError if one is malformed or none is given."""
    changes: list[tuple[str, str, str | None]] = []
    for op in ops:
        for item in getattr(args, op):
            name, sep, value = item.partition("=")
            if not sep or not name:
                raise ValueError(f"--{op} expects NAME=VALUE, got {item!r}")
            changes.append((op, name.strip(), value))
    changes += [("delete", name.strip(), None) for name in args.delete]
    if not changes:
        flags = ", ".join(f"--{op}" for op in (*ops, "delete"))
        raise ValueError(f"nothing to change: give {flags}")
    return changes


def topics_alter_config(admin: Admin, args: argparse.Namespace) -> int:
    changes = config_changes(args)
    admin.alter_topic_configs(args.topic, changes)
    if args.json:
        print_json({"topic": args.topic, "changed": [c[1] for c in changes]})
    else:
        print(f"Completed updating config for topic {args.topic}.")
    return 0


__all__ = [
    "AdminError", "add_topic_parsers", "config_changes", "topics_alter_config", "topics_describe"
]
