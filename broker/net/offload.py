"""Keeping big requests (groups, offsets, metadata, fetches) from holding the event loop.

One loop serves every connection, so no single request may keep it for long (about 100 ms at
most). Two tools, for the two kinds of work a big request brings:

- reading coordinator state, which must happen on the loop (the shards are single-threaded):
  done in slices, with :func:`pause` between them so that other connections are served;
- building and encoding a big response from values nothing changes any more (the shards'
  answers are immutable): :func:`off_loop` runs it in one worker thread while the loop goes
  on serving. The interpreter hands the waiting loop thread the GIL at least every switch
  interval (5 ms), so the loop slows down meanwhile instead of stopping. Small responses are
  built inline (:func:`is_big`), where a thread hop would cost more than the work.

One worker, not the default executor: fsyncs run there and must not queue behind encodings.

Work that grows with a request's size and reads state on the loop can be written once as a
generator yielding between slices (:data:`Sliced`): :func:`run_now` runs it at once for small
requests, :func:`run_sliced` with pauses for big ones. Long work whose steps vary in cost
(replaying a log at start-up, batch by batch) pauses every :data:`SLICE_S` (:class:`SliceTimer`).
Many small callbacks due in the same turn (timers of many shards) share one budget per turn
(:class:`TurnBudget`).

While a big request is served (:func:`gc_paused`), in the worker or in slices on the loop,
the cyclic garbage collector is paused. Serving one creates hundreds of thousands of
short-lived container objects; collections of the young generations would promote them, and
enough promoted objects set off a full collection, which holds the interpreter, and so the
loop, for as long as it takes to walk every object of the broker (measured: 300-500 ms with
400,000 groups, on nearly every big response). Paused, the objects are freed by reference
counting before any collection sees them. The collector is never kept off for more than
``GC_PAUSE_MAX_S`` in a row, however many big requests follow one another.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import threading
import time
from collections.abc import Callable, Generator, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from kcoord.protocol.codec import RawBody, encode_body

T = TypeVar("T")

SLICE = 2_000
"""Units of work (groups, partitions, offsets) read on the loop between two pauses."""

BIG = 5_000
"""Entries (partitions, offsets, groups) from which a response is built in the worker."""

GC_PAUSE_MAX_S = 10.0
"""Longest the collector stays paused in a row; past it, big requests run with it on."""

_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kcoord-encode")


class _GcPause:
    """Who currently wants the collector paused (the loop and the worker both may)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.holders = 0
        self.since = 0.0
        self.restore = False  # whether the collector was on when the first holder came

    def enter(self) -> bool:
        with self.lock:
            now = time.monotonic()
            if self.holders and now - self.since > GC_PAUSE_MAX_S:
                if self.restore:
                    gc.enable()  # enough: let it catch up, even if a holder remains
                return False
            if not self.holders:
                self.restore = gc.isenabled()
                self.since = now
                gc.disable()
            self.holders += 1
            return True

    def leave(self) -> None:
        with self.lock:
            self.holders -= 1
            if not self.holders and self.restore:
                gc.enable()


_gc_pause = _GcPause()


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic garbage collector off while the block runs (see the module docstring)."""
    held = _gc_pause.enter()
    try:
        yield
    finally:
        if held:
            _gc_pause.leave()


def is_big(entries: int) -> bool:
    return entries >= BIG


def off_loop(fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
    """``fn(*args)`` in the worker thread, the garbage collector paused meanwhile; a future
    of its result. ``fn`` must only read values that nothing on the loop changes."""
    return asyncio.get_running_loop().run_in_executor(_executor, _without_gc, fn, args)


def encoded_off_loop(build: Callable[[], Any]) -> asyncio.Future[RawBody]:
    """The response ``build()`` makes (a kio entity), built and encoded in the worker: a
    RawBody the connection frames as it is."""
    return off_loop(lambda: RawBody(encode_body(build())))


def _without_gc(fn: Callable[..., T], args: tuple[Any, ...]) -> T:
    with gc_paused():
        return fn(*args)


async def pause() -> None:
    """Let the loop serve everyone else once (one pass over ready I/O and callbacks)."""
    await asyncio.sleep(0)


SLICE_S = 0.01
"""Longest stretch of a long task on the loop (loading a log) between two pauses."""


class SliceTimer:
    """For loops whose steps vary in cost (a log's batches, read at start-up): :meth:`due`
    is true once the current slice has run :data:`SLICE_S`, and starts the next one."""

    __slots__ = ("_until",)

    def __init__(self) -> None:
        self._until = time.perf_counter() + SLICE_S

    def due(self) -> bool:
        now = time.perf_counter()
        if now < self._until:
            return False
        self._until = now + SLICE_S
        return True


class TurnBudget:
    """A share of one turn of the event loop for callbacks that may all come due in the same
    turn: the 50 offsets shards' timers (a thousand sessions ending together). Each keeps its
    own bound (timers per call), but fifty of them in one turn add up; with this, once the
    turn has spent :data:`SLICE_S` on them, the rest wait for the next turn (after the loop
    has read its sockets again).

    A turn is found without the loop's help: the first :meth:`charge` of one queues
    (``call_soon``) the reset, which runs first in the next turn, ahead of anything deferred
    after it."""

    __slots__ = ("_reset_queued", "_spent", "limit_s")

    def __init__(self, limit_s: float = SLICE_S) -> None:
        self.limit_s = limit_s
        self._spent = 0.0
        self._reset_queued = False

    def used_up(self) -> bool:
        """This turn's share is spent: defer (``call_soon``) to the next one."""
        return self._spent >= self.limit_s

    def charge(self, seconds: float) -> None:
        self._spent += seconds
        if not self._reset_queued:
            self._reset_queued = True
            asyncio.get_running_loop().call_soon(self._reset)

    def _reset(self) -> None:
        self._spent = 0.0
        self._reset_queued = False


Sliced = Generator[None, None, T]
"""Work on coordinator or log state written as a generator: it yields after each slice (about
``SLICE`` units) and returns its result. One body serves small requests (:func:`run_now`) and
big ones (:func:`run_sliced`)."""


def run_now(work: Sliced[T]) -> T:
    """Run sliced work to the end at once (a request too small to be worth pausing)."""
    while True:
        try:
            next(work)
        except StopIteration as done:
            return done.value


async def run_sliced(work: Sliced[T]) -> T:
    """Run sliced work, serving the loop between slices, the collector paused meanwhile."""
    with gc_paused():
        while True:
            try:
                next(work)
            except StopIteration as done:
                return done.value
            await pause()
