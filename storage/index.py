"""The sparse offset index of one log segment, in Kafka's ``<base>.index`` file format.

The file is a flat array of 8-byte big-endian entries ``(int32 relative offset, int32 position)``.
An entry says "the batch whose *last* offset is ``base + relative`` starts at byte ``position``
of the segment's ``.log`` file" (the same convention Kafka uses). Entries are strictly increasing
in both fields. One entry is added roughly every ``index_interval_bytes`` of log, so a lookup
narrows a search to a few kilobytes which the segment then scans header by header.

:class:`IndexFile` is what the offset index and the time index (``storage.time_index``) share:
the in-memory columns and the file mirroring them. New entries are written to the file lazily
(``write_pending``: when the segment is synced, sealed or closed), not one small write per
append; an index whose tail was never written is completed by the segment's consistency check or
recovery at the next start. If writing the file fails (disk full, read-only file) the entries
stay in memory and the next write rewrites the whole file. The file's descriptor comes from a
``storage.files.FilePool`` and is opened only when the file is read or written. Not thread-safe
on its own: the owning ``PartitionLog`` serialises writers.
"""

from __future__ import annotations

import contextlib
import os
import struct
from array import array
from bisect import bisect_right
from pathlib import Path

from kcoord.storage.files import DEFAULT_POOL, FilePool, ManagedFile

ENTRY_SIZE = 8
_ENTRY = struct.Struct(">ii")
INT32_MAX = 2**31 - 1


class IndexFile:
    """Two columns of entries mirrored to an append-only file of fixed-size records."""

    _entry: struct.Struct = _ENTRY
    _codes: tuple[str, str] = ("i", "i")

    def __init__(self, path: Path, base_offset: int, pool: FilePool | None = None) -> None:
        self.path = path
        self.base_offset = base_offset
        self._file = ManagedFile(path, pool or DEFAULT_POOL, create=True)
        self._a: array[int] = array(self._codes[0])
        self._b: array[int] = array(self._codes[1])
        self._written = 0  # entries already in the file
        self._rewrite = False  # the file's contents are unknown: rewrite it whole next time

    @property
    def file(self) -> ManagedFile:
        return self._file

    def __len__(self) -> int:
        return len(self._a)

    def _read_entries(self) -> list[tuple[int, int]] | None:
        """The file's entries, or None if it is missing or not a whole number of entries."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return None
        size = self._entry.size
        if len(data) % size:
            return None
        return list(self._entry.iter_unpack(data))

    def _set(self, entries: list[tuple[int, int]]) -> None:
        self._a = array(self._codes[0], (a for a, _ in entries))
        self._b = array(self._codes[1], (b for _, b in entries))

    def _blob(self, start: int, end: int) -> bytes:
        pack = self._entry.pack
        a, b = self._a, self._b
        return b"".join(pack(a[i], b[i]) for i in range(start, end))

    def reset(self, entries: list[tuple[int, int]]) -> None:
        """Replace every entry, in memory and then on disk (skipped if the file already holds
        exactly these). On an OSError the entries are kept in memory and the error raised."""
        self._set(entries)
        blob = self._blob(0, len(entries))
        try:
            if self.path.read_bytes() == blob:
                self._written = len(entries)
                self._rewrite = False
                return
        except FileNotFoundError:
            pass
        self._written = 0
        self._rewrite = True
        self._file.check_writable()
        with self._file as fd:
            os.ftruncate(fd, 0)
            if blob:
                pwrite_all(fd, blob, 0)
        self._file.written()
        self._written = len(entries)
        self._rewrite = False

    def write_pending(self) -> None:
        """Write the entries appended since the last call to the file (one write)."""
        n = len(self._a)
        if self._rewrite:
            self._file.check_writable()
            with self._file as fd:
                os.ftruncate(fd, 0)
                if n:
                    pwrite_all(fd, self._blob(0, n), 0)
            self._file.written()
            self._written = n
            self._rewrite = False
            return
        start = self._written
        if start >= n:
            return
        self._file.check_writable()
        with self._file as fd:
            pwrite_all(fd, self._blob(start, n), start * self._entry.size)
        self._file.written()
        self._written = n

    def _drop_from(self, keep: int) -> None:
        """Keep only the first ``keep`` entries (in memory, and in the file if it has more)."""
        if keep >= len(self._a):
            return
        del self._a[keep:]
        del self._b[keep:]
        if self._written > keep and not self._rewrite:
            self._written = keep
            try:
                self._file.check_writable()
                with self._file as fd:
                    os.ftruncate(fd, keep * self._entry.size)
                self._file.written()
            except OSError:
                self._rewrite = True  # left for the next write; recovery copes meanwhile
                raise

    def sync(self) -> None:
        self.write_pending()
        self._file.sync()

    def close(self) -> None:
        """Write what is pending (best effort: the index can be rebuilt) and close the file."""
        try:
            if self._rewrite or self._written < len(self._a):
                self.write_pending()
        except OSError:
            pass
        finally:
            self._file.close()

    def delete(self) -> None:
        self._file.close()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()


class OffsetIndex(IndexFile):
    """Sorted (relative offset, position) pairs mirrored to ``<base>.index``."""

    # -- loading ---------------------------------------------------------------------------

    def load(self, log_size: int) -> bool:
        """Read the index file; return False (and keep no entries) if it is missing or unsound.

        Sound means: a whole number of entries, both columns strictly increasing, relative
        offsets non-negative and every position inside a log of ``log_size`` bytes.
        """
        self._set([])
        entries = self._read_entries()
        if entries is None:
            return False
        prev_rel = prev_pos = -1
        for r, p in entries:
            if r <= prev_rel or p <= prev_pos or p >= log_size:
                return False
            prev_rel, prev_pos = r, p
        self._set(entries)
        self._written = len(entries)
        self._rewrite = False
        return True

    # -- queries ---------------------------------------------------------------------------

    def entry(self, i: int) -> tuple[int, int]:
        """The i-th entry as (absolute offset, position)."""
        return self.base_offset + self._a[i], self._b[i]

    @property
    def positions(self) -> array[int]:
        return self._b

    def lookup(self, offset: int) -> int:
        """Position to start scanning from for the batch holding ``offset``.

        That is the position of the last entry whose offset is <= ``offset`` (that batch either
        holds ``offset`` or lies wholly before it), or 0 if there is none.
        """
        rel = offset - self.base_offset
        if rel > INT32_MAX:
            rel = INT32_MAX
        i = bisect_right(self._a, rel) - 1
        return self._b[i] if i >= 0 else 0

    # -- mutation --------------------------------------------------------------------------

    def append(self, last_offset: int, position: int) -> None:
        rel = last_offset - self.base_offset
        if not 0 <= rel <= INT32_MAX or not 0 <= position <= INT32_MAX:
            raise ValueError(f"index entry ({last_offset}, {position}) out of range")
        if self._a and (rel <= self._a[-1] or position <= self._b[-1]):
            raise ValueError("index entries must be strictly increasing")
        self._a.append(rel)
        self._b.append(position)

    def truncate_to_position(self, position: int) -> None:
        """Drop every entry pointing at or beyond ``position``."""
        self._drop_from(bisect_right(self._b, position - 1))


def pwrite_all(fd: int, data: bytes | bytearray | memoryview, position: int) -> None:
    """Write all of ``data`` at ``position`` (os.pwrite may write less than asked)."""
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, position)
        view = view[n:]
        position += n
