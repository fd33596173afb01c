"""``kcoord pipeline run``: the Spark job from the command line (Spark is imported lazily)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

DESCRIPTION = """Read the __consumer_offsets and topic logs of a data directory (kcoord's or a
Kafka broker's), or of a kcoord broker's PostgreSQL database (--storage-url), with Spark and write Parquet tables offset_commits, offsets_latest,
group_generations, consumer_group_epochs and consumer_lag, plus report/index.html with PNG
charts, under --out.
Exit status: 0 done, 2 bad input, 3 done but some segments could not be read (named on
stderr, in summary.json and in the report) and were skipped."""


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``pipeline run`` to the ``kcoord`` command's subparsers."""
    parser = subparsers.add_parser(
        "pipeline", help="Spark jobs over the logs (offsets, lag, rebalance history)",
        description=DESCRIPTION,
    )
    sub = parser.add_subparsers(dest="pipeline_command", required=True)
    run_p = sub.add_parser("run", help="write the tables and the report", description=DESCRIPTION)
    where = run_p.add_mutually_exclusive_group(required=True)
    where.add_argument("--data-dir", help="broker data directory (path or Hadoop/pyarrow URI)")
    where.add_argument(
        "--storage-url", metavar="URL",
        help="the broker's storage.url, postgresql://user@host:port/db (leave the password out:"
        " libpq reads PGPASSWORD or ~/.pgpass); never printed with its password",
    )
    run_p.add_argument("--out", required=True, help="output directory (path or URI)")
    run_p.add_argument(
        "--master", default=None,
        help="Spark master; default local[*], or spark-submit's master when run under it",
    )
    run_p.add_argument("--shuffle-partitions", type=int, default=None,
                       help="spark.sql.shuffle.partitions (default locally: 2 x cores)")
    run_p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                       help="extra Spark setting, repeatable")
    run_p.add_argument("--no-report", action="store_true", help="tables only")
    run_p.add_argument("--log-level", default="WARNING", help="Python logging level")
    run_p.add_argument("--spark-log-level", default="WARN", help="Spark's log level")
    return parser


def run(args: argparse.Namespace) -> int:
    if getattr(args, "pipeline_command", None) != "run":
        print("kcoord pipeline: expected 'run'", file=sys.stderr)
        return 2
    try:
        import matplotlib  # noqa: F401
        import pandas  # noqa: F401
        import pyarrow  # noqa: F401
        import pyspark  # noqa: F401
    except ImportError as e:
        print(f"kcoord pipeline: {e.name} is missing; install the pipeline extra (./kcoord"
              " pipeline run does on first use; or pip install 'kcoord[pipeline]')", file=sys.stderr)
        return 2
    from . import fs
    from .session import build_session, is_local, java_version

    source = args.storage_url or args.data_dir
    problem = _check_source(source, args.storage_url is not None)
    if problem is not None:
        print(f"kcoord pipeline: {problem}", file=sys.stderr)
        return 2
    conf = {}
    for item in args.conf:
        key, sep, value = item.partition("=")
        if not sep:
            print(f"kcoord pipeline: --conf wants KEY=VALUE, got {item!r}", file=sys.stderr)
            return 2
        conf[key] = value
    if is_local(args.master) and java_version() is None:
        print("kcoord pipeline: Spark needs a Java runtime (17 or 21); `java -version` failed",
              file=sys.stderr)
        return 2

    from .job import run_job

    spark = build_session(args.master, shuffle_partitions=args.shuffle_partitions, conf=conf)
    try:
        spark.sparkContext.setLogLevel(args.spark_log_level)
        summary = run_job(spark, source, args.out, report=not args.no_report)
    finally:
        spark.stop()
    for name, count in summary.rows.items():
        print(f"{name}: {count} rows -> {fs.join(args.out, name)}")
    if not args.no_report:
        print(f"report: {fs.join(args.out, 'report', 'index.html')}")
    print(f"{len(summary.segments)} segments, {summary.totals.get('records', 0)} records, "
          f"{summary.seconds:.1f} s")
    for p in summary.problems:
        print(f"kcoord pipeline: SKIPPED {p['name']}: {p['message']}", file=sys.stderr)
    return 3 if summary.problems else 0


def _check_source(source: str, is_url: bool) -> str | None:
    """Why ``source`` cannot be read (no ``__consumer_offsets`` there), or None."""
    from .logs import OFFSETS_TOPIC, partition_dirs
    from .postgres import is_postgres_url, offsets_partitions

    if is_url or is_postgres_url(source):
        from kcoord.storage.postgres.engine import redacted

        shown = redacted(source)
        if not is_postgres_url(source):
            return f"--storage-url wants a postgresql:// URL, not {shown}"
        try:
            found = offsets_partitions(source, OFFSETS_TOPIC)
        except OSError as e:
            return f"cannot read {shown}: {_without_password(str(e), source)}"
        if not found:
            return f"no {OFFSETS_TOPIC} partitions in {shown}"
        return None
    try:
        dirs = partition_dirs(source)
    except OSError as e:  # FileNotFoundError and NotADirectoryError among them
        return f"cannot list --data-dir {source}: {e}"
    if not any(topic == OFFSETS_TOPIC for topic, _, _ in dirs):
        return f"no {OFFSETS_TOPIC}-N directories in {source}"
    return None


def _without_password(message: str, url: str) -> str:
    from urllib.parse import unquote, urlsplit

    password = urlsplit(url).password
    if password:
        message = message.replace(password, "***").replace(unquote(password), "***")
    return message
