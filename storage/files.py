"""Bounded file descriptors: segment and index files opened lazily, closed least recently used.

Every segment file (``.log``, ``.index``, ``.timeindex``) is a :class:`ManagedFile`. It holds no
descriptor until it is used; :meth:`ManagedFile.acquire` opens it on demand and
:meth:`ManagedFile.release` gives it back. A :class:`FilePool` (one per process, shared by all
logs: :data:`DEFAULT_POOL`, resized by the broker from ``log.max.open.files``) keeps the open
descriptors in least-recently-used order; when opening one more would exceed its capacity it
closes the least recently used descriptors that nobody holds. A closed descriptor is reopened on
the next use, so a broker with any number of partitions keeps about ``capacity`` descriptors.

Thread safety: descriptors are used by the event loop thread and by flush and compaction
threads. A descriptor is only closed by eviction while no thread holds it (``acquire`` counts
its users under the pool's lock), so a thread never finds its descriptor closed, or its number
reused for another file, in the middle of a system call. If every open descriptor is in use the
pool goes over its capacity for the moment rather than wait.

Files that cannot be opened for writing (read-only mounts, immutable files) are opened
read-only instead: ``read_only`` says so and writers refuse to write (see
:class:`FileReadOnly`). Dirty tracking: ``written()`` marks a file as having data not yet
fsynced, ``sync()`` fsyncs it only then; fsync works on the file, not the descriptor, so a
descriptor closed by eviction before the fsync loses nothing (the next fsync reopens the file).

Also here: :func:`fsync_dir`, :func:`write_file` (small files written whole, atomically) and
:func:`describe_error`, used wherever storage touches files.
This module does plain blocking file I/O and knows nothing about segments.
"""

from __future__ import annotations

import errno
import os
import threading
from collections import OrderedDict
from pathlib import Path
from types import TracebackType

DEFAULT_CAPACITY = 1000

_READ_ONLY_ERRNOS = frozenset({errno.EACCES, errno.EPERM, errno.EROFS})


def fsync_dir(path: Path) -> None:
    """fsync a directory (makes the creation, renaming or removal of its entries durable)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_file(path: Path, data: bytes, *, fsync: bool = True, atomic: bool = True) -> None:
    """Write the small file ``path`` whole. ``atomic``: through ``<name>.tmp`` renamed into
    place, then the directory fsynced (if ``fsync``), so a crash leaves the old file or the new
    one. Without it the file is written directly and fsynced (if ``fsync``), the directory not."""
    target = path.with_name(path.name + ".tmp") if atomic else path
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)
    if atomic:
        os.replace(target, path)
        if fsync:
            fsync_dir(path.parent)


def describe_error(e: BaseException) -> str:
    """A short description of an error for a log line (no traceback, bounded length)."""
    if isinstance(e, OSError) and e.strerror:
        name = Path(e.filename).name if isinstance(e.filename, str) else ""
        text = f"{e.strerror} ({name})" if name else e.strerror
    else:
        text = f"{type(e).__name__}: {e}"
    return text if len(text) <= 300 else text[:300] + "..."


class FileReadOnly(OSError):
    """A write to a file that could only be opened read-only (permissions, immutable, ro mount)."""


class FileClosed(ValueError):
    """A ManagedFile was used after :meth:`ManagedFile.close`."""


class FilePool:
    """The open descriptors of many ManagedFiles, at most ``capacity`` of them idle."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.capacity = capacity
        self._lock = threading.Lock()
        self._open: OrderedDict[ManagedFile, None] = OrderedDict()  # least recently used first
        self.opens = 0  # descriptors opened so far (statistics and tests)
        self.evictions = 0

    @property
    def open_count(self) -> int:
        """Descriptors held open by this pool right now."""
        return len(self._open)

    def resize(self, capacity: int) -> None:
        """Change the capacity; closes idle descriptors at once if now over it."""
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        with self._lock:
            self.capacity = capacity
            self._evict_locked()

    def close_idle(self) -> None:
        """Close every descriptor that nobody holds (tests, shutdown)."""
        with self._lock:
            for f in [f for f in self._open if f._users == 0]:
                self._close_locked(f)

    # -- used by ManagedFile, under self._lock ---------------------------------------------

    def _opened_locked(self, f: ManagedFile) -> None:
        self._open[f] = None
        self.opens += 1
        self._evict_locked()

    def _evict_locked(self) -> None:
        excess = len(self._open) - self.capacity
        if excess <= 0:
            return
        victims = []
        for f in self._open:  # least recently used first; skip those in use
            if f._users == 0:
                victims.append(f)
                if len(victims) == excess:
                    break
        for f in victims:
            self._close_locked(f)
        self.evictions += len(victims)

    def _close_locked(self, f: ManagedFile) -> None:
        self._open.pop(f, None)
        fd, f._fd = f._fd, None
        if fd is not None:
            os.close(fd)


class ManagedFile:
    """One file whose descriptor comes from a FilePool (or, with ``pool=None``, is private).

    ``create=True`` creates the file on first open if it does not exist. A private file
    (``pool=None``) is opened at once, never evicted, and must be closed by its owner.
    Use as ``fd = f.acquire()`` ... ``f.release()``, or ``with f as fd:``.
    """

    __slots__ = ("path", "pool", "create", "read_only", "dirty", "_fd", "_users", "_closed")

    def __init__(
        self,
        path: Path,
        pool: FilePool | None,
        *,
        create: bool = False,
        writable: bool = True,
    ) -> None:
        self.path = path
        self.pool = pool
        self.create = create
        self.read_only = not writable
        self.dirty = False  # written since the last fsync
        self._fd: int | None = None
        self._users = 0
        self._closed = False
        if pool is None:
            self._fd = self._open_fd()

    @property
    def is_open(self) -> bool:
        return self._fd is not None

    def acquire(self) -> int:
        """The descriptor, opened if needed; it stays open until the matching release()."""
        pool = self.pool
        if pool is None:
            if self._fd is None:
                raise FileClosed(f"{self.path} is closed")
            return self._fd
        with pool._lock:
            if self._closed:
                raise FileClosed(f"{self.path} is closed")
            fd = self._fd
            if fd is None:
                fd = self._fd = self._open_fd()
                self._users += 1
                pool._opened_locked(self)
            else:
                self._users += 1
                pool._open.move_to_end(self)
            return fd

    def release(self) -> None:
        pool = self.pool
        if pool is None:
            return
        with pool._lock:
            self._users -= 1

    def __enter__(self) -> int:
        return self.acquire()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

    def check_writable(self) -> None:
        """Raise FileReadOnly if the file could only be opened read-only."""
        if self.read_only:
            raise FileReadOnly(errno.EROFS, "file is not writable", str(self.path))

    def written(self) -> None:
        """Note data written through this file that is not fsynced yet."""
        self.dirty = True

    def sync(self) -> bool:
        """fsync the file if anything was written since the last sync; whether it did."""
        if not self.dirty:
            return False
        self.dirty = False  # before the fsync: a write racing with it marks the file again
        try:
            with self as fd:
                os.fsync(fd)
        except BaseException:
            self.dirty = True
            raise
        return True

    def nlink(self) -> int:
        """The file's link count through its descriptor (0: deleted while open)."""
        with self as fd:
            return os.fstat(fd).st_nlink

    def close(self) -> None:
        """Close the descriptor for good; later use raises FileClosed. Idempotent.

        The caller guarantees that no other thread holds the descriptor.
        """
        pool = self.pool
        if pool is None:
            self._closed = True
            fd, self._fd = self._fd, None
            if fd is not None:
                os.close(fd)
            return
        with pool._lock:
            self._closed = True
            pool._close_locked(self)

    def _open_fd(self) -> int:
        flags = os.O_CREAT if self.create else 0
        if not self.read_only:
            try:
                return os.open(self.path, os.O_RDWR | flags, 0o644)
            except OSError as e:
                if e.errno not in _READ_ONLY_ERRNOS:
                    raise
                self.read_only = True
        return os.open(self.path, os.O_RDONLY)


DEFAULT_POOL = FilePool()
"""The process-wide pool every log uses unless given another."""
