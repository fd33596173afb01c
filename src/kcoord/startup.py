"""What ``kcoord serve`` does around the broker: its options, and the first things a user sees.

It owns the serve command's options, the console's default address, the settings it builds from
them (with the ``--dev`` preset), the checks made before the broker opens anything (the data
directory, the ready file's directory), the ready file, and the rule that a mistake a user can
fix (a bad setting, a port in use, a directory that cannot be made) ends start-up with one line
saying what to do and exit status 2, never a traceback.

The console (and ``/metrics``, ``/healthz``, ``/readyz``: one HTTP port) is on by default, on
127.0.0.1 at :data:`DEFAULT_CONSOLE_PORT`, whatever ``--host`` says: it shows every group to
whoever can reach it, so only this machine can unless a port is asked for. Where that port is
taken (a second broker on this machine, say), the broker logs one line and serves Kafka without
it: the console is there to help, not a reason to refuse to start. A port given with
``--metrics-port`` is on ``--host`` and is required: taken, start-up stops. With ``--port 0``
the default console takes any free port too; ``--no-console`` turns it off.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
from pathlib import Path

from .broker.config import Config, ConfigError
from .broker.config.presets import DEV_PRESET, describe_preset
from .broker.net.listeners import parse_listeners, server_ssl_context

DEFAULT_CONSOLE_PORT = 9308
"""The default console's port (as Prometheus' exporters number theirs; the container's too)."""

log = logging.getLogger("kcoord")


class StartupError(Exception):
    """Start-up cannot go on; the message (one line) says why and what to do."""


def add_preset_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--dev",
        action="store_true",
        help="development preset: " + describe_preset(DEV_PRESET)
        + " (a file, KCOORD_* or --set overrides any)",
    )


def add_serve_arguments(serve: argparse.ArgumentParser) -> None:
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on")
    serve.add_argument(
        "--port", type=int, default=9092, help="Kafka port to listen on (0: any free port)"
    )
    serve.add_argument("--data-dir", default="data", help="directory holding the logs")
    serve.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        metavar="N",
        help="serve the web console, /metrics (Prometheus), /healthz and /readyz on --host at"
        f" this port (0: any free port); default: on 127.0.0.1:{DEFAULT_CONSOLE_PORT} where"
        " that port is free",
    )
    serve.add_argument(
        "--no-console",
        action="store_true",
        help="serve no console, metrics or health checks over HTTP",
    )
    serve.add_argument(
        "--ready-file",
        default=None,
        metavar="FILE",
        help="once the broker accepts requests, write its bootstrap address (host:port) to"
        " FILE (removed again at a clean shutdown)",
    )
    serve.add_argument("--log-level", default="INFO")


def serve_config(args: argparse.Namespace) -> Config:
    """The configuration ``kcoord serve`` runs with; raises StartupError (one line)."""
    try:
        config = Config.load(
            host=args.host,
            port=args.port,
            data_dir=args.data_dir,
            config_file=args.config,
            overrides=args.set,
            metrics_port=None if args.no_console else args.metrics_port,
            dev=args.dev,
        )
        if any(listener.tls for listener in parse_listeners(config)):
            server_ssl_context(config)  # a bad keystore stops start-up here, by name
    except ConfigError as e:
        raise StartupError(str(e)) from None
    if not 0 <= args.port <= 65535:
        raise StartupError(f"--port {args.port} is not a port (0 to 65535; 0: any free port)")
    if args.metrics_port is not None and not 0 <= args.metrics_port <= 65535:
        raise StartupError(
            f"--metrics-port {args.metrics_port} is not a port (0 to 65535; 0: any free port)"
        )
    if not args.no_console and args.metrics_port is None:
        config.metrics_host = "127.0.0.1"
        config.metrics_port = DEFAULT_CONSOLE_PORT if args.port != 0 else 0
        config.metrics_required = False
    check_directories(config, args.ready_file)
    return config


def check_directories(config: Config, ready_file: str | None) -> None:
    """Make the data directory (and its parents) and check that it can be written; check that
    the ready file's directory exists. Raises StartupError."""
    data_dir = config.data_dir
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise StartupError(
            f"cannot create the data directory {data_dir}: {e.strerror or e}; choose another"
            " with --data-dir"
        ) from None
    if not data_dir.is_dir():
        raise StartupError(
            f"the data directory {data_dir} is not a directory; choose another with --data-dir"
        )
    if not os.access(data_dir, os.W_OK | os.X_OK):
        raise StartupError(
            f"the data directory {data_dir} is not writable by this user; fix its permissions"
            " or choose another with --data-dir"
        )
    if ready_file is not None:
        parent = Path(ready_file).absolute().parent
        if not parent.is_dir():
            raise StartupError(
                f"--ready-file {ready_file}: the directory {parent} does not exist; create it"
                " first or name a file elsewhere"
            )
        Path(ready_file).unlink(missing_ok=True)  # a stale one would say "ready" too soon


def log_start(config: Config, dev: bool, build: str) -> None:
    """The lines logged before the broker starts: warnings, the preset, the build."""
    for warning in config.warnings:
        log.warning("%s", warning)
    if dev:
        shown = {n: config[n] for n in DEV_PRESET}
        overridden = [n for n in DEV_PRESET if config.source(n) != "--dev"]
        log.info(
            "development preset (--dev): %s%s",
            describe_preset(shown),
            f" ({', '.join(overridden)} given elsewhere)" if overridden else "",
        )
    log.info("%s", build)


def write_ready_file(path: str, bootstrap: str) -> None:
    """Write ``host:port`` and a newline to ``path`` in one step (a reader never sees half)."""
    target = Path(path)
    scratch = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    scratch.write_text(bootstrap + "\n")
    os.replace(scratch, target)


def remove_ready_file(path: str | None) -> None:
    if path is not None:
        with contextlib.suppress(OSError):
            Path(path).unlink(missing_ok=True)


def fail(message: str) -> int:
    """Print one line, ``kcoord: <message>``, and give start-up's exit status, 2."""
    print(f"kcoord: {message}", file=sys.stderr)
    return 2
