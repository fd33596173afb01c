"""What one shard operation produces, and how its managers write into it.

An operation of a shard (a request, a timer round, a failed append's aftermath) returns one
:class:`Output`: the ``__consumer_offsets`` records to append, in order, and the replies to
deliver once those records are durable (a reply may answer an earlier, parked request). Every
manager of the shard writes into the Output of the operation under way through the shard's one
:class:`Operation`, which also guards against re-entry (a shard is single-threaded and its
operations never nest).

A write that can fail needs an undo: the manager that made it attaches a failure action (its own
frozen dataclass) to the Output; if the runtime cannot append the records it hands the whole
Output back to :meth:`coordinator.shard.GroupShard.append_failed`, which gives each action to
the manager that owns its type. :func:`map_store_error` turns the log's error into the one
clients see, as Kafka's coordinator does.
"""

from __future__ import annotations

import itertools
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

from kcoord.coordinator.messages import Response, TxnMarkerRequest
from kcoord.protocol.errors import ErrorCode

Record = tuple[bytes, bytes | None]
Reply = tuple[Hashable, Response]


@dataclass(slots=True)
class Output:
    """What one shard operation produced.

    ``records``: (key, value) pairs to append in order; value None is a tombstone.
    ``replies``: (handle, response) pairs to deliver once ``records`` are durable.
    ``on_failure``: how :meth:`GroupShard.append_failed` reacts if the append fails; the
    runtime treats it as opaque and passes the whole Output back.
    ``producer_id``/``producer_epoch``: the records are one transactional batch of that
    producer; ``marker``: the Output writes a transaction marker (a control batch) instead.

    Every write must fit in one batch of ``GroupConfig.max_batch_bytes``: an Output with
    ``on_failure`` actions is written atomically (one batch, or append_failed), one without
    (independent records: expired offsets' tombstones, an Empty group's record) may be cut
    into several batches.
    """

    records: list[Record] = field(default_factory=list)
    replies: list[Reply] = field(default_factory=list)
    on_failure: list[Any] = field(default_factory=list)
    """Failure actions: frozen dataclasses with a ``handles`` property (the replies they
    answer instead), owned by the manager that attached them."""
    producer_id: int = -1
    """>= 0: ``records`` are a transactional batch of this producer (a TxnOffsetCommit)."""
    producer_epoch: int = -1
    marker: TxnMarkerRequest | None = None
    """Not None: the Output is this transaction marker (a control batch), with no records."""

    def reply_for(self, handle: Hashable) -> Response | None:
        """The reply for ``handle`` in this Output, if any (convenience for callers/tests)."""
        for h, resp in self.replies:
            if h == handle:
                return resp
        return None


_STAMPS = itertools.count(1)
"""Stamps for every Operation of the process: one is never given twice, to any shard."""


class Operation:
    """The Output of the operation under way, shared by the shard and its managers.

    ``stamp`` changes at the start of every operation but the reads (:meth:`begin_read`: the
    describes, ListGroups, OffsetFetch), to a value no operation of any shard had before: while
    it stays the same, the shard's mode and offsets have not changed (the heartbeats that run
    without an operation, ``GroupShard.heartbeat_now``, change neither, and the loading replay
    serves nothing)."""

    __slots__ = ("out", "stamp")

    def __init__(self) -> None:
        self.out: Output | None = None
        self.stamp: int = next(_STAMPS)

    def not_reentered(self) -> None:
        if self.out is not None:
            raise RuntimeError("GroupShard is not re-entrant")

    def begin(self) -> Output:
        self.not_reentered()
        self.stamp = next(_STAMPS)
        self.out = Output()
        return self.out

    def begin_read(self) -> Output:
        """:meth:`begin` of an operation that only answers: it changes nothing of the shard,
        so the stamp stays."""
        self.not_reentered()
        self.out = Output()
        return self.out

    def end(self) -> Output:
        out = self.out
        self.out = None
        assert out is not None
        return out

    def reply(self, handle: Hashable, response: Response) -> None:
        assert self.out is not None
        self.out.replies.append((handle, response))

    def emit(self, key: bytes, value: bytes | None) -> None:
        assert self.out is not None
        self.out.records.append((key, value))

    def on_failure(self, action: Any) -> None:
        assert self.out is not None
        self.out.on_failure.append(action)


@dataclass(frozen=True, slots=True)
class RebalanceCompleted:
    """A rebalance that ended (the group became Stable, or Empty at a new generation), for
    the runtime's metrics and history (built by ``coordinator.rebalances.finish``).
    ``duration_ms`` runs from the first PreparingRebalance (or epoch bump); ``generation`` is
    the classic generation or the consumer group's epoch; ``members`` is the count after.

    The manager's reason text is :attr:`reason`. Kept whole in ``reason_head`` unless it names
    :attr:`member`: then the text around the member's id is kept (``reason_head``,
    ``reason_tail``, both shared: few distinct ones) and the id is the one :attr:`member`
    holds, so that a group's stored event repeats neither its id nor its text."""

    group_id: str
    generation: int
    members: int
    reason_head: str
    duration_ms: int
    group_type: str = "classic"
    trigger: str = "other"
    member: str = ""
    """The member named by the trigger ("" when none is)."""
    started_ms: int = 0
    members_before: int = 0
    partitions_moved: int = 0
    reason_tail: str | None = None
    """None: ``reason_head`` is the whole reason; else what follows :attr:`member` in it."""

    @property
    def reason(self) -> str:
        tail = self.reason_tail
        return self.reason_head if tail is None else self.reason_head + self.member + tail


def map_store_error(error: int) -> int:
    """Kafka's mapping of a failed __consumer_offsets append to the error clients see
    (CoordinatorOperationExceptionHelper, GroupMetadataManager's
    appendGroupMetadataErrorToResponseError). Offset commits use it too: Kafka's coordinator
    answers a commit whose write failed with the mapped error on every partition, a batch
    over the size limit (MESSAGE_TOO_LARGE) included: UNKNOWN_SERVER_ERROR."""
    if error in (
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.not_enough_replicas,
        ErrorCode.not_enough_replicas_after_append,
        ErrorCode.request_timed_out,
    ):
        return ErrorCode.coordinator_not_available
    if error in (ErrorCode.not_leader_or_follower, ErrorCode.kafka_storage_error):
        return ErrorCode.not_coordinator
    if error in (
        ErrorCode.record_list_too_large,
        ErrorCode.message_too_large,
        ErrorCode.invalid_fetch_size,
    ):
        return ErrorCode.unknown_server_error
    if error == ErrorCode.none:
        return ErrorCode.unknown_server_error
    return error
