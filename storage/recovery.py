"""What opening a partition directory finds and mends, and how it reports it.

:func:`recover_segments` does the recovery of ``PartitionLog.open``, in this order:

1. Crash leftovers of compaction are settled (below).
2. Index files whose ``.log`` is gone are logged at ERROR with the offsets lost, then removed
   (segment files are deleted indexes first, so only an outside hand leaves that).
3. Every segment but the last is trusted if its indexes pass a consistency check; the last
   (active) segment, and any segment whose index is missing or inconsistent, is scanned batch
   by batch (framing, magic 2, CRC-32C, increasing offsets). The first torn or corrupt batch and
   everything after it is cut from the file, the later segments (from a segment overlapping the
   one before it on, too) are deleted, and one WARNING on the ``kcoord.storage`` logger says
   what went.
4. In a log that is not compacted, offsets missing between two segments are logged at ERROR.
5. With fsync on, whatever the previous process left in the page cache is made durable.

Writes recovery would like to make (cutting a tail, rewriting an index, fsyncs) may fail on a
full disk or a read-only file without failing the open (see ``storage.segment``).

Compaction's file names: a cleaned segment being written is ``<base><suffix>.cleaned``; once the
cleaner's files are complete they are renamed ``<base><suffix>.swap`` (the commit point of a
swap, ``storage.cleaning``).

Crash leftovers, handled at open before anything else: every ``*.cleaned`` file is deleted (the
swap had not started). A ``<B>.log.swap`` is complete and fsynced (it was renamed from a
finished ``.cleaned`` file), so the swap is finished: the segments whose base offset is B or lies
in [B, next offset of the swap file) -- all of them members of the group it replaces -- are
deleted (indexes, then ``.log``), ``<B>.index.swap`` and ``<B>.timeindex.swap`` (if any) and then
``<B>.log.swap`` are renamed into place. Members of the group beyond the swap file's next offset
(their records were all removed) may survive a crash; they only hold offsets above the swap
file's, so the log stays consistent, merely less compacted. An index ``.swap`` without its
``.log.swap`` is deleted (the index is rebuilt if needed). This rule is safe for any subset of a
swap's renames having reached disk.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
from pathlib import Path

from kcoord.protocol.batch import CorruptBatch
from kcoord.storage.files import FilePool, describe_error, fsync_dir
from kcoord.storage.index import INT32_MAX, OffsetIndex
from kcoord.storage.segment import (
    BUILD_CHUNK,
    INDEX_SUFFIX,
    INDEX_SUFFIXES,
    LOG_SUFFIX,
    TIMEINDEX_SUFFIX,
    Cut,
    Segment,
)
from kcoord.storage.time_index import TimeIndex
from kcoord.storage.txn_index import TXN_INDEX_SUFFIX

log = logging.getLogger("kcoord.storage")

SEGMENT_FILE = re.compile(r"^(\d{20})(\.log|\.index|\.timeindex|\.txnindex)$")
CLEANED_SUFFIX = ".cleaned"  # a cleaned segment file being written (phase 1 of compaction)
SWAP_SUFFIX = ".swap"  # a cleaned segment file committed to replace its group (phase 2)
CLEANER_FILE = re.compile(
    r"^(\d{20})(\.log|\.index|\.timeindex|\.txnindex)(\.cleaned|\.swap)$"
)
SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIMEINDEX_SUFFIX, TXN_INDEX_SUFFIX)


def cleaned_path(directory: Path, base_offset: int, suffix: str) -> Path:
    """``<base>.log.cleaned`` / ``<base>.index.cleaned`` / ``<base>.timeindex.cleaned``."""
    return directory / f"{base_offset:020d}{suffix}{CLEANED_SUFFIX}"


def remove_cleaned(directory: Path, base: int) -> None:
    for suffix in SEGMENT_SUFFIXES:
        with contextlib.suppress(OSError):
            cleaned_path(directory, base, suffix).unlink()


def _swap_next_offset(path: Path, base: int) -> int:
    """One past the last offset of the whole batches in the swap file ``path``."""
    reader = Segment.private_reader(path, base)  # the segment's header walker on the .swap
    next_offset = base
    try:
        size = reader.file_size()
        for _, h in reader.walk_headers(0, size, BUILD_CHUNK):
            next_offset = max(next_offset, h.next_offset)
    except CorruptBatch:
        pass  # normal recovery cuts the segment there after the rename
    finally:
        reader.close()
    return next_offset


def finish_cleaner_leftovers(path: Path) -> bool:
    """Delete ``.cleaned`` leftovers and finish interrupted swaps in partition directory
    ``path``; True if anything changed. The rule is in the module docstring."""
    cleaned: list[str] = []
    log_swaps: list[int] = []
    index_swaps: set[tuple[int, str]] = set()
    bases: set[int] = set()
    for entry in os.listdir(path):
        m = CLEANER_FILE.match(entry)
        if m:
            if m.group(3) == CLEANED_SUFFIX:
                cleaned.append(entry)
            elif m.group(2) == LOG_SUFFIX:
                log_swaps.append(int(m.group(1)))
            else:
                index_swaps.add((int(m.group(1)), m.group(2)))
            continue
        m = SEGMENT_FILE.match(entry)
        if m:
            bases.add(int(m.group(1)))
    for entry in cleaned:
        (path / entry).unlink()
    for base, suffix in index_swaps:
        if base not in log_swaps:
            (path / f"{base:020d}{suffix}{SWAP_SUFFIX}").unlink()
    for base in sorted(log_swaps):
        stem = f"{base:020d}"
        swap = path / f"{stem}{LOG_SUFFIX}{SWAP_SUFFIX}"
        end = _swap_next_offset(swap, base)
        for old in sorted(bases):
            if old == base or base <= old < end:
                for suffix in (*INDEX_SUFFIXES, LOG_SUFFIX):  # indexes first, as always
                    with contextlib.suppress(FileNotFoundError):
                        (path / f"{old:020d}{suffix}").unlink()
        for suffix in INDEX_SUFFIXES:
            if (base, suffix) in index_swaps:
                os.rename(path / f"{stem}{suffix}{SWAP_SUFFIX}", path / f"{stem}{suffix}")
        os.rename(swap, path / f"{stem}{LOG_SUFFIX}")
    if log_swaps:
        log.warning(
            "recovery of %s: finished an interrupted compaction swap of segment(s) %s",
            path,
            ", ".join(str(b) for b in sorted(log_swaps)),
        )
    return bool(cleaned or index_swaps or log_swaps)


def recover_segments(
    path: Path,
    *,
    index_interval_bytes: int,
    fsync: bool,
    compacted: bool,
    pool: FilePool | None = None,
) -> list[Segment]:
    """Recover the existing partition directory ``path`` as the module docstring describes and
    return its segments in offset order (a directory without segments gets an empty one at
    offset 0). ``compacted``: offsets missing between segments are expected, not reported.

    With ``fsync``, everything kept (and the directory, if recovery changed it) is made durable;
    a failure to do so only warns.
    """
    dir_changed = finish_cleaner_leftovers(path)
    log_bases: set[int] = set()
    index_bases: dict[int, set[str]] = {}
    for entry in os.listdir(path):
        m = SEGMENT_FILE.match(entry)
        if m:
            base = int(m.group(1))
            if m.group(2) == LOG_SUFFIX:
                log_bases.add(base)
            else:
                index_bases.setdefault(base, set()).add(m.group(2))
    orphans = sorted(set(index_bases) - log_bases)
    if orphans:  # an index without its log: the log was deleted by someone else
        _report_orphans(path, orphans, sorted(log_bases))
        for base in orphans:
            for suffix in index_bases[base]:
                (path / f"{base:020d}{suffix}").unlink()
        dir_changed = True

    segments = [Segment(path, b, index_interval_bytes, pool) for b in sorted(log_bases)]
    kept: list[Segment] = []
    cut: tuple[Segment, Cut] | None = None
    dropped: list[Segment] = []
    for i, seg in enumerate(segments):
        if kept and seg.base_offset < kept[-1].next_offset:
            cut = (kept[-1], Cut(kept[-1].size, 0, f"segment {seg.base_offset} overlaps"))
            dropped = segments[i:]
            break
        is_last = i == len(segments) - 1
        if is_last or not seg.load_sealed():
            c = seg.recover()
            if not {INDEX_SUFFIX, TIMEINDEX_SUFFIX} <= index_bases.get(seg.base_offset, set()):
                dir_changed = True  # recover() created an index file
            if c is not None:
                cut = (seg, c)
                seg.recovered = True
                kept.append(seg)
                dropped = segments[i + 1 :]
                break
            seg.recovered = True  # its .txnindex is rebuilt too (storage.txn_log)
            if not is_last:
                _seal_quietly(seg)
        kept.append(seg)

    dropped_bytes = 0
    for seg in dropped:
        with contextlib.suppress(FileNotFoundError):
            dropped_bytes += seg.log_path.stat().st_size
        seg.delete_files()
        dir_changed = True
    if cut is not None or dropped:
        _warn_recovery(path, cut, dropped, dropped_bytes)
    if not compacted:
        _report_gaps(path, kept)

    if not kept:
        kept.append(Segment.create(path, 0, index_interval_bytes, pool))
        dir_changed = True
    if fsync:
        # Whatever the previous process left in the page cache becomes durable now.
        try:
            for seg in kept:
                seg.sync_existing()
            if dir_changed:
                fsync_dir(path)
        except OSError as e:
            log.warning("recovery of %s: fsync failed: %s", path, describe_error(e))
    return kept


def _warn_recovery(
    path: Path, cut: tuple[Segment, Cut] | None, dropped: list[Segment], dropped_bytes: int
) -> None:
    parts: list[str] = []
    if cut is not None:
        seg, c = cut
        if c.removed_bytes:
            parts.append(
                f"cut {c.removed_bytes} bytes from {seg.log_path.name} at position "
                f"{c.position} (next offset {seg.next_offset}): {c.reason}"
            )
        else:
            parts.append(c.reason)
    if dropped:
        names = ", ".join(s.log_path.name for s in dropped)
        parts.append(f"deleted {len(dropped)} later segment(s) ({dropped_bytes} bytes): {names}")
    log.warning("recovery of %s: %s", path, "; ".join(parts))


def _seal_quietly(seg: Segment) -> None:
    """Seal a recovered segment (final time index entry); a failed write only warns."""
    try:
        seg.seal()
    except OSError as e:
        log.warning(
            "recovery of %s: sealing its indexes failed, kept in memory: %s",
            seg.log_path,
            describe_error(e),
        )


def _report_orphans(path: Path, orphans: list[int], log_bases: list[int]) -> None:
    """Log, at ERROR, each segment whose index files remain but whose ``.log`` is gone."""
    for base in orphans:
        later = [b for b in log_bases if b > base]
        if later:
            lost = f"offsets {base} to {later[0] - 1} are lost"
        else:
            seen = _last_indexed_offset(path, base)
            more = f" (at least to {seen})" if seen is not None else ""
            lost = f"offsets from {base} on{more} are lost"
        log.error(
            "partition %s: segment %s.log is missing (its index remains): %s",
            path.name,
            f"{base:020d}",
            lost,
        )


def _last_indexed_offset(path: Path, base: int) -> int | None:
    """The largest offset an orphan index file of segment ``base`` names, if readable."""
    best: int | None = None
    try:
        offsets = OffsetIndex(path / f"{base:020d}{INDEX_SUFFIX}", base)
        if offsets.load(INT32_MAX) and len(offsets):
            best = offsets.entry(len(offsets) - 1)[0]
        times = TimeIndex(path / f"{base:020d}{TIMEINDEX_SUFFIX}", base)
        if times.load() and len(times):
            best = max(best or base, times.last_entry()[1])
    except OSError:
        pass
    return best


def _report_gaps(path: Path, segments: list[Segment]) -> None:
    """Log, at ERROR, offsets missing between consecutive segments of an uncompacted log."""
    for prev, seg in zip(segments, segments[1:], strict=False):
        if prev.next_offset < seg.base_offset:
            log.error(
                "partition %s: offsets %d to %d are missing (no segment holds them; segment"
                " files were deleted?)",
                path.name,
                prev.next_offset,
                seg.base_offset - 1,
            )


def segment_bases(path: Path) -> list[int]:
    """Base offsets of the ``.log`` files in partition directory ``path`` (by name only)."""
    bases = []
    for entry in os.listdir(path):
        m = SEGMENT_FILE.match(entry)
        if m and m.group(2) == LOG_SUFFIX:
            bases.append(int(m.group(1)))
    return sorted(bases)
