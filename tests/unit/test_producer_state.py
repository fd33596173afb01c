"""A partition's producer state (storage.producer_state) with a fake clock: de-duplication of
the last five batches, epochs, expiry of idle producers, and its memory per producer. (The
sequence and transaction checks, snapshots and rebuilds: test_producer_checks.py.)"""

from __future__ import annotations

import tracemalloc

import pytest

from kcoord.storage.producer_state import RECENT_BATCHES, ProducerState


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


def test_finds_the_last_batches_only() -> None:
    table = ProducerState(60_000, Clock())
    other_partition = ProducerState(60_000, Clock())
    for n in range(RECENT_BATCHES + 2):
        table.record(7, 0, n * 10, n * 10 + 9, 1000 + n * 10)
    assert len(table) == 1
    assert table.find(7, 0, 0, 9) is None  # forgotten: only the last five are kept
    assert table.find(7, 0, 10, 19) is None
    for n in range(2, RECENT_BATCHES + 2):
        assert table.find(7, 0, n * 10, n * 10 + 9) == 1000 + n * 10
    assert table.find(7, 0, 20, 28) is None  # another range
    assert other_partition.find(7, 0, 20, 29) is None  # another partition (its own state)
    assert table.find(8, 0, 20, 29) is None  # another producer


def test_a_new_epoch_starts_afresh() -> None:
    table = ProducerState(60_000, Clock())
    table.record(7, 0, 0, 4, 100)
    assert table.find(7, 1, 0, 4) is None
    table.record(7, 1, 0, 4, 200)
    assert table.find(7, 1, 0, 4) == 200
    assert table.find(7, 0, 0, 4) is None


def test_idle_producers_expire() -> None:
    clock = Clock()
    table = ProducerState(10_000, clock)  # partition 0
    table1 = ProducerState(10_000, clock)  # partition 1
    table.record(1, 0, 0, 0, 10)
    clock.now += 4_000
    table.record(2, 0, 0, 0, 11)
    table1.record(1, 0, 0, 0, 12)
    clock.now += 4_000
    table.record(1, 0, 1, 1, 13)  # producer 1 wrote again on partition 0
    assert table.expire() + table1.expire() == 0
    clock.now += 2_000  # producer 1 on partition 0: idle 2 s; the other two: 6 s
    assert table.expire() + table1.expire() == 0
    clock.now += 4_000  # idle 6 s and 10 s
    assert table.expire() + table1.expire() == 2
    assert len(table) + len(table1) == 1
    assert table.find(1, 0, 1, 1) == 13
    assert table.find(2, 0, 0, 0) is None
    clock.now += 3_999
    assert table.expire() == 0
    clock.now += 1
    assert table.expire() == 1
    assert len(table) == 0


def test_expiry_only_looks_at_what_expires() -> None:
    clock = Clock()
    table = ProducerState(1_000, clock)
    for pid in range(100_000):
        table.record(pid, 0, 0, 0, pid)
    clock.now += 500
    table.record(0, 0, 1, 1, 5)
    clock.now += 600
    assert table.expire() == 99_999
    assert len(table) == 1


def test_rejects_a_non_positive_expiration() -> None:
    with pytest.raises(ValueError):
        ProducerState(0, Clock())


def test_memory_per_producer_is_small() -> None:
    table = ProducerState(60_000, Clock())
    n = 20_000
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for pid in range(10**12, 10**12 + n):
            for b in range(RECENT_BATCHES):  # the most a producer ever holds
                table.record(pid, 0, b * 100, b * 100 + 99, 10**9 + b)
        used = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    per_producer = used / n
    assert per_producer < 400, per_producer  # was ~860 bytes in DataApi's deque of dataclasses
