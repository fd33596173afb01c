"""The share partition (kcoord.share.partition) against its rules R1-R9, with a fake clock (plain
integers for ``now_ms``): one test per rule at least, each naming it; the bad acknowledgements
of issue 29, each refused with nothing changed; and a property test: random acquire /
acknowledge / release / expire / log-start / restart sequences keep ``persisted()`` equal to the
replay of every write through ``apply_write``, and the in-flight invariants."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kcoord.protocol.errors import ErrorCode
from kcoord.share.inflight import DONE
from kcoord.share.model import (
    AckType,
    AcquiredRange,
    LogBatch,
    PersistedState,
    RecordState,
    StateBatch,
    StateWrite,
)
from kcoord.share.partition import Acknowledgement, ShareLimits, SharePartition
from kcoord.share.state_merge import apply_write

LOCK = 1000
ACCEPT, RELEASE, REJECT, GAP, RENEW = (
    AckType.ACCEPT,
    AckType.RELEASE,
    AckType.REJECT,
    AckType.GAP,
    AckType.RENEW,
)


def fresh(start: int = 0, max_in_flight: int = 2000, limit: int = 5) -> SharePartition:
    return SharePartition(
        PersistedState(state_epoch=3, start_offset=start), ShareLimits(max_in_flight, limit)
    )


def ack(first: int, last: int, *types: int) -> Acknowledgement:
    return Acknowledgement(first, last, tuple(types))


def batches(*spans: tuple[int, int]) -> list[LogBatch]:
    return [LogBatch(first, last) for first, last in spans]


def snapshot(sp: SharePartition) -> tuple[object, ...]:
    """Everything observable of a share partition."""
    return (
        sp.in_flight_runs(),
        sp.persisted(),
        sp.start_offset,
        sp.end_offset,
        sp.fetch_offset(),
        sp.next_expiry(),
        sp.in_flight(),
        sp.acquired(),
        sp.archived_count(),
    )


def states(sp: SharePartition) -> list[tuple[int, int, RecordState, int, str | None]]:
    return [
        (r.first_offset, r.last_offset, r.state, r.delivery_count, r.member_id)
        for r in sp.in_flight_runs()
    ]


AV, AQ, AK, AR = (
    RecordState.AVAILABLE,
    RecordState.ACQUIRED,
    RecordState.ACKNOWLEDGED,
    RecordState.ARCHIVED,
)


# R1 acquire ----------------------------------------------------------------------------------


def test_r1_acquire_in_offset_order_whole_batches_with_lock_and_delivery_count() -> None:
    """R1: whole log batches until max_records is passed, delivery count 1, locked to the member."""
    sp = fresh()
    assert sp.fetch_offset() == 0
    got = sp.acquire(
        "m1", batches((0, 4), (5, 9), (10, 14)), max_records=6, lock_ms=LOCK, now_ms=100
    )
    assert got == [AcquiredRange(0, 9, 1)]  # two batches: the second passes 6
    assert sp.end_offset == 10
    assert sp.acquired() == 10
    assert sp.next_expiry() == 100 + LOCK
    assert states(sp) == [(0, 9, AQ, 1, "m1")]
    assert sp.fetch_offset() == 10


def test_r1_reacquire_from_first_available_raises_delivery_count() -> None:
    """R1: a released record is acquired again first, its delivery count raised."""
    sp = fresh()
    sp.acquire("m1", batches((0, 9)), 100, LOCK, 0)
    assert sp.acknowledge("m1", [ack(3, 5, RELEASE)], LOCK, 10) == ErrorCode.none
    assert sp.fetch_offset() == 3
    got = sp.acquire("m2", batches((0, 9), (10, 12)), 100, LOCK, 20, read_offset=3)
    assert got == [AcquiredRange(3, 5, 2), AcquiredRange(10, 12, 1)]
    assert states(sp) == [
        (0, 2, AQ, 1, "m1"),
        (3, 5, AQ, 2, "m2"),
        (6, 9, AQ, 1, "m1"),
        (10, 12, AQ, 1, "m2"),
    ]


# R2 not deliverable ---------------------------------------------------------------------------


def test_r2_control_batches_and_compacted_gaps_are_archived_never_acquired() -> None:
    """R2: a non-deliverable batch and the offsets between batches are ARCHIVED at once."""
    sp = fresh()
    log = [LogBatch(2, 4), LogBatch(5, 5, deliverable=False), LogBatch(8, 9)]
    got = sp.acquire("m1", log, 100, LOCK, 0)
    assert got == [AcquiredRange(2, 4, 1), AcquiredRange(8, 9, 1)]
    # 0-1 (before the first batch) and 5-7 archived: the SPSO moves past 0-1 at once.
    assert sp.start_offset == 2
    assert states(sp) == [(2, 4, AQ, 1, "m1"), (5, 7, AR, 0, None), (8, 9, AQ, 1, "m1")]
    assert sp.archived_count() == 5
    write = sp.take_write()
    assert write == StateWrite(2, (StateBatch(5, 7, AR, 0),))


def test_r2_available_offsets_missing_from_the_log_are_archived_from_the_read_offset() -> None:
    """R2: after a restart lost the gap's write, the AVAILABLE offsets the log no longer holds
    (between read_offset and the first batch) are archived instead of read forever."""
    loaded = PersistedState(1, 0, (StateBatch(0, 1, AK, 1), StateBatch(6, 7, AV, 1)))
    sp = SharePartition(loaded, ShareLimits())
    assert sp.start_offset == 2 and sp.fetch_offset() == 2
    got = sp.acquire("m1", batches((4, 7)), 100, LOCK, 0, read_offset=2)
    assert got == [AcquiredRange(4, 5, 1), AcquiredRange(6, 7, 2)]
    assert sp.start_offset == 4


# R3 in-flight limit ---------------------------------------------------------------------------


def test_r3_in_flight_limit_stops_new_records_not_available_ones() -> None:
    """R3: at the limit nothing past the end offset is acquired; AVAILABLE ones still are."""
    sp = fresh(max_in_flight=10)
    sp.acquire("m1", batches((0, 4), (5, 9), (10, 14)), 100, LOCK, 0)
    assert sp.end_offset == 10  # the limit stopped before the third batch
    assert sp.fetch_offset() is None
    assert sp.acquire("m2", batches((10, 14)), 100, LOCK, 1) == []
    sp.acknowledge("m1", [ack(6, 7, RELEASE)], LOCK, 2)
    assert sp.fetch_offset() == 6
    got = sp.acquire("m2", batches((5, 9), (10, 14)), 100, LOCK, 3, read_offset=6)
    assert got == [AcquiredRange(6, 7, 2)]
    assert sp.end_offset == 10
    sp.acknowledge("m1", [ack(0, 4, ACCEPT)], LOCK, 4)  # the SPSO moves: room again
    assert sp.start_offset == 5 and sp.fetch_offset() == 10
    assert sp.acquire("m2", batches((10, 14)), 100, LOCK, 5) == [AcquiredRange(10, 14, 1)]


# R4 acknowledge -------------------------------------------------------------------------------


def test_r4_acknowledge_types_move_records_to_their_states() -> None:
    """R4: ACCEPT -> ACKNOWLEDGED, REJECT/GAP -> ARCHIVED, RELEASE -> AVAILABLE, RENEW keeps
    the lock for another lock_ms from now; per-offset types split the run."""
    sp = fresh()
    sp.acquire("m1", batches((0, 9)), 100, LOCK, 0)
    types = (ACCEPT, ACCEPT, REJECT, GAP, RELEASE, RENEW, RENEW, ACCEPT, RELEASE, RELEASE)
    assert sp.acknowledge("m1", [ack(0, 9, *types)], 5000, 500) == ErrorCode.none
    assert states(sp) == [
        (4, 4, AV, 1, None),
        (5, 6, AQ, 1, "m1"),
        (7, 7, AK, 1, None),
        (8, 9, AV, 1, None),
    ]
    assert sp.start_offset == 4  # R7: past the accepted 0-1 and the archived 2-3
    assert sp.next_expiry() == 5500  # renewed from now (500) by 5000
    assert sp.expire(1000) == 0
    assert sp.in_flight() == 5 and sp.acquired() == 2 and sp.archived_count() == 2


def test_r4_release_at_the_delivery_limit_archives() -> None:
    """R4: RELEASE of a record whose delivery count reached the limit archives it."""
    sp = fresh(limit=2)
    sp.acquire("m1", batches((0, 0)), 1, LOCK, 0)
    sp.acknowledge("m1", [ack(0, 0, RELEASE)], LOCK, 1)
    assert states(sp) == [(0, 0, AV, 1, None)]
    sp.acquire("m1", batches((0, 0)), 1, LOCK, 2, read_offset=0)
    sp.acknowledge("m1", [ack(0, 0, RELEASE)], LOCK, 3)
    assert sp.start_offset == 1 and sp.archived_count() == 1
    assert sp.take_write() == StateWrite(1, ())  # the archived record is below the SPSO


def _held(sp: SharePartition) -> SharePartition:
    """m1 holds 0-9, m2 holds 10-14, 15-19 acknowledged (nothing pending to write)."""
    sp.acquire("m1", batches((0, 9)), 10, LOCK, 0)
    sp.acquire("m2", batches((10, 14), (15, 19)), 10, LOCK, 0)
    sp.acknowledge("m2", [ack(15, 19, ACCEPT)], LOCK, 0)
    sp.take_write()
    return sp


BAD_ACKS = {
    "not acquired (acknowledged)": ("m2", [ack(15, 15, ACCEPT)], ErrorCode.invalid_record_state),
    "held by another member": ("m1", [ack(9, 10, ACCEPT)], ErrorCode.invalid_record_state),
    "below the SPSO": ("m1", [ack(0, 0, ACCEPT)], ErrorCode.invalid_record_state),
    "past the end offset": ("m1", [ack(18, 25, ACCEPT)], ErrorCode.invalid_record_state),
    "never fetched": ("m1", [ack(10**9, 10**9, ACCEPT)], ErrorCode.invalid_record_state),
    "negative offsets": ("m1", [ack(-5, 2, ACCEPT)], ErrorCode.invalid_record_state),
    "a million offsets, one type": (
        "m1",
        [ack(1, 1_000_000, ACCEPT)],
        ErrorCode.invalid_record_state,
    ),
    "a million offsets, one type each": (
        "m1",
        [Acknowledgement(1, 1_000_000, (ACCEPT,) * 1_000_000)],
        ErrorCode.invalid_record_state,
    ),
    "a good batch then a bad one": (
        "m1",
        [ack(1, 2, ACCEPT), ack(12, 12, ACCEPT)],
        ErrorCode.invalid_record_state,
    ),
    "duplicated in one request": (
        "m1",
        [ack(1, 3, ACCEPT), ack(3, 4, ACCEPT)],
        ErrorCode.invalid_request,
    ),
    "unsorted": ("m1", [ack(5, 6, ACCEPT), ack(1, 2, ACCEPT)], ErrorCode.invalid_request),
    "first past last": ("m1", [ack(4, 3, ACCEPT)], ErrorCode.invalid_request),
    "types of the wrong length": ("m1", [ack(1, 4, ACCEPT, ACCEPT)], ErrorCode.invalid_request),
    "no types": ("m1", [ack(1, 4)], ErrorCode.invalid_request),
    "unknown type": ("m1", [ack(1, 2, 7)], ErrorCode.invalid_request),
    "unknown type among many": ("m1", [ack(1, 3, ACCEPT, 5, ACCEPT)], ErrorCode.invalid_request),
}


@pytest.mark.parametrize("case", sorted(BAD_ACKS))
def test_r4_bad_acknowledgements_are_refused_and_change_nothing(case: str) -> None:
    """R4: each bad acknowledgement of issue 29 gets its error code and nothing changes."""
    sp = _held(fresh())
    sp.acknowledge("m1", [ack(0, 0, ACCEPT)], LOCK, 0)  # SPSO 1
    sp.take_write()
    member, acks, code = BAD_ACKS[case]
    before = snapshot(sp)
    assert sp.acknowledge(member, acks, LOCK, 10) == code
    assert snapshot(sp) == before
    assert sp.take_write() is None


def test_r4_duplicated_acknowledgement_is_refused_the_second_time() -> None:
    """R4: acknowledging the same records twice: the second is INVALID_RECORD_STATE."""
    sp = _held(fresh())
    assert sp.acknowledge("m1", [ack(3, 4, REJECT)], LOCK, 1) == ErrorCode.none
    before = snapshot(sp)
    assert sp.acknowledge("m1", [ack(3, 4, ACCEPT)], LOCK, 2) == ErrorCode.invalid_record_state
    assert snapshot(sp) == before


def test_r4_r5_acknowledgement_after_the_lock_expired_is_refused() -> None:
    """R4/R5: once the lock passed (even before the broker's timer ran) the records are not
    held any more: the acknowledgement is refused and the records are AVAILABLE again."""
    sp = _held(fresh())
    assert sp.acknowledge("m1", [ack(0, 9, ACCEPT)], LOCK, LOCK) == ErrorCode.invalid_record_state
    assert states(sp)[0] == (0, 14, AV, 1, None)


# R5 lock expiry -------------------------------------------------------------------------------


def test_r5_lock_expiry_releases_and_archives_at_the_limit() -> None:
    """R5: at its deadline an ACQUIRED record goes back as RELEASE does."""
    sp = fresh(limit=2)
    sp.acquire("m1", batches((0, 4)), 100, LOCK, 0)
    sp.acquire("m2", batches((5, 9)), 100, 2 * LOCK, 0)
    assert sp.next_expiry() == LOCK
    assert sp.expire(LOCK - 1) == 0
    assert sp.expire(LOCK) == 5
    assert states(sp) == [(0, 4, AV, 1, None), (5, 9, AQ, 1, "m2")]
    assert sp.next_expiry() == 2 * LOCK
    sp.acquire("m3", batches((0, 4)), 100, LOCK, LOCK, read_offset=0)
    assert sp.expire(3 * LOCK) == 10
    assert states(sp) == [(5, 9, AV, 1, None)]  # 0-4 reached the limit: archived, SPSO moved
    assert sp.start_offset == 5 and sp.archived_count() == 5
    assert sp.next_expiry() is None


def test_r5_renewed_lock_does_not_expire_at_the_old_deadline() -> None:
    """R5/R4: RENEW moves the deadline; the old one passing releases nothing."""
    sp = fresh()
    sp.acquire("m1", batches((0, 4)), 100, LOCK, 0)
    sp.acknowledge("m1", [ack(0, 4, RENEW)], LOCK, 900)
    assert sp.next_expiry() == 1900
    assert sp.expire(1000) == 0 and sp.acquired() == 5
    assert sp.take_write() is None  # renewing persists nothing
    assert sp.expire(1900) == 5


# R6 member gone -------------------------------------------------------------------------------


def test_r6_release_member_releases_only_its_records() -> None:
    """R6: release_member releases what that member holds, as RELEASE."""
    sp = _held(fresh())
    assert sp.release_member("m2", 5) == 5
    assert states(sp) == [(0, 9, AQ, 1, "m1"), (10, 14, AV, 1, None), (15, 19, AK, 1, None)]
    assert sp.release_member("nobody", 6) == 0
    assert sp.fetch_offset() == 10


# R7 start offset ------------------------------------------------------------------------------


def test_r7_start_offset_moves_past_leading_done_records_only() -> None:
    """R7: the SPSO moves past leading ACKNOWLEDGED/ARCHIVED records, stops at any other."""
    sp = fresh(start=100)
    sp.acquire("m1", batches((100, 109)), 100, LOCK, 0)
    sp.acknowledge("m1", [ack(102, 105, ACCEPT)], LOCK, 1)
    assert sp.start_offset == 100
    sp.acknowledge("m1", [ack(100, 101, REJECT)], LOCK, 2)
    assert sp.start_offset == 106
    sp.acknowledge("m1", [ack(106, 109, ACCEPT)], LOCK, 3)
    assert sp.start_offset == 110 == sp.end_offset
    assert sp.in_flight() == 0 and sp.in_flight_runs() == ()
    assert sp.take_write() == StateWrite(110, ())


# R8 persistence -------------------------------------------------------------------------------


def test_r8_acquiring_writes_nothing_and_persists_as_before_the_acquisition() -> None:
    """R8: ACQUIRED is not written; persisted() shows it AVAILABLE with the delivery count it
    had before (nothing at all for a first delivery); the state epoch is carried."""
    sp = fresh()
    sp.acquire("m1", batches((0, 4)), 100, LOCK, 0)
    assert sp.take_write() is None
    assert sp.persisted() == PersistedState(3, 0, ())
    sp.acknowledge("m1", [ack(0, 4, RELEASE)], LOCK, 1)
    assert sp.take_write() == StateWrite(0, (StateBatch(0, 4, AV, 1),))
    sp.acquire("m2", batches((0, 4)), 100, LOCK, 2, read_offset=0)
    assert sp.take_write() is None
    assert sp.persisted() == PersistedState(3, 0, (StateBatch(0, 4, AV, 1),))
    assert sp.state_epoch == 3


def test_r8_restart_loads_counts_and_done_runs() -> None:
    """R8: a restart from persisted(): AVAILABLE runs keep their delivery count (raised by the
    next acquisition), done runs stay done, acquired records come back AVAILABLE."""
    sp = fresh()
    sp.acquire("m1", batches((0, 9)), 100, LOCK, 0)
    sp.acknowledge("m1", [ack(3, 4, ACCEPT), ack(5, 5, RELEASE), ack(6, 6, REJECT)], LOCK, 1)
    sp.acquire("m1", batches((5, 9)), 100, LOCK, 2, read_offset=5)
    state = sp.persisted()
    assert state.batches == (
        StateBatch(3, 4, AK, 1),
        StateBatch(5, 5, AV, 1),
        StateBatch(6, 6, AR, 1),
    )
    again = SharePartition(state, ShareLimits())
    assert again.persisted() == state
    assert again.end_offset == 7 and again.fetch_offset() == 0
    got = again.acquire("m2", batches((0, 9)), 100, LOCK, 3, read_offset=0)
    assert got == [AcquiredRange(0, 2, 1), AcquiredRange(5, 5, 2), AcquiredRange(7, 9, 1)]


def test_r8_loaded_available_record_at_the_delivery_limit_is_archived_not_delivered() -> None:
    """R8/R4: a record loaded AVAILABLE with a delivery count at the limit is archived when read."""
    sp = SharePartition(
        PersistedState(0, 0, (StateBatch(0, 1, AV, 5),)), ShareLimits(delivery_count_limit=5)
    )
    assert sp.acquire("m1", batches((0, 3)), 100, LOCK, 0, read_offset=0) == [
        AcquiredRange(2, 3, 1)
    ]
    assert sp.start_offset == 2
    assert sp.take_write() == StateWrite(2, ())


def test_r8_unresolved_start_offset_is_refused() -> None:
    """R8: the broker resolves an unknown SPSO (-1) before loading."""
    with pytest.raises(ValueError):
        SharePartition(PersistedState(0, -1), ShareLimits())


# R9 log start ---------------------------------------------------------------------------------


def test_r9_advance_start_archives_and_forgets_offsets_below_the_log_start() -> None:
    """R9: offsets below the new log start are forgotten (the undone ones counted archived);
    past the end offset, the end moves too."""
    sp = _held(fresh())
    sp.advance_start(12)
    assert sp.start_offset == 12 and sp.archived_count() == 12
    assert states(sp) == [(12, 14, AQ, 1, "m2"), (15, 19, AK, 1, None)]
    assert sp.acknowledge("m1", [ack(3, 3, ACCEPT)], LOCK, 1) == ErrorCode.invalid_record_state
    assert sp.take_write() == StateWrite(12, ())
    sp.advance_start(5)  # backwards: nothing
    assert sp.take_write() is None
    sp.advance_start(30)
    assert sp.start_offset == sp.end_offset == 30 and sp.fetch_offset() == 30
    assert sp.next_expiry() is None


# Property: the state is its replay -----------------------------------------------------------


@st.composite
def logs(draw: st.DrawFn) -> list[LogBatch]:
    out: list[LogBatch] = []
    at = 0
    for _ in range(draw(st.integers(3, 12))):
        at += draw(st.sampled_from([0, 0, 0, 1, 2]))  # a compacted gap now and then
        size = draw(st.integers(1, 5))
        out.append(
            LogBatch(
                at, at + size - 1, deliverable=draw(st.sampled_from([True, True, True, False]))
            )
        )
        at += size
    return out


MEMBERS = ("m1", "m2", "m3")
steps = st.lists(
    st.one_of(
        st.tuples(st.just("acquire"), st.sampled_from(MEMBERS), st.integers(1, 8)),
        st.tuples(st.just("ack"), st.sampled_from(MEMBERS), st.integers(0, 2**16)),
        st.tuples(st.just("release"), st.sampled_from(MEMBERS)),
        st.tuples(st.just("tick"), st.integers(0, 2 * LOCK)),
        st.tuples(st.just("take")),
        st.tuples(st.just("restart"), st.booleans()),
        st.tuples(st.just("log_start"), st.integers(0, 6)),
    ),
    max_size=40,
)


def check_invariants(sp: SharePartition, limits: ShareLimits, largest_batch: int) -> None:
    runs = sp.in_flight_runs()
    assert sp.start_offset <= sp.end_offset
    at = sp.start_offset
    for run in runs:
        assert run.first_offset == at <= run.last_offset
        at = run.last_offset + 1
        assert (
            (run.state == AQ) == (run.member_id is not None) == (run.lock_deadline_ms is not None)
        )
        assert 0 <= run.delivery_count <= limits.delivery_count_limit
        if run.state == AQ:
            assert run.delivery_count >= 1
    assert at == sp.end_offset
    assert not runs or runs[0].state not in DONE  # R7
    size = {
        s: sum(r.last_offset - r.first_offset + 1 for r in runs if r.state == s)
        for s in RecordState
    }
    assert sp.acquired() == size[AQ]
    assert sp.in_flight() == size[AQ] + size[AV]
    assert sp.end_offset - sp.start_offset < limits.max_in_flight + largest_batch + 2
    expiries = [r.lock_deadline_ms for r in runs if r.lock_deadline_ms is not None]
    assert sp.next_expiry() == (min(expiries) if expiries else None)


def per_offset(sp: SharePartition) -> dict[int, tuple[RecordState, int]]:
    return {
        o: (r.state, r.delivery_count)
        for r in sp.in_flight_runs()
        for o in range(r.first_offset, r.last_offset + 1)
    }


def check_acknowledged(
    sp: SharePartition,
    acks: list[Acknowledgement],
    counts: dict[int, int],
    limits: ShareLimits,
    now: int,
) -> None:
    """R4: each acknowledged offset (still in flight) is in the state its type leads to."""
    runs = sp.in_flight_runs()
    for a in acks:
        for offset in range(max(a.first_offset, sp.start_offset), a.last_offset + 1):
            kind = a.types[0] if len(a.types) == 1 else a.types[offset - a.first_offset]
            run = next(r for r in runs if r.first_offset <= offset <= r.last_offset)
            assert run.delivery_count == counts[offset]
            if kind == ACCEPT:
                assert run.state == AK
            elif kind == RENEW:
                assert run.state == AQ and run.lock_deadline_ms == now + LOCK
            elif kind == RELEASE and counts[offset] < limits.delivery_count_limit:
                assert run.state == AV
            else:
                assert run.state == AR


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(log=logs(), script=steps, data=st.data())
def test_r8_property_state_is_the_replay_of_its_writes(
    log: list[LogBatch], script: list[tuple], data: st.DataObject
) -> None:
    """R1-R9, R8 above all: random acquire / acknowledge (random types, some invalid) /
    release_member / expire / restart / advance_start sequences keep persisted() equal to the
    replay of every take_write() through apply_write, and the in-flight invariants; a refused
    acknowledgement changes nothing."""
    limits = ShareLimits(max_in_flight=12, delivery_count_limit=3)
    largest = max(b.last_offset - b.base_offset + 1 for b in log)
    replayed = PersistedState(state_epoch=1, start_offset=0)
    sp = SharePartition(replayed, limits)
    now = 0
    done: dict[int, RecordState] = {}

    def take() -> None:
        nonlocal replayed
        write = sp.take_write()
        if write is not None:
            replayed = apply_write(replayed, write)
        assert sp.persisted() == replayed

    for step in script:
        kind = step[0]
        if kind == "acquire":
            offset = sp.fetch_offset()
            if offset is not None:
                read = [b for b in log if b.last_offset >= offset][:3]
                got = sp.acquire(step[1], read, step[2], LOCK, now, read_offset=offset)
                for taken in got:  # R2: only deliverable batches' records are handed out
                    assert all(
                        b.deliverable
                        for b in read
                        if b.base_offset <= taken.first_offset <= b.last_offset
                    )
        elif kind == "ack":
            sp.expire(now)  # so that a refusal must leave everything as it is
            held = [r for r in sp.in_flight_runs() if r.state == AQ and r.member_id == step[1]]
            acks: list[Acknowledgement] = []
            for r in held:
                first = data.draw(st.integers(r.first_offset, r.last_offset))
                last = data.draw(st.integers(first, r.last_offset))
                types: tuple[int, ...]
                if data.draw(st.booleans()):
                    types = (data.draw(st.sampled_from(list(AckType))),)
                else:
                    types = tuple(
                        data.draw(st.sampled_from(list(AckType))) for _ in range(last - first + 1)
                    )
                acks.append(Acknowledgement(first, last, types))
            if data.draw(st.integers(0, 4)) == 0:  # sometimes a range it does not hold
                first = data.draw(st.integers(-2, sp.end_offset + 2))
                acks.append(Acknowledgement(first, first + data.draw(st.integers(0, 3)), (ACCEPT,)))
                acks.sort(key=lambda a: a.first_offset)
            before = snapshot(sp)
            counts = {o: c for o, (_, c) in per_offset(sp).items()}
            code = sp.acknowledge(step[1], acks, LOCK, now)
            if code != ErrorCode.none:
                assert snapshot(sp) == before
            else:
                check_acknowledged(sp, acks, counts, limits, now)
        elif kind == "release":
            sp.release_member(step[1], now)
        elif kind == "tick":
            now += step[1]
            sp.expire(now)
        elif kind == "take":
            take()
        elif kind == "restart":
            if step[1]:
                take()
            sp = SharePartition(replayed, limits)  # what was not taken is lost
            if not step[1]:
                done.clear()  # done but not written: may come back
            assert sp.persisted() == replayed
        elif kind == "log_start":
            sp.advance_start(sp.start_offset + step[1])
        check_invariants(sp, limits, largest)
        now_offsets = per_offset(sp)
        for offset, state in list(done.items()):  # done records stay done while in flight
            if offset >= sp.start_offset:
                assert now_offsets[offset][0] == state
        done.update({o: st_ for o, (st_, _) in now_offsets.items() if st_ in DONE})
    take()
