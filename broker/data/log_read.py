"""What a consumer may read of a partition log: the high watermark and the cut of a read at it.

Shared by Fetch (``broker/data/api.py``) and ShareFetch (``broker/share/reading.py``).
"""

from __future__ import annotations

from kcoord.protocol.batch import peek_size
from kcoord.storage.engine import Log


def high_watermark(plog: Log) -> int:
    """The last offset + 1 that consumers may read: what is durable (flushed)."""
    return plog.flushed_offset


def cap_at(data: bytes, upto: int) -> bytes:
    """``data`` (whole batches) without the batches starting at or past ``upto`` (the high
    watermark: appended but not yet durable; or the last stable offset)."""
    pos = 0
    n = len(data)
    while pos < n:
        size = peek_size(data, pos)
        if size is None or pos + size > n:
            break
        base = int.from_bytes(data[pos : pos + 8], "big", signed=True)
        if base >= upto:
            break
        pos += size
    return data if pos == n else data[:pos]
