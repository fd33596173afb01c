"""Partition logs on a failing disk: offline logs, lost segment files reported with their
offsets, read-only files, a full disk at append and at start-up."""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from kcoord.storage.file_engine import open_or_offline
from kcoord.storage.files import FilePool
from kcoord.storage.log import PartitionLog
from kcoord.storage.offline import LogOffline

from .test_log import make_batch, open_log, read_all

SEG = "{:020d}"


def _errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


def _filled(path: Path, n: int = 12, **kw: int) -> PartitionLog:
    kw.setdefault("segment_bytes", 500)
    log = open_log(path, **kw)
    for _ in range(n):
        log.append(make_batch(1, payload_size=100))
    return log


def _fail_on(
    monkeypatch: pytest.MonkeyPatch, name: str, when: Callable[[int], bool], err: int
) -> None:
    """Make ``os.<name>(fd, ...)`` fail with ``err`` when ``when(fd)`` holds."""
    real = getattr(os, name)

    def failing(fd: int, *args: object) -> object:
        if when(fd):
            raise OSError(err, os.strerror(err))
        return real(fd, *args)

    monkeypatch.setattr(os, name, failing)


def _is(path_end: str) -> Callable[[int], bool]:
    return lambda fd: os.readlink(f"/proc/self/fd/{fd}").endswith(path_end)


# -- offline logs -----------------------------------------------------------------------------


def test_a_partition_that_cannot_be_opened_is_offline_and_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "t-3"
    log = _filled(path)
    bases = log.segment_base_offsets
    log.close()
    last = path / (SEG.format(bases[-1]) + ".log")
    last.unlink()
    last.mkdir()  # opening it as a file fails (EISDIR)
    with caplog.at_level(logging.ERROR, logger="kcoord.storage"):
        plog = open_or_offline(path, fsync=False)
    assert plog.offline is not None
    (msg,) = _errors(caplog)
    assert "t-3" in msg and "offline" in msg and f"offsets from {bases[0]} on" in msg
    assert plog.log_start_offset == plog.log_end_offset == -1
    for op in (
        lambda: plog.append(make_batch()),
        lambda: plog.read(0, 100),
        plog.flush,
        lambda: list(plog.iter_batches()),
        lambda: plog.offset_for_timestamp(0),
        plog.max_timestamp_batch,
    ):
        with pytest.raises(LogOffline) as exc:
            op()
        assert isinstance(exc.value, OSError)
    plog.close()
    plog.delete()
    assert not path.exists()


# -- lost segment files -------------------------------------------------------------------------


def test_a_deleted_middle_segment_is_reported_with_its_offsets(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "t-0"
    log = _filled(path)
    bases = log.segment_base_offsets
    assert len(bases) >= 4
    log.close()
    (path / (SEG.format(bases[1]) + ".log")).unlink()  # its indexes remain
    with caplog.at_level(logging.ERROR, logger="kcoord.storage"):
        log = open_log(path, segment_bytes=500)
    errors = _errors(caplog)
    assert any(f"offsets {bases[1]} to {bases[2] - 1} are lost" in m for m in errors), errors
    assert any(f"offsets {bases[1]} to {bases[2] - 1} are missing" in m for m in errors), errors
    assert not (path / (SEG.format(bases[1]) + ".index")).exists()
    log.close()


def test_a_gap_without_any_file_left_is_reported_unless_compacted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "t-0"
    log = _filled(path)
    bases = log.segment_base_offsets
    log.close()
    for suffix in (".index", ".timeindex", ".txnindex", ".log"):  # every file of the segment
        (path / (SEG.format(bases[1]) + suffix)).unlink()
    with caplog.at_level(logging.ERROR, logger="kcoord.storage"):
        open_log(path, segment_bytes=500, compacted=True).close()
    assert _errors(caplog) == []  # compaction leaves gaps: not a loss
    with caplog.at_level(logging.ERROR, logger="kcoord.storage"):
        open_log(path, segment_bytes=500).close()
    assert [m for m in _errors(caplog) if f"{bases[1]} to {bases[2] - 1}" in m]


def test_a_deleted_last_segment_reports_what_its_index_knew(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "t-0"
    log = _filled(path, n=40, segment_bytes=100_000, index_interval_bytes=300)
    log.close()
    (path / (SEG.format(0) + ".log")).unlink()
    with caplog.at_level(logging.ERROR, logger="kcoord.storage"):
        log = open_log(path, segment_bytes=100_000, index_interval_bytes=300)
    (msg,) = _errors(caplog)
    assert "offsets from 0 on (at least to 3" in msg  # its last index entry named offset 3x
    assert log.log_end_offset == 0
    log.close()


def test_the_active_segment_deleted_under_a_running_log_refuses_the_flush(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "t-0"
    log = open_log(path, fsync=True)
    for _ in range(6):
        log.append(make_batch())
    log.flush()
    (path / (SEG.format(0) + ".log")).unlink()
    log.append(make_batch())  # lands in the unlinked file...
    with caplog.at_level(logging.ERROR, logger="kcoord.storage"), pytest.raises(LogOffline):
        log.flush()  # ...and is not acknowledged
    assert log.flushed_offset == 6
    (msg,) = _errors(caplog)
    assert "was deleted" in msg and "offsets 0 to 6" in msg
    with pytest.raises(LogOffline):
        log.append(make_batch())
    assert log.offline is not None
    log.close()


def test_a_deleted_segment_whose_descriptor_was_evicted(tmp_path: Path) -> None:
    pool = FilePool(16)
    path = tmp_path / "t-0"
    log = PartitionLog.open(path, fsync=True, pool=pool)
    log.append(make_batch())
    log.flush()
    (path / (SEG.format(0) + ".log")).unlink()
    pool.close_idle()
    with pytest.raises(LogOffline):
        log.append(make_batch())
    assert log.log_end_offset == 1
    log.close()


# -- read-only files and a full disk ----------------------------------------------------------


def test_a_read_only_segment_serves_reads_and_refuses_appends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "t-0"
    log = _filled(path, n=3, segment_bytes=100_000)
    content = read_all(log)
    log.close()
    seg = str(path / (SEG.format(0) + ".log"))
    real_open = os.open

    def immutable(p: object, flags: int, *args: int) -> int:
        if str(p) == seg and flags & (os.O_RDWR | os.O_WRONLY):
            raise PermissionError(errno.EPERM, "Operation not permitted", str(p))
        return real_open(p, flags, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", immutable)
    log = open_log(path, segment_bytes=100_000)
    assert read_all(log) == content
    with pytest.raises(OSError):
        log.append(make_batch())
    assert log.log_end_offset == 3 and read_all(log) == content
    log.close()


def test_a_full_disk_at_append_leaves_the_log_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "t-0"
    log = _filled(path, n=5)
    content = read_all(log)
    with monkeypatch.context() as m:
        _fail_on(m, "pwrite", _is(".log"), errno.ENOSPC)
        with pytest.raises(OSError) as exc:
            log.append(make_batch(3) + make_batch(2))
        assert exc.value.errno == errno.ENOSPC
    assert log.log_end_offset == 5 and read_all(log) == content
    first, last = log.append(make_batch(2))  # space again: offsets continue
    assert (first, last) == (5, 6)
    log.close()
    log = open_log(path, segment_bytes=500)
    assert log.log_end_offset == 7
    log.close()


def test_start_up_survives_failing_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "t-0"
    log = _filled(path, n=8, segment_bytes=100_000, index_interval_bytes=150)
    content = read_all(log)
    log.close()
    seg = path / (SEG.format(0) + ".log")
    with open(seg, "ab") as f:
        f.write(b"\x00\x00\x00\x00torn")  # a torn tail recovery wants to cut
    for suffix in (".index", ".timeindex"):
        (path / (SEG.format(0) + suffix)).unlink()  # indexes recovery wants to rewrite
    with monkeypatch.context() as m:
        _fail_on(m, "ftruncate", lambda fd: True, errno.EPERM)
        _fail_on(m, "pwrite", lambda fd: True, errno.ENOSPC)
        with caplog.at_level(logging.WARNING, logger="kcoord.storage"):
            log = open_log(path, segment_bytes=100_000, index_interval_bytes=150)
        assert read_all(log) == content
        assert log.offset_for_timestamp(0) == (0, 1_000)
        assert log.read(5, 100)[:8] == (5).to_bytes(8, "big")  # the in-memory index works
        with pytest.raises(OSError):
            log.append(make_batch())  # the tail could not be cut: no appends
    warnings = " ".join(r.getMessage() for r in caplog.records)
    assert "could not cut" in warnings and "kept in memory" in warnings
    log.close()
    log = open_log(path, segment_bytes=100_000, index_interval_bytes=150)  # a healthy disk
    assert read_all(log) == content
    log.append(make_batch())
    log.close()
