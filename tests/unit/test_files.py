"""storage.files: the bounded, lazily opened, least-recently-used pool of descriptors, and the
logs built on it (no descriptor until used, a bound however many partitions, threads safe)."""

from __future__ import annotations

import errno
import os
import threading
from pathlib import Path

import pytest

from kcoord.storage.files import FileClosed, FilePool, FileReadOnly, ManagedFile
from kcoord.storage.log import PartitionLog

from .test_log import make_batch, read_all


def _files(tmp_path: Path, n: int, pool: FilePool) -> list[ManagedFile]:
    out = []
    for i in range(n):
        path = tmp_path / f"f{i}"
        path.write_bytes(b"%d" % i * 10)
        out.append(ManagedFile(path, pool))
    return out


def _read(f: ManagedFile) -> bytes:
    with f as fd:
        return os.pread(fd, 100, 0)


def test_a_file_holds_no_descriptor_until_used(tmp_path: Path) -> None:
    pool = FilePool(4)
    (f,) = _files(tmp_path, 1, pool)
    assert not f.is_open and pool.open_count == 0
    assert _read(f) == b"0" * 10
    assert f.is_open and pool.open_count == 1 and pool.opens == 1
    assert _read(f) == b"0" * 10
    assert pool.opens == 1  # kept open between uses


def test_least_recently_used_descriptors_are_closed_and_reopened(tmp_path: Path) -> None:
    pool = FilePool(3)
    files = _files(tmp_path, 5, pool)
    for f in files[:3]:
        _read(f)
    _read(files[0])  # files[1] is now the least recently used
    _read(files[3])
    assert pool.open_count == 3
    assert [f.is_open for f in files] == [True, False, True, True, False]
    assert _read(files[1]) == b"1" * 10  # reopened on use
    assert pool.open_count == 3 and pool.evictions == 2
    assert not files[2].is_open


def test_a_descriptor_in_use_is_never_closed_by_eviction(tmp_path: Path) -> None:
    pool = FilePool(1)
    a, b, c = _files(tmp_path, 3, pool)
    fd_a = a.acquire()  # held, like a flush thread in the middle of an fsync
    assert _read(b) == b"1" * 10
    assert a.is_open and pool.open_count <= 2  # over capacity rather than closing a
    assert os.pread(fd_a, 10, 0) == b"0" * 10
    a.release()
    _read(c)
    assert pool.open_count == 1 and c.is_open and not a.is_open


def test_threads_sharing_a_tiny_pool_always_read_their_own_file(tmp_path: Path) -> None:
    pool = FilePool(2)
    files = _files(tmp_path, 12, pool)
    errors: list[str] = []

    def reader(offset: int) -> None:
        for round_ in range(400):
            i = (offset + round_) % len(files)
            got = _read(files[i])
            if got != b"%d" % i * 10:
                errors.append(f"file {i} read {got!r}")

    threads = [threading.Thread(target=reader, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert pool.open_count <= 2 + len(threads)
    pool.close_idle()
    assert pool.open_count == 0


def test_read_only_fallback_and_refused_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "ro"
    path.write_bytes(b"data")
    real_open = os.open

    def no_write(p: object, flags: int, *args: int) -> int:
        if Path(str(p)) == path and flags & os.O_RDWR:
            raise PermissionError(errno.EPERM, "Operation not permitted", str(p))
        return real_open(p, flags, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", no_write)
    f = ManagedFile(path, FilePool(2))
    assert _read(f) == b"data"
    assert f.read_only
    with pytest.raises(FileReadOnly) as exc:
        f.check_writable()
    assert isinstance(exc.value, OSError)


def test_sync_only_when_written_and_closed_files_refuse_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(fd) or real_fsync(fd))
    (f,) = _files(tmp_path, 1, FilePool(1))
    f.sync()
    assert synced == []
    with f as fd:
        os.pwrite(fd, b"x", 0)
    f.written()
    f.pool.close_idle()  # type: ignore[union-attr]  # evicted before the fsync
    f.sync()
    assert len(synced) == 1  # reopened to fsync: fsync works on the file
    f.sync()
    assert len(synced) == 1
    f.close()
    with pytest.raises(FileClosed):
        f.acquire()


def test_fresh_partitions_hold_no_descriptor_and_many_logs_stay_bounded(tmp_path: Path) -> None:
    pool = FilePool(16)
    logs = []
    for i in range(60):
        path = tmp_path / f"t-{i}"
        path.mkdir()
        PartitionLog.initialize(path, fsync=False)
        logs.append(PartitionLog.fresh(path, fsync=False, pool=pool, segment_bytes=400))
    assert pool.open_count == 0 and pool.opens == 0
    batch = make_batch(1, payload_size=100)
    for _ in range(5):  # several segments each
        for plog in logs:
            plog.append(batch)
            plog.flush()
    assert pool.open_count <= 16
    for plog in logs:
        assert read_all(plog) == b"".join(
            bytes(b) for b in _renumbered(batch, plog.log_end_offset)
        )
        assert len(plog.segment_base_offsets) >= 2
    assert pool.open_count <= 16
    for plog in logs:
        plog.close()
    assert pool.open_count == 0
    reopened = [
        PartitionLog.open(tmp_path / f"t-{i}", fsync=False, pool=pool) for i in range(60)
    ]
    assert pool.open_count <= 16
    assert all(plog.log_end_offset == 5 for plog in reopened)
    for plog in reopened:
        plog.close()


def _renumbered(batch: bytes, count: int) -> list[bytearray]:
    """``count`` copies of a one-record batch with base offsets 0..count-1."""
    out = []
    for i in range(count):
        b = bytearray(batch)
        b[0:8] = i.to_bytes(8, "big")
        out.append(b)
    return out


def test_flush_threads_and_appends_share_a_tiny_pool(tmp_path: Path) -> None:
    pool = FilePool(16)
    logs = [
        PartitionLog.open(tmp_path / f"t-{i}", fsync=True, pool=pool, segment_bytes=2000)
        for i in range(40)
    ]
    batch = make_batch(1, payload_size=60)
    stop = threading.Event()
    errors: list[BaseException] = []

    def flusher() -> None:
        while not stop.is_set():
            for plog in logs:
                try:
                    plog.flush()
                except BaseException as e:  # noqa: BLE001 - reported below
                    errors.append(e)

    threads = [threading.Thread(target=flusher) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        for _ in range(30):
            for plog in logs:
                plog.append(batch)
                assert plog.read(plog.log_start_offset, 1 << 16)
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert errors == []
    for plog in logs:
        plog.flush()
        assert plog.flushed_offset == plog.log_end_offset == 30
        assert read_all(plog) == b"".join(bytes(b) for b in _renumbered(batch, 30))
        plog.close()
    assert pool.open_count == 0
