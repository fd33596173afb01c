"""All-or-nothing creation of partition directories (new topics, added partitions).

A topic's partitions are many directories, and a crash (or a full disk) part-way through
creating them must never leave a half topic that loads at the next start. So partitions are
built where the loader does not look, and only a committed creation is moved into place::

    <data-dir>/.staging/<creation id>/        one creation (the loader skips .staging, which
                                               is removed when no creation uses it)
        <topic>-<partition>/                   a complete partition: partition.metadata and
                                               an empty segment, fsynced
        COMMITTED                              written last: the commit point

The protocol (:class:`StagedPartitions`):

1. ``add`` builds each partition directory inside the creation's directory: the
   ``partition.metadata`` file and an empty segment (``.log``, ``.index``, ``.timeindex``).
2. ``commit`` checks that no target directory exists yet and makes everything built durable:
   for a large creation one ``syncfs`` of the filesystem (thousands of partitions would
   otherwise cost two fsyncs each), else (or where syncfs is not available) an fsync of every
   file and directory. It then
   creates ``COMMITTED`` and fsyncs the creation directory. That fsync is the commit point:
   before it the creation does not exist, after it the creation must complete.
3. Each partition directory is renamed into the data directory; the data directory is fsynced;
   ``COMMITTED`` and the creation directory are removed.

``abort`` (a failure before the commit point) removes the creation directory.

Creations run at the same time in worker threads, all in the one ``.staging``. The root is
made by the first creation under way and removed by the last to finish, counted under a lock
(:func:`_enter`, :func:`_leave`), so it exists for as long as any creation uses it: none ever
fsyncs a root another has removed (they once did, and logged "could not remove finished
creation"). Only one process uses a data directory.

At start-up,
before any partition is loaded, :func:`recover_staged` settles what a crash left: a creation
without ``COMMITTED`` is deleted (rolled back), one with it is rolled forward (its remaining
partition directories renamed into place, then it is deleted). Any subset of the renames may
have reached the disk; each partition directory is either still staged or in place, so rolling
forward is always possible. A target that exists when rolling forward (it cannot, unless
someone created it by hand) is logged at ERROR and the staged copy is left in ``.staging``.

This module does plain blocking file I/O (callers run it in a worker thread when it is big).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import logging
import os
import shutil
import threading
import uuid
from pathlib import Path

from kcoord.storage.files import fsync_dir
from kcoord.storage.log import PartitionLog
from kcoord.storage.partition_metadata import write_partition_metadata

log = logging.getLogger("kcoord.storage")

STAGING_DIR = ".staging"
COMMIT_MARKER = "COMMITTED"
SYNCFS_FROM = 32
"""Creations of at least this many partitions are made durable by one syncfs of the whole
filesystem; smaller ones by fsyncs of their own files (cheaper when the filesystem is busy)."""


class CreationIncomplete(OSError):
    """A committed creation could not move every partition into place (the next start will).

    ``installed`` lists the partition directories that did move.
    """

    def __init__(self, cause: OSError, installed: list[Path]) -> None:
        super().__init__(cause.errno, f"creation committed but incomplete: {cause.strerror}")
        self.cause = cause
        self.installed = installed


_libc: ctypes.CDLL | None = None


def _syncfs(path: Path) -> bool:
    """syncfs(2) on the filesystem holding ``path`` (Linux): everything written to it is
    durable on return. False if the call is not available; OSError if it fails."""
    global _libc
    if _libc is None:
        try:
            _libc = ctypes.CDLL(None, use_errno=True)
        except OSError:
            return False
    syncfs = getattr(_libc, "syncfs", None)
    if syncfs is None:
        return False
    fd = os.open(path, os.O_RDONLY)
    try:
        if syncfs(fd) != 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err), str(path))
    finally:
        os.close(fd)
    return True


class StagedPartitions:
    """One creation of partition directories under ``<data-dir>/.staging/<id>/``."""

    def __init__(self, data_dir: Path, *, fsync: bool = True) -> None:
        self.data_dir = Path(data_dir)
        self.fsync = fsync
        root = self.data_dir / STAGING_DIR
        self.dir = root / uuid.uuid4().hex
        _enter(root)
        self._entered = True
        try:
            self.dir.mkdir()
            if fsync:
                # The creation's directory must be findable after a crash from the commit point
                # on (the start-up recovery rolls it forward): its entry in the root, and the
                # root's in the data directory, are made durable before anything is built.
                fsync_dir(root)
                fsync_dir(self.data_dir)
        except BaseException:
            shutil.rmtree(self.dir, ignore_errors=True)
            self._leave()
            raise
        self.names: list[str] = []
        self.committed = False

    def add(self, topic: str, partition: int, topic_id: uuid.UUID) -> None:
        """Build the directory of partition ``partition`` of ``topic`` (empty; made durable by
        :meth:`commit`)."""
        name = f"{topic}-{partition}"
        path = self.dir / name
        path.mkdir()
        self.names.append(name)
        write_partition_metadata(path, topic_id, fsync=False, atomic=False)
        PartitionLog.initialize(path, fsync=False)

    def _make_durable(self) -> None:
        if len(self.names) >= SYNCFS_FROM and _syncfs(self.dir):
            return
        for name in self.names:
            path = self.dir / name
            for child in path.iterdir():
                fd = os.open(child, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            fsync_dir(path)
        fsync_dir(self.dir)

    def commit(self) -> list[Path]:
        """Commit and move every partition into place; returns their final paths.

        A failure before the commit point aborts the creation and raises the error; after it,
        CreationIncomplete says which partitions moved (the others move at the next start).
        """
        try:
            for name in self.names:
                if (self.data_dir / name).exists():
                    raise FileExistsError(errno.EEXIST, "partition directory exists", name)
            if self.fsync:
                self._make_durable()
            fd = os.open(self.dir / COMMIT_MARKER, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            os.close(fd)
            if self.fsync:
                fsync_dir(self.dir)  # the commit point
        except BaseException:
            self.abort()
            raise
        self.committed = True
        installed: list[Path] = []
        try:
            for name in self.names:
                os.rename(self.dir / name, self.data_dir / name)
                installed.append(self.data_dir / name)
            if self.fsync:
                fsync_dir(self.data_dir)
                fsync_dir(self.dir)
        except OSError as e:
            self._leave()  # what is left is the next start's to finish
            raise CreationIncomplete(e, installed) from e
        self._remove()
        return installed

    def abort(self) -> None:
        """Remove everything built so far (only before the commit point)."""
        if self.committed:
            raise RuntimeError("a committed creation cannot be aborted")
        shutil.rmtree(self.dir, ignore_errors=True)
        self._leave()

    def _remove(self) -> None:
        # Every partition is in place and durable (the data directory was fsynced after the
        # renames, and this directory after them, so no partition entry is left in it): what
        # is removed here is bookkeeping. A crash before its removal is durable leaves an empty
        # creation directory, with or without COMMITTED, which the next start deletes (rolling
        # forward nothing). The root's fsync only keeps that from happening; it needs the
        # root to exist, which it does while this creation has not left it.
        try:
            (self.dir / COMMIT_MARKER).unlink()
            self.dir.rmdir()
            if self.fsync:
                fsync_dir(self.dir.parent)
        except OSError as e:  # only bookkeeping is left: the next start removes it
            log.warning("could not remove finished creation %s: %s", self.dir, e.strerror)
        self._leave()

    def _leave(self) -> None:
        if self._entered:
            self._entered = False
            _leave(self.dir.parent)


_roots_lock = threading.Lock()
_users: dict[str, int] = {}
"""Creations under way in this process, per staging root (by its real path)."""


def _enter(root: Path) -> None:
    """A creation starts using ``root``: made if it does not exist."""
    key = os.path.realpath(root)
    with _roots_lock:
        root.mkdir(parents=True, exist_ok=True)
        _users[key] = _users.get(key, 0) + 1


def _leave(root: Path) -> None:
    """A creation is done with ``root``: the last one removes it, if empty (a creation that
    could not finish leaves its directory for the next start). Its removal need not be durable:
    an empty root left by a crash is removed at the next start."""
    key = os.path.realpath(root)
    with _roots_lock:
        left = _users[key] - 1
        if left:
            _users[key] = left
            return
        del _users[key]
        _remove_if_empty(root)


def _remove_if_empty(root: Path) -> None:
    """Remove the staging root if it is empty (Kafka's own loader would take a leftover
    directory for a partition with a malformed name). Callers make sure no creation is using
    it: the last to leave it, or the start-up recovery, before any creation."""
    with contextlib.suppress(OSError):
        root.rmdir()


def create_partitions(
    data_dir: Path,
    topic: str,
    topic_id: uuid.UUID,
    partitions: range,
    *,
    fsync: bool = True,
) -> list[Path]:
    """Create partitions ``partitions`` of ``topic`` all-or-nothing (see the module docstring);
    returns their directories. Raises OSError (nothing created) or CreationIncomplete."""
    staged = StagedPartitions(data_dir, fsync=fsync)
    try:
        for p in partitions:
            staged.add(topic, p, topic_id)
    except BaseException:
        staged.abort()
        raise
    return staged.commit()


def recover_staged(data_dir: Path, *, fsync: bool = True) -> None:
    """Settle the creations a crash interrupted (start-up, before loading partitions)."""
    root = Path(data_dir) / STAGING_DIR
    try:
        creations = sorted(p for p in root.iterdir() if p.is_dir())
    except FileNotFoundError:
        return
    for creation in creations:
        try:
            _recover_one(Path(data_dir), creation, fsync)
        except OSError as e:
            log.error(
                "could not settle the interrupted creation %s: %s; it is ignored",
                creation,
                e.strerror or e,
            )
    _remove_if_empty(root)


def _recover_one(data_dir: Path, creation: Path, fsync: bool) -> None:
    parts = sorted(p.name for p in creation.iterdir() if p.is_dir())
    if not (creation / COMMIT_MARKER).exists():
        shutil.rmtree(creation)
        if parts:
            log.warning(
                "rolled back an interrupted creation of %d partition(s) (%s ...)",
                len(parts),
                parts[0],
            )
        return
    stuck = []
    for name in parts:
        if (data_dir / name).exists():
            stuck.append(name)
            continue
        os.rename(creation / name, data_dir / name)
    if fsync:
        fsync_dir(data_dir)
    if stuck:
        log.error(
            "an interrupted creation could not be completed: %d partition directory(ies) already"
            " exist (%s ...); the staged copies are left in %s",
            len(stuck),
            stuck[0],
            creation,
        )
        return
    (creation / COMMIT_MARKER).unlink()
    creation.rmdir()
    if fsync:
        fsync_dir(creation.parent)
    if parts:
        log.warning(
            "completed an interrupted creation of %d partition(s) (%s ...)", len(parts), parts[0]
        )
