"""The transactional side of a partition log: producer state kept with the log, snapshots at
segment rolls, the aborted-transaction indexes and the last stable offset.

:class:`TxnLogMixin` is mixed into ``storage.log.PartitionLog`` (like ``storage.cleaning`` and
``storage.retention``) and owns the log's :class:`~storage.producer_state.ProducerState`:

* every batch the log appends is applied to it (:meth:`TxnLogMixin._txn_appended`); an ABORT
  marker that ends a transaction adds an entry to the ``.txnindex`` of the segment holding it;
* when a segment is sealed (a roll) the state is written to ``<offset>.snapshot`` (the offset
  up to which it accounts for the log, as Kafka's producer snapshots are named) and the sealed
  segment gets its ``.txnindex`` (empty if nothing was aborted in it): every sealed segment has
  one, so a missing one is known to be lost;
* a clean close writes one more snapshot, at the log end;
* at open (:meth:`TxnLogMixin._txn_recover`) the newest readable snapshot at or below the log
  end -- and at or below the earliest sealed segment recovery had to scan or that lacks its
  ``.txnindex`` -- is loaded and the batches after it are replayed, headers only (markers read
  whole); the ``.txnindex`` of every segment the replay covers is rebuilt from it (the entries
  before the snapshot's offset were made durable before the snapshot was written: rolls and
  replays snapshot at a segment's base, a close after its flush). After a clean close nothing
  is replayed; after a crash, the active segment's batches since its roll; a log without
  snapshots (written before this existed) is replayed whole once, and a snapshot is written
  when the replay reaches the active segment;
* retention deletes snapshots below the new first segment (keeping the newest of them), a
  truncation deletes those above the new end and rebuilds the state.

Plain blocking file I/O on the writer thread, as the rest of the log.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import threading
import time
from bisect import bisect_right
from collections.abc import Callable, Sequence
from pathlib import Path

from kcoord.protocol.batch import BatchHeader, CorruptBatch
from kcoord.protocol.control import decode_marker
from kcoord.protocol.records import decode_batch
from kcoord.storage.files import describe_error, write_file
from kcoord.storage.producer_state import CorruptSnapshot, ProducerState
from kcoord.storage.segment import Segment
from kcoord.storage.txn_index import AbortedTxn

log = logging.getLogger("kcoord.storage")

SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOT_FILE = re.compile(r"^(\d{20})\.snapshot$")
DEFAULT_PRODUCER_EXPIRATION_MS = 86_400_000  # Kafka's producer.id.expiration.ms


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


def marker_of(batch: bytes | memoryview) -> tuple[bool, int] | None:
    """(commit, coordinator epoch) of a control batch holding a transaction marker."""
    try:
        records = decode_batch(batch, verify_crc=False).records
    except CorruptBatch:
        return None
    if not records:
        return None
    marker = decode_marker(records[0].key, records[0].value)
    return None if marker is None else (marker.commit, marker.coordinator_epoch)


def snapshot_path(directory: Path, offset: int) -> Path:
    return directory / f"{offset:020d}{SNAPSHOT_SUFFIX}"


def snapshot_offsets(directory: Path) -> list[int]:
    out = []
    for entry in os.listdir(directory):
        m = SNAPSHOT_FILE.match(entry)
        if m:
            out.append(int(m.group(1)))
    return sorted(out)


class TxnLogMixin:
    """Producer state, snapshots, ``.txnindex`` upkeep and the LSO of ``PartitionLog``."""

    _path: Path
    _segments: list[Segment]
    _bases: list[int]
    _lock: threading.Lock
    _fsync: bool
    _dir_dirty: bool
    _flushed_offset: int
    _producers: ProducerState
    _sealed_pending: list[Segment]

    def _txn_init(self, expiration_ms: int, clock: Callable[[], int] | None) -> None:
        self._producers = ProducerState(expiration_ms, clock or wall_clock_ms)
        self._sealed_pending = []

    @property
    def producer_state(self) -> ProducerState:
        return self._producers

    # -- reading ---------------------------------------------------------------------------

    def last_stable_offset(self, high_watermark: int) -> int:
        """The first offset of the earliest open transaction, else ``high_watermark``."""
        return self._producers.last_stable_offset(high_watermark)

    def aborted_transactions(self, start: int, upper: int) -> list[AbortedTxn]:
        """The aborted transactions that overlap [start, upper): marker at or after ``start``,
        first offset below ``upper``."""
        out: list[AbortedTxn] = []
        i = max(bisect_right(self._bases, start) - 1, 0)
        for seg in list(self._segments[i:]):
            for e in seg.txn_index.entries():
                if e.last_offset >= start and e.first_offset < upper:
                    out.append(e)
                if e.last_stable_offset >= upper:
                    return out  # every later abort began at or after upper (Kafka's rule)
        return out

    # -- appending and rolling ----------------------------------------------------------------

    def _txn_appended(self, buf: bytearray, assigned: Sequence[tuple[int, BatchHeader]]) -> None:
        """Account for batches just appended (``assigned``: position in ``buf``, header)."""
        self._txn_after_roll()
        state = self._producers
        state.forget_ended(self._flushed_offset)  # bounded even if nobody asks for the LSO
        for pos, h in assigned:
            if h.producer_id < 0:
                state.offset = h.next_offset
                continue
            marker = marker_of(memoryview(buf)[pos : pos + h.size]) if h.is_control else None
            done = state.apply(h, marker)
            if done is not None and done.aborted:
                seg = self._segments[bisect_right(self._bases, h.base_offset) - 1]
                entry = AbortedTxn(
                    done.producer_id,
                    done.first_offset,
                    done.last_offset,
                    state.stable_offset_at(h.next_offset),
                )
                try:
                    seg.txn_index.append(entry)
                except OSError as e:  # kept in memory; rewritten at the segment's next sync
                    log.error("%s: writing %s failed: %s", self._path.name,
                              seg.txn_index.path.name, describe_error(e))

    def _txn_after_roll(self) -> None:
        """After a roll: the state's snapshot, and a ``.txnindex`` for each sealed segment."""
        sealed, self._sealed_pending = self._sealed_pending, []
        if not sealed:
            return
        try:
            for seg in sealed:
                seg.txn_index.ensure_file()
                if self._fsync:
                    seg.txn_index.sync()  # durable before the snapshot that relies on it
            self._write_snapshot()
        except OSError as e:
            log.warning("%s: producer snapshot at a roll failed: %s (rebuilt from the log"
                        " at the next start)", self._path.name, describe_error(e))

    def _snapshot_quietly(self) -> None:
        try:
            self._write_snapshot()
        except OSError as e:
            log.warning("%s: writing a producer snapshot failed: %s", self._path.name,
                        describe_error(e))

    def _write_snapshot(self) -> None:
        state = self._producers
        write_file(snapshot_path(self._path, state.offset), state.snapshot(),
                   fsync=self._fsync, atomic=True)
        self._prune_snapshots()

    def _prune_snapshots(self) -> None:
        """Keep, per segment, the snapshot nearest its base (a rebuild of its ``.txnindex``
        starts there), and the newest one; delete the rest (earlier clean closes)."""
        offsets = snapshot_offsets(self._path)
        keep = set(offsets[-1:])
        seen: set[int] = set()
        for offset in offsets:
            segment = bisect_right(self._bases, offset)
            if segment not in seen:
                seen.add(segment)
                keep.add(offset)
        for offset in offsets:
            if offset not in keep:
                with contextlib.suppress(FileNotFoundError):
                    snapshot_path(self._path, offset).unlink()

    def _txn_closing(self) -> None:
        """A clean close: the state at the log end as a snapshot, so that the next start
        replays nothing. Not fsynced: a torn one is detected and an older one replayed from."""
        state = self._producers
        if not self._segments or state.offset != self._segments[-1].next_offset:
            return
        path = snapshot_path(self._path, state.offset)
        if path.exists():
            return  # nothing appended since the last one
        try:
            write_file(path, state.snapshot(), fsync=False, atomic=True)
            self._prune_snapshots()
        except OSError as e:
            log.warning("%s: producer snapshot at close failed: %s", self._path.name,
                        describe_error(e))

    def _txn_discard_rolls(self) -> None:
        """An append failed: the segments it sealed are active again (or deleted)."""
        self._sealed_pending = []

    # -- deleting ------------------------------------------------------------------------------

    def _txn_segments_deleted(self) -> None:
        """Delete the snapshots below the first segment, except the newest of them."""
        first = self._bases[0] if self._bases else 0
        below = [o for o in snapshot_offsets(self._path) if o < first]
        for offset in below[:-1]:
            with contextlib.suppress(FileNotFoundError):
                snapshot_path(self._path, offset).unlink()

    def _txn_truncated(self, offset: int) -> None:
        """The log was cut to ``offset``: later snapshots go and the state is rebuilt."""
        for o in snapshot_offsets(self._path):
            if o > offset:
                with contextlib.suppress(FileNotFoundError):
                    snapshot_path(self._path, o).unlink()
        self._txn_recover()

    # -- recovery -------------------------------------------------------------------------------

    def _txn_recover(self) -> None:
        """Rebuild the producer state and the ``.txnindex`` files that need it (module
        docstring)."""
        segments = self._segments
        if not segments:
            return
        end = segments[-1].next_offset
        first_base = segments[0].base_offset
        need = end  # a snapshot at or below the first segment whose .txnindex is rebuilt
        for seg in segments[:-1]:
            if seg.recovered or not seg.txn_index.path.exists():
                need = min(need, seg.base_offset)
                break
        state = self._producers
        start = first_base
        state.reset(first_base)
        for offset in reversed(snapshot_offsets(self._path)):
            path = snapshot_path(self._path, offset)
            if offset > end:
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
                continue
            if offset > need:
                continue
            try:
                state.restore(path.read_bytes())
            except (OSError, CorruptSnapshot) as e:
                log.warning("%s: producer snapshot %s unreadable (%s); using an older one",
                            self._path.name, path.name, e)
                with contextlib.suppress(OSError):
                    path.unlink()
                state.reset(first_base)
                continue
            start = max(offset, first_base)
            break
        self._replay(start)
        for seg in segments:
            seg.recovered = False  # rebuilt: a later rebuild (a truncation) need not redo it

    def _replay(self, start: int) -> None:
        state = self._producers
        active = self._segments[-1]
        for seg in self._segments:
            if seg is active and start < seg.base_offset:
                self._snapshot_quietly()  # the next start replays the active segment only
            if seg.next_offset <= start or seg.size == 0:
                if seg.next_offset > start or seg is self._segments[-1]:
                    self._rebuild_index(seg, start, [])
                continue
            pos = 0 if start <= seg.base_offset else seg.find(start)
            found: list[AbortedTxn] = []
            if pos is not None:
                for at, h in seg.walk_headers(pos, seg.size):
                    if h.base_offset < start:
                        continue
                    if h.producer_id < 0:
                        state.offset = h.next_offset
                        continue
                    marker = marker_of(seg.pread(h.size, at)) if h.is_control else None
                    done = state.apply(h, marker, replay=True)
                    if done is not None and done.aborted:
                        found.append(AbortedTxn(done.producer_id, done.first_offset,
                                                done.last_offset,
                                                state.stable_offset_at(h.next_offset)))
            self._rebuild_index(seg, start, found)
        state.offset = max(state.offset, self._segments[-1].next_offset)

    def _rebuild_index(self, seg: Segment, start: int, found: list[AbortedTxn]) -> None:
        index = seg.txn_index
        present = index.path.exists()
        wanted = [e for e in index.entries() if e.last_offset < start] + found
        if present and wanted == index.entries():
            return
        if not wanted and not present and seg is self._segments[-1]:
            return  # the active segment's index is created with its first entry
        try:
            index.reset(wanted)
        except OSError as e:
            log.warning("%s: rebuilding %s failed, kept in memory: %s", self._path.name,
                        index.path.name, describe_error(e))
