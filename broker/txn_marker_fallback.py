"""A stand-in marker writer for the transaction coordinator, until the data plane's
``write_markers`` (``broker/txn_markers.py``) is wired in its place.

It appends one COMMIT/ABORT control batch (``protocol.control.encode_marker``) to each data
partition's log and waits for the group-commit fsync; it knows nothing of producer state, the
last stable offset or the aborted-transaction index. ``__consumer_offsets`` partitions are
handed to the injected ``offsets_marker`` when there is one (the group coordinator's
``write_txn_marker``), and otherwise counted as written: without TxnOffsetCommit there is
nothing pending there to resolve.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

from protocol.control import encode_marker
from protocol.errors import ErrorCode
from storage.log import PartitionLog

from .topic_names import OFFSETS_TOPIC

if TYPE_CHECKING:
    from .flusher import Flusher
    from .topics import TopicStore

log = logging.getLogger("kcoord.transactions")

OffsetsMarker = Callable[[int, int, int, bool, int], Awaitable[int]]


class LogMarkerWriter:
    def __init__(
        self, topics: TopicStore, flusher: Flusher, offsets_marker: OffsetsMarker | None = None
    ) -> None:
        self.topics = topics
        self.flusher = flusher
        self.offsets_marker = offsets_marker

    async def write_markers(
        self,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        coordinator_epoch: int,
        partitions: Sequence[tuple[str, int]],
    ) -> dict[tuple[str, int], int]:
        results: dict[tuple[str, int], int] = {}
        written: list[tuple[tuple[str, int], PartitionLog]] = []
        now = int(time.time() * 1000)
        for tp in partitions:
            topic, p = tp
            if topic == OFFSETS_TOPIC:
                if self.offsets_marker is None:
                    results[tp] = 0
                else:
                    results[tp] = await self.offsets_marker(
                        p, producer_id, producer_epoch, commit, coordinator_epoch
                    )
                continue
            t = self.topics.get(topic)
            if t is None or not 0 <= p < len(t.partitions):
                results[tp] = ErrorCode.unknown_topic_or_partition
                continue
            plog = t.partitions[p]
            try:
                plog.append(encode_marker(producer_id, producer_epoch, commit, coordinator_epoch, now))
            except Exception as e:
                log.error("marker for %s-%d not written: %s", topic, p, e)
                results[tp] = ErrorCode.kafka_storage_error
                continue
            written.append((tp, plog))
        syncs = [self.flusher.sync([plog]) for _, plog in written]
        outcomes = await asyncio.gather(*syncs, return_exceptions=True)
        for (tp, _), outcome in zip(written, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                log.error("marker for %s-%d not synced: %s", tp[0], tp[1], outcome)
                results[tp] = ErrorCode.kafka_storage_error
            else:
                results[tp] = 0
        return results
