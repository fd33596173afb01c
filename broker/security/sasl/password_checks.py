"""Password checks in a small pool of threads of their own, taken in turn from client addresses.

Checking a password against a stored SCRAM credential (a SASL/PLAIN login, a console login)
derives the salted password again: thousands of hash rounds, milliseconds of CPU each, asked for
by clients that have not proved who they are. Were they run in the default executor, a flood of
wrong passwords would queue ahead of the group commit's fsyncs (``broker/data/flusher.py``) and
every durable write would wait for it. So they run here, in :data:`WORKERS` threads nothing else
uses, at a lower CPU priority than the rest of the broker (:data:`NICENESS`): at most that many
cores go to password checks, whatever the flood, and on a busy machine the event loop and the
fsync threads get the CPU first (measured on two cores: without it the flooded commits' median
was still 10x the quiet one, with it 2-3x).

A check waiting for a thread waits in the queue of its client's address, and the threads take
the next check from each address in turn: an address sending logins as fast as it can costs a
login from another address one check per turn, not a place behind the whole flood. At most
:data:`PER_ADDRESS` checks wait per address and :data:`WAITING` in all; one more is refused at
once (:class:`ChecksBusy`), and the caller fails that login, which costs the broker no
derivation at all. A check whose caller went away (its connection closed) before it reached a
thread is dropped unrun.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import sys
import threading
from collections import OrderedDict, deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

WORKERS = 2 if (os.cpu_count() or 1) >= 4 else 1
"""Threads deriving passwords: one core of a small machine at most, two of a bigger one."""

PER_ADDRESS = 16
"""Most checks waiting for a thread from one client address."""

WAITING = 256
"""Most checks waiting for a thread in all."""

NICENESS = 10
"""How much lower than the broker's other threads the checking threads' CPU priority is (Linux:
a thread's own nice value), so that on a busy machine the loop and the fsyncs go first."""


class ChecksBusy(Exception):
    """Too many password checks are waiting: the login fails without one."""


@dataclass(slots=True)
class _Check:
    run: Callable[[], bool]
    answer: asyncio.Future[bool]


class PasswordChecks:
    """The broker's one pool of password checks (SASL/PLAIN and the console share it)."""

    def __init__(
        self, workers: int = WORKERS, per_address: int = PER_ADDRESS, waiting: int = WAITING
    ) -> None:
        self._workers = workers
        self._per_address = per_address
        self._max_waiting = waiting
        self._queues: OrderedDict[str, deque[_Check]] = OrderedDict()
        """Waiting checks by client address; the first address has the next turn."""
        self._waiting = 0
        self._running = 0
        self._executor: ThreadPoolExecutor | None = None
        self._closed = False

    @property
    def waiting(self) -> int:
        """Checks waiting for a thread now."""
        return self._waiting

    async def check(self, address: str, run: Callable[[], bool]) -> bool:
        """``run()`` (a password check) in one of the threads, in its turn among the checks of
        client address ``address``; raises ChecksBusy at once when too many wait."""
        queue = self._queues.get(address)
        if self._closed:
            raise ChecksBusy("the broker is stopping")
        if self._waiting >= self._max_waiting or (
            queue is not None and len(queue) >= self._per_address
        ):
            raise ChecksBusy(f"{self._waiting} password checks are waiting")
        if queue is None:
            queue = self._queues[address] = deque()
        answer: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        queue.append(_Check(run, answer))
        self._waiting += 1
        self._start_next()
        return await answer

    def close(self) -> None:
        """Stop the threads (the broker is stopping: waiting checks are dropped unanswered)."""
        self._closed = True
        self._queues.clear()
        self._waiting = 0
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None

    def _start_next(self) -> None:
        """Hand waiting checks to free threads, one address after the other."""
        while self._running < self._workers and self._queues and not self._closed:
            address, queue = self._queues.popitem(last=False)
            item = queue.popleft()
            self._waiting -= 1
            if queue:
                self._queues[address] = queue  # its next check waits for its next turn
            if item.answer.done():  # the caller was cancelled meanwhile
                continue
            self._running += 1
            if self._executor is None:
                self._executor = ThreadPoolExecutor(
                    self._workers, thread_name_prefix="kcoord-password", initializer=_yield_cpu
                )
            ran = asyncio.get_running_loop().run_in_executor(self._executor, item.run)
            ran.add_done_callback(functools.partial(self._finished, item.answer))

    def _finished(self, answer: asyncio.Future[bool], done: asyncio.Future[bool]) -> None:
        self._running -= 1
        if not answer.done():
            if done.cancelled():
                answer.cancel()
            elif (error := done.exception()) is not None:
                answer.set_exception(error)
            else:
                answer.set_result(done.result())
        self._start_next()


def _yield_cpu() -> None:
    """Lower the CPU priority of the calling (checking) thread, where the system allows it."""
    if sys.platform.startswith("linux"):  # elsewhere the id would name the whole process
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), NICENESS)
