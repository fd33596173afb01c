"""A group's lag on one partition, in records and in seconds: the one computation behind
``/metrics`` (``kafka_consumergroup_lag``, ``kafka_consumergroup_lag_seconds``) and the web
console's lag columns.

Lag in records is the partition's high watermark (what Fetch reports: the flushed offset)
minus the committed offset, counted from the log start offset when the commit is below it
(records removed by DeleteRecords or retention are no longer waiting to be consumed), and never
below zero. Lag in seconds is the age of the oldest record still to be consumed: now minus the
timestamp of the record at that same offset, read from the log (:class:`RecordTimes` keeps what
it read); zero when nothing is behind, unknown (None) when the record cannot be read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kcoord.protocol.records import decode_batch

if TYPE_CHECKING:
    from kcoord.storage.engine import Log

    from ..data.topics import TopicStore


class RecordTimes:
    """The timestamp of the record at an offset, read from the partition's log and kept
    (at most ``max_entries``, then forgotten all at once). A lookup that would read the log
    after ``budget`` reads in one answer or scrape gives None instead, so that none reads much."""

    def __init__(self, max_entries: int = 100_000) -> None:
        self.max_entries = max_entries
        self._known: dict[tuple[str, int, int], int | None] = {}

    def timestamp(
        self, topic: str, partition: int, plog: Log, offset: int, budget: list[int]
    ) -> int | None:
        key = (topic, partition, offset)
        if key in self._known:
            return self._known[key]
        if budget[0] <= 0:
            return None
        budget[0] -= 1
        found = _read_timestamp(plog, offset)
        if len(self._known) >= self.max_entries:
            self._known.clear()
        self._known[key] = found
        return found


def _read_timestamp(plog: Log, offset: int) -> int | None:
    try:
        data = plog.read(offset, 1)
        if not data:
            return None
        batch = decode_batch(data, verify_crc=False)
    except Exception:  # an offline log, a batch we cannot read: no lag in time then
        return None
    header = batch.header
    if header.log_append_time:
        return header.max_timestamp
    for record in batch.records:
        if header.base_offset + record.offset_delta >= offset:
            return header.base_timestamp + record.timestamp_delta
    return None


def records_behind(plog: Log, offset: int) -> int:
    """Lag in records of a committed ``offset`` (>= 0) on ``plog``."""
    return max(plog.flushed_offset - max(offset, plog.log_start_offset), 0)


def seconds_behind(
    times: RecordTimes,
    topic: str,
    partition: int,
    plog: Log,
    offset: int,
    now_ms: int,
    budget: list[int],
) -> float | None:
    """Lag in seconds of a committed ``offset`` (>= 0) on ``plog``; None if unknown (the record
    unreadable, or the read budget spent)."""
    if records_behind(plog, offset) == 0:
        return 0.0
    ts = times.timestamp(topic, partition, plog, max(offset, plog.log_start_offset), budget)
    return None if ts is None else max(now_ms - ts, 0) / 1000.0


def partition_lag(
    topics: TopicStore,
    times: RecordTimes,
    topic: str,
    partition: int,
    offset: int,
    now_ms: int,
    budget: list[int],
) -> tuple[Log | None, int | None, float | None]:
    """(log, lag in records, lag in seconds) of a committed offset; no lag for a partition
    that does not exist or an offset below zero (none committed)."""
    plog = topics.partition(topic, partition)
    if plog is None or offset < 0:
        return plog, None, None
    behind = records_behind(plog, offset)
    if behind == 0:
        return plog, 0, 0.0
    return plog, behind, seconds_behind(times, topic, partition, plog, offset, now_ms, budget)
