"""``kcoord consume TOPIC``: print a topic's records, as kcat -C does.

Where to start: ``-o beginning`` (the default), ``end``, an offset ``N``, ``-N`` (N records
before each partition's end), or ``--from-time`` (the first record at or after a time). ``-c N``
stops after N records, ``-e`` at the end of every partition. Without ``--group`` the consumer
reads every partition (or ``-p N``) and commits nothing; with ``--group G`` it subscribes as a
member of G, starts from G's committed offsets (``-o beginning|end`` where it has none) and
commits what it printed. ``--isolation read_committed`` hides aborted and open transactions.

Output: ``--format text`` (the default: the value, or key SEP value with ``-K SEP``, a record a
line), ``--format json`` (a JSON object a line) or ``-f FORMAT``, kcat's format string:
``%s`` value, ``%k`` key, ``%S``/``%K`` their sizes, ``%t`` topic, ``%p`` partition, ``%o``
offset, ``%T`` timestamp (ms), ``%h`` headers (``name=value,...``), ``%%``; ``\\n``, ``\\t``,
``\\r`` and ``\\\\`` are escapes.
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
from dataclasses import dataclass
from typing import IO, Any

from .client import AdminError
from .offsets import parse_datetime_ms


@dataclass(frozen=True, slots=True)
class Record:
    topic: str
    partition: int
    offset: int
    timestamp: int | None
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


def add_consume_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "consume",
        parents=[common],
        help="print a topic's records (as kcat -C)",
        description="Print the records of TOPIC, a line each, until interrupted (or -c, -e).",
    )
    p.add_argument("topic", metavar="TOPIC")
    p.add_argument(
        "-o", dest="offset", default=None, metavar="WHERE",
        help="beginning (default), end, an offset N, or -N: N records before the end",
    )  # fmt: skip
    p.add_argument("--from-time", metavar="ISO", help="start at the first record at or after a time")
    p.add_argument("-c", dest="count", type=int, default=None, metavar="N", help="stop after N records")
    p.add_argument("-e", dest="exit_at_end", action="store_true", help="stop at the end of the log")
    p.add_argument("-p", dest="partition", type=int, default=None, metavar="N", help="one partition only")
    p.add_argument("--group", default=None, metavar="GROUP", help="consume as a member of GROUP")
    p.add_argument(
        "--isolation", choices=("read_uncommitted", "read_committed"), default="read_uncommitted",
        help="read_committed: only committed transactions' records",
    )  # fmt: skip
    out = p.add_mutually_exclusive_group()
    out.add_argument("-f", dest="fmt", metavar="FORMAT", help="kcat's format string, e.g. '%%k=%%s\\n'")
    out.add_argument(
        "--format", dest="output_format", choices=("text", "json"), default="text",
        help="text (the value a line) or json (an object a line)",
    )  # fmt: skip
    p.add_argument("-K", dest="key_separator", metavar="SEP", help="text: print KEY SEP VALUE")


def parse_start(text: str | None) -> tuple[str, int]:
    """``-o``: ("beginning"|"end", 0), ("offset", N) or ("tail", N)."""
    if text is None or text == "beginning":
        return "beginning", 0
    if text == "end":
        return "end", 0
    try:
        n = int(text)
    except ValueError:
        raise ValueError(f"-o {text!r}: beginning, end, an offset N or -N") from None
    return ("tail", -n) if n < 0 else ("offset", n)


_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\"}


def format_record(fmt: str, r: Record) -> bytes:
    """One record through kcat's format string."""
    out = bytearray()
    i = 0
    while i < len(fmt):
        c = fmt[i]
        nxt = fmt[i + 1] if i + 1 < len(fmt) else ""
        if c == "%" and nxt:
            out += _token(nxt, r)
            i += 2
        elif c == "\\" and nxt in _ESCAPES:
            out += _ESCAPES[nxt].encode()
            i += 2
        else:
            out += c.encode()
            i += 1
    return bytes(out)


def _token(t: str, r: Record) -> bytes:
    values: dict[str, bytes] = {
        "s": r.value or b"",
        "k": r.key or b"",
        "S": str(-1 if r.value is None else len(r.value)).encode(),
        "K": str(-1 if r.key is None else len(r.key)).encode(),
        "t": r.topic.encode(),
        "p": str(r.partition).encode(),
        "o": str(r.offset).encode(),
        "T": str(-1 if r.timestamp is None else r.timestamp).encode(),
        "h": b",".join(n.encode() + b"=" + (v or b"") for n, v in r.headers),
        "%": b"%",
    }
    return values.get(t, b"%" + t.encode())


def _text(data: bytes | None) -> str | None:
    if data is None:
        return None
    try:
        return data.decode()
    except UnicodeDecodeError:
        return "base64:" + base64.b64encode(data).decode()


def record_json(r: Record) -> dict[str, Any]:
    """A record as ``--format json`` prints it (bytes as UTF-8, else ``base64:...``)."""
    return {
        "topic": r.topic,
        "partition": r.partition,
        "offset": r.offset,
        "timestamp": r.timestamp,
        "key": _text(r.key),
        "value": _text(r.value),
        "headers": [[n, _text(v)] for n, v in r.headers],
    }


def render(args: argparse.Namespace, r: Record) -> bytes:
    if args.fmt is not None:
        return format_record(args.fmt, r)
    if args.output_format == "json" or args.json:  # --json: as the other commands take it
        return json.dumps(record_json(r)).encode() + b"\n"
    key = (r.key or b"") + args.key_separator.encode() if args.key_separator else b""
    return key + (r.value or b"") + b"\n"


def _record(msg: Any) -> Record:
    kind, ts = msg.timestamp()
    return Record(
        msg.topic(),
        msg.partition(),
        msg.offset(),
        ts if kind else None,
        msg.key(),
        msg.value(),
        tuple(msg.headers() or ()),
    )


def consume(args: argparse.Namespace, security: dict[str, str]) -> int:
    from confluent_kafka import Consumer, KafkaError

    start, n = parse_start(args.offset)
    from_ms = parse_datetime_ms(args.from_time) if args.from_time else None
    if args.group and (start in ("offset", "tail") or from_ms is not None or args.partition is not None):
        raise ValueError("with --group, -o takes beginning or end only, and no --from-time or -p")
    consumer = Consumer(
        {
            **security,
            "bootstrap.servers": args.bootstrap_server,
            "group.id": args.group or "kcoord-consume",
            "enable.auto.commit": bool(args.group),
            "auto.offset.reset": "latest" if start == "end" else "earliest",
            "isolation.level": args.isolation,
            "enable.partition.eof": True,
            "socket.timeout.ms": int(args.timeout * 1000),
            "log_level": 2,
        }
    )
    assigned: set[tuple[str, int]] = set()
    not_at_end: set[tuple[str, int]] = set()
    out: IO[bytes] = sys.stdout.buffer
    printed = 0
    try:
        if args.group:

            def on_assign(_c: Any, partitions: list[Any]) -> None:
                tps = {(tp.topic, tp.partition) for tp in partitions}
                assigned.update(tps)
                not_at_end.update(tps)

            def on_revoke(_c: Any, partitions: list[Any]) -> None:
                tps = {(tp.topic, tp.partition) for tp in partitions}
                assigned.difference_update(tps)
                not_at_end.difference_update(tps)

            consumer.subscribe([args.topic], on_assign=on_assign, on_revoke=on_revoke)
        else:
            tps = _start_offsets(consumer, args, start, n, from_ms)
            consumer.assign(tps)
            assigned.update((tp.topic, tp.partition) for tp in tps)
            not_at_end.update(assigned)
        while args.count is None or printed < args.count:
            if args.exit_at_end and assigned and not not_at_end:
                break
            msg = consumer.poll(0.2)
            if msg is None:
                out.flush()
                continue
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    not_at_end.discard((msg.topic(), msg.partition()))
                    continue
                raise AdminError(f"consuming {args.topic!r}: {err.name()}: {err.str()}")
            record = _record(msg)
            not_at_end.add((record.topic, record.partition))
            out.write(render(args, record))
            printed += 1
        out.flush()
    finally:
        consumer.close()
    return 0


def _start_offsets(consumer: Any, args: argparse.Namespace, start: str, n: int, from_ms: int | None) -> list[Any]:
    """The partitions to read without a group, each at its start offset."""
    from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, TopicPartition

    try:
        md = consumer.list_topics(args.topic, timeout=args.timeout)
    except Exception as e:  # librdkafka's KafkaException: no broker answered
        raise AdminError(f"reading the metadata of {args.topic!r}: {e}") from None
    topic = md.topics.get(args.topic)
    if topic is None or topic.error is not None:
        raise AdminError(f"topic {args.topic!r}: {topic.error.str() if topic else 'not found'}")
    parts = sorted(topic.partitions)
    if args.partition is not None:
        if args.partition not in parts:
            raise AdminError(f"topic {args.topic!r} has no partition {args.partition}")
        parts = [args.partition]
    if from_ms is not None:
        found = consumer.offsets_for_times(
            [TopicPartition(args.topic, p, from_ms) for p in parts], timeout=args.timeout
        )
        return [TopicPartition(args.topic, tp.partition, tp.offset if tp.offset >= 0 else OFFSET_END)
                for tp in found]  # fmt: skip
    if start == "tail":
        tps = []
        for p in parts:
            low, high = consumer.get_watermark_offsets(TopicPartition(args.topic, p), timeout=args.timeout)
            tps.append(TopicPartition(args.topic, p, max(low, high - n)))
        return tps
    offset = {"beginning": OFFSET_BEGINNING, "end": OFFSET_END}.get(start, n)
    return [TopicPartition(args.topic, p, offset) for p in parts]


__all__ = ["Record", "add_consume_parser", "consume", "format_record", "parse_start", "record_json"]
