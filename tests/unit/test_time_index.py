"""storage.time_index and its use by segments, logs and compaction: Kafka's ``.timeindex``
format, lookups that walk a few batch headers rather than the segment, rebuild by recovery."""

from __future__ import annotations

import os
import random
import struct
from pathlib import Path

import pytest

from kcoord.storage.compaction import compact
from kcoord.storage.log import PartitionLog
from kcoord.storage.segment import Segment
from kcoord.storage.time_index import NO_TIMESTAMP, TimeIndex

from .test_compaction import NOW, append
from .test_compaction import open_log as open_compacted
from .test_log import make_batch, open_log


def _entries(path: Path) -> list[tuple[int, int]]:
    data = path.read_bytes()
    assert len(data) % 12 == 0
    return list(struct.iter_unpack(">qi", data))


def _brute_first(stamps: list[tuple[int, int]], ts: int) -> tuple[int, int] | None:
    for base, max_ts in stamps:
        if max_ts >= ts:
            return base, max_ts
    return None


def _brute_max(stamps: list[tuple[int, int]]) -> tuple[int, int] | None:
    best: tuple[int, int] | None = None
    for base, max_ts in stamps:
        if best is None or max_ts > best[1]:
            best = (base, max_ts)
    return best


def test_time_index_entries_and_lookup(tmp_path: Path) -> None:
    idx = TimeIndex(tmp_path / "x.timeindex", 100)
    assert idx.last_entry() == (NO_TIMESTAMP, 100)
    idx.maybe_append(NO_TIMESTAMP, 100)  # nothing to say yet
    idx.maybe_append(50, 103)
    idx.maybe_append(50, 110)  # not larger: ignored
    idx.maybe_append(80, 120)
    assert len(idx) == 2
    assert idx.lookup(10) == (NO_TIMESTAMP, 100)
    assert idx.lookup(50) == (50, 103)
    assert idx.lookup(79) == (50, 103)
    assert idx.lookup(1000) == (80, 120)
    idx.write_pending()
    assert _entries(idx.path) == [(50, 3), (80, 20)]
    with pytest.raises(ValueError):
        idx.maybe_append(90, 110)  # offsets never go back
    idx.truncate_to_offset(120)
    assert idx.last_entry() == (50, 103) and _entries(idx.path) == [(50, 3)]
    idx.close()

    again = TimeIndex(idx.path, 100)
    assert again.load() and again.last_entry() == (50, 103)
    idx.path.write_bytes(struct.pack(">qiqi", 50, 3, 50, 4))  # timestamps must grow
    assert not TimeIndex(idx.path, 100).load()
    idx.path.write_bytes(b"\x00" * 13)
    assert not TimeIndex(idx.path, 100).load()
    idx.path.unlink()
    assert not TimeIndex(idx.path, 100).load()


def _random_log(path: Path, n: int = 200, seed: int = 7) -> tuple[PartitionLog, list[tuple[int, int]]]:
    rnd = random.Random(seed)
    log = open_log(path, segment_bytes=2000, index_interval_bytes=300)
    stamps = []
    ts = 1_000
    for _ in range(n):
        ts += rnd.randint(-30, 60)  # mostly growing, sometimes back in time
        base, _ = log.append(make_batch(rnd.randint(1, 3), base_ts=ts - 5, max_ts=ts))
        stamps.append((base, ts))
    return log, stamps


def test_timeindex_files_follow_kafkas_format(tmp_path: Path) -> None:
    log, stamps = _random_log(tmp_path / "t-0")
    bases = log.segment_base_offsets
    assert len(bases) > 5
    log.close()
    for i, base in enumerate(bases):
        entries = _entries(tmp_path / "t-0" / f"{base:020d}.timeindex")
        assert entries == sorted(entries) and len({t for t, _ in entries}) == len(entries)
        end = bases[i + 1] if i + 1 < len(bases) else 10**9
        batches = [(b, ts) for b, ts in stamps if base <= b < end]
        if i + 1 < len(bases):  # sealed: the last entry is the segment's max and where it is
            top = max(ts for _, ts in batches)
            first_top = next(b for b, ts in batches if ts == top)
            next_base = next((b for b, _ in stamps if b > first_top), end)
            assert entries[-1] == (top, next_base - 1 - base)


def test_lookups_match_brute_force_after_reopen_and_rebuild(tmp_path: Path) -> None:
    path = tmp_path / "t-0"
    log, stamps = _random_log(path)
    targets = [0, 999, 1_000, *range(1_000, 8_000, 97), 10**12]

    def check(lg: PartitionLog) -> None:
        for ts in targets:
            assert lg.offset_for_timestamp(ts) == _brute_first(stamps, ts), ts
        assert lg.max_timestamp_batch() == _brute_max(stamps)

    check(log)
    log.close()
    before = {p: (path / p).read_bytes() for p in os.listdir(path) if p.endswith(".timeindex")}
    log = open_log(path, segment_bytes=2000, index_interval_bytes=300)
    check(log)
    log.close()
    for name in before:
        (path / name).unlink()
    log = open_log(path, segment_bytes=2000, index_interval_bytes=300)  # rebuilt by recovery
    check(log)
    log.close()
    assert {p: (path / p).read_bytes() for p in before} == before


def test_lookups_after_truncation(tmp_path: Path) -> None:
    path = tmp_path / "t-0"
    log, stamps = _random_log(path)
    cut = stamps[len(stamps) // 2][0] + 1  # inside a batch: the whole batch goes
    log.truncate_to(cut)
    kept = [(b, ts) for b, ts in stamps if b < log.log_end_offset]
    for ts in range(900, 8_000, 113):
        assert log.offset_for_timestamp(ts) == _brute_first(kept, ts)
    assert log.max_timestamp_batch() == _brute_max(kept)
    log.close()


def test_lookups_walk_a_few_headers_not_the_segment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "t-0"
    log = open_log(path, segment_bytes=1 << 20, index_interval_bytes=500)
    for i in range(2000):
        log.append(make_batch(1, base_ts=10_000 + i, max_ts=10_000 + i, payload_size=30))
    log.append(make_batch(1, payload_size=30))  # a later, active segment... or the same one
    log.close()
    log = open_log(path, segment_bytes=1 << 20, index_interval_bytes=500)
    walked = [0]
    real = Segment.walk_headers

    def counting(self: Segment, start: int, end: int, chunk: int = 16 << 10):  # type: ignore[no-untyped-def]
        for item in real(self, start, end, chunk):
            walked[0] += 1
            yield item

    monkeypatch.setattr(Segment, "walk_headers", counting)
    assert log.offset_for_timestamp(11_234) == (1_234, 11_234)
    assert walked[0] < 50
    walked[0] = 0
    assert log.max_timestamp_batch() == (1_999, 11_999)
    assert walked[0] < 50
    log.close()


def test_empty_and_timestampless_logs(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    assert log.offset_for_timestamp(0) is None and log.max_timestamp_batch() is None
    log.append(make_batch(2, base_ts=NO_TIMESTAMP, max_ts=NO_TIMESTAMP))
    assert log.max_timestamp_batch() == (0, NO_TIMESTAMP)
    assert log.offset_for_timestamp(0) is None
    log.close()


def test_compaction_writes_time_indexes_for_cleaned_segments(tmp_path: Path) -> None:
    path = tmp_path / "p"
    log = open_compacted(path)
    rnd = random.Random(3)
    for i in range(600):  # keys updated over and over, timestamps mostly growing
        keys = [b"key-%d" % rnd.randint(0, 60) for _ in range(5)]
        append(log, [(k, b"v%d" % i) for k in keys], ts=NOW - 4_000 + i * 10 - rnd.randint(0, 40))
    before = log.size_bytes
    compact(log, now_ms=NOW)
    assert log.size_bytes < before
    bases = log.segment_base_offsets
    answers = [log.offset_for_timestamp(t) for t in range(NOW - 5_000, NOW + 5_000, 250)]
    top = log.max_timestamp_batch()
    log.close()
    written = {b: (path / f"{b:020d}.timeindex").read_bytes() for b in bases}
    assert all(len(_entries(path / f"{b:020d}.timeindex")) > 1 for b in bases[:-1])
    for b in bases:
        (path / f"{b:020d}.timeindex").unlink()
    log = open_compacted(path)  # recovery rebuilds them: the same bytes
    assert {b: (path / f"{b:020d}.timeindex").read_bytes() for b in bases} == written
    assert [log.offset_for_timestamp(t) for t in range(NOW - 5_000, NOW + 5_000, 250)] == answers
    assert log.max_timestamp_batch() == top
    log.close()
