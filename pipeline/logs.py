"""Finding and scanning partition logs on any filesystem, without Spark.

The layout is Kafka's (and kcoord's, see ``storage.log``): ``<data-dir>/<topic>-<partition>/``
holding ``<20-digit base offset>.log`` segments of record batches v2 and sparse ``.index``
files. Everything here is plain Python over :mod:`pipeline.fs`, so the Spark executors, the
single-process pass and the tests share it. Batch framing and CRCs are ``protocol.batch``'s,
record decoding ``protocol.records``'s.
"""

from __future__ import annotations

import functools
import re
import struct
from bisect import bisect_right
from collections.abc import Iterator
from dataclasses import dataclass, field

from kcoord.protocol.batch import HEADER_SIZE, BatchHeader, CorruptBatch, crc_ok, parse_header
from kcoord.protocol.record_scan import batch_first_at_or_after
from kcoord.storage.checkpoint import LOG_START_CHECKPOINT, CheckpointError, parse_checkpoint
from kcoord.storage.partition_metadata import (
    PARTITION_METADATA_FILE,
    parse_partition_metadata,
    topic_id_to_str,
)
from kcoord.storage.segment import INDEX_SUFFIX, LOG_SUFFIX, segment_name

from . import fs

OFFSETS_TOPIC = "__consumer_offsets"
SCAN_CHUNK = 8 << 20
HEADER_CHUNK = 64 << 10

_PARTITION_DIR = re.compile(r"^(.+)-(\d+)$")
_SEGMENT_FILE = re.compile(r"^(\d{20})(\.log|\.index|\.log\.swap|\.log\.cleaned)$")
_INDEX_ENTRY = struct.Struct(">ii")
_ANY_TIMESTAMP = -(2**63)  # any timestamp
NO_SEGMENTS = "partition directory without segment files"

PartitionEnd = tuple[int, int]
"""Where a run stops reading one partition (``pipeline.snapshot``): the base offset of its last
segment when the run started, and that segment's length in bytes then."""


@dataclass(frozen=True, slots=True)
class Problem:
    """Something the pipeline could not read, named so that an operator can find it."""

    name: str  # e.g. "__consumer_offsets-7/00000000000000000000.log"
    message: str


@dataclass(frozen=True, slots=True)
class SegmentRef:
    """One segment file of one partition (picklable: it travels to the executors)."""

    data_dir: str
    dirname: str  # "<topic>-<partition>"
    log_partition: int
    base_offset: int
    size: int  # as listed (the last segment: its length in the run's snapshot, if any)
    last: bool  # the partition's active segment: a torn final batch is a write in flight
    end: PartitionEnd | None = None  # the partition's end in the snapshot; None: the files' end

    @property
    def name(self) -> str:
        return f"{self.dirname}/{segment_name(self.base_offset)}{LOG_SUFFIX}"

    @property
    def uri(self) -> str:
        return fs.join(self.data_dir, self.dirname, segment_name(self.base_offset) + LOG_SUFFIX)


@dataclass(slots=True)
class ScanStats:
    batches: int = 0
    control_batches: int = 0
    transactional_batches: int = 0
    bytes: int = 0
    torn_tail_bytes: int = 0  # incomplete last batch of an active segment (not counted as data)


def partition_dirs(data_dir: str) -> list[tuple[str, int, str]]:
    """(topic, partition, directory name) of every partition directory under ``data_dir``.

    Listed by hand: Spark's file sources hide names starting with ``_`` (so
    ``__consumer_offsets-N`` would read as empty), and Kafka's ``*-delete``/``*-future``
    directories are not partitions.
    """
    out = []
    for e in fs.list_dir(data_dir):
        parsed = parse_partition_dir(e.name)
        if e.is_dir and parsed:
            out.append((*parsed, e.name))
    out.sort(key=lambda t: (t[0], t[1]))
    return out


def parse_partition_dir(name: str) -> tuple[str, int] | None:
    """(topic, partition) of a ``<topic>-<partition>`` directory name, or None."""
    m = _PARTITION_DIR.match(name)
    return (m.group(1), int(m.group(2))) if m else None


def partition_ends(data_dir: str) -> dict[str, PartitionEnd | None]:
    """The end of every partition directory now (None: it has no segment file), by name."""
    ends: dict[str, PartitionEnd | None] = {}
    for _topic, partition, dirname in partition_dirs(data_dir):
        try:
            refs, _ = list_segments(data_dir, dirname, partition)
        except FileNotFoundError:
            continue  # deleted while listed
        ends[dirname] = (refs[-1].base_offset, refs[-1].size) if refs else None
    return ends


def topic_names(data_dir: str) -> dict[str, str]:
    """Topic id (Kafka's text form, as ``partition.metadata`` holds it) -> topic name, read
    from the ``partition.metadata`` file of one partition directory per topic (internal
    ``__*`` topics excluded). A topic whose file is missing or unreadable is left out; so are
    deleted topics, whose directories are gone."""
    names: dict[str, str] = {}
    seen: set[str] = set()
    for topic, _partition, dirname in partition_dirs(data_dir):
        if topic in seen or topic.startswith("__"):
            continue
        uri = fs.join(data_dir, dirname, PARTITION_METADATA_FILE)
        try:
            topic_id = parse_partition_metadata(fs.read_all(uri).decode("utf-8"), uri)
        except (OSError, ValueError):  # missing (FileNotFoundError is an OSError), malformed
            continue
        seen.add(topic)
        names[topic_id_to_str(topic_id)] = topic
    return names


def list_segments(
    data_dir: str, dirname: str, log_partition: int, end: PartitionEnd | None = None
) -> tuple[list[SegmentRef], list[Problem]]:
    """The segments of one partition directory, oldest first, and what looks wrong there.

    With ``end`` (the partition's end in a snapshot) the list stops there: segments rolled
    since are left out and the snapshot's last segment is the last, with its length then (it
    is named even if it is gone: reading it then says so)."""
    logs: dict[int, int] = {}
    indexes: set[int] = set()
    leftovers: list[str] = []
    try:
        entries = fs.list_dir(fs.join(data_dir, dirname))
    except FileNotFoundError:
        if end is None:
            raise
        entries = []
    for e in entries:
        m = _SEGMENT_FILE.match(e.name)
        if not m or e.is_dir:
            continue
        base, suffix = int(m.group(1)), m.group(2)
        if suffix == LOG_SUFFIX:
            logs[base] = e.size
        elif suffix == INDEX_SUFFIX:
            indexes.add(base)
        else:
            leftovers.append(e.name)
    problems = [
        Problem(
            f"{dirname}/{segment_name(base)}{LOG_SUFFIX}",
            "segment file missing (its .index is there)",
        )
        for base in sorted(indexes - logs.keys())
    ]
    if leftovers:
        problems.append(
            Problem(
                dirname,
                "unfinished compaction files "
                + ", ".join(sorted(leftovers))
                + " (start the broker once to finish the swap); read the .log files only",
            )
        )
    if end is not None:
        logs = {b: n for b, n in logs.items() if b < end[0]} | {end[0]: end[1]}
    bases = sorted(logs)
    refs = [
        SegmentRef(data_dir, dirname, log_partition, b, logs[b], i == len(bases) - 1, end)
        for i, b in enumerate(bases)
    ]
    return refs, problems


def read_end(ref: SegmentRef, f: fs.RandomAccess) -> int:
    """How far the segment ``ref`` (open as ``f``) is read: its partition's last segment up to
    its length in the snapshot (never past the file's end), any other to the file's end."""
    size = f.size()
    return min(ref.size, size) if ref.last and ref.end is not None else size


def offsets_segments(
    data_dir: str, topic: str = OFFSETS_TOPIC, ends: dict[str, PartitionEnd | None] | None = None
) -> tuple[list[SegmentRef], list[Problem]]:
    """Every segment of every ``__consumer_offsets-N`` directory, and the listing problems;
    with ``ends`` (a snapshot's, :func:`partition_ends`), its directories up to their ends."""
    refs: list[SegmentRef] = []
    problems: list[Problem] = []
    dirs: list[tuple[str, int, str, PartitionEnd | None]]
    if ends is None:
        dirs = [(t, partition, dirname, None) for t, partition, dirname in partition_dirs(data_dir)]
    else:
        dirs = sorted(
            (*parsed, dirname, end)
            for dirname, end in ends.items()
            if (parsed := parse_partition_dir(dirname)) is not None
        )
    for t, partition, dirname, end in dirs:
        if t != topic:
            continue
        if ends is not None and end is None:
            problems.append(Problem(dirname, NO_SEGMENTS))
            continue
        r, p = list_segments(data_dir, dirname, partition, end)
        if not r and not p:
            p = [Problem(dirname, NO_SEGMENTS)]
        refs += r
        problems += p
    return refs, problems


def scan_batches(
    f: fs.RandomAccess, stats: ScanStats, *, end: int | None = None, allow_torn_tail: bool = False
) -> Iterator[tuple[BatchHeader, memoryview]]:
    """Yield (header, whole batch) for each batch of a segment file, CRC checked.

    Raises CorruptBatch (its message says at which byte) on bad framing, magic or CRC, and on a
    truncated batch, unless ``allow_torn_tail``: then a final batch cut short by the end of the
    file ends the scan (recorded in ``stats.torn_tail_bytes``).
    """
    end = f.size() if end is None else end
    pos = 0
    while pos < end:
        buf = f.read_at(pos, min(SCAN_CHUNK, end - pos))
        view = memoryview(buf)
        n = len(buf)
        off = 0
        while n - off >= HEADER_SIZE:
            h = _header(view, off, pos)
            if h.size > n - off:
                break
            if not crc_ok(view, off, h):
                raise CorruptBatch(f"CRC mismatch in the batch at byte {pos + off}")
            stats.batches += 1
            stats.bytes += h.size
            yield h, view[off : off + h.size]
            off += h.size
        if off == 0:
            # The batch at pos does not fit in the chunk: a big batch, or the file ends in it.
            if n >= HEADER_SIZE:
                h = _header(view, 0, pos)
                whole = f.read_at(pos, h.size) if pos + h.size <= end else b""
                if len(whole) == h.size:
                    if not crc_ok(whole, 0, h):
                        raise CorruptBatch(f"CRC mismatch in the batch at byte {pos}")
                    stats.batches += 1
                    stats.bytes += h.size
                    yield h, memoryview(whole)
                    pos += h.size
                    continue
            if allow_torn_tail:
                stats.torn_tail_bytes = end - pos
                return
            raise CorruptBatch(f"truncated batch at byte {pos} ({end - pos} bytes left)")
        pos += off


def _header(view: memoryview, off: int, pos: int) -> BatchHeader:
    try:
        return parse_header(view, off)
    except CorruptBatch as e:
        raise CorruptBatch(f"{e} at byte {pos + off}") from None


# --------------------------------------------------------------------------- topic logs


@dataclass(slots=True)
class TopicLog:
    topic: str
    partition: int
    dirname: str
    log_start_offset: int | None = None
    log_end_offset: int | None = None
    segments: list[int] = field(default_factory=list)
    problem: str | None = None


def _index_entries(data_dir: str, dirname: str, base: int) -> list[tuple[int, int]]:
    """(absolute last offset, position) entries of a segment's index; [] if unreadable."""
    uri = fs.join(data_dir, dirname, segment_name(base) + INDEX_SUFFIX)
    try:
        data = fs.read_all(uri)
    except (FileNotFoundError, OSError):
        return []
    data = data[: len(data) - len(data) % _INDEX_ENTRY.size]
    return [(base + rel, p) for rel, p in _INDEX_ENTRY.iter_unpack(data)]


def _walk_headers(f: fs.RandomAccess, start: int, end: int) -> Iterator[tuple[int, BatchHeader]]:
    """(position, header) of the complete batches in [start, end); stops at anything bad."""
    pos = start
    while pos < end:
        buf = f.read_at(pos, min(HEADER_CHUNK, end - pos))
        off = 0
        while len(buf) - off >= HEADER_SIZE:
            try:
                h = parse_header(buf, off)
            except CorruptBatch:
                return
            if pos + off + h.size > end:
                return
            yield pos + off, h
            off += h.size
        if off == 0:
            if len(buf) < HEADER_SIZE:
                return
            try:
                h = parse_header(buf, 0)
            except CorruptBatch:
                return
            if pos + h.size > end:
                return
            yield pos, h
            off = h.size
        pos += off


@functools.lru_cache(maxsize=8)
def checkpointed_starts(data_dir: str) -> dict[tuple[str, int], int]:
    """The log start offsets of Kafka's ``log-start-offset-checkpoint`` (DeleteRecords and
    retention move them, possibly inside a segment); empty if it cannot be read."""
    try:
        text = fs.read_all(fs.join(data_dir, LOG_START_CHECKPOINT)).decode("utf-8")
        return parse_checkpoint(text, LOG_START_CHECKPOINT)
    except (OSError, UnicodeDecodeError, CheckpointError):
        return {}


def topic_log(
    data_dir: str, topic: str, partition: int, dirname: str, end: PartitionEnd | None = None
) -> TopicLog:
    """Log start offset (the first segment's base, or the checkpointed log start when later)
    and log end offset (after the last complete batch, up to ``end`` if given) of one topic
    partition, read from its segment headers."""
    out = TopicLog(topic, partition, dirname)
    try:
        refs, _ = list_segments(data_dir, dirname, partition, end)
    except FileNotFoundError:
        out.problem = "partition directory vanished"
        return out
    if not refs:
        out.problem = NO_SEGMENTS
        return out
    out.segments = [r.base_offset for r in refs]
    out.log_start_offset = refs[0].base_offset
    last = refs[-1]
    end_offset = last.base_offset
    try:
        f = fs.open_read(last.uri)
    except FileNotFoundError:
        out.problem = f"{last.name} vanished"
        return out
    try:
        size = read_end(last, f)
        start = 0
        entries = [e for e in _index_entries(data_dir, dirname, last.base_offset) if e[1] < size]
        if entries:
            start = entries[-1][1]
        for _pos, h in _walk_headers(f, start, size):
            end_offset = max(end_offset, h.next_offset)
    finally:
        f.close()
    out.log_end_offset = end_offset
    checkpointed = checkpointed_starts(data_dir).get((topic, partition))
    if checkpointed is not None:
        out.log_start_offset = max(refs[0].base_offset, min(checkpointed, end_offset))
    return out


def first_record_at_or_after(
    data_dir: str, dirname: str, segments: list[int], offset: int
) -> tuple[int, int] | None:
    """(offset, timestamp) of the first record whose offset is >= ``offset``, or None.

    Uses the sparse index to skip to the right place, then walks one batch's records with
    ``protocol.record_scan`` (records of compacted topics may have gaps, hence "at or after"),
    decompressing within the usual bound; a batch that cannot be decoded is skipped.
    """
    i = max(bisect_right(segments, offset) - 1, 0)
    for base in segments[i:]:
        uri = fs.join(data_dir, dirname, segment_name(base) + LOG_SUFFIX)
        try:
            f = fs.open_read(uri)
        except FileNotFoundError:
            continue
        try:
            size = f.size()
            start = 0
            if base < offset:
                entries = _index_entries(data_dir, dirname, base)
                k = bisect_right([e[0] for e in entries], offset - 1) - 1
                if k >= 0 and entries[k][1] < size:
                    start = entries[k][1]
            for pos, h in _walk_headers(f, start, size):
                if h.last_offset < offset or h.is_control:
                    continue
                try:
                    found = batch_first_at_or_after(f.read_at(pos, h.size), offset, _ANY_TIMESTAMP)
                except CorruptBatch:
                    continue  # undecodable (corrupt, or expanding past the bound): skip it
                if found is not None:
                    return found
        finally:
            f.close()
    return None
