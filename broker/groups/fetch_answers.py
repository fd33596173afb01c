"""The OffsetFetch answers the direct path remembers: monitoring tools and lag exporters ask the
same question of the same group over and over, and between two commits the answer is the same.

An answer is kept under the request's body (the bytes after its header, which name the group,
the partitions and RequireStable) with the version, the group's ``__consumer_offsets``
partition, the shard's :attr:`GroupShard.stamp` when it was read, and the encoded response
without its size and correlation id. It is given again only while that shard's stamp is
unchanged and the shard has no output waiting to become durable
(:meth:`ShardRuntime.idle_stamp`): every operation of the shard but the reads (describes,
ListGroups, OffsetFetch) changes the stamp: a commit, transactional or not, a transaction marker,
an expiry round, OffsetDelete, DeleteGroups, a deleted topic's tombstones, a failed write undone,
loading and unloading, and also joins, leaves and timers, which do not change the answer; a
shard replaced by a reload has a stamp of its own. A remembered answer can therefore never be
one the shard would not give now.

Only the direct path uses it, and that path does not exist under an authorizer (broker/app.py):
ACL checks are never skipped. What it holds is bounded in entries and in bytes, the oldest
entries leaving first, and large answers are not kept at all: a client sending endless distinct
requests costs the broker no more memory than the bounds.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from .write_path import ShardRuntime

MAX_ENTRIES = 4096
MAX_BYTES = 8 << 20
MAX_ENTRY_BYTES = 16 << 10
"""A request and answer larger than this together are not kept."""
ENTRY_OVERHEAD = 200
"""What an entry costs besides its two byte strings (its tuple, the dict slot, the objects'
headers), counted in the byte bound."""

_HEAD = struct.Struct(">ii")  # frame size, correlation id

Entry = tuple[int, int, int, bytes]
"""(version, offsets partition, shard stamp, response after the correlation id)."""


class FetchAnswers:
    """Remembered OffsetFetch answers (module docstring)."""

    __slots__ = ("_entries", "bytes", "max_bytes", "max_entries")

    def __init__(self, max_entries: int = MAX_ENTRIES, max_bytes: int = MAX_BYTES) -> None:
        self._entries: dict[bytes, Entry] = {}
        self.bytes = 0
        """What the entries hold, counted as :func:`_cost` does."""
        self.max_entries = max_entries
        self.max_bytes = max_bytes

    def __len__(self) -> int:
        return len(self._entries)

    def answer(
        self, body: bytes, version: int, correlation_id: int, shards: Sequence[ShardRuntime]
    ) -> bytes | None:
        """The whole response frame to the request ``body`` of ``version``, if one is kept and
        still what its shard (in ``shards``, by partition) would answer; else None."""
        entry = self._entries.get(body)
        if entry is None:
            return None
        kept_version, partition, stamp, answer = entry
        if kept_version != version or shards[partition].idle_stamp() != stamp:
            return None
        return _HEAD.pack(len(answer) + 4, correlation_id) + answer

    def keep(self, body: bytes, version: int, partition: int, stamp: int, frame: bytes) -> None:
        """Remember ``frame`` (a whole response frame, its size and correlation id included)
        as the answer to ``body`` of ``version`` while shard ``partition`` has ``stamp``."""
        answer = frame[8:]
        cost = _cost(body, answer)
        if cost > MAX_ENTRY_BYTES or cost > self.max_bytes or stamp == 0:
            return
        entries = self._entries
        old = entries.pop(body, None)
        if old is not None:
            self.bytes -= _cost(body, old[3])
        while entries and (len(entries) >= self.max_entries or self.bytes + cost > self.max_bytes):
            oldest = next(iter(entries))
            self.bytes -= _cost(oldest, entries.pop(oldest)[3])
        entries[body] = (version, partition, stamp, answer)
        self.bytes += cost


def _cost(body: bytes, answer: bytes) -> int:
    return len(body) + len(answer) + ENTRY_OVERHEAD
