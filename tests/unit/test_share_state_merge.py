"""Unit tests of share/state_merge.py: writes laid over held share state."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kcoord.share.model import PersistedState, StateBatch, StateWrite
from kcoord.share.state_merge import apply_write

ACKED, ARCHIVED, AVAILABLE = 2, 4, 0


def _state(start: int, *batches: StateBatch) -> PersistedState:
    return PersistedState(state_epoch=1, start_offset=start, batches=batches)


def test_a_written_run_replaces_the_middle_of_a_held_one() -> None:
    held = _state(0, StateBatch(0, 9, AVAILABLE, 1))
    out = apply_write(held, StateWrite(0, (StateBatch(3, 5, ACKED, 1),)))
    assert out.batches == (
        StateBatch(0, 2, AVAILABLE, 1),
        StateBatch(3, 5, ACKED, 1),
        StateBatch(6, 9, AVAILABLE, 1),
    )


def test_runs_below_the_new_start_offset_are_dropped_and_cut() -> None:
    held = _state(0, StateBatch(0, 4, ACKED, 1), StateBatch(5, 9, AVAILABLE, 2))
    out = apply_write(held, StateWrite(7, ()))
    assert out.start_offset == 7 and out.batches == (StateBatch(7, 9, AVAILABLE, 2),)


def test_neighbours_of_equal_state_and_count_are_joined() -> None:
    held = _state(0, StateBatch(0, 4, ACKED, 1))
    out = apply_write(held, StateWrite(0, (StateBatch(5, 9, ACKED, 1),)))
    assert out.batches == (StateBatch(0, 9, ACKED, 1),)


def test_start_offset_minus_one_keeps_the_held_one() -> None:
    out = apply_write(_state(3), StateWrite(-1, (StateBatch(3, 3, ARCHIVED, 5),)))
    assert out.start_offset == 3 and out.batches == (StateBatch(3, 3, ARCHIVED, 5),)


_batch = st.builds(
    lambda first, length, state, count: StateBatch(first, first + length, state, count),
    st.integers(0, 40),
    st.integers(0, 6),
    st.sampled_from([AVAILABLE, ACKED, ARCHIVED]),
    st.integers(0, 3),
)


@given(st.lists(st.tuples(st.integers(-1, 30), st.lists(_batch, max_size=4)), max_size=8))
def test_the_result_equals_a_per_offset_replay(writes: list[tuple[int, list[StateBatch]]]) -> None:
    """Laying writes over each other equals keeping one (state, count) per offset."""
    state = _state(0)
    offsets: dict[int, tuple[int, int]] = {}
    start = 0
    for write_start, batches in writes:
        state = apply_write(state, StateWrite(write_start, tuple(batches)))
        for b in batches:
            for o in range(b.first_offset, b.last_offset + 1):
                offsets[o] = (b.delivery_state, b.delivery_count)
        start = write_start if write_start >= 0 else start
        offsets = {o: v for o, v in offsets.items() if o >= start}
    assert state.start_offset == start
    flat = {
        o: (b.delivery_state, b.delivery_count)
        for b in state.batches
        for o in range(b.first_offset, b.last_offset + 1)
    }
    assert flat == offsets
    pairs = zip(state.batches, state.batches[1:], strict=False)
    assert all(a.last_offset < b.first_offset for a, b in pairs)
