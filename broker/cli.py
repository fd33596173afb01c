"""The ``kcoord`` command line: ``kcoord serve`` runs the broker in the foreground."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from collections.abc import Sequence

from .config import Config, ConfigError


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kcoord", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the broker in the foreground")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on")
    serve.add_argument("--port", type=int, default=9092, help="port to listen on")
    serve.add_argument("--data-dir", default="data", help="directory holding the logs")
    serve.add_argument("--config", default=None, help="TOML file of settings")
    serve.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a setting by its Kafka name, e.g. group.initial.rebalance.delay.ms=0",
    )
    serve.add_argument("--log-level", default="INFO")
    try:  # the Spark pipeline is an optional extra
        from pipeline.cli import add_parser as add_pipeline_parser
    except ImportError:
        pass
    else:
        add_pipeline_parser(sub)
    return parser


async def _serve(config: Config) -> None:
    from .app import Broker

    broker = Broker(config)
    await broker.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    logging.getLogger("kcoord").info("shutting down")
    await broker.stop()


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, str(args.log_level).upper(), logging.INFO),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    if args.command == "serve":
        try:
            config = Config.load(
                host=args.host,
                port=args.port,
                data_dir=args.data_dir,
                config_file=args.config,
                overrides=args.set,
            )
        except ConfigError as e:
            print(f"kcoord: {e}", file=sys.stderr)
            return 2
        try:
            import uvloop
        except ImportError:  # pragma: no cover - uvloop is a dependency, but optional at run time
            asyncio.run(_serve(config))
        else:
            uvloop.run(_serve(config))
        return 0
    if args.command == "pipeline":
        from pipeline.cli import run as run_pipeline

        return int(run_pipeline(args))
    return 2


if __name__ == "__main__":
    sys.exit(main())
