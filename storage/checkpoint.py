"""Kafka's offset checkpoint files, and what a log on disk lost compared with them.

The data directory holds two files in Kafka's checkpoint format:

* ``recovery-point-offset-checkpoint``: per partition, the offset below which everything had
  been flushed (made durable) when the file was written;
* ``log-start-offset-checkpoint``: per partition, its first offset.

The format is text: a line with the version (``0``), a line with the number of entries, then one
line per entry ``<topic> <partition> <offset>``. Files are replaced atomically (a temporary file,
fsynced, renamed over the old one, directory fsynced).

At start-up :func:`lost_offsets` compares a partition as found on disk with the checkpoints: a
log that now ends before its recovery point, or starts after its checkpointed start, lost the
offsets in between (a segment file deleted or truncated by someone else). The checkpoints
lag behind the logs (they are written periodically), so they can miss a loss but never invent
one, as long as the broker itself never moves a log's end back or its start forward behind
their back: DeleteTopics rewrites them without the topic before deleting it, and DeleteRecords
and retention (``broker/data/retention.py``) write the new log start before deleting segments.
The log start checkpoint is also where a log start inside a segment is kept (read back at
open: ``storage.retention``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from kcoord.storage.files import write_file

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_CHECKPOINT = "log-start-offset-checkpoint"
VERSION = 0

TopicPartition = tuple[str, int]


class CheckpointError(ValueError):
    """A checkpoint file that is not in Kafka's format."""


def write_checkpoint(
    path: Path, offsets: Mapping[TopicPartition, int], *, fsync: bool = True
) -> None:
    """Atomically replace the checkpoint file ``path`` with ``offsets``."""
    lines = [str(VERSION), str(len(offsets))]
    lines += [f"{topic} {partition} {offset}" for (topic, partition), offset in offsets.items()]
    data = ("\n".join(lines) + "\n").encode("utf-8")
    write_file(path, data, fsync=fsync)


def read_checkpoint(path: Path) -> dict[TopicPartition, int]:
    """The entries of checkpoint file ``path``; empty if it does not exist.

    Raises CheckpointError if it is not a version 0 checkpoint with as many entries as it says.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    return parse_checkpoint(text, path.name)


def parse_checkpoint(text: str, name: str) -> dict[TopicPartition, int]:
    """The entries of a checkpoint file's text (``name`` for messages); CheckpointError if it
    is not a version 0 checkpoint with as many entries as it says."""
    lines = text.splitlines()
    if len(lines) < 2 or lines[0].strip() != str(VERSION):
        raise CheckpointError(f"{name}: not a version {VERSION} checkpoint")
    try:
        count = int(lines[1])
    except ValueError:
        raise CheckpointError(f"{name}: bad entry count {lines[1][:40]!r}") from None
    entries = [line for line in lines[2:] if line.strip()]
    if len(entries) != count:
        raise CheckpointError(f"{name}: {len(entries)} entries, expected {count}")
    out: dict[TopicPartition, int] = {}
    for line in entries:
        fields = line.split()
        if len(fields) != 3:
            raise CheckpointError(f"{name}: malformed line {line[:80]!r}")
        try:
            out[(fields[0], int(fields[1]))] = int(fields[2])
        except ValueError:
            raise CheckpointError(f"{name}: malformed line {line[:80]!r}") from None
    return out


def lost_offsets(
    log_start: int, log_end: int, checkpoint_start: int | None, recovery_point: int | None
) -> list[tuple[int, int]]:
    """Offset ranges ``(first, last)`` (inclusive) that a log found on disk holding
    ``[log_start, log_end)`` has lost, given its checkpointed start and recovery point (None:
    not in the checkpoint)."""
    lost: list[tuple[int, int]] = []
    if checkpoint_start is not None and log_start > checkpoint_start:
        lost.append((checkpoint_start, log_start - 1))
    if recovery_point is not None and log_end < recovery_point:
        if lost and log_end <= lost[-1][1] + 1:
            lost[-1] = (lost[-1][0], max(lost[-1][1], recovery_point - 1))
        else:
            lost.append((log_end, recovery_point - 1))
    return lost
