"""Combining share-state writes: the state the share coordinator holds after a write.

A :class:`~share.model.StateWrite` names only the runs that changed; the share coordinator keeps
the whole picture (:class:`~share.model.PersistedState`). :func:`apply_write` lays the written
runs over the held ones (a written offset takes the written state), drops everything below the
new start offset, and joins neighbouring runs of equal state and delivery count, so that the
result is sorted, without overlaps, and as short as the states allow. The share partition's
tests replay its writes through it; the share coordinator's shard applies every write with it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from kcoord.share.model import PersistedState, StateBatch, StateWrite


def apply_write(state: PersistedState, write: StateWrite) -> PersistedState:
    """``state`` after ``write`` (module docstring)."""
    start = write.start_offset if write.start_offset >= 0 else state.start_offset
    runs = _overlay(state.batches, write.batches)
    return replace(state, start_offset=start, batches=tuple(_joined(_from(runs, start))))


def _overlay(held: Iterable[StateBatch], written: Iterable[StateBatch]) -> list[StateBatch]:
    """The held runs with every written run laid over them (a later written run over an
    earlier one where they overlap), sorted by first offset."""
    runs = list(held)
    for new in written:
        kept: list[StateBatch] = []
        for run in runs:
            if run.last_offset < new.first_offset or run.first_offset > new.last_offset:
                kept.append(run)
                continue
            if run.first_offset < new.first_offset:
                kept.append(replace(run, last_offset=new.first_offset - 1))
            if run.last_offset > new.last_offset:
                kept.append(replace(run, first_offset=new.last_offset + 1))
        kept.append(new)
        runs = sorted(kept, key=lambda b: b.first_offset)
    return runs


def _from(runs: Iterable[StateBatch], start: int) -> Iterable[StateBatch]:
    """The parts of ``runs`` at or past ``start``."""
    for run in runs:
        if run.last_offset < start:
            continue
        yield run if run.first_offset >= start else replace(run, first_offset=start)


def _joined(runs: Iterable[StateBatch]) -> list[StateBatch]:
    """Neighbouring runs of the same state and delivery count as one."""
    out: list[StateBatch] = []
    for run in runs:
        if out:
            last = out[-1]
            if (
                last.last_offset + 1 == run.first_offset
                and last.delivery_state == run.delivery_state
                and last.delivery_count == run.delivery_count
            ):
                out[-1] = replace(last, last_offset=run.last_offset)
                continue
        out.append(run)
    return out
