"""The broker-wide budget of memory for large requests (``queued.max.request.bytes``).

A connection that starts receiving a request larger than :data:`SMALL_REQUEST` reserves its
declared size here before reading the rest of it, and gives it back once the request has been
handed to its handler (or the connection is gone). When the budget is spent the connection stops
reading and waits in line; connections are let in again first come, first served as memory is
given back. Small requests need no reservation: each connection holds at most one read's worth
of them (it stops reading while it has unhandled frames), so they are bounded per connection.

A request larger than the whole budget is still let in when nothing else is reserved, so a
limit below ``socket.request.max.bytes`` slows such requests down but never locks them out.
"""

from __future__ import annotations

from collections import deque
from typing import Protocol

SMALL_REQUEST = 64 * 1024
"""Requests up to this size are received without a reservation."""


class Waiter(Protocol):
    def wanted(self) -> int:
        """The bytes it still waits for (0: none any more, e.g. it was closed)."""
        ...

    def admitted(self, size: int) -> None:
        """It now holds ``size`` bytes of the budget."""
        ...


class RequestMemory:
    def __init__(self, limit: int) -> None:
        self.limit = limit  # -1: no limit
        self.used = 0
        self._waiting: deque[Waiter] = deque()

    def _fits(self, size: int) -> bool:
        return self.limit < 0 or not self.used or self.used + size <= self.limit

    def reserve(self, size: int) -> bool:
        """Take ``size`` bytes of the budget if they are free and nobody waits for memory
        already (first come, first served); False otherwise (then :meth:`wait`)."""
        if self._waiting or not self._fits(size):
            return False
        self.used += size
        return True

    def release(self, size: int) -> None:
        """Give ``size`` bytes back and let waiters in, in order, as far as they fit."""
        self.used -= size
        waiting = self._waiting
        while waiting:
            need = waiting[0].wanted()
            if need and not self._fits(need):
                return
            waiter = waiting.popleft()
            self.used += need
            waiter.admitted(need)

    def wait(self, waiter: Waiter) -> None:
        """Queue ``waiter`` until memory is given back."""
        if waiter not in self._waiting:
            self._waiting.append(waiter)

    def forget(self, waiter: Waiter) -> None:
        if waiter in self._waiting:
            self._waiting.remove(waiter)

    @property
    def waiting(self) -> int:
        return len(self._waiting)
