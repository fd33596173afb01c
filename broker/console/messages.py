"""The console's message browser: one page of a partition's records, read in-process.

The records are read as Fetch reads them (broker/data/api.py): whole batches from the
partition log, cut at the high watermark (what is durable), or, ``read_committed``, at the last
stable offset, leaving out the records of aborted transactions (the log's transaction index,
as a consumer drops them from Fetch's ``aborted_transactions``); control batches (transaction
markers) are never shown. A page starts at an offset, or at a time: the first record whose
timestamp is at or after it (as ListOffsets by timestamp finds it). Without either, the page
is the partition's newest records.

Bounds: at most :data:`MAX_PAGE` records a page, :data:`READ_BYTES` read from the log for
one page (at least one batch), and each key, value and header value shown up to
``max_bytes`` (at most :data:`MAX_VALUE_BYTES`; its full size is given). Batches are decoded
in the worker thread (broker/net/offload.py), with the decompression bound Produce uses.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kcoord.protocol.batch import CorruptBatch
from kcoord.protocol.record_scan import batch_first_at_or_after
from kcoord.protocol.records import RecordBatch, decode_batches
from kcoord.storage.engine import Log, OffsetOutOfRange
from kcoord.storage.txn_index import AbortedTxn

from ..data.log_read import cap_at, high_watermark
from ..net.offload import off_loop

if TYPE_CHECKING:
    from ..data.topics import TopicStore

MAX_PAGE = 100
"""The most records one page shows."""
MAX_VALUE_BYTES = 65536
"""The most bytes of one key, value or header value shown (``max_bytes`` asks for fewer)."""
DEFAULT_VALUE_BYTES = 4096
READ_BYTES = 1 << 20
"""Bytes read from the log for one page (whole batches: at least one)."""
_CHUNK = 65536


class Unreadable(Exception):
    """The partition cannot be browsed: ``status`` (404 unknown, 409 offline) and why."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True, slots=True)
class Page:
    """What is asked: where to start (``offset``, else ``timestamp``, else the newest
    records), how many, and how."""

    topic: str
    partition: int
    offset: int | None = None
    timestamp: int | None = None
    limit: int = 20
    committed: bool = False
    max_bytes: int = DEFAULT_VALUE_BYTES


def offset_at_time(plog: Log, ts_ms: int, upto: int) -> int:
    """The offset of the first record at or after ``ts_ms`` (``upto`` if none before it):
    the batch from the log's time index, then the record within it."""
    found = plog.offset_for_timestamp(ts_ms)
    if found is None or found[0] >= upto:
        return upto
    base = max(found[0], plog.log_start_offset)
    try:
        exact = batch_first_at_or_after(plog.read(base, 1), base, ts_ms)
    except (CorruptBatch, OffsetOutOfRange, OSError):
        return base
    return min(exact[0], upto) if exact is not None else base


def shown_bytes(data: bytes | None, cap: int) -> dict[str, Any] | None:
    """Bytes as the page shows them: text when they are UTF-8, whether that text is a JSON
    object or array, and hex; all of at most ``cap`` bytes."""
    if data is None:
        return None
    part = bytes(data[:cap])
    truncated = len(data) > cap
    text: str | None = None
    for cut in range(4 if truncated else 1):  # a character cut in two at the bound
        try:
            text = part[: len(part) - cut].decode("utf-8")
            break
        except UnicodeDecodeError:
            continue
    is_json = False
    if text is not None and not truncated and text.lstrip()[:1] in ("{", "["):
        try:
            json.loads(text)
            is_json = True
        except ValueError:
            pass
    return {"size": len(data), "truncated": truncated, "text": text, "json": is_json,
            "hex": part.hex()}  # fmt: skip


def _aborted(batch: RecordBatch, aborted: list[AbortedTxn]) -> bool:
    h = batch.header
    return h.is_transactional and any(
        a.producer_id == h.producer_id and a.first_offset <= h.base_offset <= a.last_offset
        for a in aborted
    )


def _decode(
    data: bytes, start: int, room: int, cap: int, aborted: list[AbortedTxn]
) -> tuple[list[dict[str, Any]], int]:
    """The records of ``data`` (whole batches) from offset ``start``, at most ``room`` of them,
    and the offset to read next. Pure: runs in the worker thread."""
    out: list[dict[str, Any]] = []
    batches = decode_batches(data, verify_crc=False) if data else []
    next_offset = start
    for batch in batches:
        h = batch.header
        if h.is_control or _aborted(batch, aborted):
            next_offset = max(next_offset, h.next_offset)
            continue
        for r in batch.records:
            offset = h.base_offset + r.offset_delta
            if offset < start:
                continue
            if len(out) >= room:
                return out, offset
            out.append(
                {
                    "offset": offset,
                    "timestamp": h.max_timestamp
                    if h.log_append_time
                    else h.base_timestamp + r.timestamp_delta,
                    "timestamp_type": "LogAppendTime" if h.log_append_time else "CreateTime",
                    "key": shown_bytes(r.key, cap),
                    "value": shown_bytes(r.value, cap),
                    "headers": [{"key": x.key, "value": shown_bytes(x.value, cap)} for x in r.headers],
                    "transactional": h.is_transactional,
                }
            )
            next_offset = offset + 1
        next_offset = max(next_offset, h.next_offset)
    return out, next_offset


async def browse(topics: TopicStore, page: Page) -> dict[str, Any]:
    """One page of records (see the module's docstring); raises :class:`Unreadable`."""
    plog = topics.partition(page.topic, page.partition)
    if plog is None:
        raise Unreadable(404, f"no partition {page.topic}-{page.partition}")
    if plog.offline is not None:
        raise Unreadable(409, f"{page.topic}-{page.partition} is offline: {plog.offline}")
    hw = high_watermark(plog)
    lso = plog.last_stable_offset(hw)
    upto = lso if page.committed else hw
    start = plog.log_start_offset
    limit = min(max(page.limit, 1), MAX_PAGE)
    if page.offset is not None:
        first = page.offset
    elif page.timestamp is not None:
        first = offset_at_time(plog, page.timestamp, upto)
    else:
        first = upto - limit
    first = min(max(first, start), max(upto, start))
    cap = min(max(page.max_bytes, 0), MAX_VALUE_BYTES)
    messages: list[dict[str, Any]] = []
    position = first
    read = 0
    while len(messages) < limit and position < upto and read < READ_BYTES:
        try:
            data = cap_at(plog.read(position, _CHUNK), upto)
        except (OffsetOutOfRange, OSError) as e:
            raise Unreadable(409, f"cannot read {page.topic}-{page.partition}: {e}") from None
        if not data:
            break
        read += len(data)
        aborted = plog.aborted_transactions(position, upto) if page.committed else []
        try:
            found, after = await off_loop(
                _decode, data, position, limit - len(messages), cap, aborted
            )
        except CorruptBatch as e:
            raise Unreadable(409, f"a batch of {page.topic}-{page.partition} cannot be decoded: {e}") from None
        messages.extend(found)
        if after <= position:
            break
        position = after
    return {
        "topic": page.topic,
        "partition": page.partition,
        "isolation": "read_committed" if page.committed else "read_uncommitted",
        "log_start": start,
        "high_watermark": hw,
        "last_stable_offset": lso,
        "first_offset": first,
        "next_offset": position,
        "max_bytes": cap,
        "limit": limit,
        "messages": messages,
    }
