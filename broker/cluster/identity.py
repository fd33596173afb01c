"""The data directory's lock, and the incarnation it last ran (cluster mode); the two errors
that stop a node from starting as who it says it is.

A node holds an exclusive ``flock`` on ``<data dir>/node.lock`` for as long as it runs; the
kernel drops it when the process dies, ``kill -9`` included. The file holds the incarnation the
directory's last process registered. So when a node restarts on the same directory, it knows
that the live-looking session of that incarnation in the database is its own former self, dead
(the lock proves it), and takes its node id back at once instead of waiting for the session to
expire (``storage.postgres.cluster.ClusterStore.register``). A node on a fresh directory waits.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import uuid
from pathlib import Path

LOCK_FILE = "node.lock"


class DataDirInUse(RuntimeError):
    """Another process holds the data directory."""


class NodeIdInUse(RuntimeError):
    """Another live node runs with this node id."""


class NodeIdentity:
    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / LOCK_FILE
        self._fd: int | None = None

    def acquire(self) -> uuid.UUID | None:
        """Lock the directory (DataDirInUse if another process has it); the incarnation its
        last process recorded, if any."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise DataDirInUse(
                f"another kcoord process uses the data directory {self.path.parent}"
            ) from None
        self._fd = fd
        text = os.pread(fd, 64, 0).decode("ascii", "replace").strip()
        with contextlib.suppress(ValueError):
            return uuid.UUID(text)
        return None

    def record(self, incarnation: uuid.UUID) -> None:
        """Remember the incarnation now registered (durably: it outlives a crash)."""
        assert self._fd is not None
        data = f"{incarnation}\n".encode()
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, data, 0)
        os.fsync(self._fd)

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing drops the lock
            self._fd = None
