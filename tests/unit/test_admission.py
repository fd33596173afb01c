"""The broker-wide budget for large requests (queued.max.request.bytes, broker/net/admission.py)."""

from __future__ import annotations

from kcoord.broker.net.admission import RequestMemory


class _Conn:
    def __init__(self, size: int) -> None:
        self.size = size
        self.reserved = 0

    def wanted(self) -> int:
        return self.size

    def admitted(self, size: int) -> None:
        self.reserved = size


def test_requests_past_the_budget_wait_in_line_and_are_let_in_in_order() -> None:
    memory = RequestMemory(100)
    assert memory.reserve(60)
    big, small = _Conn(50), _Conn(30)
    assert not memory.reserve(big.size)
    memory.wait(big)
    # 30 would fit, but someone is waiting: first come, first served.
    assert not memory.reserve(small.size)
    memory.wait(small)
    memory.release(10)  # 50 used: big fits (100), small does not yet
    assert big.reserved == 50 and small.reserved == 0
    assert memory.used == 100 and memory.waiting == 1
    memory.release(50)
    assert small.reserved == 30 and memory.waiting == 0 and memory.used == 80


def test_a_request_larger_than_the_budget_gets_in_when_nothing_else_is_reserved() -> None:
    memory = RequestMemory(100)
    assert memory.reserve(250)
    assert not memory.reserve(1)
    memory.release(250)
    assert memory.reserve(1)


def test_minus_one_means_no_limit() -> None:
    assert RequestMemory(-1).reserve(10**12)


def test_waiters_that_want_nothing_any_more_or_were_forgotten_are_skipped() -> None:
    memory = RequestMemory(10)
    assert memory.reserve(10)
    closed, forgotten, next_one = _Conn(0), _Conn(5), _Conn(5)
    for c in (closed, forgotten, next_one):
        memory.wait(c)
    memory.forget(forgotten)
    memory.release(10)
    assert forgotten.reserved == 0 and next_one.reserved == 5 and memory.used == 5
