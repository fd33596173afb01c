"""The files engine's offset checkpoints: what each partition's log held when they were last
written, and the losses start-up finds against them.

``storage.checkpoint`` owns the two files (each partition's log start offset and recovery
point, in Kafka's format) and the comparison; :class:`OffsetCheckpoints` keeps what was read at
start-up or recorded since, reports at ERROR the offsets a partition lost (or a whole partition
whose directory is gone), takes snapshots on the event loop and writes
them from any thread, never letting an older snapshot overwrite a newer one.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from kcoord.storage.checkpoint import (
    LOG_START_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    CheckpointError,
    lost_offsets,
    read_checkpoint,
    write_checkpoint,
)
from kcoord.storage.engine import Log
from kcoord.storage.files import describe_error

log = logging.getLogger("kcoord.topics")


@dataclass(frozen=True, slots=True)
class CheckpointSnapshot:
    seq: int
    starts: dict[tuple[str, int], int]
    ends: dict[tuple[str, int], int]


class OffsetCheckpoints:
    """The checkpointed start and end offsets of every partition of ``data_dir``."""

    def __init__(self, data_dir: Path, *, fsync: bool) -> None:
        self._data_dir = data_dir
        self._fsync = fsync
        self._starts: dict[tuple[str, int], int] = {}
        self._ends: dict[tuple[str, int], int] = {}
        self._lock = threading.Lock()
        self._seq = 0  # snapshots taken
        self._written = 0  # newest snapshot written

    def read(self) -> None:
        """Read both checkpoint files (start-up); one that cannot be read is not used."""
        for file, into in (
            (LOG_START_CHECKPOINT, self._starts),
            (RECOVERY_POINT_CHECKPOINT, self._ends),
        ):
            try:
                into.update(read_checkpoint(self._data_dir / file))
            except (OSError, CheckpointError) as e:
                log.warning("%s could not be read, not used: %s", file, short_error(e))

    def restore_start(self, name: str, partition: int, plog: Log) -> None:
        """Give the just-opened log its checkpointed log start offset (DeleteRecords and
        retention move it inside a segment; it is written before segments below it go)."""
        start = self._starts.get((name, partition))
        if start is not None and plog.offline is None:
            plog.restore_log_start(start)

    def check_lost(self, name: str, partition: int, plog: Log) -> None:
        """Log, at ERROR, the offsets partition ``name``-``partition`` held at the last
        checkpoint and no longer has (nothing for an offline log: its offsets are unknown)."""
        if plog.offline is not None:
            return
        key = (name, partition)
        for first, last in lost_offsets(
            plog.log_start_offset,
            plog.log_end_offset,
            self._starts.get(key),
            self._ends.get(key),
        ):
            log.error(
                "partition %s-%d lost offsets %d to %d: they were in the log at the last"
                " checkpoint and are not on disk now (segment files deleted or truncated?)",
                name,
                partition,
                first,
                last,
            )

    def report_missing(self, present: set[str]) -> None:
        """Log, at ERROR, each checkpointed partition with offsets whose topic has no directory
        left (``present``: the topics found in the data directory)."""
        for (name, p), end in sorted(self._ends.items()):
            if name not in present and end > 0:
                start = self._starts.get((name, p), 0)
                if end > start:
                    log.error(
                        "partition %s-%d is gone (its directory is missing): offsets %d to %d"
                        " are lost",
                        name,
                        p,
                        start,
                        end - 1,
                    )

    def snapshot(self, topics: Iterable[tuple[str, Sequence[Log]]]) -> CheckpointSnapshot:
        """The offsets to checkpoint for ``topics`` (name and partition logs), taken on the
        event loop: each partition's start and flushed offset; a partition offline since
        start-up (offsets unknown) keeps what the previous snapshot (or the checkpoint read at
        start-up) had. Partitions not listed drop out."""
        starts: dict[tuple[str, int], int] = {}
        ends: dict[tuple[str, int], int] = {}
        old_starts, old_ends = self._starts, self._ends
        for name, partitions in topics:
            for p, plog in enumerate(partitions):
                key = (name, p)
                if plog.flushed_offset >= 0:
                    starts[key] = plog.log_start_offset
                    ends[key] = plog.flushed_offset
                else:
                    if key in old_starts:
                        starts[key] = old_starts[key]
                    if key in old_ends:
                        ends[key] = old_ends[key]
        self._starts, self._ends = starts, ends
        self._seq += 1
        return CheckpointSnapshot(self._seq, starts, ends)

    def write(self, snap: CheckpointSnapshot) -> bool:
        """Write both checkpoint files from ``snap`` (blocking; any thread). A snapshot older
        than one already written is skipped. Failures are logged; returns whether it wrote."""
        with self._lock:
            if snap.seq <= self._written:
                return False
            try:
                fsync = self._fsync
                write_checkpoint(self._data_dir / LOG_START_CHECKPOINT, snap.starts, fsync=fsync)
                write_checkpoint(self._data_dir / RECOVERY_POINT_CHECKPOINT, snap.ends, fsync=fsync)
            except OSError as e:
                log.warning("writing the offset checkpoints failed: %s", describe_error(e))
                return False
            self._written = snap.seq
            return True


def short_error(e: BaseException) -> str:
    """An error for a log line of the registry: an OSError described by
    ``storage.files.describe_error``, anything else by its message, cut at 200 characters."""
    text = describe_error(e) if isinstance(e, OSError) else str(e)
    return text if len(text) <= 200 else text[:200] + "..."
