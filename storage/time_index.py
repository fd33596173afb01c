"""The time index of one log segment, in Kafka's ``<base>.timeindex`` file format.

The file is a flat array of 12-byte big-endian entries ``(int64 timestamp, int32 relative
offset)``. An entry ``(T, O)`` says: the largest batch max-timestamp among the batches up to the
one holding offset ``base + O`` is ``T``, and the batch whose *last* offset is ``base + O`` is
the earliest batch with that timestamp. Entries are strictly increasing in timestamp (and never
decreasing in offset): one is added at an offset-index entry when the segment's maximum
timestamp has grown since the last one, and a final one when the segment is sealed, so the last
entry of a sealed segment names its largest timestamp and where it is.

Lookup by timestamp ``t`` takes the last entry whose timestamp is <= ``t``: every batch before
its offset has a smaller timestamp, so a search for the first batch with max timestamp >= ``t``
may start there (found through the offset index). This module owns the entries and the file
(shared machinery in ``storage.index.IndexFile``); the segment decides when to add entries.
"""

from __future__ import annotations

import struct
from bisect import bisect_right

from kcoord.storage.index import INT32_MAX, IndexFile

ENTRY_SIZE = 12
NO_TIMESTAMP = -1


class TimeIndex(IndexFile):
    """Sorted (timestamp, relative offset) pairs mirrored to ``<base>.timeindex``."""

    _entry = struct.Struct(">qi")
    _codes = ("q", "i")

    def load(self) -> bool:
        """Read the file; False (keeping no entries) if it is missing or unsound.

        Sound means: a whole number of entries, timestamps strictly increasing, relative
        offsets non-negative and never decreasing. Whether the offsets lie inside the segment
        is for the segment to check (:meth:`last_entry`).
        """
        self._set([])
        entries = self._read_entries()
        if entries is None:
            return False
        prev_ts = None
        prev_rel = -1
        for ts, rel in entries:
            if (prev_ts is not None and ts <= prev_ts) or rel < max(prev_rel, 0):
                return False
            prev_ts, prev_rel = ts, rel
        self._set(entries)
        self._written = len(entries)
        self._rewrite = False
        return True

    def entry(self, i: int) -> tuple[int, int]:
        """The i-th entry as (timestamp, absolute offset)."""
        return self._a[i], self.base_offset + self._b[i]

    def last_entry(self) -> tuple[int, int]:
        """The last entry as (timestamp, absolute offset); (NO_TIMESTAMP, base) if none."""
        if not self._a:
            return NO_TIMESTAMP, self.base_offset
        return self._a[-1], self.base_offset + self._b[-1]

    def lookup(self, timestamp: int) -> tuple[int, int]:
        """The last entry whose timestamp is <= ``timestamp``; (NO_TIMESTAMP, base) if none."""
        i = bisect_right(self._a, timestamp) - 1
        if i < 0:
            return NO_TIMESTAMP, self.base_offset
        return self._a[i], self.base_offset + self._b[i]

    def maybe_append(self, timestamp: int, offset: int) -> None:
        """Add (timestamp, offset) if ``timestamp`` is larger than the last entry's."""
        if self._a and timestamp <= self._a[-1]:
            return
        if not self._a and timestamp == NO_TIMESTAMP:
            return
        rel = offset - self.base_offset
        if not 0 <= rel <= INT32_MAX:
            raise ValueError(f"time index offset {offset} out of range")
        if self._b and rel < self._b[-1]:
            raise ValueError("time index offsets must not decrease")
        self._a.append(timestamp)
        self._b.append(rel)

    def truncate_to_offset(self, next_offset: int) -> None:
        """Drop every entry naming an offset >= ``next_offset``."""
        self._drop_from(bisect_right(self._b, next_offset - 1 - self.base_offset))
