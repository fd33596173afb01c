"""What the data plane reads from the partitions' producer state: ``read_committed`` Fetch's
aborted transactions, and every partition's producers taken together (the idle-producer
sweep, the ``kcoord_producer_ids`` gauge, the open-transaction metrics).

The state itself lives with each partition log (``storage.txn_log``, ``storage.producer_state``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from protocol.batch import CorruptBatch, iter_headers
from storage.log import PartitionLog

if TYPE_CHECKING:
    from .topics import TopicStore


def committed_view(plog: PartitionLog, offset: int, data: bytes) -> list[dict[str, Any]]:
    """The aborted transactions (producer id, first offset) overlapping the batches ``data``
    read from ``offset``: a ``read_committed`` consumer drops their records."""
    end = offset
    try:
        for _, h in iter_headers(data, verify_crc=False):
            end = max(end, h.next_offset)
    except CorruptBatch:
        pass
    if end <= offset:
        return []
    return [
        dict(producer_id=a.producer_id, first_offset=a.first_offset)
        for a in plog.aborted_transactions(offset, end)
    ]


@dataclass(frozen=True, slots=True)
class OpenTxns:
    """One partition's open transactions, for the metrics."""

    topic: str
    partition: int
    count: int
    oldest_start_ms: int


class AllProducers:
    """Every partition's producer state, taken together."""

    def __init__(self, topics: TopicStore) -> None:
        self._topics = topics

    def _states(self) -> Iterator[tuple[str, int, PartitionLog]]:
        for name, index, plog in self._topics.all_partitions():
            if plog.offline is None:
                yield name, index, plog

    def __len__(self) -> int:
        """Producer states held, over all partitions."""
        return sum(len(plog.producer_state) for _, _, plog in self._states())

    def expire(self) -> int:
        """Forget idle producers everywhere; how many."""
        gone = 0
        for _, _, plog in self._states():
            gone += plog.producer_state.expire()
        return gone

    def open_transactions(self) -> list[OpenTxns]:
        """The partitions with open transactions."""
        out = []
        for name, index, plog in self._states():
            txns = plog.producer_state.open_transactions()
            if txns:
                out.append(OpenTxns(name, index, len(txns), min(t[2] for t in txns)))
        return out
