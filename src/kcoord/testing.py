"""A throwaway kcoord broker for anyone's tests: ``with kcoord.testing.broker() as b: b.bootstrap``.

It owns :class:`TestBroker`, a real ``kcoord serve`` process started with the same Python that
imported this module, on a free port (``--port 0``), with its data in a temporary directory,
and ready when :meth:`TestBroker.start` returns: the broker writes its bootstrap address to a
ready file (``--ready-file``) only once it accepts requests, so nothing here polls a port. On
leaving the ``with`` block the process is killed and its directory removed.

Settings are keyword arguments with underscores for dots (``num_partitions=6`` is
``num.partitions=6``; no kcoord setting has an underscore in its name) or a ``settings``
mapping of Kafka names. The ``--dev`` preset is on unless ``dev=False``: groups form at once and
a topic a client names is created with three partitions. The pytest fixtures built on this are
in :mod:`kcoord.pytest_plugin`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import kcoord

__all__ = ["BrokerStartError", "TestBroker", "broker"]

START_TIMEOUT = 60.0
"""Seconds a start may take before it is given up (a cold start on a busy machine is ~1 s)."""


class BrokerStartError(RuntimeError):
    """The broker process exited or did not become ready; the message ends with its log."""


def setting_name(keyword: str) -> str:
    """``num_partitions`` -> ``num.partitions``."""
    return keyword.replace("_", ".")


class TestBroker:
    """One broker process and its directory. Start it with :meth:`start` (or use
    :func:`broker`); :attr:`bootstrap` is its address."""

    __test__ = False  # not a test class, whatever pytest's collection makes of the name

    def __init__(
        self,
        settings: Mapping[str, object] | None = None,
        *,
        dev: bool = True,
        console: bool = False,
        data_dir: str | os.PathLike[str] | None = None,
        start_timeout: float = START_TIMEOUT,
    ) -> None:
        self.settings = dict(settings or {})
        self.dev = dev
        self.console = console
        self.start_timeout = start_timeout
        self._own_dir = Path(tempfile.mkdtemp(prefix="kcoord-test-"))
        self.data_dir = Path(data_dir) if data_dir is not None else self._own_dir / "data"
        self.log_path = self._own_dir / "broker.log"
        self._ready = self._own_dir / "ready"
        self.port = 0
        """The Kafka port: 0 until the first start, then the same one across restarts."""
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        """``host:port`` for ``bootstrap.servers``."""
        if self.port == 0:
            raise RuntimeError("the broker has not been started")
        return f"127.0.0.1:{self.port}"

    @property
    def console_url(self) -> str | None:
        """The web console's URL, with ``console=True`` (read from the start-up line)."""
        for line in reversed(self.log().splitlines()):
            if "kcoord serving on" in line and ", console " in line:
                return line.split(", console ", 1)[1].split(",", 1)[0]
        return None

    def command(self) -> list[str]:
        cmd = [sys.executable, "-m", "kcoord", "serve", "--host", "127.0.0.1",
               "--port", str(self.port), "--data-dir", str(self.data_dir),
               "--ready-file", str(self._ready)]
        cmd += ["--metrics-port", "0"] if self.console else ["--no-console"]
        if self.dev:
            cmd.append("--dev")
        for name, value in self.settings.items():
            shown = str(value).lower() if isinstance(value, bool) else str(value)
            cmd += ["--set", f"{name}={shown}"]
        return cmd

    def start(self) -> TestBroker:
        """Start the process and return once it accepts requests; raises BrokerStartError."""
        if self.alive():
            return self
        self._ready.unlink(missing_ok=True)
        env = dict(os.environ)
        # The child imports the very kcoord this process did (a checkout's src/, a venv's).
        home = str(Path(kcoord.__file__).resolve().parent.parent)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [home, env.get("PYTHONPATH")]))
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                self.command(), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                # In the caller's working directory: the broker writes nothing there, and tools
                # that keep a cache in the working directory find theirs.
                env=env,
            )
        deadline = time.monotonic() + self.start_timeout
        while not self._ready.exists():
            if self.proc.poll() is not None:
                raise BrokerStartError(
                    f"kcoord serve exited with status {self.proc.returncode}:\n{self.log()[-4000:]}"
                )
            if time.monotonic() > deadline:
                self.kill()
                raise BrokerStartError(
                    f"kcoord serve not ready within {self.start_timeout:.0f} s:\n{self.log()[-4000:]}"
                )
            time.sleep(0.005)
        self.port = int(self._ready.read_text().strip().rpartition(":")[2])
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 30.0) -> None:
        """A clean shutdown (SIGTERM), as Ctrl-C would do; SIGKILL if it takes too long."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()

    def kill(self) -> None:
        """SIGKILL: no shutdown, as a crash; what was acknowledged is on disk all the same."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)
        self._ready.unlink(missing_ok=True)

    def restart(self, kill: bool = False) -> TestBroker:
        """Stop (or with ``kill=True`` SIGKILL) and start again on the same port and data,
        ready when it returns."""
        if kill:
            self.kill()
        else:
            self.stop()
        return self.start()

    def admin(self, **config: Any) -> Any:
        """A confluent-kafka ``AdminClient`` for this broker (``config``: more of its settings)."""
        from confluent_kafka.admin import AdminClient

        return AdminClient({"bootstrap.servers": self.bootstrap, **config})

    def log(self) -> str:
        """What the broker logged so far."""
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def close(self) -> None:
        """Kill the process and remove its directory (not a ``data_dir`` given by the caller)."""
        self.kill()
        shutil.rmtree(self._own_dir, ignore_errors=True)

    def __enter__(self) -> TestBroker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


@contextlib.contextmanager
def broker(
    settings: Mapping[str, object] | None = None,
    *,
    dev: bool = True,
    console: bool = False,
    data_dir: str | os.PathLike[str] | None = None,
    start_timeout: float = START_TIMEOUT,
    **more: object,
) -> Iterator[TestBroker]:
    """A started :class:`TestBroker`, killed and cleaned up on leaving the block.

    ``settings`` are Kafka names (``{"num.partitions": 6}``), ``more`` the same with underscores
    (``num_partitions=6``); ``dev=False`` leaves the ``--dev`` preset out; ``console=True``
    serves the web console on a free port (:attr:`TestBroker.console_url`)."""
    merged = {**dict(settings or {}), **{setting_name(k): v for k, v in more.items()}}
    b = TestBroker(merged, dev=dev, console=console, data_dir=data_dir,
                   start_timeout=start_timeout)
    try:
        yield b.start()
    finally:
        b.close()
