"""The ``kcoord`` command line.

``kcoord serve`` runs the broker in the foreground; ``kcoord config`` prints the effective
configuration and where each value came from; ``kcoord groups ...``, ``kcoord offsets ...``,
``kcoord topics ...`` and the rest administer a running broker (or Apache Kafka) over the Kafka
protocol; ``kcoord produce`` and ``kcoord consume`` write and read records.

The help texts are plain (:data:`DESCRIPTION`), not this docstring's markup. A reader that goes
away (``kcoord topics list | head -1``) ends the command quietly, with status 1 and nothing on
stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import logging
import signal
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from . import compiled
from .admin import COMMANDS as ADMIN_COMMANDS
from .admin.output import quiet_when_pipe_closes
from .broker.cluster.identity import DataDirInUse, NodeIdInUse
from .broker.config import Config, ConfigError
from .broker.net.binding import ListenError
from .broker.security.sasl.users import add_parser as add_users_parser
from .broker.security.sasl.users import run as run_users
from .startup import (
    StartupError,
    add_preset_argument,
    add_serve_arguments,
    fail,
    log_start,
    remove_ready_file,
    serve_config,
    write_ready_file,
)

if TYPE_CHECKING:
    from .broker.app import Broker


def _settings_parent() -> argparse.ArgumentParser:
    """Options shared by ``serve`` and ``config``: where settings come from."""
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument("--config", default=None, help="TOML file of settings")
    parent.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a setting by its Kafka name, e.g. group.initial.rebalance.delay.ms=0",
    )
    add_preset_argument(parent)
    return parent


DESCRIPTION = (
    "kcoord serve runs the broker in the foreground; kcoord config prints the effective"
    " configuration and where each value came from; groups, offsets, share, topics,"
    " transactions and cluster administer a running broker (or Apache Kafka) over the Kafka"
    " protocol; produce and consume write and read records."
)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kcoord", description=DESCRIPTION)
    sub = parser.add_subparsers(dest="command", required=True)
    settings = _settings_parent()
    serve = sub.add_parser(
        "serve", parents=[settings], help="run the broker in the foreground"
    )
    add_serve_arguments(serve)
    show = sub.add_parser(
        "config",
        parents=[settings],
        help="print the effective configuration and where each value came from",
    )
    show.add_argument("--json", action="store_true", help="print JSON instead of a table")
    show.add_argument(
        "--verbose", "-v", action="store_true", help="also show allowed values and descriptions"
    )
    build = sub.add_parser(
        "build",
        help="compile the hot modules with mypyc (needs gcc and the Python headers), used from"
        " the next start",
    )
    build.add_argument("--if-stale", action="store_true", help="do nothing if the build is current")
    add_users_parser(sub)
    # The admin commands are Kafka clients of their own package (admin/); only their
    # arguments are added here: confluent-kafka is imported when one of them runs.
    from kcoord.admin.cli import add_parsers as add_admin_parsers

    add_admin_parsers(sub)
    try:  # the Spark pipeline is an optional extra
        from kcoord.pipeline.cli import add_parser as add_pipeline_parser
    except ImportError:
        pass
    else:
        add_pipeline_parser(sub)
    return parser


YOUNG_GENERATION_THRESHOLD = 7_000
"""Net new tracked objects between two young collections (CPython's default is 700)."""


def _tune_collector() -> None:
    """Tune the cyclic garbage collector for a long-running server, once start-up is done.

    Freeze what start-up built (modules, classes, schema tables, config: some 70,000 objects
    that live as long as the process): a full collection walks every tracked object, and
    under the commit benchmark one ran about once a second and took 45-75 ms, which was the
    p99 latency; frozen, a full collection takes 2-3 ms there. Frozen objects are still freed
    by reference counting; only cycles among them would never be collected, hence the
    collection first.

    Collect the young generation ten times less often: a request's objects (a commit's
    records, its undo, its futures) live until its fsync, a few milliseconds, so with the
    default threshold most of them were walked once or twice more and promoted before dying.
    Under the commit benchmark the collector's time fell from ~0.4 s to ~0.08 s per 700,000
    offsets.

    In the process entry point, not in Broker.start: tests start many brokers in one
    process."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_GENERATION_THRESHOLD, middle, old)


async def _freeze_when_loaded(broker: Broker) -> None:
    """Freeze, as :func:`_tune_collector` does, what the start-up load of the coordinators'
    partitions built once it is over (the broker serves meanwhile, so it ends after that
    first freeze): every group and committed offset loaded lives on, and each full collection
    walked them all (with 20,000 groups and 20,000 offsets, 100-180 ms of the event loop,
    every few big requests). Only the young generations are collected first: a full
    collection here would cost that much once more, and the cycles already among the old
    objects, left uncollected, are few and made once."""
    await broker.groups.loads_done()
    gc.collect(1)
    gc.freeze()


async def _serve(config: Config, ready_file: str | None) -> int:
    from .broker.app import Broker

    try:
        broker = Broker(config)
    except OSError as e:  # the storage engine could not open what it keeps
        return fail(f"cannot open the broker's storage: {e}")
    except DataDirInUse as e:  # cluster mode: another process runs on this data directory
        return fail(str(e))
    # Before the ready file says so: a script may stop the broker as soon as it is up.
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await broker.start()
    except ListenError as e:  # raised before anything was loaded: only the storage is open
        broker.engine.close()
        return fail(str(e))
    except NodeIdInUse as e:  # cluster mode: another live node has this node.id
        await broker.stop()
        return fail(str(e))
    if ready_file is not None:
        listener = broker.listeners[0]
        write_ready_file(ready_file, f"{listener.advertised_host}:{listener.advertised_port}")
    _tune_collector()
    frozen = asyncio.ensure_future(_freeze_when_loaded(broker))
    await stop.wait()
    frozen.cancel()
    logging.getLogger("kcoord").info("shutting down")
    remove_ready_file(ready_file)
    await broker.stop()
    return 0


def _show_config(args: argparse.Namespace) -> int:
    """``kcoord config``: the settings ``kcoord serve`` would run with, given the same
    ``--config``/``--set`` flags and this environment."""
    try:
        config = Config.load(config_file=args.config, overrides=args.set, dev=args.dev)
    except ConfigError as e:
        print(f"kcoord: {e}", file=sys.stderr)
        return 2
    for warning in config.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    rows = config.describe()
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    headers = ["NAME", "VALUE", "SOURCE"] + (["ALLOWED", "DESCRIPTION"] if args.verbose else [])
    table = [
        [r["name"], "(hidden)" if r["sensitive"] else _show_value(r["value"]), r["source"]]
        + ([r["allowed"], r["doc"]] if args.verbose else [])
        for r in rows
    ]
    widths = [max(len(h), *(len(row[i]) for row in table)) for i, h in enumerate(headers)]
    for row in [headers, *table]:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    return 0


def _show_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return '""' if value == "" else str(value)


def main(argv: Sequence[str] | None = None) -> int:
    return quiet_when_pipe_closes(lambda: _run(argv))


def _run(argv: Sequence[str] | None) -> int:
    args = _parser().parse_args(argv)
    # The format names no thread, process or source line: do not look them up for every
    # record (a line per completed rebalance: one per group created).
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    logging._srcfile = None  # no caller's frame walk (the logging HOWTO's "Optimization")
    logging.basicConfig(
        level=getattr(logging, str(getattr(args, "log_level", "WARNING")).upper(), logging.INFO),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    if args.command == "serve":
        try:
            config = serve_config(args)
        except StartupError as e:
            return fail(str(e))
        log_start(config, args.dev, compiled.describe())
        try:
            import uvloop
        except ImportError:  # pragma: no cover - uvloop is a dependency, but optional at run time
            return asyncio.run(_serve(config, args.ready_file))
        return uvloop.run(_serve(config, args.ready_file))
    if args.command == "config":
        return _show_config(args)
    if args.command == "build":
        from .compiled.build import main as build_main

        return build_main(["--if-stale"] if args.if_stale else [])
    if args.command == "users":
        return run_users(args)
    if args.command in ADMIN_COMMANDS:
        from kcoord.admin.cli import run as run_admin

        return run_admin(args)
    if args.command == "pipeline":
        from kcoord.pipeline.cli import run as run_pipeline

        return int(run_pipeline(args))
    return 2


if __name__ == "__main__":
    sys.exit(main())
