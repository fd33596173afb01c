"""Kafka's producer checks in storage.producer_state, driven batch by batch with a fake clock:
sequence gaps and steps back, new and older epochs, duplicates of the last five batches,
transactions opened by a transactional batch and closed by a marker, the last stable offset,
marker fencing (producer and coordinator epochs), and snapshots that restore the same state."""

from __future__ import annotations

import pytest

from kcoord.protocol.batch import parse_header
from kcoord.protocol.errors import ErrorCode
from kcoord.protocol.record_encoding import build_batch
from kcoord.storage.producer_state import CorruptSnapshot, ProducerState

T0 = 1_700_000_000_000


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> int:
        return self.now


def header(
    base_offset: int,
    n: int = 1,
    *,
    pid: int = 7,
    epoch: int = 0,
    seq: int = 0,
    txn: bool = False,
    ts: int = T0,
):  # type: ignore[no-untyped-def]
    data = build_batch(
        [(b"k", b"v", (), ts)] * n,
        base_offset=base_offset,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        is_transactional=txn,
    )
    return parse_header(data)


def marker_header(base_offset: int, *, pid: int = 7, epoch: int = 0):  # type: ignore[no-untyped-def]
    from kcoord.protocol.control import encode_marker

    return parse_header(encode_marker(pid, epoch, False, 0, T0, base_offset=base_offset))


def test_sequences_must_follow_on() -> None:
    s = ProducerState(60_000, Clock())
    first = header(0, 3, seq=0)
    assert s.check(first).error_code == 0  # an unknown producer may start anywhere
    s.apply(first)
    assert s.check(header(3, 2, seq=5)).error_code == ErrorCode.out_of_order_sequence_number
    assert s.check(header(3, 2, seq=1)).error_code == ErrorCode.out_of_order_sequence_number
    nxt = header(3, 2, seq=3)
    assert s.check(nxt).error_code == 0
    s.apply(nxt)
    dup = s.check(header(99, 3, seq=0))  # a retry of the first batch
    assert dup.duplicate_of == 0 and dup.error_code == 0
    assert s.check(header(99, 2, seq=3)).duplicate_of == 3


def test_an_unknown_producer_may_start_at_any_sequence() -> None:
    s = ProducerState(60_000, Clock())
    assert s.check(header(0, seq=1234)).error_code == 0


def test_sequence_wraps_after_int32_max() -> None:
    s = ProducerState(60_000, Clock())
    s.apply(header(0, 1, seq=2**31 - 1))
    assert s.check(header(1, 1, seq=0)).error_code == 0


def test_epochs() -> None:
    s = ProducerState(60_000, Clock())
    s.apply(header(0, 2, epoch=3, seq=0))
    older = s.check(header(2, epoch=2, seq=2))
    assert older.error_code == ErrorCode.invalid_producer_epoch
    assert s.check(header(2, epoch=4, seq=5)).error_code == ErrorCode.out_of_order_sequence_number
    assert s.check(header(2, epoch=4, seq=0)).error_code == 0  # a new epoch starts at 0
    s.apply(header(2, epoch=4, seq=0))
    assert s.check(header(3, epoch=3, seq=2)).error_code == ErrorCode.invalid_producer_epoch


def test_a_transaction_holds_the_last_stable_offset_until_its_marker() -> None:
    s = ProducerState(60_000, Clock())
    s.apply(header(0, 2, pid=1, seq=0))  # plain idempotent: no transaction
    assert s.last_stable_offset(2) == 2
    s.apply(header(2, 2, pid=2, seq=0, txn=True))
    s.apply(header(4, 1, pid=3, seq=0, txn=True))
    s.apply(header(5, 1, pid=2, seq=2, txn=True))
    assert s.last_stable_offset(6) == 2
    assert [(p, f) for p, f, _ in s.open_transactions()] == [(2, 2), (3, 4)]
    # producer 2 has an open transaction: a plain batch from it is refused
    assert s.check(header(6, pid=2, seq=3)).error_code == ErrorCode.invalid_txn_state
    done = s.apply(marker_header(6, pid=2), (True, 0))
    assert done is not None and (done.first_offset, done.last_offset, done.aborted) == (2, 6, False)
    assert s.last_stable_offset(6) == 2  # the marker at 6 is not below the high watermark yet
    assert s.last_stable_offset(7) == 4  # now it is: producer 3's transaction holds it
    done = s.apply(marker_header(7, pid=3), (False, 0))
    assert done is not None and done.aborted and done.first_offset == 4
    assert s.last_stable_offset(8) == 8
    assert s.open_transactions() == []
    assert s.apply(marker_header(8, pid=3), (False, 0)) is None  # nothing open: no transaction


def test_markers_fence_older_epochs_and_coordinators() -> None:
    s = ProducerState(60_000, Clock())
    s.apply(header(0, pid=5, epoch=1, seq=0, txn=True))
    assert s.check_marker(5, 0, 0).error_code == ErrorCode.invalid_producer_epoch
    assert s.check_marker(5, 2, 0).error_code == 0
    s.apply(marker_header(1, pid=5, epoch=2), (False, 3))  # the coordinator bumped the epoch
    assert s.check(header(2, pid=5, epoch=1, seq=1, txn=True)).error_code == (
        ErrorCode.invalid_producer_epoch  # the zombie is fenced
    )
    assert s.check_marker(5, 2, 2).error_code == ErrorCode.transaction_coordinator_fenced
    info = {p.producer_id: p for p in s.producers()}[5]
    assert (info.producer_epoch, info.coordinator_epoch, info.txn_start_offset) == (2, 3, -1)


def test_open_transactions_survive_expiry() -> None:
    clock = Clock()
    s = ProducerState(1_000, clock)
    s.apply(header(0, pid=1, seq=0, txn=True))
    s.apply(header(1, pid=2, seq=0))
    clock.now += 5_000
    assert s.expire() == 1
    assert [p.producer_id for p in s.producers()] == [1]


def test_snapshot_restores_the_same_state() -> None:
    clock = Clock()
    s = ProducerState(60_000, clock)
    for i in range(7):
        s.apply(header(i * 2, 2, pid=1, seq=i * 2))
    s.apply(header(14, 1, pid=2, epoch=3, seq=0, txn=True))
    s.apply(marker_header(15, pid=4, epoch=1), (True, 9))
    s.apply(header(16, 1, pid=5, seq=0, txn=True))
    blob = s.snapshot()
    t = ProducerState(60_000, clock)
    t.restore(blob)
    assert t.offset == s.offset == 17
    assert list(t.producers()) == list(s.producers())
    assert t.open_transactions() == s.open_transactions()
    assert t.last_stable_offset(17) == 14
    assert t.find(1, 0, 12, 13) == 12 and t.find(1, 0, 2, 3) is None  # the last five only
    for bad in (blob[:-1], blob[:10] + bytes([blob[10] ^ 1]) + blob[11:], b""):
        with pytest.raises(CorruptSnapshot):
            ProducerState(60_000, clock).restore(bad)


def test_recording_an_abort_does_not_release_a_marker_not_yet_durable() -> None:
    s = ProducerState(60_000, Clock())
    s.apply(header(0, pid=1, seq=0, txn=True))
    s.apply(header(1, pid=2, seq=0, txn=True))
    s.apply(marker_header(2, pid=1), (True, 0))
    s.apply(marker_header(3, pid=2), (False, 0))
    assert s.stable_offset_at(4) == 4  # what the abort's index entry records
    assert s.last_stable_offset(2) == 0  # the high watermark is still below both markers
    assert s.last_stable_offset(3) == 1
    assert s.last_stable_offset(4) == 4
