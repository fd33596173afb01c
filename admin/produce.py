"""``kcoord produce TOPIC``: records from standard input, a line each, as kcat -P makes them.

``-K SEP`` splits each line at its first SEP into key and value (a line without SEP has no key);
``-H NAME=VALUE`` (repeatable) adds a header to every record; ``-p N`` writes to partition N
(else the partitioner chooses, by key). Every record is acknowledged by the broker (acks=all)
before the command ends; a record the broker refuses is an error (exit status 1).
A confluent-kafka Producer, with the same ``--command-config`` security as the admin commands.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Iterator
from typing import Any

from .client import AdminError


def add_produce_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "produce",
        parents=[common],
        help="write lines of standard input to a topic (as kcat -P)",
        description="Write each line of standard input to TOPIC as a record.",
    )
    p.add_argument("topic", metavar="TOPIC")
    p.add_argument("-K", dest="key_separator", metavar="SEP", help="split lines into KEY SEP VALUE")
    p.add_argument(
        "-H", dest="headers", action="append", default=[], metavar="NAME=VALUE",
        help="a header of every record (repeatable)",
    )  # fmt: skip
    p.add_argument("-p", dest="partition", type=int, default=None, metavar="N", help="the partition")
    p.add_argument(
        "-z", dest="compression", default="none", choices=("none", "gzip", "snappy", "lz4", "zstd"),
        help="compression codec (default none)",
    )  # fmt: skip


def parse_headers(items: Iterable[str]) -> list[tuple[str, str | bytes | None]]:
    """``NAME=VALUE`` items as record headers; ValueError if one has no ``=`` or no name."""
    out: list[tuple[str, str | bytes | None]] = []
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise ValueError(f"-H expects NAME=VALUE, got {item!r}")
        out.append((name, value.encode()))
    return out


def split_lines(lines: Iterable[bytes], separator: bytes | None) -> Iterator[tuple[bytes | None, bytes]]:
    """(key, value) of each input line, its line ending removed; with ``separator``, the key is
    what comes before its first occurrence (no key if it does not occur)."""
    for line in lines:
        line = line.rstrip(b"\n").rstrip(b"\r")
        if separator:
            key, sep, value = line.partition(separator)
            yield (key, value) if sep else (None, line)
        else:
            yield None, line


def produce(args: argparse.Namespace, security: dict[str, str]) -> int:
    from confluent_kafka import KafkaException, Producer

    headers = parse_headers(args.headers)
    producer = Producer(
        {
            **security,
            "bootstrap.servers": args.bootstrap_server,
            "acks": "all",
            "compression.type": args.compression,
            "linger.ms": 5,
            "socket.timeout.ms": int(args.timeout * 1000),
            "message.timeout.ms": int(args.timeout * 1000),
            "log_level": 2,
        }
    )
    failures: list[str] = []

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            failures.append(f"{err.name()}: {err.str()}")

    extra = {"partition": args.partition} if args.partition is not None else {}
    separator = args.key_separator.encode() if args.key_separator else None
    count = 0
    try:
        for key, value in split_lines(sys.stdin.buffer, separator):
            while True:
                try:
                    producer.produce(
                        args.topic, value, key, headers=headers or None, on_delivery=delivered, **extra
                    )
                    break
                except BufferError:  # the local queue is full: let deliveries drain it
                    producer.poll(0.1)
            producer.poll(0)
            count += 1
            if failures:
                break
    except KafkaException as e:
        raise AdminError(f"producing to {args.topic!r}: {e.args[0].str()}") from None
    left = producer.flush(args.timeout)
    if failures:
        raise AdminError(f"producing to {args.topic!r}: {failures[0]}")
    if left:
        raise AdminError(f"producing to {args.topic!r}: {left} of {count} records not acknowledged")
    return 0


__all__ = ["add_produce_parser", "parse_headers", "produce", "split_lines"]
