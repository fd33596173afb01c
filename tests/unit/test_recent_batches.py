"""storage.postgres.recent: the newest flushed batches of all logs within one byte budget."""

from __future__ import annotations

from dataclasses import replace

from kcoord.protocol.batch import parse_header
from kcoord.protocol.record_encoding import build_batch
from kcoord.storage.postgres.recent import Batch, RecentBatches

ONE = build_batch([(b"k", b"v" * 50, [], 0)])
SIZE = len(ONE)


def batch(offset: int) -> Batch:
    return replace(parse_header(ONE), base_offset=offset), ONE


def test_the_oldest_batches_of_any_log_go_first_and_each_tail_stays_contiguous() -> None:
    shared = RecentBatches(budget_bytes=3 * SIZE)
    a, b = shared.tail(), shared.tail()
    a.add([batch(0), batch(1)])
    b.add([batch(0)])
    a.add([batch(2)])  # over budget: a's offset 0, the oldest, goes
    assert shared.held_bytes == 3 * SIZE
    first, held = a.since(0, 3)
    assert first == 1 and [h.base_offset for h, _ in held] == [1, 2]
    assert b.since(0, 1)[0] == 0
    # A reader near the end gets the batch holding its offset and what follows.
    assert [h.base_offset for h, _ in a.since(2, 3)[1]] == [2]
    assert shared.tail().since(5, 7) == (7, [])  # nothing held: from the flushed offset


def test_dropped_batches_leave_the_budget_without_taking_newer_ones() -> None:
    shared = RecentBatches(budget_bytes=2 * SIZE)
    a = shared.tail()
    a.add([batch(0), batch(1)])
    a.drop_below(2)  # a compaction rewrote both
    a.add([batch(2)])  # over budget: the dropped offset 0 leaves, offset 2 stays
    assert [h.base_offset for h, _ in a.since(0, 3)[1]] == [2]
    a.add([batch(3)])  # the dropped offset 1 leaves
    assert [h.base_offset for h, _ in a.since(0, 4)[1]] == [2, 3]
    assert shared.held_bytes == 2 * SIZE
