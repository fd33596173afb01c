"""Which transactional batches of a ``__consumer_offsets`` segment were committed.

A TxnOffsetCommit writes its offset records in a transactional batch of its producer; they
count only once that producer's next COMMIT marker follows them in the partition, and never
if the next marker is an ABORT or none was written (the coordinator keeps them pending, so no
reader may show them). The marker is usually in the same segment, but may be in a later one:
:class:`TxnOutcomes` finds it, reading batch headers (and only the markers' bodies) of this
segment and, for producers still unresolved, of the partition's later segments (up to the
run's snapshot: a marker written since does not count). Nothing is read for a segment without
transactional batches.

:func:`resolve` is the rule itself, over any run of batches: the PostgreSQL source
(``pipeline.postgres``) feeds it rows instead of segment files.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from kcoord.protocol.batch import HEADER_SIZE, BatchHeader
from kcoord.protocol.control import decode_marker
from kcoord.protocol.key_values import decode_key_values

from . import fs
from .logs import SegmentRef, _walk_headers, list_segments, read_end


def _markers_and_txns(
    ref: SegmentRef, wanted: set[int] | None
) -> tuple[list[tuple[int, int]], list[tuple[int, int, bool]]]:
    """(producer id, base offset) of the transactional data batches and (producer id,
    offset, commit) of the markers of one segment, in order (``wanted``: only those
    producers' markers, and no data batches)."""
    txns: list[tuple[int, int]] = []
    markers: list[tuple[int, int, bool]] = []
    try:
        f = fs.open_read(ref.uri)
    except FileNotFoundError:
        return txns, markers
    try:
        for pos, h in _walk_headers(f, 0, read_end(ref, f)):
            if not h.is_transactional:
                continue
            if not h.is_control:
                if wanted is None:
                    txns.append((h.producer_id, h.base_offset))
                continue
            if wanted is not None and h.producer_id not in wanted:
                continue
            commit = marker_commit(h, f.read_at(pos, h.size))
            if commit is not None:
                markers.append((h.producer_id, h.base_offset, commit))
    finally:
        f.close()
    return txns, markers


def marker_commit(h: BatchHeader, data: bytes | memoryview) -> bool | None:
    """Whether the control batch ``data`` (header ``h``) is a COMMIT marker (False: ABORT),
    or None if it holds no marker."""
    try:
        pairs = decode_key_values(h, memoryview(data)[HEADER_SIZE:])
    except ValueError:
        return None
    for key, value in pairs:
        marker = decode_marker(key, value)
        if marker is not None:
            return marker.commit
    return None


Markers = Iterable[tuple[int, int, bool]]


def resolve(
    txns: list[tuple[int, int]],
    markers: list[tuple[int, int, bool]],
    later: Callable[[set[int]], Markers],
) -> dict[int, bool]:
    """Base offset of each transactional data batch of a run of batches -> whether it was
    committed. ``txns``: (producer id, base offset) of the run's transactional data batches;
    ``markers``: (producer id, offset, commit) of its markers; ``later(producers)``: the
    markers of those producers after the run, in offset order (read only as far as needed)."""
    result: dict[int, bool] = {}
    unresolved: dict[int, list[int]] = {}
    for pid, base in txns:
        commit = next((c for p, off, c in markers if p == pid and off > base), None)
        if commit is None:
            unresolved.setdefault(pid, []).append(base)
        else:
            result[base] = commit
    if unresolved:
        found = iter(later(set(unresolved)))
        try:
            for pid, _off, commit in found:
                for base in unresolved.pop(pid, ()):
                    result[base] = commit
                if not unresolved:
                    break
        finally:
            close = getattr(found, "close", None)
            if close is not None:
                close()
    for bases in unresolved.values():  # still open: pending, not visible
        for base in bases:
            result[base] = False
    return result


def outcomes(ref: SegmentRef) -> dict[int, bool]:
    """Base offset of each transactional data batch of ``ref`` -> whether it was committed."""
    txns, markers = _markers_and_txns(ref, None)

    def later(wanted: set[int]) -> Iterator[tuple[int, int, bool]]:
        for seg in list_segments(ref.data_dir, ref.dirname, ref.log_partition, ref.end)[0]:
            if seg.base_offset > ref.base_offset:
                yield from _markers_and_txns(seg, wanted)[1]

    return resolve(txns, markers, later)


class TxnOutcomes:
    """Lazily computed outcomes of one run of batches (``compute``: e.g. :func:`outcomes`
    of a segment), asked only when the run has a transactional batch."""

    __slots__ = ("_compute", "_outcomes")

    def __init__(self, compute: Callable[[], dict[int, bool]]) -> None:
        self._compute = compute
        self._outcomes: dict[int, bool] | None = None

    def committed(self, h: BatchHeader) -> bool:
        if self._outcomes is None:
            self._outcomes = self._compute()
        return self._outcomes.get(h.base_offset, False)
