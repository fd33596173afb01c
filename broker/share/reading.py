"""Reading a partition log for a share partition: the batches from its fetch offset, what the
share partition may deliver of them, and the bytes of a ShareFetch answer.

Reads stop at the high watermark (read_uncommitted) or the last stable offset (read_committed).
Control batches are never deliverable; under read_committed neither are the batches of aborted
transactions (a transactional batch of a producer whose aborted transaction spans its offset).
A ShareFetch answers with the whole batches that hold acquired records, as Kafka does: the
consumer reads the records of its acquired ranges out of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kcoord.protocol.batch import BatchHeader, CorruptBatch, parse_header
from kcoord.share.model import AcquiredRange, LogBatch
from kcoord.storage.engine import Log

from ..data.log_read import cap_at, high_watermark


@dataclass(frozen=True, slots=True)
class LogRead:
    """Whole batches read from a log: their bytes and each one's (position, header)."""

    data: bytes
    headers: list[tuple[int, BatchHeader]]

    def log_batches(self, aborted: Sequence[tuple[int, int, int]] = ()) -> list[LogBatch]:
        """The batches as the share partition sees them; ``aborted``: (producer id, first
        offset, last offset) of the aborted transactions of the range (read_committed)."""
        out = []
        for _, h in self.headers:
            deliverable = not h.is_control
            if deliverable and h.is_transactional and aborted:
                deliverable = not any(
                    pid == h.producer_id and first <= h.base_offset <= last
                    for pid, first, last in aborted
                )
            out.append(LogBatch(h.base_offset, h.last_offset, deliverable))
        return out

    def covering(self, ranges: Sequence[AcquiredRange]) -> bytes:
        """The batches holding an offset of ``ranges``, in log order."""
        if not ranges:
            return b""
        parts = []
        for pos, h in self.headers:
            if any(r.first_offset <= h.last_offset and h.base_offset <= r.last_offset for r in ranges):
                parts.append(self.data[pos : pos + h.size])
        return b"".join(parts)


def readable_end(plog: Log, committed: bool) -> int:
    """Where a share consumer's reads stop: the high watermark, or the last stable offset."""
    hw = high_watermark(plog)
    return plog.last_stable_offset(hw) if committed else hw


def read_from(plog: Log, offset: int, upto: int, max_bytes: int) -> LogRead:
    """Whole batches from the one holding ``offset``, about ``max_bytes`` worth (one at
    least), none starting at or past ``upto``. Raises OffsetOutOfRange, OSError; a stored
    batch that cannot be parsed ends the read before it."""
    if offset >= upto:
        return LogRead(b"", [])
    data = cap_at(plog.read(offset, max(max_bytes, 1)), upto)
    headers: list[tuple[int, BatchHeader]] = []
    pos = 0
    while pos < len(data):
        try:
            h = parse_header(data, pos)
        except CorruptBatch:
            break
        if pos + h.size > len(data):
            break
        headers.append((pos, h))
        pos += h.size
    return LogRead(data[:pos], headers)


def aborted_in(plog: Log, read: LogRead) -> list[tuple[int, int, int]]:
    """The aborted transactions overlapping ``read``: (producer id, first, last offset)."""
    if not read.headers:
        return []
    start = read.headers[0][1].base_offset
    end = read.headers[-1][1].next_offset
    return [(a.producer_id, a.first_offset, a.last_offset) for a in plog.aborted_transactions(start, end)]
