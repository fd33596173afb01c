"""Runs a real kcoord broker as a subprocess on a free loopback port, for integration tests."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

ENGINE_ENV = "KCOORDTEST_ENGINE"  # (not KCOORD_*: the broker warns of those naming no setting)
"""``postgresql``: the run is on the PostgreSQL engine (``conftest.py`` sets
:data:`database_factory`); unset or ``files``: on the files engine."""
database_factory: Callable[[], str] | None = None
"""On the PostgreSQL engine: makes a database. Each data directory gets one of its own, so a
broker keeps its database across restarts and ``kcoord users --data-dir`` finds it too."""
_databases: dict[Path, str] = {}


def storage_url(data_dir: Path) -> str | None:
    """On the PostgreSQL engine, the database of the broker whose data directory this is;
    None on the files engine."""
    if database_factory is None:
        return None
    key = Path(data_dir).resolve()
    if key not in _databases:
        _databases[key] = database_factory()
    return _databases[key]


def stored_batches(data_dir: Path, topic: str, partition: int) -> bytes:
    """Every record batch a partition holds in storage, in offset order (as the files engine's
    segments hold them, one after the other)."""
    url = storage_url(data_dir)
    if url is None:
        directory = Path(data_dir) / f"{topic}-{partition}"
        return b"".join(p.read_bytes() for p in sorted(directory.glob("*.log")))
    import psycopg

    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT b.data FROM batches b JOIN partitions p ON p.id = b.partition_id"
            " WHERE p.topic = %s AND p.partition = %s AND NOT p.deleted ORDER BY b.base_offset",
            (topic, partition),
        ).fetchall()
    return b"".join(bytes(r[0]) for r in rows)


def stored_document(data_dir: Path, name: str) -> bytes | None:
    """A document of the broker's storage engine (``storage.engine``), wherever it lives."""
    url = storage_url(data_dir)
    if url is None:
        path = Path(data_dir) / name
        return path.read_bytes() if path.exists() else None
    import psycopg

    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT body FROM documents WHERE name = %s", (name,)).fetchone()
    return None if row is None else bytes(row[0])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(
    condition: Callable[[], object], timeout: float = 30.0, interval: float = 0.05, what: str = ""
) -> object:
    """Poll ``condition`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last_error: BaseException | None = None
    while time.monotonic() < deadline:
        try:
            value = condition()
        except Exception as e:  # the condition may raise while the system settles
            last_error = e
            value = None
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what or condition}: {last_error!r}")


class BrokerProcess:
    def __init__(
        self,
        data_dir: Path,
        settings: dict[str, object] | None = None,
        metrics_port: int | None = None,
        wrapper: list[str] | None = None,
    ) -> None:
        self.data_dir = data_dir
        # A command the broker runs under, e.g. ["prlimit", "--as=2147483648"] (it must exec
        # the broker, so that the pid is the broker's).
        self.wrapper = list(wrapper or [])
        self.settings = dict(settings or {})
        # Kafka 4.3 batches a consumer group's target assignment over 1 s (KIP-1263); the tests
        # were written for an assignment at once, as --dev has it. A test of batching sets it.
        self.settings.setdefault("group.consumer.assignment.interval.ms", 0)
        url = storage_url(data_dir)
        if url is not None and "storage.url" not in self.settings:
            self.settings["storage.url"] = url
        self.port = free_port()
        self.metrics_port = metrics_port  # passed as --metrics-port when set
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = data_dir.parent / f"broker-{self.port}.log"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> BrokerProcess:
        self.launch()
        wait_for(self._accepting, timeout, what=f"broker on port {self.port}")
        return self

    def launch(self) -> subprocess.Popen[bytes]:
        """Start the process and return at once (:meth:`start` waits until it accepts)."""
        cmd = [
            *self.wrapper,
            sys.executable,
            "-m",
            "kcoord",
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--data-dir",
            str(self.data_dir),
        ]
        for name, value in self.settings.items():
            cmd += ["--set", f"{name}={value}"]
        # Always said: brokers of parallel tests must never meet on the default console port.
        if self.metrics_port is not None:
            cmd += ["--metrics-port", str(self.metrics_port)]
        else:
            cmd += ["--no-console"]
        env = dict(os.environ)
        env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        logf = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child
        self.proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
        logf.close()
        return self.proc

    def _accepting(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"broker exited with {self.proc.returncode}:\n{self.log()}")
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                return True
        except OSError:
            return False

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-20000:]
        except OSError:
            return ""

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL: no chance to flush or clean up."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self, timeout: float = 15.0) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        return self.proc.returncode

    def restart(self) -> BrokerProcess:
        """Start again on the same port and data dir (after kill() or stop())."""
        return self.start()
