"""Transactions in the data plane: ``read_committed`` Fetch's aborted transactions, Produce's
transactional-id check and the verification of its transactional batches, and every partition's producers taken together (the idle-producer
sweep, the ``kcoord_producer_ids`` gauge, the open-transaction metrics).

The state itself lives with each partition log (``storage.txn_log``, ``storage.producer_state``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kcoord.protocol.batch import TRANSACTIONAL_FLAG, CorruptBatch, iter_headers
from kcoord.protocol.errors import ErrorCode
from kcoord.storage.engine import Log

from ..net.connection import RequestContext
from ..security.acl.model import Operation, ResourceType

if TYPE_CHECKING:
    from ..data.topics import TopicStore


_ATTRIBUTES_AT = 22  # low byte of a v2 batch's attributes

TxnVerifier = Callable[[str, int, int, str, int], "int | Awaitable[int]"]
"""``(transactional id, producer id, producer epoch, topic, partition)``: 0 if a transactional
batch of that producer may be appended there, else Produce's error for it (the transaction
coordinator's ``TxnRuntime.verify_partition``); an awaitable of it when the coordinator is
another node (``broker.txn.remote.TxnVerification``)."""


def transactional_refusal(ctx: RequestContext, req: Any) -> int:
    """TRANSACTIONAL_ID_AUTHORIZATION_FAILED for the whole Produce if it holds a transactional
    batch and names no transactional id, or one the client may not WRITE (as Kafka answers);
    else 0."""
    has_txn = any(
        p.records is not None
        and len(p.records) > _ATTRIBUTES_AT
        and p.records[_ATTRIBUTES_AT] & TRANSACTIONAL_FLAG
        for t in req.topic_data
        for p in t.partition_data
    )
    if not has_txn:
        return 0
    txn_id = req.transactional_id
    if txn_id is None or not ctx.allowed(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, txn_id):
        return ErrorCode.transactional_id_authorization_failed
    return 0


def committed_view(plog: Log, offset: int, data: bytes) -> list[dict[str, Any]]:
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

    def _states(self) -> Iterator[tuple[str, int, Log]]:
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
