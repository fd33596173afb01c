"""Tests for storage.log (PartitionLog), its segments/index, and storage.partition_metadata."""

from __future__ import annotations

import logging
import os
import struct
import threading
import uuid
from pathlib import Path

import pytest
from crc32c import crc32c

import kcoord.storage.segment as segment_mod
from kcoord.protocol.batch import CorruptBatch, iter_headers, parse_header
from kcoord.storage.engine import LogClosed, OffsetOutOfRange
from kcoord.storage.log import PartitionLog
from kcoord.storage.partition_metadata import (
    PARTITION_METADATA_FILE,
    read_partition_metadata,
    topic_id_from_str,
    topic_id_to_str,
    write_partition_metadata,
)

SEG0 = "00000000000000000000.log"


def make_batch(
    records: int = 1,
    *,
    payload_size: int = 20,
    base_ts: int = 1_000,
    max_ts: int | None = None,
    base_offset: int = 0,
    fill: int = 0xAB,
) -> bytes:
    """A v2 batch with an opaque record area (the log never decodes records)."""
    body = (
        struct.pack(
            ">hiqqqhii",
            0,  # attributes
            records - 1,  # lastOffsetDelta
            base_ts,
            base_ts if max_ts is None else max_ts,
            -1,  # producerId
            -1,  # producerEpoch
            -1,  # baseSequence
            records,
        )
        + bytes([fill]) * payload_size
    )
    crc = crc32c(body)
    return struct.pack(">qiibI", base_offset, 9 + len(body), -1, 2, crc) + body


def headers(data: bytes) -> list[tuple[int, int, int]]:
    """(base offset, last offset, size) for each batch in data."""
    return [(h.base_offset, h.last_offset, h.size) for _, h in iter_headers(data)]


def open_log(path: Path, **kw: int | bool) -> PartitionLog:
    kw.setdefault("fsync", False)
    return PartitionLog.open(path, **kw)  # type: ignore[arg-type]


def read_all(log: PartitionLog) -> bytes:
    out = bytearray()
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        chunk = log.read(offset, 1 << 20)
        assert chunk
        out += chunk
        offset = headers(chunk)[-1][1] + 1
    return bytes(out)


# -- append / read ---------------------------------------------------------------------------


def test_append_read_round_trip(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    raw = make_batch(3, base_offset=77)
    assert log.append(raw) == (0, 2)
    assert raw == make_batch(3, base_offset=77)  # caller's bytes untouched
    data = log.read(0, 1 << 20)
    assert headers(data) == [(0, 2, len(raw))]
    assert data[8:] == raw[8:]  # only baseOffset differs
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (0, 3, 3)
    assert log.size_bytes == len(raw)
    assert log.read(3, 100) == b""
    log.close()


def test_offsets_assigned_across_appends(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    assert log.append(make_batch(3)) == (0, 2)
    assert log.append(make_batch(1)) == (3, 3)
    multi = make_batch(2) + make_batch(5) + make_batch(1)
    assert log.append(bytearray(multi)) == (4, 11)
    assert log.log_end_offset == 12
    assert [(b, last) for b, last, _ in headers(read_all(log))] == [
        (0, 2),
        (3, 3),
        (4, 5),
        (6, 10),
        (11, 11),
    ]
    # The first batch returned may start before the requested offset.
    assert headers(log.read(8, 1))[0][:2] == (6, 10)
    log.close()


def test_read_max_bytes_always_whole_batches(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    big = make_batch(1, payload_size=5000)
    small = make_batch(1, payload_size=10)
    log.append(big)
    log.append(small)
    log.append(small)
    # max_bytes smaller than the first batch: still exactly one whole batch.
    for max_bytes in (0, 1, 100, len(big) - 1, len(big)):
        assert headers(log.read(0, max_bytes)) == [(0, 0, len(big))]
    # Room for the big batch and one and a half small ones: two batches, never a partial one.
    got = log.read(0, len(big) + len(small) + len(small) // 2)
    assert [h[0] for h in headers(got)] == [0, 1]
    assert len(log.read(0, 1 << 20)) == len(big) + 2 * len(small)
    assert headers(log.read(2, 1)) == [(2, 2, len(small))]
    with pytest.raises(OffsetOutOfRange):
        log.read(4, 100)
    with pytest.raises(OffsetOutOfRange):
        log.read(-1, 100)
    log.close()


def test_invalid_append_raises_and_leaves_log_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "t-0"
    log = open_log(path, segment_bytes=300)
    log.append(make_batch(2))
    before = (log.log_end_offset, log.size_bytes, sorted(os.listdir(path)), read_all(log))

    good = make_batch(1, payload_size=250)
    bad_crc = bytearray(make_batch(1))
    bad_crc[-1] ^= 0xFF
    bad_magic = bytearray(make_batch(1))
    bad_magic[16] = 1
    cases = [
        good + bytes(bad_crc),  # the first (valid) batch must not be written either
        good + make_batch(1)[:-3],  # torn
        good + bytes(bad_magic),
        good + b"\x00" * 7,  # trailing bytes
        b"",
    ]
    for case in cases:
        with pytest.raises(CorruptBatch):
            log.append(case)
        after = (log.log_end_offset, log.size_bytes, sorted(os.listdir(path)), read_all(log))
        assert after == before
    assert log.append(make_batch(1)) == (2, 2)
    log.close()


def test_append_rolls_back_on_io_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "t-0"
    log = open_log(path, segment_bytes=400)
    log.append(make_batch(1, payload_size=100))
    before = (log.log_end_offset, log.size_bytes, sorted(os.listdir(path)))
    real = segment_mod.pwrite_all
    calls = 0

    def flaky(fd: int, data: bytes | bytearray | memoryview, position: int) -> None:
        nonlocal calls
        calls += 1
        if calls == 2:  # the write into the freshly rolled segment
            raise OSError(28, "No space left on device")
        real(fd, data, position)

    monkeypatch.setattr(segment_mod, "pwrite_all", flaky)
    batch = make_batch(1, payload_size=150)
    with pytest.raises(OSError):
        log.append(batch + batch + batch)
    monkeypatch.setattr(segment_mod, "pwrite_all", real)
    assert (log.log_end_offset, log.size_bytes, sorted(os.listdir(path))) == before
    assert os.path.getsize(path / SEG0) == before[1]
    assert log.append(batch) == (1, 1)
    log.close()


# -- segments and index ----------------------------------------------------------------------


def test_segment_roll_by_size_and_names(tmp_path: Path) -> None:
    path = tmp_path / "t-0"
    batch = make_batch(2, payload_size=100)  # 181 bytes
    log = open_log(path, segment_bytes=400)
    log.append(batch)  # 0-1
    log.append(batch)  # 2-3 (362 bytes)
    log.append(batch)  # 4-5 -> would exceed: new segment at 4
    assert log.segment_base_offsets == [0, 4]
    log.append(batch + batch + batch)  # 6-7 fits with 4-5; 8-9 rolls; 10-11 with it
    assert log.segment_base_offsets == [0, 4, 8]
    huge = make_batch(1, payload_size=1000)
    log.append(huge)  # 12: bigger than segment_bytes -> a segment of its own
    log.append(batch)  # 13-14: next segment
    assert log.segment_base_offsets == [0, 4, 8, 12, 13]
    names = sorted(n for n in os.listdir(path) if n.endswith(".log"))
    assert names == [f"{b:020d}.log" for b in (0, 4, 8, 12, 13)]
    assert names[0] == SEG0 and names[1] == "00000000000000000004.log"
    assert os.path.getsize(path / f"{12:020d}.log") == len(huge)
    assert all((path / n.replace(".log", ".index")).exists() for n in names)
    # Reads cross segment boundaries one segment at a time.
    assert [b for b, _, _ in headers(read_all(log))] == [0, 2, 4, 6, 8, 10, 12, 13]
    assert headers(log.read(5, 1 << 20)) == [(4, 5, len(batch)), (6, 7, len(batch))]
    log.close()


def test_reopen_keeps_everything(tmp_path: Path) -> None:
    path = tmp_path / "t-0"
    log = PartitionLog.open(path, segment_bytes=1000, fsync=True)
    for i in range(20):
        log.append(make_batch(i % 3 + 1, payload_size=50 + i))
    log.flush()
    assert log.flushed_offset == log.log_end_offset
    end, size, bases, data = (
        log.log_end_offset,
        log.size_bytes,
        log.segment_base_offsets,
        read_all(log),
    )
    log.close()
    with pytest.raises(LogClosed):
        log.read(0, 10)
    log = PartitionLog.open(path, segment_bytes=1000, fsync=True)
    assert (log.log_end_offset, log.size_bytes, log.segment_base_offsets) == (end, size, bases)
    assert read_all(log) == data
    assert log.append(make_batch(1)) == (end, end)
    log.close()


def test_index_lookups_in_big_log(tmp_path: Path) -> None:
    path = tmp_path / "t-0"
    log = open_log(path, segment_bytes=256 * 1024, index_interval_bytes=4096)
    spans: list[tuple[int, int]] = []
    for i in range(3000):
        first, last = log.append(make_batch(i % 4 + 1, payload_size=60 + (i * 37) % 300))
        spans.append((first, last))
    assert len(log.segment_base_offsets) > 2

    def check(lg: PartitionLog) -> None:
        for first, last in spans[::7] + spans[-3:]:
            for off in {first, last, (first + last) // 2}:
                b, lst, _ = headers(lg.read(off, 1))[0]
                assert (b, lst) == (first, last)

    check(log)
    # The index file is Kafka's format: (int32 relative last offset, int32 position) pairs,
    # each pointing at the start of the batch that ends at that offset.
    seg = path / SEG0
    entries = list(struct.iter_unpack(">ii", (path / "00000000000000000000.index").read_bytes()))
    assert len(entries) > 40
    log_bytes = seg.read_bytes()
    for rel, pos in entries:
        assert parse_header(log_bytes, pos).last_offset == rel
    gaps = [b[1] - a[1] for a, b in zip(entries, entries[1:], strict=False)]
    assert all(4096 <= g < 4096 + 500 for g in gaps)
    log.close()
    # After reopening, sealed segments use their on-disk index; the active one is rebuilt.
    log = open_log(path, segment_bytes=256 * 1024)
    check(log)
    log.close()


def test_bad_sealed_index_is_rebuilt(tmp_path: Path) -> None:
    path = tmp_path / "t-0"
    log = open_log(path, segment_bytes=20_000, index_interval_bytes=512)
    for _ in range(200):
        log.append(make_batch(2, payload_size=200))
    data, end = read_all(log), log.log_end_offset
    log.close()
    (path / "00000000000000000000.index").write_bytes(b"\x00" * 64)  # zero-filled
    os.remove(path / f"{log.segment_base_offsets[1]:020d}.index")  # missing
    log = open_log(path, segment_bytes=20_000, index_interval_bytes=512)
    assert (read_all(log), log.log_end_offset) == (data, end)
    entries = list(struct.iter_unpack(">ii", (path / "00000000000000000000.index").read_bytes()))
    assert entries and entries[0] != (0, 0)
    log.close()


# -- recovery --------------------------------------------------------------------------------


def _five_batches(path: Path) -> tuple[list[tuple[int, int, int]], bytes]:
    log = open_log(path)
    for i in range(5):
        log.append(make_batch(2, payload_size=40 + i))
    data = read_all(log)
    log.close()
    return headers(data), data


def test_recovery_torn_last_batch(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "t-0"
    spans, data = _five_batches(path)
    boundary = sum(s for _, _, s in spans[:4])
    os.truncate(path / SEG0, boundary + 30)
    with caplog.at_level(logging.WARNING, logger="kcoord.storage"):
        log = open_log(path)
    assert os.path.getsize(path / SEG0) == boundary
    assert log.log_end_offset == 8
    assert read_all(log) == data[:boundary]
    assert log.append(make_batch(1)) == (8, 8)
    records = [r for r in caplog.records if r.name == "kcoord.storage"]
    assert len(records) == 1 and records[0].levelno == logging.WARNING
    assert "cut 30 bytes" in records[0].getMessage()
    log.close()


def test_recovery_flipped_byte_in_last_but_one(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "t-0"
    spans, data = _five_batches(path)
    boundary = sum(s for _, _, s in spans[:3])
    raw = bytearray((path / SEG0).read_bytes())
    raw[boundary + 70] ^= 0x01  # inside batch 4's records: CRC mismatch
    (path / SEG0).write_bytes(raw)
    with caplog.at_level(logging.WARNING, logger="kcoord.storage"):
        log = open_log(path)
    assert os.path.getsize(path / SEG0) == boundary
    assert log.log_end_offset == 6
    assert read_all(log) == data[:boundary]
    assert "CRC" in caplog.text
    assert log.append(make_batch(3)) == (6, 8)
    log.close()


def test_recovery_garbage_after_valid_batches(tmp_path: Path) -> None:
    path = tmp_path / "t-0"
    _, data = _five_batches(path)
    with open(path / SEG0, "ab") as f:
        f.write(os.urandom(1000))
    log = open_log(path)
    assert (path / SEG0).read_bytes() == data
    assert log.log_end_offset == 10
    log.close()
    # Garbage shaped like a huge batch length is cut as well.
    with open(path / SEG0, "ab") as f:
        f.write(struct.pack(">qi", 10, 1 << 30) + b"\x00" * 100)
    log = open_log(path)
    assert (path / SEG0).read_bytes() == data
    log.close()
    # So is a whole, CRC-valid batch whose offsets go backwards (a replayed write).
    with open(path / SEG0, "ab") as f:
        f.write(make_batch(1, base_offset=9))
    log = open_log(path)
    assert (path / SEG0).read_bytes() == data
    assert log.log_end_offset == 10
    log.close()


def test_recovery_empty_segment_files(tmp_path: Path) -> None:
    path = tmp_path / "t-0"
    path.mkdir()
    (path / SEG0).touch()
    log = open_log(path)
    assert (log.log_start_offset, log.log_end_offset, log.size_bytes) == (0, 0, 0)
    assert log.read(0, 100) == b""
    assert log.append(make_batch(2)) == (0, 1)
    log.close()
    # An empty active segment after a roll: the log ends at its base offset.
    (path / f"{2:020d}.log").touch()
    log = open_log(path)
    assert log.segment_base_offsets == [0, 2]
    assert log.log_end_offset == 2
    assert log.append(make_batch(1)) == (2, 2)
    assert [b for b, _, _ in headers(read_all(log))] == [0, 2]
    log.close()


def test_recovery_of_sealed_segment_without_index_drops_later_segments(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "t-0"
    log = open_log(path, segment_bytes=500)
    batch = make_batch(1, payload_size=100)
    for _ in range(12):
        log.append(batch)
    bases = log.segment_base_offsets
    assert len(bases) >= 3
    log.close()
    second = path / f"{bases[1]:020d}.log"
    raw = bytearray(second.read_bytes())
    raw[len(batch) + 80] ^= 0xFF  # the second batch of the second segment
    second.write_bytes(raw)
    os.remove(path / f"{bases[1]:020d}.index")
    with caplog.at_level(logging.WARNING, logger="kcoord.storage"):
        log = open_log(path, segment_bytes=500)
    assert log.segment_base_offsets == bases[:2]
    assert log.log_end_offset == bases[1] + 1
    assert sorted(os.listdir(path)) == sorted(
        [
            f"{b:020d}{ext}"
            for b in bases[:2]
            for ext in (".log", ".index", ".timeindex", ".txnindex")
        ]
        + [f"{bases[1]:020d}.snapshot"]  # the producer snapshot of the roll; later ones deleted
    )
    msgs = [r.getMessage() for r in caplog.records if r.name == "kcoord.storage"]
    assert len(msgs) == 1 and "deleted" in msgs[0]
    log.close()


# -- timestamps, iteration, truncation, flush, delete ----------------------------------------


def test_offset_for_timestamp(tmp_path: Path) -> None:
    path = tmp_path / "t-0"
    log = open_log(path, segment_bytes=600, index_interval_bytes=200)
    stamps = [100, 300, 200, 400, 400, 500, 450, 900]
    for ts in stamps:
        log.append(make_batch(2, base_ts=ts - 5, max_ts=ts, payload_size=100))

    def check(lg: PartitionLog) -> None:
        assert lg.offset_for_timestamp(0) == (0, 100)
        assert lg.offset_for_timestamp(100) == (0, 100)
        assert lg.offset_for_timestamp(150) == (2, 300)
        assert lg.offset_for_timestamp(301) == (6, 400)
        assert lg.offset_for_timestamp(460) == (10, 500)
        assert lg.offset_for_timestamp(900) == (14, 900)
        assert lg.offset_for_timestamp(901) is None

    assert len(log.segment_base_offsets) > 2
    check(log)
    log.close()
    log = open_log(path, segment_bytes=600, index_interval_bytes=200)
    check(log)  # time index rebuilt lazily for sealed segments
    log.close()


def test_offset_for_timestamp_with_sparse_time_index(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", index_interval_bytes=256)
    for i in range(500):
        log.append(make_batch(1, base_ts=i * 10, payload_size=80))
    for target in (0, 5, 10, 1234, 2500, 4990):
        off = (target + 9) // 10
        assert log.offset_for_timestamp(target) == (off, off * 10)
    assert log.offset_for_timestamp(4991) is None
    log.close()


def test_iter_batches_across_segments(tmp_path: Path) -> None:
    path = tmp_path / "t-0"
    log = open_log(path, segment_bytes=1000)
    spans = [log.append(make_batch(i % 3 + 1, payload_size=100 + i)) for i in range(30)]
    assert len(log.segment_base_offsets) > 3
    got = [(off, h.last_offset, bytes(data)) for off, h, data in log.iter_batches()]
    assert [(a, b) for a, b, _ in got] == spans
    assert b"".join(d for _, _, d in got) == read_all(log)
    for _, h, data in log.iter_batches(verify_crc=True):
        assert parse_header(data).base_offset == h.base_offset
    mid_first, mid_last = spans[17]
    from_mid = [off for off, _, _ in log.iter_batches(mid_first + (mid_last > mid_first))]
    assert from_mid == [s[0] for s in spans[17:]]
    assert list(log.iter_batches(log.log_end_offset)) == []
    log.close()


def test_iter_batches_large_batches_small_chunks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(segment_mod, "SCAN_CHUNK", 256)
    log = open_log(tmp_path / "t-0")
    sizes = [50, 1000, 30, 3000, 10]
    for s in sizes:
        log.append(make_batch(1, payload_size=s))
    got = list(log.iter_batches(verify_crc=True))
    assert [len(d) - 61 for _, _, d in got] == sizes
    log.close()


def test_truncate_to(tmp_path: Path) -> None:
    path = tmp_path / "t-0"
    log = open_log(path, segment_bytes=500)
    for _ in range(10):
        log.append(make_batch(2, payload_size=100))  # 2 batches per segment
    log.truncate_to(9)  # inside batch 8-9: the whole batch goes
    assert log.log_end_offset == 8
    log.truncate_to(4)  # at a segment boundary: that segment is deleted
    assert log.log_end_offset == 4
    assert log.segment_base_offsets == [0]
    assert log.append(make_batch(1)) == (4, 4)
    log.close()
    log = open_log(path, segment_bytes=500)
    assert log.log_end_offset == 5
    log.close()


def test_flush_group_commit_and_concurrent_append(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "t-0", segment_bytes=2000, fsync=True)
    for _ in range(5):
        log.append(make_batch(1, payload_size=300))
    assert log.flushed_offset == 0
    log.flush()
    assert log.flushed_offset == 5
    errors: list[BaseException] = []

    def flusher() -> None:
        try:
            for _ in range(20):
                log.flush()
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    t = threading.Thread(target=flusher)
    t.start()
    for _ in range(200):
        log.append(make_batch(1, payload_size=300))
    t.join()
    assert not errors
    log.flush()
    assert log.flushed_offset == log.log_end_offset == 205
    log.close()


def test_delete_removes_directory(tmp_path: Path) -> None:
    path = tmp_path / "t-0"
    log = open_log(path)
    log.append(make_batch(1))
    write_partition_metadata(path, uuid.uuid4(), fsync=False)
    log.delete()
    assert not path.exists()
    assert os.listdir(tmp_path) == []


# -- partition.metadata ----------------------------------------------------------------------


def test_partition_metadata_round_trip(tmp_path: Path) -> None:
    assert read_partition_metadata(tmp_path) is None
    tid = uuid.UUID("6ba7b810-9dad-11d1-80b4-00c04fd430c8")
    write_partition_metadata(tmp_path, tid)
    text = (tmp_path / PARTITION_METADATA_FILE).read_text()
    assert text == "version: 0\ntopic_id: a6e4EJ2tEdGAtADAT9QwyA\n"
    assert read_partition_metadata(tmp_path) == tid
    other = uuid.uuid4()
    write_partition_metadata(tmp_path, other)
    assert read_partition_metadata(tmp_path) == other
    assert sorted(os.listdir(tmp_path)) == [PARTITION_METADATA_FILE]
    # Opening a log in the same directory leaves the file alone.
    open_log(tmp_path).close()
    assert read_partition_metadata(tmp_path) == other


def test_topic_id_string_form() -> None:
    assert topic_id_to_str(uuid.UUID(int=0)) == "AAAAAAAAAAAAAAAAAAAAAA"
    for _ in range(20):
        u = uuid.uuid4()
        s = topic_id_to_str(u)
        assert len(s) == 22 and "=" not in s
        assert topic_id_from_str(s) == u
    for bad in ("", "abc", "A" * 23, "!" * 22):
        with pytest.raises(ValueError):
            topic_id_from_str(bad)


def test_partition_metadata_malformed(tmp_path: Path) -> None:
    (tmp_path / PARTITION_METADATA_FILE).write_text(
        "version: 1\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA\n"
    )
    with pytest.raises(ValueError):
        read_partition_metadata(tmp_path)
    (tmp_path / PARTITION_METADATA_FILE).write_text("version: 0\n")
    with pytest.raises(ValueError):
        read_partition_metadata(tmp_path)
