"""A segment's aborted-transaction index: Kafka's ``<base>.txnindex``.

One 34-byte entry per transaction aborted by a marker in the segment, in marker order: version
int16 (0), producer id int64, first offset int64, last offset int64 (the ABORT marker's),
last stable offset int64 (when the marker was written). A ``read_committed`` Fetch returns the
(producer id, first offset) of each aborted transaction overlapping what it reads, and the
consumer drops that producer's records from the first offset until it meets the marker.

Every sealed segment has this file (empty when nothing was aborted in it); the active segment's
is created with its first entry. Recovery rebuilds it (``storage.txn_log``). Entries are held
in memory once read; appends write through to the file (plain blocking I/O, made durable by the
segment's flush).
"""

from __future__ import annotations

import contextlib
import os
import struct
from dataclasses import dataclass
from pathlib import Path

from kcoord.storage.index import pwrite_all

TXN_INDEX_SUFFIX = ".txnindex"

_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def encode(self) -> bytes:
        return _ENTRY.pack(
            0, self.producer_id, self.first_offset, self.last_offset, self.last_stable_offset
        )


def decode_entries(data: bytes) -> list[AbortedTxn]:
    """The entries of an index file's bytes; a torn last entry is ignored."""
    usable = len(data) - len(data) % ENTRY_SIZE
    return [
        AbortedTxn(pid, first, last, lso)
        for _, pid, first, last, lso in _ENTRY.iter_unpack(memoryview(data)[:usable])
    ]


class TxnIndex:
    """The ``.txnindex`` of one segment."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._entries: list[AbortedTxn] | None = None  # None: not read yet
        self._dirty = False  # written since the last sync
        self._stale = False  # the file lacks entries held in memory (a write failed)

    def entries(self) -> list[AbortedTxn]:
        if self._entries is None:
            try:
                self._entries = decode_entries(self.path.read_bytes())
            except FileNotFoundError:
                self._entries = []
        return self._entries

    def append(self, entry: AbortedTxn) -> None:
        """Add an entry (in memory even if writing it fails: then the file is rewritten at
        the next :meth:`sync`, and the error propagates)."""
        entries = self.entries()
        entries.append(entry)
        self._dirty = True
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644)
            try:
                pwrite_all(fd, entry.encode(), (len(entries) - 1) * ENTRY_SIZE)
            finally:
                os.close(fd)
        except OSError:
            self._stale = True
            raise

    def ensure_file(self) -> None:
        """Create the (empty) file if it does not exist."""
        if not self.path.exists():
            self.reset(self.entries())

    def reset(self, entries: list[AbortedTxn]) -> None:
        """Rewrite the file with ``entries``."""
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            pwrite_all(fd, b"".join(e.encode() for e in entries), 0)
        finally:
            os.close(fd)
        self._entries = list(entries)
        self._dirty = True
        self._stale = False

    def truncate_from(self, offset: int) -> None:
        """Drop the entries of markers at or after ``offset`` (the log was truncated)."""
        kept = [e for e in self.entries() if e.last_offset < offset]
        if len(kept) != len(self.entries()):
            self.reset(kept)

    @property
    def unsynced(self) -> bool:
        """Whether the file was written (or must be rewritten) since the last sync."""
        return self._dirty or self._stale

    def sync(self) -> None:
        if self._stale:
            self.reset(self.entries())
        if not self._dirty:
            return
        self._dirty = False
        with contextlib.suppress(FileNotFoundError):
            fd = os.open(self.path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def delete(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        self._entries = []
        self._dirty = False
