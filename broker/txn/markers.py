"""Transaction markers: the writer the transaction coordinator calls, and WriteTxnMarkers.

:meth:`MarkerWriter.write_markers` ends one producer's transaction in the partitions it wrote
to: a COMMIT or ABORT control batch (``protocol.control``) is appended to each data partition
through the partition log (which updates the producer state, the last stable offset and, for
an ABORT, the segment's aborted-transaction index: ``storage.txn_log``), after the same epoch
checks Kafka makes (an older producer epoch: INVALID_PRODUCER_EPOCH; an older coordinator
epoch: TRANSACTION_COORDINATOR_FENCED). A marker with a newer producer epoch bumps the
partition's epoch, which fences the older producer's later batches. The markers of
``__consumer_offsets`` partitions are not written here: they go to the injected
``offsets_marker`` (the group runtime's, which also makes the pending transactional offsets
visible or drops them). The call returns once every marker written is durable (the same group
fsync as Produce), with an error code per partition (0: written); the markers of a wide
transaction are appended in slices of :data:`MARKER_SLICE_S`, the event loop served in
between. In a cluster, the markers of
partitions (``__consumer_offsets`` ones included) whose log here is a placeholder because another
node leads them go to that node as WriteTxnMarkers (``broker.txn.remote``), unless the call is
itself a WriteTxnMarkers from a peer: a node writes only what it leads, never forwards.

:meth:`MarkerWriter.write_txn_markers` is the WriteTxnMarkers handler (API 27, v1; CLUSTER_ACTION
on the cluster under an authorizer, as in Kafka, else CLUSTER_AUTHORIZATION_FAILED for every
partition).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from kcoord.protocol.control import encode_marker
from kcoord.protocol.errors import ErrorCode
from kcoord.storage.engine import Log, LogClosed
from kcoord.storage.offline import moved_away

from ..data.topic_names import OFFSETS_TOPIC
from ..data.topics import storage_error_code
from ..net.connection import RequestContext
from ..net.offload import pause
from ..security.acl.model import CLUSTER_NAME, Operation, ResourceType

if TYPE_CHECKING:
    from ..data.flusher import Flusher
    from ..data.topics import TopicStore
    from .remote import RemoteTxn

log = logging.getLogger("kcoord.txn")

OffsetsMarker = Callable[[int, int, int, bool, int], Awaitable[int]]
"""(partition, producer id, producer epoch, commit, coordinator epoch) -> error code."""

Where = tuple[str, int]

MARKER_SLICE_S = 0.005
"""How long markers are appended before a pause for the event loop (an append is a write to
the partition's segment: thousands in a row would hold every other client). By time, not by
count, and one transaction at a time: the transactions ending together wait their turn rather
than each taking a slice in the same turn of the loop."""


class MarkerWriter:
    def __init__(
        self,
        topics: TopicStore,
        flusher: Flusher,
        offsets_marker: OffsetsMarker | None = None,
        clock: Callable[[], float] = time.time,
        remote: RemoteTxn | None = None,
    ) -> None:
        self.topics = topics
        self.flusher = flusher
        self.offsets_marker = offsets_marker
        self._clock = clock
        self.remote = remote
        self._appending = asyncio.Lock()

    async def write_markers(
        self,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        coordinator_epoch: int,
        partitions: Sequence[Where],
        forward: bool = True,
    ) -> dict[Where, int]:
        """Write one marker per partition (module docstring); an error code per partition.
        ``forward``: send those of partitions led by other nodes to them (not when answering
        a peer's WriteTxnMarkers)."""
        results: dict[Where, int] = {}
        written: dict[Where, Log] = {}
        delegated: list[Where] = []
        elsewhere: list[Where] = []
        async with self._appending:  # one transaction's slices at a time (MARKER_SLICE_S)
            now_ms = int(self._clock() * 1000)
            slice_started = time.perf_counter()
            for where in dict.fromkeys(partitions):
                # The clock after every marker: an append that opens its segment's file (a
                # transaction over more partitions than the open-file cache holds) may take
                # a millisecond, and sixteen of them in a row held the loop past 50 ms.
                if time.perf_counter() - slice_started >= MARKER_SLICE_S:
                    await pause()  # a transaction over thousands of partitions: let others in
                    slice_started = time.perf_counter()
                if forward and self.remote is not None and self._led_elsewhere(where):
                    elsewhere.append(where)
                    continue
                if where[0] == OFFSETS_TOPIC:
                    delegated.append(where)
                    continue
                code = self._append(where, producer_id, producer_epoch, commit,
                                    coordinator_epoch, now_ms, written)
                if code is not None:
                    results[where] = code
        waits: list[tuple[list[Where], Awaitable[Any]]] = []
        if delegated:
            waits.extend(
                ([w], self._offsets(w[1], producer_id, producer_epoch, commit, coordinator_epoch))
                for w in delegated
            )
        by_log: dict[Log, list[Where]] = {}
        for where, plog in written.items():
            by_log.setdefault(plog, []).append(where)
        for plog, wheres in by_log.items():
            synced = self.flusher.synced([plog])
            if synced is None:
                results.update((w, ErrorCode.none) for w in wheres)
            else:
                waits.append((wheres, synced))
        if elsewhere:
            assert self.remote is not None
            waits.append((elsewhere, self.remote.write_markers(
                producer_id, producer_epoch, commit, coordinator_epoch, elsewhere
            )))
        outcomes = await asyncio.gather(*(w for _, w in waits), return_exceptions=True)
        for (wheres, _), outcome in zip(waits, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                log.error("marker for producer %d in %s not durable: %r", producer_id, wheres,
                          outcome)
                code = ErrorCode.kafka_storage_error
            elif isinstance(outcome, int):
                code = outcome  # the offsets marker's answer
            elif isinstance(outcome, dict):
                results.update(outcome)  # the leaders' answers for partitions led elsewhere
                continue
            else:
                code = ErrorCode.none
            results.update((w, code) for w in wheres)
        return results

    def _led_elsewhere(self, where: Where) -> bool:
        """Whether another node leads the partition: its log here is a placeholder."""
        plog = self.topics.partition(*where)
        return plog is not None and moved_away(plog.offline)

    def _append(
        self,
        where: Where,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        coordinator_epoch: int,
        now_ms: int,
        written: dict[Where, Log],
    ) -> int | None:
        """Append one data partition's marker; an error code, or None once it is appended."""
        plog = self.topics.partition(*where)
        if plog is None:
            return ErrorCode.unknown_topic_or_partition
        if plog.offline is not None:
            return storage_error_code(plog.offline)
        verdict = plog.producer_state.check_marker(producer_id, producer_epoch, coordinator_epoch)
        if verdict.error_code:
            log.info("marker for %s-%d refused: %s", where[0], where[1], verdict.message)
            return verdict.error_code
        batch = encode_marker(producer_id, producer_epoch, commit, coordinator_epoch, now_ms)
        try:
            plog.append(batch)
        except LogClosed:
            return ErrorCode.unknown_topic_or_partition
        except OSError as e:
            log.error("marker append to %s-%d failed: %r", where[0], where[1], e)
            return ErrorCode.kafka_storage_error
        written[where] = plog
        return None

    async def _offsets(
        self, partition: int, producer_id: int, epoch: int, commit: bool, coordinator_epoch: int
    ) -> int:
        if self.offsets_marker is None:
            return ErrorCode.coordinator_not_available
        try:
            return await self.offsets_marker(partition, producer_id, epoch, commit,
                                             coordinator_epoch)
        except Exception as e:
            log.error("offsets marker in %s-%d failed: %r", OFFSETS_TOPIC, partition, e)
            return ErrorCode.unknown_server_error

    # WriteTxnMarkers --------------------------------------------------------------------------
    async def write_txn_markers(self, ctx: RequestContext, req: Any) -> Any:
        allowed = ctx.allowed(Operation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME)
        answers = []
        for m in req.markers:
            wanted: list[Where] = [(t.name, int(p)) for t in m.topics for p in t.partition_indexes]
            codes: dict[Where, int]
            if m.producer_id < 0 or m.producer_epoch < 0:  # no producer: nothing to end
                codes = dict.fromkeys(wanted, ErrorCode.invalid_request)
            elif allowed:
                codes = await self.write_markers(
                    int(m.producer_id),
                    int(m.producer_epoch),
                    bool(m.transaction_result),
                    int(m.coordinator_epoch),
                    wanted,
                    forward=False,
                )
            else:
                codes = dict.fromkeys(wanted, ErrorCode.cluster_authorization_failed)
            answers.append(
                dict(
                    producer_id=m.producer_id,
                    topics=[
                        dict(
                            name=t.name,
                            partitions=[
                                dict(partition_index=p, error_code=codes[(t.name, int(p))])
                                for p in t.partition_indexes
                            ],
                        )
                        for t in m.topics
                    ],
                )
            )
        return ctx.respond(markers=answers)
