"""Which transactional batches of a ``__consumer_offsets`` segment were committed.

A TxnOffsetCommit writes its offset records in a transactional batch of its producer; they
count only once that producer's next COMMIT marker follows them in the partition, and never
if the next marker is an ABORT or none was written (the coordinator keeps them pending, so no
reader may show them). The marker is usually in the same segment, but may be in a later one:
:class:`TxnOutcomes` finds it, reading batch headers (and only the markers' bodies) of this
segment and, for producers still unresolved, of the partition's later segments. Nothing is
read for a segment without transactional batches.
"""

from __future__ import annotations

from kcoord.protocol.batch import HEADER_SIZE, BatchHeader
from kcoord.protocol.control import decode_marker
from kcoord.protocol.key_values import decode_key_values

from . import fs
from .logs import SegmentRef, _walk_headers, list_segments


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
        for pos, h in _walk_headers(f, 0, f.size()):
            if not h.is_transactional:
                continue
            if not h.is_control:
                if wanted is None:
                    txns.append((h.producer_id, h.base_offset))
                continue
            if wanted is not None and h.producer_id not in wanted:
                continue
            commit = _marker(h, f.read_at(pos, h.size))
            if commit is not None:
                markers.append((h.producer_id, h.base_offset, commit))
    finally:
        f.close()
    return txns, markers


def _marker(h: BatchHeader, data: bytes) -> bool | None:
    try:
        pairs = decode_key_values(h, memoryview(data)[HEADER_SIZE:])
    except ValueError:
        return None
    for key, value in pairs:
        marker = decode_marker(key, value)
        if marker is not None:
            return marker.commit
    return None


def outcomes(ref: SegmentRef) -> dict[int, bool]:
    """Base offset of each transactional data batch of ``ref`` -> whether it was committed."""
    txns, markers = _markers_and_txns(ref, None)
    result: dict[int, bool] = {}
    unresolved: dict[int, list[int]] = {}
    for pid, base in txns:
        commit = next((c for p, off, c in markers if p == pid and off > base), None)
        if commit is None:
            unresolved.setdefault(pid, []).append(base)
        else:
            result[base] = commit
    if unresolved:
        later, _ = list_segments(ref.data_dir, ref.dirname, ref.log_partition)
        for seg in later:
            if seg.base_offset <= ref.base_offset:
                continue
            _, found = _markers_and_txns(seg, set(unresolved))
            for pid, _off, commit in found:
                for base in unresolved.pop(pid, ()):
                    result[base] = commit
            if not unresolved:
                break
    for bases in unresolved.values():  # still open: pending, not visible
        for base in bases:
            result[base] = False
    return result


class TxnOutcomes:
    """Lazily computed :func:`outcomes` of one segment."""

    __slots__ = ("_outcomes", "_ref")

    def __init__(self, ref: SegmentRef) -> None:
        self._ref = ref
        self._outcomes: dict[int, bool] | None = None

    def committed(self, h: BatchHeader) -> bool:
        if self._outcomes is None:
            self._outcomes = outcomes(self._ref)
        return self._outcomes.get(h.base_offset, False)
