"""The compaction side of a partition log: the cleaner's snapshot and the swap of cleaned files.

``storage.compaction`` decides which records to keep; this module only hands a cleaner what it
may read and swaps the files it wrote into the log. :class:`CleaningMixin` is mixed into
``storage.log.PartitionLog`` and works on that log's segment list under the log's locks (the
attributes it relies on are declared on the mixin).

``begin_cleaning`` snapshots the segment list and opens private read-only handles on every
segment (at most one cleaning at a time). The cleaner writes ``<base>.log.cleaned``,
``<base>.index.cleaned`` and ``<base>.timeindex.cleaned`` (complete and fsynced) for groups of
adjacent sealed segments, then ``replace_sealed`` swaps them in on the writer thread. The swap
protocol:

1. rename every ``.cleaned`` file to ``.swap`` and fsync the directory: the commit point;
2. delete the segments being replaced;
3. rename every ``.swap`` file to its final name and fsync the directory.

Each cleaned segment has the base offset of the first segment of its group and holds a subset
of the group's batches, so offsets stay increasing with gaps where records were removed. An
``iter_batches`` iterator that is suspended while a swap happens continues from the offset
after its last batch on the new segments (its memoryviews are copies and stay valid); it never
reads a replaced file.

A crash anywhere in the swap is settled at the next open by ``storage.recovery`` (before the
commit point the cleaned files are dropped, after it the swap is finished).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kcoord.storage.files import FilePool, fsync_dir
from kcoord.storage.recovery import SEGMENT_SUFFIXES, SWAP_SUFFIX, cleaned_path, remove_cleaned
from kcoord.storage.segment import INDEX_SUFFIXES, LOG_SUFFIX, Segment

log = logging.getLogger("kcoord.storage")


class CleaningInProgress(RuntimeError):
    """begin_cleaning was called while another cleaning of the same log was under way."""


@dataclass(eq=False)
class CleaningSnapshot:
    """What a cleaner may read, taken by :meth:`CleaningMixin.begin_cleaning` under the lock.

    ``readers[i]`` is a private read-only handle on ``segments[i]`` (same file, own descriptor,
    size and next offset as of the snapshot), usable from any thread. ``segments[:sealed]`` are
    sealed and hold only offsets below ``flushed_offset``: those may be replaced. The others
    (the active segment last) may only be read, and only batches ending below
    ``flushed_offset`` are durable.
    """

    segments: tuple[Segment, ...]
    readers: tuple[Segment, ...]
    sealed: int
    flushed_offset: int
    segment_bytes: int
    index_interval_bytes: int
    fsync: bool
    _truncations: int = field(repr=False)
    _swaps: int = field(repr=False)
    _ended: bool = field(default=False, repr=False)


class CleaningMixin:
    """``begin_cleaning``, ``end_cleaning`` and ``replace_sealed`` of ``PartitionLog``.

    The state below belongs to the log (``PartitionLog.__init__`` sets it); the mixin reads it
    and, for a swap, replaces the segment list under the log's locks.
    """

    _path: Path
    _segments: list[Segment]
    _bases: list[int]
    _dirty: list[Segment]
    _lock: threading.Lock
    _flush_lock: threading.Lock
    _flushed_offset: int
    _segment_bytes: int
    _index_interval_bytes: int
    _fsync: bool
    _pool: FilePool
    _closed: bool
    _truncations: int  # bumped by truncate_to: invalidates a cleaning in progress
    _swaps: int  # bumped by a swap: tells suspended iterators to re-resolve
    _cleaning: bool  # a cleaning is under way

    def _check_open(self) -> None:
        """Raise if the log is closed or offline (``PartitionLog`` overrides this)."""
        raise NotImplementedError

    def begin_cleaning(self) -> CleaningSnapshot:
        """Snapshot the segments for a cleaner and open private read handles (any thread).

        Call :meth:`flush` first so that everything appended so far counts as durable. Only one
        cleaning may be under way: raises CleaningInProgress otherwise. End it with
        :meth:`replace_sealed` or :meth:`end_cleaning`.
        """
        with self._lock:
            self._check_open()
            if self._cleaning:
                raise CleaningInProgress(f"log {self._path} is already being cleaned")
            segments = tuple(self._segments)
            flushed = self._flushed_offset
            sealed = 0
            while sealed < len(segments) - 1 and segments[sealed].next_offset <= flushed:
                sealed += 1
            readers: list[Segment] = []
            try:
                for seg in segments:
                    readers.append(seg.open_reader())
            except BaseException:
                for r in readers:
                    r.close()
                raise
            self._cleaning = True
            return CleaningSnapshot(
                segments=segments,
                readers=tuple(readers),
                sealed=sealed,
                flushed_offset=flushed,
                segment_bytes=self._segment_bytes,
                index_interval_bytes=self._index_interval_bytes,
                fsync=self._fsync,
                _truncations=self._truncations,
                _swaps=self._swaps,
            )

    def end_cleaning(self, snapshot: CleaningSnapshot) -> None:
        """Close the snapshot's read handles and allow the next cleaning. Idempotent."""
        for r in snapshot.readers:
            r.close()
        with self._lock:
            if not snapshot._ended:
                snapshot._ended = True
                self._cleaning = False

    def replace_sealed(
        self,
        snapshot: CleaningSnapshot,
        replacements: Sequence[tuple[Sequence[Segment], int | None]],
    ) -> bool:
        """Swap cleaned segment files in for groups of sealed segments (writer thread).

        Each replacement is ``(group, base)``: ``group`` lists adjacent segments from
        ``snapshot.segments[:snapshot.sealed]``; ``base`` is ``group[0].base_offset`` when the
        cleaner wrote ``cleaned_path(path, base, ".log"/".index")`` (complete, fsynced, holding
        a subset of the group's batches) or None when nothing of the group survives and its
        segments are simply deleted. Groups must not overlap. The swap follows the protocol in
        the module docstring and ends the cleaning.

        Returns False, deleting the cleaned files and changing nothing, if the log was closed,
        truncated or otherwise changed under the snapshot since begin_cleaning (the cleaner's
        decisions may rest on records that are gone). An I/O error after the commit point
        closes the log (reopening it completes the swap) and propagates. Holds the flush lock
        throughout, so it waits for a flush running in another thread to finish.
        """
        if snapshot._ended:
            raise ValueError("this cleaning has already ended")
        new_bases = [base for _, base in replacements if base is not None]
        try:
            with self._flush_lock:
                present = {id(s) for s in self._segments[:-1]}
                stale = (
                    self._closed
                    or self._truncations != snapshot._truncations
                    or self._swaps != snapshot._swaps
                    or any(id(s) not in present for group, _ in replacements for s in group)
                )
                if stale:
                    for base in new_bases:
                        remove_cleaned(self._path, base)
                    return False
                if not replacements:
                    return True
                self._swap_files(replacements, new_bases)
            return True
        finally:
            self.end_cleaning(snapshot)

    def _swap_files(
        self, replacements: Sequence[tuple[Sequence[Segment], int | None]], new_bases: list[int]
    ) -> None:
        path = self._path
        committed = False
        try:
            # 1. Commit: every cleaned file becomes a .swap file, made durable.
            for base in new_bases:
                for suffix in SEGMENT_SUFFIXES:
                    cleaned = cleaned_path(path, base, suffix)
                    if suffix == LOG_SUFFIX or cleaned.exists():
                        os.rename(cleaned, path / f"{base:020d}{suffix}{SWAP_SUFFIX}")
            if self._fsync:
                fsync_dir(path)
            committed = True
            # 2. Delete the replaced segments, 3. move the swap files into place.
            for group, _ in replacements:
                for seg in group:
                    seg.delete_files()
            fresh: dict[int, Segment] = {}
            for base in new_bases:
                stem = f"{base:020d}"
                for suffix in INDEX_SUFFIXES:
                    index_swap = path / f"{stem}{suffix}{SWAP_SUFFIX}"
                    if index_swap.exists():
                        os.rename(index_swap, path / f"{stem}{suffix}")
                os.rename(path / f"{stem}{LOG_SUFFIX}{SWAP_SUFFIX}", path / f"{stem}{LOG_SUFFIX}")
            if self._fsync:
                fsync_dir(path)
            for base in new_bases:
                seg = Segment(path, base, self._index_interval_bytes, self._pool)
                if not seg.load_sealed():
                    seg.recover()
                fresh[base] = seg
        except BaseException:
            if not committed:
                for base in new_bases:  # nothing was deleted yet: put the log back as it was
                    for suffix in SEGMENT_SUFFIXES:
                        with contextlib.suppress(OSError):
                            (path / f"{base:020d}{suffix}{SWAP_SUFFIX}").unlink()
                    remove_cleaned(path, base)
                raise
            log.error("swap of cleaned segments in %s failed; closing the log", path)
            with self._lock:
                self._closed = True
                for seg in self._segments:
                    seg.close()
            raise

        first_of = {id(group[0]): base for group, base in replacements}
        doomed = {id(s) for group, _ in replacements for s in group}
        with self._lock:
            segments: list[Segment] = []
            for seg in self._segments:
                if id(seg) in first_of:
                    new_base = first_of[id(seg)]
                    if new_base is not None:
                        segments.append(fresh[new_base])
                elif id(seg) not in doomed:
                    segments.append(seg)
            self._segments = segments
            self._bases = [s.base_offset for s in segments]
            self._dirty = [s for s in self._dirty if id(s) not in doomed]
            self._swaps += 1
