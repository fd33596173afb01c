"""Fetch's reads of the partition logs, inline or, when they would wait on a database, later in a
worker thread.

The files engine reads segments through the page cache and answers at once. The PostgreSQL engine
answers from memory for the newest batches of a log and queries the database below them
(storage/postgres/recent.py), a round trip that must not hold the event loop: a consumer catching
up from the start of a log would otherwise stall every other client once per partition read.

:class:`FetchReads` keeps a Fetch's byte budget and reads its partitions in request order. A
partition whose log does not read ``offset`` locally (``Log.reads_locally``), and every partition
after it, is noted instead of read; :meth:`FetchReads.read_noted` then reads those in a worker,
in the same order and with the same budget, so the answer holds what an inline read would have
given. The logs are safe to read from a worker (their state is under their own locks).
"""

from __future__ import annotations

import logging
from typing import Any

from kcoord.protocol.errors import ErrorCode
from kcoord.storage.engine import Log, OffsetOutOfRange

from ..txn.data import committed_view
from .log_read import cap_at
from .topics import storage_error_code

log = logging.getLogger("kcoord.data")

# (the partition's answer, its log, the offset asked for, partition_max_bytes, the cut offset)
_Noted = tuple[dict[str, Any], Log, int, int, int]


class FetchReads:
    """The records of one look at a Fetch's partitions (see the module docstring). ``max_bytes``:
    the request's budget (0 or less: none); ``committed``: read_committed, with the aborted
    transactions of each range read."""

    __slots__ = ("budget", "committed", "errors", "noted", "total")

    def __init__(self, max_bytes: int, committed: bool) -> None:
        self.budget = max_bytes if max_bytes > 0 else 1 << 30
        self.committed = committed
        self.total = 0  # bytes of records in the answer
        self.errors = False
        self.noted: list[_Noted] = []  # to read in a worker, in order

    def read(
        self, entry: dict[str, Any], plog: Log, offset: int, max_bytes: int, upto: int
    ) -> None:
        """Fill ``entry``'s records from ``offset`` (below ``upto``: the high watermark or the
        last stable offset), now or, if that would wait on a database, in :meth:`read_noted`."""
        if self.noted or not plog.reads_locally(offset):
            self.noted.append((entry, plog, offset, max_bytes, upto))
            return
        self._read(entry, plog, offset, max_bytes, upto)

    def read_noted(self) -> None:
        """Read what :meth:`read` noted (blocking: in a worker thread)."""
        noted, self.noted = self.noted, []
        for entry, plog, offset, max_bytes, upto in noted:
            self._read(entry, plog, offset, max_bytes, upto)

    def _read(
        self, entry: dict[str, Any], plog: Log, offset: int, max_bytes: int, upto: int
    ) -> None:
        if self.budget <= 0:
            return
        limit = min(max_bytes, self.budget) if max_bytes > 0 else 0
        if limit <= 0 and self.total:
            return  # only the first partition with records is read whatever its limit
        try:
            data = cap_at(plog.read(offset, max(limit, 1)), upto)
            if self.committed:
                entry["aborted_transactions"] = committed_view(plog, offset, data)
        except OffsetOutOfRange:  # the log start moved up since the offset was checked
            entry["error_code"] = ErrorCode.offset_out_of_range
            self.errors = True
            return
        except OSError as e:  # an unreadable segment, a log gone offline
            log.error("fetch from %s failed: %s", plog.name, e)
            entry["error_code"] = storage_error_code(e)
            self.errors = True
            return
        entry["records"] = data
        self.total += len(data)
        self.budget -= len(data)
