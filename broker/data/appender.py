"""Produced batches on their way into the partition logs: checked, then appended in arrival
order per partition.

Each partition's records are checked by ``protocol.validate``: the header and CRC at once, then
the records themselves, with the topic's rules (``protocol.append_rules``: timestamps, and the
batch stamped with LogAppendTime or re-encoded with the topic's compression.type). Checking the records of a big or compressed batch (decompressing
megabytes and walking a million small records is seconds of Python) runs in a small pool of
worker threads, so the event loop keeps serving; a small uncompressed batch is checked inline.

Order: appends to one partition happen in the order its batches arrived, across requests and
connections. While a partition has batches waiting for their check, every later batch for it
(even a small one, already checked) queues behind them: ``_chains`` holds, per log, the batches
not yet appended, and each is appended, on the event loop, once it and all before it are
checked. An idempotent producer's in-flight batches therefore land in request order, and a
retried batch queued behind its original finds the original's offset (the append function
de-duplicates). A refused batch appends nothing, so it is answered at once.

A batch may also come with a *gate*, an awaitable error code decided elsewhere (cluster mode:
the verification of a transactional batch by the coordinator on another node,
``broker.txn.remote``). The batch takes its place in the chain at once and is checked, then
appended, only once its gate answered 0; any other code refuses it. So batches keep their arrival
order while some of them wait for another node.

The append itself (de-duplication, ``Log.append``, producer state) is the caller's
function; this module only decides when it runs.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from kcoord.protocol.append_rules import PLAIN, AppendRules, accept
from kcoord.protocol.batch import BatchHeader
from kcoord.protocol.errors import ErrorCode
from kcoord.protocol.validate import Refused, needs_worker
from kcoord.storage.engine import Log

log = logging.getLogger("kcoord.data")

T = TypeVar("T")

INLINE_BYTES = 16 * 1024
"""Uncompressed batches up to this size are checked on the event loop: at most about 2,300
records (a few hundred for ordinary messages), a millisecond or two of Python."""

CHECK_WORKERS = 2
"""Threads checking big batches. More would not check faster (the walk holds the GIL); this
also bounds the memory of decompressed batches in flight to CHECK_WORKERS x the limit."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """How one partition's batch fared. ``must_sync``: the log holds the batch, so the answer
    waits for an fsync of it (also for a de-duplicated retry: its original may not be durable
    yet)."""

    error_code: int
    base_offset: int = -1
    message: str | None = None
    record_errors: tuple[tuple[int, str], ...] = ()
    must_sync: bool = False
    log_append_time: int = -1
    """The time the broker stamped the batch with (a LogAppendTime topic's), else -1."""


def refused(r: Refused) -> Outcome:
    return Outcome(r.error_code, message=r.message, record_errors=r.record_errors)


Where = tuple[str, int]  # topic, partition
AppendFn = Callable[[Log, Where, BatchHeader, bytes], Outcome]


class _Pending:
    __slots__ = ("check", "done", "header", "records", "where")

    def __init__(
        self,
        where: Where,
        header: BatchHeader,
        records: bytes,
        check: asyncio.Future[Refused | bytes] | None,
        done: asyncio.Future[Outcome],
    ) -> None:
        self.where = where
        self.header = header
        self.records = records
        self.check = check  # None: already checked (records: the batch to append)
        self.done = done


def _now_ms() -> int:
    return int(time.time() * 1000)


def _check(header: BatchHeader, records: bytes, limit: int, rules: AppendRules) -> Refused | bytes:
    """The batch to append (``records`` or the topic's rewrite of it), or why not."""
    try:
        return accept(header, records, limit, rules, _now_ms())
    except Refused as r:
        return r


class Appender:
    def __init__(
        self,
        append: AppendFn,
        *,
        limit: int,
        inline_bytes: int = INLINE_BYTES,
        workers: int = CHECK_WORKERS,
    ) -> None:
        self._append = append
        self._limit = limit
        self._inline_bytes = inline_bytes
        self._workers = workers
        self._executor: ThreadPoolExecutor | None = None
        self._chains: dict[Log, deque[_Pending]] = {}

    def submit(
        self,
        plog: Log,
        where: Where,
        header: BatchHeader,
        records: bytes,
        rules: AppendRules = PLAIN,
        gate: Awaitable[int] | None = None,
    ) -> Outcome | asyncio.Future[Outcome]:
        """Check and append one partition's batch (``header`` from ``check_batch``; ``rules``:
        the topic's, ``protocol.append_rules``; ``gate``: module docstring): the outcome now,
        or a future of it when the batch must wait for its gate, a check or batches ahead of
        it."""
        chain = self._chains.get(plog)
        check: asyncio.Future[Refused | bytes] | None = None
        loop = asyncio.get_running_loop()
        if gate is not None:
            check = asyncio.ensure_future(self._gated(gate, header, records, rules))
        elif needs_worker(header, self._inline_bytes):
            check = loop.run_in_executor(self._pool(), _check, header, records, self._limit, rules)
        else:
            checked = _check(header, records, self._limit, rules)
            if isinstance(checked, Refused):
                log.info("refused produce to %s-%d: %s", *where, checked.message)
                return refused(checked)
            records = checked
            if chain is None:
                return self._append(plog, where, header, records)
        done: asyncio.Future[Outcome] = loop.create_future()
        if chain is None:
            chain = self._chains[plog] = deque()
        chain.append(_Pending(where, header, records, check, done))
        if len(chain) == 1:
            self._advance(plog)
        return done

    async def _gated(
        self, gate: Awaitable[int], header: BatchHeader, records: bytes, rules: AppendRules
    ) -> Refused | bytes:
        code = await gate
        if code:
            return Refused(code, f"refused by the transaction coordinator: {ErrorCode(code).name.upper()}")
        if needs_worker(header, self._inline_bytes):
            return await asyncio.get_running_loop().run_in_executor(
                self._pool(), _check, header, records, self._limit, rules
            )
        return _check(header, records, self._limit, rules)

    def pending(self, plog: Log) -> int:
        """Batches of ``plog`` accepted but not yet appended or refused."""
        chain = self._chains.get(plog)
        return len(chain) if chain is not None else 0

    def in_worker(self, fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        """Run ``fn(*args)`` in the checking threads (other long pure work, e.g. ListOffsets'
        decoding of one stored batch)."""
        return asyncio.get_running_loop().run_in_executor(self._pool(), fn, *args)

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None

    def _pool(self) -> ThreadPoolExecutor:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(self._workers, thread_name_prefix="kcoord-check")
        return self._executor

    def _advance(self, plog: Log) -> None:
        """Append (or refuse) the batches at the head of ``plog``'s chain whose checks are done;
        come back when the next one's is."""
        chain = self._chains[plog]
        while chain:
            item = chain[0]
            if item.check is not None and not item.check.done():
                item.check.add_done_callback(lambda _f: self._advance(plog))
                return
            chain.popleft()
            outcome = self._settle(plog, item)
            if not item.done.done():
                item.done.set_result(outcome)
        del self._chains[plog]

    def _settle(self, plog: Log, item: _Pending) -> Outcome:
        if item.check is not None:
            if item.check.cancelled():
                return Outcome(ErrorCode.unknown_server_error, message="broker shutting down")
            error = item.check.exception()
            if error is not None:
                log.error("checking a batch for %s failed", plog.name, exc_info=error)
                return Outcome(ErrorCode.unknown_server_error, message="internal error")
            checked = item.check.result()
            if isinstance(checked, Refused):
                log.info("refused produce to %s-%d: %s", *item.where, checked.message)
                return refused(checked)
            item.records = checked
        try:
            return self._append(plog, item.where, item.header, item.records)
        except Exception:  # a bug: fail this batch, keep the chain moving
            log.exception("append to %s failed", plog.name)
            return Outcome(ErrorCode.unknown_server_error, message="internal error")
