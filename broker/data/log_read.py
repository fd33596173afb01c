"""What a client may read of a partition log: the topics it may not, the high watermark, and the
cut of a read at it.

Shared by Fetch (``broker/data/api.py``), ListOffsets (``broker/data/list_offsets.py``) and
ShareFetch (``broker/share/reading.py``).
"""

from __future__ import annotations

from collections.abc import Iterable

from kcoord.protocol.batch import peek_size
from kcoord.protocol.errors import ErrorCode
from kcoord.storage.engine import Log

from ..net.connection import RequestContext
from ..security.acl.model import Operation, ResourceType

TOPIC_REFUSED = ErrorCode.topic_authorization_failed


def refused_topics(ctx: RequestContext, op: Operation, names: Iterable[str]) -> frozenset[str]:
    """The topics among ``names`` on which the client may not do ``op``."""
    if ctx.connection.authorizer is None:
        return frozenset()
    return frozenset(n for n in set(names) if not ctx.allowed(op, ResourceType.TOPIC, n))


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
