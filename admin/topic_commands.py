"""``kcoord topics list|create|delete|add-partitions``: the topic workflow of kafka-topics.sh,
over the AdminClient (Metadata, CreateTopics, DeleteTopics, CreatePartitions), and the partition
metadata ``topics describe`` prints (leader, replicas, in-sync replicas, topic id).

``create`` takes ``--partitions``, ``--replication-factor`` (what the broker accepts: 1 for a
single kcoord broker), ``--config NAME=VALUE`` (repeatable) and ``--if-not-exists``; ``delete``
takes ``--if-exists``; ``list`` prints one name a line, internal topics included unless
``--exclude-internal``; ``add-partitions`` raises a topic's partition count to ``--partitions``.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

from .client import Admin, AdminError
from .output import print_json


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    partition: int
    leader: int | None
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    topic_id: str | None
    internal: bool
    partitions: tuple[PartitionInfo, ...]


def add_topic_workflow_parsers(tsub: Any, common: argparse.ArgumentParser) -> None:
    """Add ``list``, ``create``, ``delete`` and ``add-partitions`` to the ``topics`` subcommands."""
    p = tsub.add_parser("list", parents=[common], help="the topics' names")
    p.add_argument(
        "--exclude-internal", action="store_true", help="leave out internal topics (__consumer_offsets...)"
    )
    p = tsub.add_parser("create", parents=[common], help="create a topic")
    p.add_argument("topic", metavar="TOPIC")
    p.add_argument("--partitions", type=int, default=None, metavar="N", help="default: the broker's")
    p.add_argument(
        "--replication-factor", type=int, default=None, metavar="N", help="default: the broker's"
    )
    p.add_argument(
        "--config", action="append", default=[], metavar="NAME=VALUE", help="a topic config (repeatable)"
    )
    p.add_argument("--if-not-exists", action="store_true", help="no error if the topic exists")
    p = tsub.add_parser("delete", parents=[common], help="delete topics")
    p.add_argument("topic", nargs="+", metavar="TOPIC")
    p.add_argument("--if-exists", action="store_true", help="no error if a topic does not exist")
    p = tsub.add_parser(
        "add-partitions", parents=[common], help="raise a topic's partition count"
    )
    p.add_argument("topic", metavar="TOPIC")
    p.add_argument("--partitions", type=int, required=True, metavar="N", help="the new total count")


def parse_configs(items: list[str]) -> dict[str, str]:
    """``NAME=VALUE`` items as a dict; ValueError if one has no ``=`` or no name."""
    out: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise ValueError(f"--config expects NAME=VALUE, got {item!r}")
        out[name.strip()] = value
    return out


def _error_name(e: Exception) -> str | None:
    err = e.args[0] if e.args else None
    name = getattr(err, "name", None)
    return str(name()) if callable(name) else None


def topic_names(admin: Admin) -> list[str]:
    try:
        md = admin.client.list_topics(timeout=admin.timeout)
    except Exception as e:  # librdkafka's KafkaException: no broker answered
        raise AdminError(f"listing topics: {e}") from None
    return sorted(md.topics)


def describe_topics(admin: Admin, names: list[str]) -> list[TopicInfo]:
    """DescribeTopics (Metadata) of ``names``, in that order."""
    from confluent_kafka import TopicCollection

    futures = admin.client.describe_topics(TopicCollection(names), request_timeout=admin.timeout)
    out = []
    for name in names:
        d = admin.wait(futures[name], f"describing topic {name!r}")
        # Kafka prints topic ids in URL-safe base64 without padding; librdkafka in the standard one
        topic_id = (
            str(d.topic_id).replace("+", "-").replace("/", "_").rstrip("=")
            if d.topic_id is not None
            else None
        )
        out.append(
            TopicInfo(
                name,
                None if not topic_id or topic_id == "AAAAAAAAAAAAAAAAAAAAAA" else topic_id,
                bool(d.is_internal),
                tuple(
                    PartitionInfo(
                        p.id,
                        p.leader.id if p.leader is not None and p.leader.id >= 0 else None,
                        tuple(n.id for n in p.replicas),
                        tuple(n.id for n in p.isr),
                    )
                    for p in sorted(d.partitions, key=lambda p: p.id)
                ),
            )
        )
    return out


def topics_list(admin: Admin, args: argparse.Namespace) -> int:
    names = topic_names(admin)
    if args.exclude_internal and names:
        names = [t.name for t in describe_topics(admin, names) if not t.internal]
    if args.json:
        print_json(names)
    else:
        for name in names:
            print(name)
    return 0


def topics_create(admin: Admin, args: argparse.Namespace) -> int:
    from confluent_kafka.admin import NewTopic

    configs = parse_configs(args.config)
    new = NewTopic(
        args.topic,
        num_partitions=args.partitions if args.partitions is not None else -1,
        replication_factor=args.replication_factor if args.replication_factor is not None else -1,
        config=configs,
    )
    futures = admin.client.create_topics([new], request_timeout=admin.timeout)
    try:
        futures[args.topic].result(timeout=admin.timeout)
    except Exception as e:
        if args.if_not_exists and _error_name(e) == "TOPIC_ALREADY_EXISTS":
            return _done(args, {"topic": args.topic, "created": False})
        admin.wait(futures[args.topic], f"creating topic {args.topic!r}")  # raises the AdminError
    return _done(args, {"topic": args.topic, "created": True}, f"Created topic {args.topic}.")


def topics_delete(admin: Admin, args: argparse.Namespace) -> int:
    futures = admin.client.delete_topics(list(args.topic), request_timeout=admin.timeout)
    deleted = []
    for name in args.topic:
        try:
            futures[name].result(timeout=admin.timeout)
            deleted.append(name)
        except Exception as e:
            if not (args.if_exists and _error_name(e) == "UNKNOWN_TOPIC_OR_PART"):
                admin.wait(futures[name], f"deleting topic {name!r}")
    if args.json:
        print_json({"deleted": deleted})
    else:
        for name in deleted:
            print(f"Deleted topic {name}.")
    return 0


def topics_add_partitions(admin: Admin, args: argparse.Namespace) -> int:
    from confluent_kafka.admin import NewPartitions

    futures = admin.client.create_partitions(
        [NewPartitions(args.topic, args.partitions)], request_timeout=admin.timeout
    )
    admin.wait(futures[args.topic], f"adding partitions to topic {args.topic!r}")
    return _done(
        args,
        {"topic": args.topic, "partitions": args.partitions},
        f"Topic {args.topic} now has {args.partitions} partitions.",
    )


def _done(args: argparse.Namespace, row: dict[str, Any], text: str | None = None) -> int:
    if args.json:
        print_json(row)
    elif text:
        print(text)
    return 0


__all__ = [
    "PartitionInfo",
    "TopicInfo",
    "add_topic_workflow_parsers",
    "describe_topics",
    "parse_configs",
    "topics_add_partitions",
    "topics_create",
    "topics_delete",
    "topics_list",
]
