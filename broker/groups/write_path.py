"""The pieces of the group runtime's write path that stand on their own.

:class:`ShardRuntime` is what the runtime keeps per ``__consumer_offsets`` partition besides its
shard: the partition's log, the chain of its outputs still on their way to their replies, its
timer, and the outputs held while the offsets topic is being created or while a big output's
batch is encoded in the worker thread (:meth:`ShardRuntime.encode_held`). :func:`output_batches`
is what one shard output is appended as (record batches of at most ``message.max.bytes``, or a
transaction marker). :class:`OutputCompletion` carries one
appended output through its fsync and then the shard's previous output, in that order, to the
runtime's ``finish`` callback, which delivers its replies (broker/groups/runtime.py).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from kcoord.coordinator.shard import GroupShard, Output
from kcoord.protocol.control import encode_marker
from kcoord.protocol.errors import ErrorCode
from kcoord.protocol.record_encoding import encode_kv_batch, kv_batches
from kcoord.storage.engine import Log

from ..data.topics import OFFSETS_TOPIC
from ..net.offload import off_loop

log = logging.getLogger("kcoord.coordinator")

class ShardRuntime:
    """Per-shard plumbing: the log, the ordered completion chain and the timer."""

    __slots__ = ("chain", "deferred", "log", "loaded", "partition", "shard", "timer", "timer_at")

    def __init__(self, partition: int, shard: GroupShard) -> None:
        self.partition = partition
        self.shard = shard
        self.log: Log | None = None
        self.chain: asyncio.Future[None] | None = None  # completion of the last queued output
        self.timer: asyncio.Handle | None = None  # a TimerHandle, or a call_soon when deferred
        self.timer_at: int | None = None
        self.loaded = False
        self.deferred: list[Output] | None = None
        """Outputs waiting for the offsets topic's creation, in order (GroupRuntime._defer)."""

    def idle_stamp(self) -> int:
        """The shard's :attr:`GroupShard.stamp` while it may answer on the spot (no output of
        it waiting to become durable, as GroupRuntime.fetch_offsets asks), else 0."""
        return self.shard.stamp if self.chain is None else 0

    def hold(
        self,
        out: Output,
        until: asyncio.Future[Any],
        process: Callable[[Output], None],
        failed: Callable[[Output], Output],
    ) -> None:
        """Hold ``out`` and the outputs after it (:attr:`deferred`) until ``until`` is done (the
        offsets topic created), then ``process`` them in order; those that write, with no log
        to write to then, become ``failed(out)``. :attr:`chain` holds back the shard's replies
        meanwhile, and is done once the held outputs are complete."""
        held: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        previous, self.chain, self.deferred = self.chain, held, [out]

        def resume(_: object) -> None:
            waiting, self.deferred = self.deferred or [], None
            if self.chain is held:
                self.chain = previous
            for one in waiting:
                writes = one.records or one.marker is not None
                process(failed(one) if writes and self.log is None else one)
            last = self.chain
            if last is None or last.done():
                held.set_result(None)
            else:
                last.add_done_callback(lambda _: held.set_result(None))

        until.add_done_callback(resume)


    def storage_failed(self, out: Output) -> Output:
        """The shard's undoing of ``out``, which has no log to be written to."""
        return self.shard.append_failed(out, ErrorCode.kafka_storage_error, int(time.time() * 1000))

    def encode_held(
        self,
        out: Output,
        t: int,
        limit: int,
        process: Callable[[Output], None],
        write: Callable[[Output, list[bytes] | None, int], None],
        failed: Callable[[Output], Output],
    ) -> None:
        """Encode ``out``'s batches (:func:`output_batches` at time ``t``) in the worker
        thread, then ``write(out, batches, t)``: thousands of records (a commit or deletion
        of that many offsets) take tens of milliseconds to encode. The shard's later outputs
        are held behind it (:meth:`hold`, which also hands ``failed`` those that write once
        the log is gone) and ``process``-ed in order after it, so the log keeps their order."""
        encoding = off_loop(output_batches, out, t, limit, self.partition)

        def resumed(one: Output) -> None:
            if one is not out:
                process(one)
                return
            batches: list[bytes] | None = None
            try:
                batches = encoding.result()
            except Exception:  # not expected: the write is refused, as one too big would be
                log.exception("encoding a write to %s-%d failed", OFFSETS_TOPIC, self.partition)
            write(one, batches, t)

        self.hold(out, encoding, resumed, failed)


FinishOutput = Callable[[ShardRuntime, Output, asyncio.Future[None], BaseException | None], None]
"""``(sr, out, done, error)``: complete ``out`` (its replies, or the shard's undoing of it when
``error`` is set), then set ``done``."""


class OutputCompletion:
    """One shard output on its way to its replies: first its fsync (if it appended), then the
    shard's previous output, then ``finish`` (GroupRuntime._finish_output)."""

    __slots__ = ("done", "error", "finish", "out", "prev", "sr")

    def __init__(
        self,
        finish: FinishOutput,
        sr: ShardRuntime,
        prev: asyncio.Future[None] | None,
        out: Output,
        done: asyncio.Future[None],
        error: BaseException | None,
    ) -> None:
        self.finish = finish
        self.sr = sr
        self.prev = prev
        self.out = out
        self.done = done
        self.error = error

    def start(self, flushed: asyncio.Future[None] | None) -> None:
        if flushed is None:
            self._after_flush(None)
        else:
            flushed.add_done_callback(self._after_flush)

    def _after_flush(self, flushed: asyncio.Future[None] | None) -> None:
        if flushed is not None and self.error is None:
            if flushed.cancelled():
                self.error = RuntimeError("fsync cancelled")
            else:
                self.error = flushed.exception()
        prev = self.prev
        if prev is not None and not prev.done():
            prev.add_done_callback(self._finish)
        else:
            self._finish(None)

    def _finish(self, _prev: asyncio.Future[None] | None) -> None:
        self.finish(self.sr, self.out, self.done, self.error)


def output_batches(out: Output, t: int, limit: int, partition: int) -> list[bytes] | None:
    """The batches to append for ``out``, each at most ``limit`` (message.max.bytes) bytes, as
    Kafka's coordinator runtime writes them; None when ``out`` cannot be written so.

    An output that has something to undo should it fail (``on_failure``: commits, group
    records of a sync or a static member's replacement, deletions) is one atomic write:
    one batch or nothing. The others (tombstones of expired offsets, the record of a
    group left Empty) are independent records, cut into as many batches as they need,
    like Kafka's non-atomic writes."""
    marker = out.marker
    if marker is not None:
        return [
            encode_marker(
                marker.producer_id,
                marker.producer_epoch,
                marker.commit,
                marker.coordinator_epoch,
                t,
            )
        ]
    batch = encode_kv_batch(
        out.records,
        t,
        producer_id=out.producer_id,
        producer_epoch=out.producer_epoch,
        is_transactional=out.producer_id >= 0,
        base_sequence=0 if out.producer_id >= 0 else -1,
    )
    if len(batch) <= limit:
        return [batch]
    if not out.on_failure:
        batches = [encode_kv_batch(run, t) for run in kv_batches(out.records, limit)]
        if all(len(b) <= limit for b in batches):
            return batches
    log.warning(
        "write of %d records to %s-%d refused: %d bytes do not fit in one batch of at most"
        " %d bytes (message.max.bytes)",
        len(out.records),
        OFFSETS_TOPIC,
        partition,
        len(batch),
        limit,
    )
    return None
