"""Tests for storage.compaction (key-based compaction of sealed segments) and the swap protocol
it relies on in storage.cleaning (replace_sealed) and storage.recovery (crash recovery of
.cleaned/.swap files)."""

from __future__ import annotations

import os
import random
import threading
from collections.abc import Iterable
from pathlib import Path

import pytest

from kcoord.protocol.batch import parse_header
from kcoord.protocol.compression import Compression
from kcoord.protocol.record_encoding import build_batch, encode_batch
from kcoord.protocol.records import Record, decode_batch
from kcoord.storage.cleaning import CleaningInProgress
from kcoord.storage.compaction import (
    abort_compaction,
    commit_compaction,
    compact,
    prepare_compaction,
)
from kcoord.storage.log import PartitionLog

NOW = 1_700_000_000_000
DAY = 86_400_000
SEGMENT_BYTES = 2048


def open_log(path: Path, **kw: int | bool) -> PartitionLog:
    kw.setdefault("fsync", False)
    kw.setdefault("segment_bytes", SEGMENT_BYTES)
    kw.setdefault("index_interval_bytes", 256)
    return PartitionLog.open(path, **kw)  # type: ignore[arg-type]


Entry = tuple[bytes | None, bytes | None]


def append(
    log: PartitionLog,
    entries: Iterable[Entry],
    *,
    ts: int = NOW,
    compression: Compression = Compression.NONE,
    **options: int,
) -> tuple[int, int]:
    batch = build_batch(
        ((k, v, [], ts) for k, v in entries),
        compression=compression,
        **options,  # type: ignore[arg-type]
    )
    return log.append(batch)


def records(log: PartitionLog) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every record in the log, in order."""
    out = []
    for _, _, data in log.iter_batches(verify_crc=True):
        for offset, _, r in decode_batch(data).iter_records():
            out.append((offset, r.key, r.value))
    return out


def latest(recs: Iterable[tuple[int, bytes | None, bytes | None]]) -> dict[bytes, bytes | None]:
    out: dict[bytes, bytes | None] = {}
    for _, k, v in recs:
        if k is not None:
            out[k] = v
    return out


def batches(log: PartitionLog) -> list[tuple[int, bytes]]:
    return [(off, bytes(data)) for off, _, data in log.iter_batches()]


def fill(log: PartitionLog, n_updates: int, n_keys: int, per_batch: int = 5, **kw: int) -> None:
    """n_updates updates of n_keys keys, per_batch records to a batch.

    Keys are drawn with a skew (key-0 most often), so rarely updated keys have their newest
    record in the sealed segments and often updated ones in the active segment.
    """
    rng = random.Random(n_updates * 31 + n_keys)
    entries: list[Entry] = []
    for i in range(n_updates):
        entries.append((b"key-%d" % int(n_keys * rng.random() ** 3), b"value-%d" % i))
        if len(entries) == per_batch:
            append(log, entries, **kw)  # type: ignore[arg-type]
            entries = []
    if entries:
        append(log, entries, **kw)  # type: ignore[arg-type]


def sealed_records(log: PartitionLog) -> list[tuple[int, bytes | None, bytes | None]]:
    active_base = log.segment_base_offsets[-1]
    return [r for r in records(log) if r[0] < active_base]


def check_offsets(log: PartitionLog) -> None:
    offs = [off for off, _, _ in records(log)]
    assert offs == sorted(set(offs))
    prev_next = -1
    for _, h, _ in log.iter_batches(verify_crc=True):
        assert h.base_offset >= prev_next
        prev_next = h.next_offset


# -- the basics ------------------------------------------------------------------------------


def test_keeps_only_newest_record_per_key(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p")
    fill(log, 3000, 20)
    before = records(log)
    end = log.log_end_offset
    start = log.log_start_offset
    n_segments = len(log.segment_base_offsets)
    assert n_segments > 10

    stats = compact(log, now_ms=NOW)

    after = records(log)
    assert latest(after) == latest(before)
    assert log.log_end_offset == end
    assert log.log_start_offset == start
    check_offsets(log)
    newest = {k: off for off, k, _ in before}
    # In the sealed part only the newest record of each key remains.
    sealed = sealed_records(log)
    assert sealed
    for off, k, _ in sealed:
        assert newest[k] == off
    assert len({k for _, k, _ in sealed}) == len(sealed)
    # Every surviving record is an original one, unchanged.
    assert set(after) <= set(before)
    assert stats.segments_before == n_segments - 1
    assert stats.segments_after < stats.segments_before
    assert stats.bytes_after < stats.bytes_before
    assert stats.records_after == len(sealed)
    assert stats.records_before == sum(1 for off, _, _ in before if off < after[len(sealed)][0])
    assert not stats.stale
    # The cleaned segments respect segment_bytes and load cleanly.
    for base in log.segment_base_offsets:
        assert (tmp_path / "p" / f"{base:020d}.log").stat().st_size <= SEGMENT_BYTES
    assert not [p for p in os.listdir(tmp_path / "p") if p.endswith((".cleaned", ".swap"))]
    log.close()


def test_appends_continue_and_reopen_gives_same_content(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p")
    fill(log, 2000, 15)
    compact(log, now_ms=NOW)
    end = log.log_end_offset
    first, last = append(log, [(b"key-1", b"after-1"), (b"new", b"after-2")])
    assert first == end and last == end + 1
    fill(log, 500, 15)
    check_offsets(log)
    content = batches(log)
    want = latest(records(log))
    end = log.log_end_offset
    log.close()

    log = open_log(tmp_path / "p")
    assert batches(log) == content
    assert log.log_end_offset == end
    assert latest(records(log)) == want
    # Offsets in the gaps left by compaction read from the next surviving batch.
    offs = [off for off, _, _ in records(log)]
    gap = next(o + 1 for o, n in zip(offs, offs[1:], strict=False) if n > o + 1)
    got = parse_header(log.read(gap, 1))
    assert got.last_offset >= gap and got.base_offset <= min(o for o in offs if o >= gap)
    # A second compaction after reopening still gives the same view.
    compact(log, now_ms=NOW)
    assert latest(records(log)) == want
    log.close()


def test_active_segment_is_never_touched(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p")
    fill(log, 1000, 10)
    active = tmp_path / "p" / f"{log.segment_base_offsets[-1]:020d}.log"
    data, inode = active.read_bytes(), active.stat().st_ino
    active_recs = [r for r in records(log) if r[0] >= log.segment_base_offsets[-1]]
    compact(log, now_ms=NOW)
    assert active.read_bytes() == data
    assert active.stat().st_ino == inode
    assert [r for r in records(log) if r[0] >= log.segment_base_offsets[-1]] == active_recs
    log.close()


def test_only_active_segment_is_a_no_op(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p")
    append(log, [(b"a", b"1"), (b"a", b"2"), (b"a", None)])
    before = batches(log)
    stats = compact(log, now_ms=NOW + 10 * DAY)
    assert batches(log) == before
    assert stats.segments_before == stats.segments_after == 0
    assert stats.records_before == stats.records_after == 0
    # An empty log too.
    empty = open_log(tmp_path / "q")
    assert compact(empty, now_ms=NOW).segments_before == 0
    assert empty.log_end_offset == 0
    log.close()
    empty.close()


def test_key_superseded_in_active_segment_leaves_sealed_segments(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p")
    append(log, [(b"moved", b"old")])
    fill(log, 400, 4)
    assert any(k == b"moved" for _, k, _ in sealed_records(log))
    _, newest = append(log, [(b"moved", b"new")])
    assert log.segment_base_offsets[-1] <= newest  # it is in the active segment
    compact(log, now_ms=NOW)
    assert [v for _, k, v in records(log) if k == b"moved"] == [b"new"]
    log.close()


def test_repeated_compaction_is_stable(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p")
    fill(log, 2000, 40)
    compact(log, now_ms=NOW)
    content = batches(log)
    listing = sorted(os.listdir(tmp_path / "p"))
    stats = compact(log, now_ms=NOW)
    assert batches(log) == content
    assert sorted(os.listdir(tmp_path / "p")) == listing
    assert stats.records_before == stats.records_after
    assert stats.segments_before == stats.segments_after
    log.close()


def test_segments_whose_records_all_went_are_removed_but_log_start_stays(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p")
    for i in range(300):
        append(log, [(b"k", b"v%d" % i)])
    n = len(log.segment_base_offsets)
    active_base = log.segment_base_offsets[-1]
    active = [r for r in records(log) if r[0] >= active_base]
    compact(log, now_ms=NOW)
    assert log.log_start_offset == 0
    # The first segment stays (empty); the others of the sealed part are gone.
    assert log.segment_base_offsets == [0, active_base] and n > 2
    assert (tmp_path / "p" / f"{0:020d}.log").stat().st_size == 0
    assert records(log) == active
    assert parse_header(log.read(0, 100)).base_offset == active_base
    log.close()
    log = open_log(tmp_path / "p")
    assert log.log_start_offset == 0
    assert records(log) == active
    log.close()


# -- record-level rules -----------------------------------------------------------------------


def test_tombstones_dropped_after_retention_newer_kept(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p")
    append(log, [(b"old-gone", b"x"), (b"new-gone", b"y"), (b"kept", b"z")], ts=NOW - 3 * DAY)
    append(log, [(b"old-gone", None)], ts=NOW - 2 * DAY)  # older than retention
    append(log, [(b"new-gone", None)], ts=NOW - DAY // 2)  # within retention
    fill(log, 300, 5, ts=NOW)
    stats = compact(log, now_ms=NOW, delete_retention_ms=DAY)
    recs = records(log)
    keys = [k for _, k, _ in recs]
    assert b"old-gone" not in keys
    assert [(k, v) for _, k, v in recs if k == b"new-gone"] == [(b"new-gone", None)]
    assert [(k, v) for _, k, v in recs if k == b"kept"] == [(b"kept", b"z")]
    assert stats.tombstones_dropped == 1
    # Later, once the newer tombstone is old enough, it goes too.
    stats = compact(log, now_ms=NOW + DAY, delete_retention_ms=DAY)
    assert b"new-gone" not in [k for _, k, _ in records(log)]
    assert stats.tombstones_dropped == 1
    log.close()


def test_tombstone_in_active_segment_is_kept_and_removes_older_values(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p")
    append(log, [(b"doomed", b"x")], ts=NOW - 5 * DAY)
    fill(log, 300, 5, ts=NOW - 5 * DAY)
    _, tombstone = append(log, [(b"doomed", None)], ts=NOW - 5 * DAY)
    assert log.segment_base_offsets[-1] <= tombstone
    compact(log, now_ms=NOW, delete_retention_ms=DAY)
    assert [(k, v) for _, k, v in records(log) if k == b"doomed"] == [(b"doomed", None)]
    log.close()


def test_keyless_records_are_dropped(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p")
    append(log, [(None, b"no key"), (b"a", b"1"), (None, b"no key either")])
    fill(log, 300, 5)
    compact(log, now_ms=NOW)
    recs = records(log)
    assert all(k is not None for off, k, _ in recs if off < log.segment_base_offsets[-1])
    assert (1, b"a", b"1") in recs
    log.close()


def test_partial_batch_keeps_offsets_producer_fields_and_timestamps(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p")
    first, last = append(
        log,
        [(b"a", b"1"), (b"b", b"2"), (b"a", b"3"), (b"c", b"4")],
        ts=NOW - 1000,
        producer_id=42,
        producer_epoch=3,
        base_sequence=17,
        partition_leader_epoch=5,
    )
    append(log, [(b"c", b"5")])
    fill(log, 300, 5)
    compact(log, now_ms=NOW)
    (off, h, data), *_ = list(log.iter_batches())
    assert (off, h.base_offset, h.last_offset) == (first, first, last)
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (42, 3, 17)
    assert h.partition_leader_epoch == 5
    assert h.base_timestamp == h.max_timestamp == NOW - 1000
    batch = decode_batch(data)
    assert [(o, r.key, r.value) for o, _, r in batch.iter_records()] == [
        (first + 1, b"b", b"2"),
        (first + 2, b"a", b"3"),
    ]
    log.close()


def test_control_batches_are_kept_verbatim(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p")
    append(log, [(b"txn-key", b"1")], producer_id=7, producer_epoch=0, is_transactional=True)
    marker = encode_batch(
        [Record(0, 0, b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00")],
        base_timestamp=NOW,
        producer_id=7,
        producer_epoch=0,
        is_transactional=True,
        is_control=True,
    )
    marker_offset, _ = log.append(marker)
    append(log, [(b"txn-key", b"2")])
    fill(log, 300, 5)
    compact(log, now_ms=NOW)
    kept = [(off, bytes(data)) for off, h, data in log.iter_batches() if h.is_control]
    assert len(kept) == 1 and kept[0][0] == marker_offset
    assert kept[0][1][8:] == marker[8:]  # byte for byte but for the assigned base offset
    assert [v for _, k, v in records(log) if k == b"txn-key"] == [b"2"]
    log.close()


@pytest.mark.parametrize("codec", [Compression.GZIP, Compression.ZSTD, Compression.LZ4])
def test_compressed_batches_survive_with_content_intact(tmp_path: Path, codec: Compression) -> None:
    log = open_log(tmp_path / "p")
    fill(log, 3000, 25, per_batch=20, compression=codec)
    before = records(log)
    compact(log, now_ms=NOW)
    after = records(log)
    assert latest(after) == latest(before)
    assert set(after) <= set(before)
    check_offsets(log)
    for _, h, _ in log.iter_batches():
        assert h.compression == codec
    sealed = sealed_records(log)
    assert len({k for _, k, _ in sealed}) == len(sealed)
    log.close()


# -- two phases, concurrency ------------------------------------------------------------------


def test_prepare_in_thread_while_appending(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p")
    fill(log, 3000, 30)
    result: list[object] = []
    t = threading.Thread(target=lambda: result.append(prepare_compaction(log, now_ms=NOW)))
    t.start()
    for i in range(200):
        append(log, [(b"key-%d" % (i % 30), b"late-%d" % i)])
    t.join()
    want = latest(records(log))
    end = log.log_end_offset
    stats = commit_compaction(log, result[0])  # type: ignore[arg-type]
    assert not stats.stale
    assert latest(records(log)) == want
    assert log.log_end_offset == end
    check_offsets(log)
    log.close()


def test_suspended_iterator_survives_a_swap(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p")
    fill(log, 2000, 10)
    want = latest(records(log))
    end = log.log_end_offset
    it = log.iter_batches()
    seen = [next(it) for _ in range(3)]
    held = [bytes(data) for _, _, data in seen]
    compact(log, now_ms=NOW)
    append(log, [(b"key-0", b"appended after the iterator started")])
    seen += list(it)
    assert [bytes(d) for _, _, d in seen[:3]] == held  # memoryviews still valid
    offs = [off for off, _, _ in seen]
    assert offs == sorted(set(offs)) and seen[-1][1].next_offset == end
    got: dict[bytes, bytes | None] = {}
    for _, _, data in seen:
        for _, _, r in decode_batch(data).iter_records():
            assert r.key is not None
            got[r.key] = r.value
    assert got == want
    log.close()


def test_truncation_between_phases_makes_plan_stale(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p")
    fill(log, 2000, 10)
    plan = prepare_compaction(log, now_ms=NOW)
    assert [p for p in os.listdir(tmp_path / "p") if p.endswith(".cleaned")]
    log.truncate_to(log.log_end_offset - 50)
    content = batches(log)
    stats = commit_compaction(log, plan)
    assert stats.stale and stats.records_after == stats.records_before
    assert batches(log) == content
    assert not [p for p in os.listdir(tmp_path / "p") if p.endswith(".cleaned")]
    compact(log, now_ms=NOW)  # the next compaction works
    assert latest(records(log)) == latest(
        (o, k, v) for o, k, v in _decode_all(content) if k is not None
    )
    log.close()


def _decode_all(content: list[tuple[int, bytes]]) -> list[tuple[int, bytes | None, bytes | None]]:
    return [
        (o, r.key, r.value) for _, data in content for o, _, r in decode_batch(data).iter_records()
    ]


def test_one_compaction_at_a_time_and_abort(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p")
    fill(log, 2000, 10)
    content = batches(log)
    plan = prepare_compaction(log, now_ms=NOW)
    with pytest.raises(CleaningInProgress):
        prepare_compaction(log, now_ms=NOW)
    abort_compaction(log, plan)
    assert batches(log) == content
    assert not [p for p in os.listdir(tmp_path / "p") if p.endswith(".cleaned")]
    with pytest.raises(ValueError):
        commit_compaction(log, plan)
    assert not compact(log, now_ms=NOW).stale
    log.close()


def test_close_between_phases(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p")
    fill(log, 2000, 10)
    content = batches(log)
    plan = prepare_compaction(log, now_ms=NOW)
    log.close()
    assert commit_compaction(log, plan).stale
    log = open_log(tmp_path / "p")
    assert batches(log) == content
    log.close()


# -- crash leftovers ---------------------------------------------------------------------------


def test_stray_cleaned_files_are_deleted_at_open(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p")
    fill(log, 2000, 10)
    content = batches(log)
    plan = prepare_compaction(log, now_ms=NOW)  # a crash before the swap started
    assert plan.replacements
    log.end_cleaning(plan.snapshot)  # type: ignore[arg-type]
    log.close()
    (tmp_path / "p" / f"{123456:020d}.log.cleaned").write_bytes(b"garbage")
    log = open_log(tmp_path / "p")
    assert batches(log) == content
    assert not [p for p in os.listdir(tmp_path / "p") if ".cleaned" in p]
    log.close()


def _crash_after_commit_point(path: Path, *, delete_old: int = 0, rename: int = 0) -> None:
    """Prepare a compaction of the log at ``path`` and stop the swap part-way, as a crash would:
    every .cleaned file renamed to .swap, then ``delete_old`` replaced segments deleted and
    ``rename`` swap files moved into place."""
    log = open_log(path)
    plan = prepare_compaction(log, now_ms=NOW)
    snap = plan.snapshot
    assert snap is not None and plan.replacements
    log.end_cleaning(snap)
    log.close()
    names = sorted(p for p in os.listdir(path) if p.endswith(".cleaned"))
    for name in names:
        os.rename(path / name, path / name.replace(".cleaned", ".swap"))
    doomed = [seg for group, _ in plan.replacements for seg in group]
    for seg in doomed[:delete_old]:
        seg.log_path.unlink()
        seg.index.path.unlink()
    bases = [base for _, base in plan.replacements if base is not None]
    assert len(bases) >= 3 and len(doomed) > 3
    for base in bases[:rename]:
        for suffix in (".index", ".log"):
            os.replace(path / f"{base:020d}{suffix}.swap", path / f"{base:020d}{suffix}")


@pytest.mark.parametrize(
    ("delete_old", "rename"), [(0, 0), (1, 0), (3, 0), (100, 0), (100, 1), (100, 2)]
)
def test_swap_files_are_completed_at_open(tmp_path: Path, delete_old: int, rename: int) -> None:
    path = tmp_path / "p"
    log = open_log(path)
    fill(log, 3000, 300)
    want = latest(records(log))
    end = log.log_end_offset
    log.close()
    ref = tmp_path / "ref"  # the same log, compacted without a crash
    ref.mkdir()
    for name in os.listdir(path):
        (ref / name).write_bytes((path / name).read_bytes())
    with open_log(ref) as ref_log:
        compact(ref_log, now_ms=NOW)
        ref_content = batches(ref_log)

    _crash_after_commit_point(path, delete_old=delete_old, rename=rename)
    log = open_log(path)
    assert not [p for p in os.listdir(path) if p.endswith((".swap", ".cleaned"))]
    assert log.log_end_offset == end
    assert latest(records(log)) == want
    check_offsets(log)
    if delete_old == 100:  # every replaced segment was gone: exactly the compacted log
        assert batches(log) == ref_content
    else:  # members of a group beyond its swap file's end may survive: less compacted
        assert set(ref_content) <= set(batches(log))
    log.close()


def test_partial_commit_and_orphan_index_swap(tmp_path: Path) -> None:
    path = tmp_path / "p"
    log = open_log(path)
    fill(log, 3000, 300)
    want = latest(records(log))
    plan = prepare_compaction(log, now_ms=NOW)
    log.end_cleaning(plan.snapshot)  # type: ignore[arg-type]
    log.close()
    bases = [base for _, base in plan.replacements if base is not None]
    assert len(bases) >= 2
    # Only the second group's log reached .swap; the first group's index did, its log did not.
    second = f"{bases[1]:020d}"
    os.rename(path / f"{second}.log.cleaned", path / f"{second}.log.swap")
    first = f"{bases[0]:020d}"
    os.rename(path / f"{first}.index.cleaned", path / f"{first}.index.swap")
    log = open_log(path)
    assert not [p for p in os.listdir(path) if p.endswith((".swap", ".cleaned"))]
    assert latest(records(log)) == want
    check_offsets(log)
    log.close()


def test_fsync_enabled_round_trip(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p", fsync=True)
    fill(log, 1000, 10)
    want = latest(records(log))
    compact(log, now_ms=NOW)
    content = batches(log)
    log.close()
    with open_log(tmp_path / "p", fsync=True) as log:
        assert batches(log) == content
        assert latest(records(log)) == want
