"""The files engine: the storage interface (``storage.engine``) over a data directory.

Partitions are laid out as Kafka lays them out, one directory per partition
(``<data-dir>/<topic>-<partition>/``, a :class:`storage.log.PartitionLog`) with a
``partition.metadata`` file holding the topic id, so the catalogue is rebuilt at start-up by
listing the directory. Creating partitions is all-or-nothing (``storage.creation``: built in a
staging directory, moved into place after a commit point; start-up rolls an interrupted creation
back or forward). Deleting renames the directories to ``-delete`` names at once (one directory
fsync) and removes the files later, off the event loop, or at the next start.

Documents are files in the data directory, replaced atomically (``storage.files.write_file``);
one process owns the directory (the broker's ``node.lock``), so updates of a document are kept
from losing each other by a lock of this engine's.
The offset checkpoints are Kafka's two checkpoint files (``storage.file_checkpoints``), which
also let start-up report offsets lost behind the broker's back.

Journaled logs (``LogSpec.journaled``: ``__consumer_offsets``) are flushed together through one
journal file (``storage.journal``), with fsync on; a journaled log opened at start-up first gets
back, from the journal, what its files lost in a crash.
"""

from __future__ import annotations

import logging
import shutil
import threading
import uuid
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import cast

from kcoord.storage.creation import (
    STAGING_DIR,
    CreationIncomplete,
    create_partitions,
    recover_staged,
)
from kcoord.storage.engine import DocumentChange, LeaderFence, Log, LogSpec, StoredTopic
from kcoord.storage.file_checkpoints import CheckpointSnapshot, OffsetCheckpoints, short_error
from kcoord.storage.files import FilePool, describe_error, fsync_dir, write_file
from kcoord.storage.journal import JOURNAL_FILE, SharedJournal, replay
from kcoord.storage.log import DEFAULT_PRODUCER_EXPIRATION_MS, PartitionLog
from kcoord.storage.offline import report_unopenable
from kcoord.storage.partition_metadata import read_partition_metadata, write_partition_metadata

log = logging.getLogger("kcoord.topics")

DELETED_SUFFIX = "-delete"


def partition_dir_name(entry: str) -> tuple[str, int] | None:
    """(topic, partition) of a directory name ``<topic>-<partition>``, or None."""
    name, sep, num = entry.rpartition("-")
    if not sep or not name or not num.isdigit():
        return None
    return name, int(num)


def open_or_offline(
    path: Path,
    *,
    segment_bytes: int = 1 << 30,
    index_interval_bytes: int = 4096,
    fsync: bool = True,
    compacted: bool = False,
    pool: FilePool | None = None,
    producer_expiration_ms: int = DEFAULT_PRODUCER_EXPIRATION_MS,
) -> PartitionLog:
    """:meth:`PartitionLog.open`, or, if the partition cannot be opened (an I/O error, an
    unreadable directory or segment, anything recovery cannot handle), an offline log; the
    failure is logged at ERROR with the offsets affected."""
    try:
        return PartitionLog.open(
            path,
            segment_bytes=segment_bytes,
            index_interval_bytes=index_interval_bytes,
            fsync=fsync,
            compacted=compacted,
            pool=pool,
            producer_expiration_ms=producer_expiration_ms,
        )
    except Exception as e:
        report_unopenable(path, e)
        return PartitionLog.offline_log(path, e)


class FileEngine:
    """Everything durable of one broker in the directory ``data_dir``.

    ``fsync``: flushes, creations, deletions and documents are fsynced (off only when the operator
    chose ``log.flush.interval.messages`` > 1)."""

    def __init__(
        self,
        data_dir: Path,
        *,
        fsync: bool = True,
        index_interval_bytes: int = 4096,
        producer_expiration_ms: int = DEFAULT_PRODUCER_EXPIRATION_MS,
        pool: FilePool | None = None,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.fsync = fsync
        self.index_interval_bytes = index_interval_bytes
        self.producer_expiration_ms = producer_expiration_ms
        self.pool = pool
        self._checkpoints = OffsetCheckpoints(self.data_dir, fsync=fsync)
        self._doomed: list[Path] = []  # directories of deleted partitions, to remove
        self._updating = threading.Lock()  # one document update at a time (update_document)
        self._journal: SharedJournal | None = None  # opened by start() when fsync is on

    @property
    def description(self) -> str:
        return f"files in {self.data_dir}"

    def start(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        recover_staged(self.data_dir, fsync=self.fsync)
        for entry in self.data_dir.iterdir():
            if entry.name.endswith(DELETED_SUFFIX) and entry.is_dir():
                # a deletion the previous process did not finish
                shutil.rmtree(entry, ignore_errors=True)
        self._checkpoints.read()
        self._checkpoints.report_missing(set(self._partition_dirs()))
        if self.fsync:
            self._journal = SharedJournal.open(
                self.data_dir / JOURNAL_FILE, exists=lambda name: (self.data_dir / name).is_dir()
            )

    # documents ----------------------------------------------------------------------------------
    def read_document(self, name: str) -> bytes | None:
        try:
            return (self.data_dir / name).read_bytes()
        except FileNotFoundError:
            return None

    def write_document(self, name: str, data: bytes) -> None:
        # Always fsynced, even with log fsyncs off: documents are small and rarely written.
        # (The directory may not exist yet: ``kcoord users`` writes before any broker ran.)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        write_file(self.data_dir / name, data)

    def update_document(self, name: str, change: DocumentChange) -> bytes | None:
        # Safe because every update of this process holds the lock from its read to its write,
        # and no other process writes the directory's documents while a broker runs.
        with self._updating:
            current = self.read_document(name)
            new = change(current)
            if new is None:
                return current
            self.write_document(name, new)
            return new

    # partitions ---------------------------------------------------------------------------------
    def _partition_dirs(self) -> dict[str, dict[int, Path]]:
        found: dict[str, dict[int, Path]] = {}
        for entry in sorted(self.data_dir.iterdir()):
            if entry.name == STAGING_DIR or entry.name.endswith(DELETED_SUFFIX):
                continue
            parsed = partition_dir_name(entry.name)
            if parsed is not None and entry.is_dir():
                found.setdefault(parsed[0], {})[parsed[1]] = entry
        return found

    def stored_topics(self) -> dict[str, StoredTopic]:
        return {
            name: StoredTopic(name, self._topic_id_of(dirs.values()), frozenset(dirs))
            for name, dirs in self._partition_dirs().items()
        }

    def _topic_id_of(self, dirs: Iterable[Path]) -> uuid.UUID | None:
        for path in dirs:
            try:
                topic_id = read_partition_metadata(path)
            except (OSError, ValueError) as e:
                log.warning("%s: unreadable partition.metadata: %s", path.name, short_error(e))
                continue
            if topic_id is not None:
                return topic_id
        return None

    def open_log(
        self,
        topic: str,
        partition: int,
        topic_id: uuid.UUID,
        spec: LogSpec,
        leader: LeaderFence | None = None,
    ) -> Log:
        """Also writes a missing ``partition.metadata``, gives the log its checkpointed start
        and reports offsets lost since the last checkpoint. One node owns its files: no
        ``leader`` fence."""
        path = self.data_dir / f"{topic}-{partition}"
        try:
            if read_partition_metadata(path) is None:
                write_partition_metadata(path, topic_id, fsync=self.fsync)
        except (OSError, ValueError) as e:
            log.warning(
                "%s: could not check or write partition.metadata: %s", path.name, short_error(e)
            )
        plog = open_or_offline(
            path,
            segment_bytes=spec.segment_bytes,
            index_interval_bytes=self.index_interval_bytes,
            fsync=self.fsync,
            compacted=spec.compacted,
            pool=self.pool,
            producer_expiration_ms=self.producer_expiration_ms,
        )
        journal = self._journal
        if spec.journaled and journal is not None and plog.offline is None:
            batches = journal.replay_of(path.name)  # (an offline log's wait in the journal)
            if batches:
                self._replay(journal, plog, batches)
            plog.use_journal(journal)
        self._checkpoints.restore_start(topic, partition, plog)
        self._checkpoints.check_lost(topic, partition, plog)
        return plog

    @staticmethod
    def _replay(journal: SharedJournal, plog: PartitionLog, batches: list[memoryview]) -> None:
        """Give ``plog`` back, from the journal, the batches its files lost, and fsync it."""
        end = plog.log_end_offset
        try:
            count = replay(plog, batches)
            plog.flush()
        except OSError as e:
            log.error("%s: replaying the journal failed: %s", plog.name, describe_error(e))
            journal.keep(plog.name, batches)  # the journal is not emptied before a restart
            return
        if count:
            log.info(
                "%s: %d batches (offsets %d to %d) replayed from the journal",
                plog.name,
                count,
                end,
                plog.log_end_offset - 1,
            )

    def create_logs(
        self, topic: str, topic_id: uuid.UUID, partitions: range, spec: LogSpec
    ) -> list[Log]:
        try:
            paths = create_partitions(self.data_dir, topic, topic_id, partitions, fsync=self.fsync)
        except CreationIncomplete as e:
            log.error(
                "creating partitions of %s: committed but %d of %d not moved into place (%s);"
                " they are offline until the next start completes them",
                topic,
                len(partitions) - len(e.installed),
                len(partitions),
                describe_error(e.cause),
            )
            done = {p.name for p in e.installed}
            out: list[Log] = []
            for p in partitions:
                path = self.data_dir / f"{topic}-{p}"
                if path.name in done:
                    out.append(self._fresh(path, spec))
                else:
                    out.append(PartitionLog.offline_log(path, e.cause))
            return out
        logs: list[Log] = []
        for p, path in zip(partitions, paths, strict=True):
            plog = self._fresh(path, spec)
            self._checkpoints.check_lost(topic, p, plog)
            logs.append(plog)
        return logs

    def _fresh(self, path: Path, spec: LogSpec) -> PartitionLog:
        plog = PartitionLog.fresh(
            path,
            segment_bytes=spec.segment_bytes,
            index_interval_bytes=self.index_interval_bytes,
            fsync=self.fsync,
            pool=self.pool,
            producer_expiration_ms=self.producer_expiration_ms,
        )
        if spec.journaled and self._journal is not None:
            plog.use_journal(self._journal)
        return plog

    def offline_log(self, topic: str, partition: int, cause: BaseException | str) -> Log:
        return PartitionLog.offline_log(self.data_dir / f"{topic}-{partition}", cause)

    def delete_logs(self, topic: str, logs: Sequence[Log]) -> None:
        """Renames the directories to ``-delete`` names (one directory fsync for all); the
        files are removed by :meth:`remove_deleted`, or at the next start."""
        for plog in logs:
            try:
                self._doomed.append(cast(PartitionLog, plog).detach())
            except OSError as e:
                log.error("deleting %s failed: %s", plog.name, describe_error(e))
        if self.fsync:
            try:
                fsync_dir(self.data_dir)
            except OSError as e:
                log.warning("fsync of %s failed: %s", self.data_dir, describe_error(e))

    def remove_deleted(self) -> None:
        while True:
            try:
                path = self._doomed.pop()
            except IndexError:  # (another thread took the last one)
                return
            shutil.rmtree(path, ignore_errors=True)

    def may_reopen(self) -> bool:
        return False

    # checkpoints --------------------------------------------------------------------------------
    def checkpoint(self, topics: Iterable[tuple[str, Sequence[Log]]]) -> CheckpointSnapshot:
        return self._checkpoints.snapshot(topics)

    def write_checkpoint(self, snapshot: object) -> bool:
        return self._checkpoints.write(cast(CheckpointSnapshot, snapshot))

    def close(self) -> None:
        self.remove_deleted()
        if self._journal is not None:
            self._journal.close()
