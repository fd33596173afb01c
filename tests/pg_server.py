"""A throwaway PostgreSQL server for the tests.

``initdb`` in a temporary directory, then ``postgres`` itself as a child process (so a test can
``kill -9`` it and start it again over the same files), listening on a free loopback port with
trust authentication for loopback only. PostgreSQL refuses to run as root, so under root it runs
as ``nobody`` (``setpriv``), in a directory that user owns.

The binaries come from Debian's ``postgresql`` package, which :func:`ensure_installed` installs
with apt-get where it is missing and the tests run as root, or whatever ``initdb`` is on the
PATH. Without them the fixtures skip and say why, unless ``KCOORDTEST_REQUIRE_POSTGRES=1``
(``scripts/test`` sets it) makes that a failure.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from .debian import apt_install

USER = "kcoord"
REQUIRE_ENV = "KCOORDTEST_REQUIRE_POSTGRES"  # "1": no PostgreSQL fails the test, never skips it
START_TIMEOUT_S = 60.0


def find_binaries() -> Path | str:
    """The directory holding ``initdb`` and ``postgres``, or why there is none."""
    candidates = sorted(
        glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(p.split("/")[-2]), reverse=True
    )
    initdb = shutil.which("initdb")
    if initdb:
        candidates.insert(0, str(Path(os.path.realpath(initdb)).parent))
    for directory in candidates:
        if (Path(directory) / "initdb").exists() and (Path(directory) / "postgres").exists():
            return Path(directory)
    return "PostgreSQL is not installed (no initdb/postgres; scripts/test installs Debian's postgresql)"


def ensure_installed() -> Path | str:
    """:func:`find_binaries`, after installing Debian's postgresql if they are missing and we
    may (root, apt-get)."""
    found = find_binaries()
    if isinstance(found, Path):
        return found
    failed = apt_install("postgresql")
    return find_binaries() if failed is None else failed


@contextlib.contextmanager
def running_server() -> Iterator[PostgresServer]:
    """A server started for the block and removed after it; without PostgreSQL the test
    skips (or fails, under :data:`REQUIRE_ENV`)."""
    bindir = ensure_installed()
    if isinstance(bindir, str):
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(bindir)
        pytest.skip(bindir)
    server = PostgresServer(bindir)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PostgresServer:
    """One PostgreSQL server; :meth:`database` makes a fresh database and gives its URL."""

    def __init__(self, bindir: Path) -> None:
        self.bindir = bindir
        self.root = Path(tempfile.mkdtemp(prefix="kcoord-pg-"))
        self.data = self.root / "data"
        self.port = _free_port()
        self.log_path = self.root / "postgres.log"
        self.process: subprocess.Popen[bytes] | None = None
        self._databases = 0
        self._as_user: list[str] = []
        if os.geteuid() == 0:
            os.chown(self.root, 65534, 65534)  # nobody:nogroup
            self._as_user = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"]
        self._run(
            str(bindir / "initdb"),
            "-D", str(self.data),
            "-U", USER,
            "--auth=trust",
            "--encoding=UTF8",
            "--no-sync",  # initdb's own files only; the server fsyncs as usual
        )
        with open(self.data / "postgresql.conf", "a") as conf:
            conf.write(
                "listen_addresses = '127.0.0.1'\n"
                f"unix_socket_directories = '{self.root}'\n"
                "max_connections = 200\n"
            )

    def _run(self, *argv: str) -> None:
        subprocess.run(
            [*self._as_user, *argv], check=True, capture_output=True, timeout=120, cwd=self.root
        )

    @property
    def url(self) -> str:
        return f"postgresql://{USER}@127.0.0.1:{self.port}/postgres"

    def start(self) -> None:
        """Start the server and wait until it takes connections."""
        postgres = [str(self.bindir / "postgres"), "-D", str(self.data), "-p", str(self.port)]
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [*self._as_user, *postgres],
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.root,
                start_new_session=True,  # its own process group: kill9 takes the backends too
            )
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"postgres exited at start:\n{self.log_path.read_text()[-2000:]}")
            try:
                with psycopg.connect(self.url, connect_timeout=2):
                    return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def kill9(self) -> None:
        """Kill the server and every process of it as a crash would (no shutdown checkpoint),
        and return once all are dead. PostgreSQL's backends and auxiliary processes each start
        a process group of their own (setsid), so the postmaster's group does not take them:
        they are found as its children, with the postmaster stopped first so that it forks no
        more, and killed one by one. Left alive for a moment, a backend would still answer a
        pooled connection's query, and hold the shared memory beside which a restarted server
        refuses to start ("pre-existing shared memory block is still in use")."""
        if self.process is None:
            return
        pid = self.process.pid
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGSTOP)
        children = _children_of(pid)
        for target in (pid, *children):
            with contextlib.suppress(ProcessLookupError):
                os.kill(target, signal.SIGKILL)
        # Long on a loaded machine: a process killed in the middle of an fsync goes only
        # once the disk has answered.
        self.process.wait(120)
        self.process = None
        deadline = time.monotonic() + 120
        while any(_running(child) for child in children):
            if time.monotonic() > deadline:
                raise RuntimeError(f"PostgreSQL processes outlived SIGKILL: {children}")
            time.sleep(0.01)

    def database(self) -> str:
        """A new, empty database; its URL."""
        self._databases += 1
        # Unique across servers: a killed server's port may go to another test worker's server,
        # where a client reconnecting must find no database of the same name (and answer its
        # rows as if they were this one's).
        name = f"t{self._databases}_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return f"postgresql://{USER}@127.0.0.1:{self.port}/{name}"

    def stop(self) -> None:
        if self.process is not None:
            # A fast shutdown: SIGTERM's smart shutdown would wait for clients still connected.
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(30)
            self.process = None
        shutil.rmtree(self.root, ignore_errors=True)


def _children_of(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (from /proc)."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:  # gone meanwhile
                continue
            if int(fields[1]) == pid:
                out.append(int(entry.name))
    return out


def _running(pid: int) -> bool:
    """Whether ``pid`` still runs (a zombie has released everything and does not)."""
    try:
        state = (Path(f"/proc/{pid}/stat")).read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")
