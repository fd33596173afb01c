"""The sparse offset index of one log segment, in Kafka's ``<base>.index`` file format.

The file is a flat array of 8-byte big-endian entries ``(int32 relative offset, int32 position)``.
An entry says "the batch whose *last* offset is ``base + relative`` starts at byte ``position``
of the segment's ``.log`` file" (the same convention Kafka uses). Entries are strictly increasing
in both fields. One entry is added roughly every ``index_interval_bytes`` of log, so a lookup
narrows a search to a few kilobytes which the segment then scans header by header.

This module owns the in-memory copy of the entries and the file holding them; it knows nothing
about batches. New entries are written to the file lazily (``write_pending``: when the segment
is synced, sealed or closed), not one small write per append; an index whose tail was never
written is completed by the segment's consistency check or recovery at the next start. It is not thread-safe on its own: the owning ``PartitionLog`` serialises writers.
"""

from __future__ import annotations

import os
import struct
from array import array
from bisect import bisect_right
from pathlib import Path

ENTRY_SIZE = 8
_ENTRY = struct.Struct(">ii")
INT32_MAX = 2**31 - 1


class OffsetIndex:
    """Sorted (relative offset, position) pairs mirrored to an append-only file."""

    __slots__ = ("path", "base_offset", "_rel", "_pos", "_fd", "_written")

    def __init__(self, path: Path, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self._rel: array[int] = array("i")
        self._pos: array[int] = array("i")
        self._fd: int | None = None
        self._written = 0  # entries already in the file

    # -- loading ---------------------------------------------------------------------------

    def load(self, log_size: int) -> bool:
        """Read the index file; return False (and keep no entries) if it is missing or unsound.

        Sound means: a whole number of entries, both columns strictly increasing, relative
        offsets non-negative and every position inside a log of ``log_size`` bytes.
        """
        self._rel = array("i")
        self._pos = array("i")
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return False
        if len(data) % ENTRY_SIZE:
            return False
        rel: array[int] = array("i")
        pos: array[int] = array("i")
        prev_rel = prev_pos = -1
        for r, p in _ENTRY.iter_unpack(data):
            if r <= prev_rel or p <= prev_pos or p >= log_size:
                return False
            rel.append(r)
            pos.append(p)
            prev_rel, prev_pos = r, p
        self._rel, self._pos = rel, pos
        self._written = len(rel)
        return True

    def reset(self, entries: list[tuple[int, int]]) -> None:
        """Replace every entry (in memory and on disk) with ``entries`` of (relative, position)."""
        self._rel = array("i", (r for r, _ in entries))
        self._pos = array("i", (p for _, p in entries))
        fd = self._open()
        os.ftruncate(fd, 0)
        if entries:
            blob = b"".join(_ENTRY.pack(r, p) for r, p in entries)
            pwrite_all(fd, blob, 0)
        self._written = len(entries)

    # -- queries ---------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._rel)

    def entry(self, i: int) -> tuple[int, int]:
        """The i-th entry as (absolute offset, position)."""
        return self.base_offset + self._rel[i], self._pos[i]

    @property
    def positions(self) -> array[int]:
        return self._pos

    def lookup(self, offset: int) -> int:
        """Position to start scanning from for the batch holding ``offset``.

        That is the position of the last entry whose offset is <= ``offset`` (that batch either
        holds ``offset`` or lies wholly before it), or 0 if there is none.
        """
        rel = offset - self.base_offset
        if rel > INT32_MAX:
            rel = INT32_MAX
        i = bisect_right(self._rel, rel) - 1
        return self._pos[i] if i >= 0 else 0

    # -- mutation --------------------------------------------------------------------------

    def append(self, last_offset: int, position: int) -> None:
        rel = last_offset - self.base_offset
        if not 0 <= rel <= INT32_MAX or not 0 <= position <= INT32_MAX:
            raise ValueError(f"index entry ({last_offset}, {position}) out of range")
        if self._rel and (rel <= self._rel[-1] or position <= self._pos[-1]):
            raise ValueError("index entries must be strictly increasing")
        self._rel.append(rel)
        self._pos.append(position)

    def write_pending(self) -> None:
        """Write the entries appended since the last call to the file (one write)."""
        n = len(self._rel)
        start = self._written
        if start >= n:
            return
        blob = b"".join(_ENTRY.pack(self._rel[i], self._pos[i]) for i in range(start, n))
        pwrite_all(self._open(), blob, start * ENTRY_SIZE)
        self._written = n

    def truncate_to_position(self, position: int) -> None:
        """Drop every entry pointing at or beyond ``position``."""
        keep = bisect_right(self._pos, position - 1)
        if keep == len(self._pos):
            return
        del self._rel[keep:]
        del self._pos[keep:]
        self._written = min(self._written, keep)
        os.ftruncate(self._open(), self._written * ENTRY_SIZE)

    def sync(self) -> None:
        self.write_pending()
        if self._fd is not None:
            os.fsync(self._fd)

    def close(self) -> None:
        if self._written < len(self._rel):
            self.write_pending()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _open(self) -> int:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        return self._fd


def pwrite_all(fd: int, data: bytes | bytearray | memoryview, position: int) -> None:
    """Write all of ``data`` at ``position`` (os.pwrite may write less than asked)."""
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, position)
        view = view[n:]
        position += n
