"""Disk faults: a full disk, an unwritable segment, a segment deleted under a running broker.

Finding 2 of the storage part of the hardening issue: the broker refused to start while the
disk was full or a segment was unwritable (a traceback), and a segment deleted under a running
broker silently lost acknowledged records at the next start. Now start-up tolerates failed
writes and serves what it can read, writes are refused with errors, and lost offsets are
logged at ERROR with their range (while running, writes to a deleted segment are refused
instead of acknowledged).

These probes need a real full disk and a real unwritable file: a size-limited tmpfs mounted
for the data directory and ``chattr +i`` (or a read-only bind mount), which need root (CI runs
as root); without it they are skipped, saying why.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from kcoord.protocol.apis import ApiKey
from kcoord.protocol.errors import ErrorCode
from kcoord.storage.checkpoint import RECOVERY_POINT_CHECKPOINT, read_checkpoint
from tests.integration.clients import consume_confluent, create_topic, produce_confluent
from tests.integration.harness import BrokerProcess, wait_for
from tests.integration.rawclient import RawClient

from .conftest import _BASE_SETTINGS, _wrapper

SEGMENT0 = f"{0:020d}.log"


def _run(*cmd: str) -> bool:
    return subprocess.run(cmd, capture_output=True).returncode == 0


@contextlib.contextmanager
def _small_disk(path: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` mounted at ``path`` (root only)."""
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("a full disk needs root, to mount a size-limited tmpfs for the data dir")
    if not _run("mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)):
        pytest.skip("mounting a tmpfs failed on this machine")
    try:
        yield path
    finally:
        _run("umount", "-l", str(path))


@contextlib.contextmanager
def _unwritable(path: Path) -> Iterator[None]:
    """Make the file ``path`` unwritable even for root: ``chattr +i``, or else a read-only
    bind mount of its directory."""
    if os.geteuid() != 0:
        pytest.skip("making a file unwritable for the broker needs root (chattr +i or mount)")
    if _run("chattr", "+i", str(path)):
        try:
            yield
        finally:
            _run("chattr", "-i", str(path))
        return
    d = str(path.parent)
    if _run("mount", "--bind", d, d) and _run("mount", "-o", "remount,bind,ro", d, d):
        try:
            yield
        finally:
            _run("umount", "-l", d)
        return
    pytest.skip("neither chattr +i nor a read-only bind mount works here")


def _fill(disk: Path) -> Path:
    """Write a file until the disk is full; returns it."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for size in (1 << 20, 4096, 1):
            chunk = b"\0" * size
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, chunk)
        with pytest.raises(OSError) as exc:
            os.write(fd, b"\0")
        assert exc.value.errno == errno.ENOSPC
    finally:
        os.close(fd)
    return filler


def _not_acknowledged(bootstrap: str, topic: str, partition: int, n: int = 3) -> list[Any]:
    """Produce ``n`` messages that must not be acknowledged; returns their errors. They are
    16 KiB each: a small one may still fit in the last, partly used page of a full disk."""
    errors: list[Any] = []
    acked: list[Any] = []
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "message.timeout.ms": 6000,
                  "retries": 2, "compression.type": "none"})
    for i in range(n):
        value = b"refused-%d-" % i + os.urandom(8 << 10).hex().encode()
        p.produce(topic, value=value, partition=partition,
                  on_delivery=lambda err, msg: (errors if err else acked).append(err or msg))
    p.flush(30)
    assert acked == [], "a write the disk could not take was acknowledged"
    assert len(errors) == n
    return errors


def _start_up_part(broker: BrokerProcess, before: int) -> str:
    """The broker's log from offset ``before`` up to its 'serving on' line."""
    text = broker.log_path.read_text(errors="replace")[before:]
    end = text.find("kcoord serving on")
    assert end >= 0, text[-3000:]
    return text[:end]


def _log_size(broker: BrokerProcess) -> int:
    return broker.log_path.stat().st_size if broker.log_path.exists() else 0


def test_a_full_disk_at_produce_and_at_start_up(tmp_path: Path) -> None:
    with _small_disk(tmp_path / "data", "48m") as disk:  # the broker's own log stays outside
        broker = BrokerProcess(disk, dict(_BASE_SETTINGS), wrapper=_wrapper())
        broker.start()
        try:
            create_topic(broker.bootstrap, "full", 2)
            sent = [(0, b"k%d" % i, b"v%d" % i) for i in range(20)]
            produce_confluent(broker.bootstrap, "full", sent, "none")
            filler = _fill(disk)
            _not_acknowledged(broker.bootstrap, "full", 0)
            got = consume_confluent(broker.bootstrap, "full", 1, 20)
            assert [v for _, _, _, v in got] == [v for _, _, v in sent]  # reads still served

            broker.kill()
            before = _log_size(broker)
            broker.restart()  # on a disk that is still full
            assert "Traceback" not in _start_up_part(broker, before)
            got = consume_confluent(broker.bootstrap, "full", 1, 20)
            assert [v for _, _, _, v in got] == [v for _, _, v in sent]
            _not_acknowledged(broker.bootstrap, "full", 1)
            with RawClient(broker.port) as c:  # a creation fails cleanly, leaving nothing
                r = c.request(ApiKey.CREATE_TOPICS, 7, topics=[dict(
                    name="nospace", num_partitions=200, replication_factor=1, assignments=[],
                    configs=[])], timeout=30000, validate_only=False)
                assert r.topics[0].error_code == ErrorCode.kafka_storage_error
            assert not [p for p in disk.iterdir() if p.name.startswith("nospace")]
            assert not (disk / ".staging").exists()

            filler.unlink()  # space again: writes work
            produce_confluent(broker.bootstrap, "full", [(1, b"k", b"after")], "none")
            got = consume_confluent(broker.bootstrap, "full", 2, 21)
            assert b"after" in [v for _, _, _, v in got]
        finally:
            broker.stop()


def test_an_unwritable_segment_serves_reads_and_refuses_writes(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data", dict(_BASE_SETTINGS), wrapper=_wrapper())
    broker.start()
    try:
        create_topic(broker.bootstrap, "frozen", 2)
        sent = [(p, b"k", b"v%d-%d" % (p, i)) for i in range(10) for p in range(2)]
        produce_confluent(broker.bootstrap, "frozen", sent, "none")
        broker.stop()
        segment = broker.data_dir / "frozen-0" / SEGMENT0
        with open(segment, "ab") as f:
            f.write(b"\0\0\0\0 torn tail")  # recovery would like to cut this
        with _unwritable(segment):
            before = _log_size(broker)
            broker.restart()
            startup = _start_up_part(broker, before)
            assert "Traceback" not in startup and "could not cut" in startup
            got = consume_confluent(broker.bootstrap, "frozen", 2, 20)
            assert sorted(v for _, _, _, v in got) == sorted(v for _, _, v in sent)
            _not_acknowledged(broker.bootstrap, "frozen", 0)
            produce_confluent(broker.bootstrap, "frozen", [(1, b"k", b"fine")], "none")
            broker.stop()
        broker.restart()  # writable again: the tail is cut, appends work
        produce_confluent(broker.bootstrap, "frozen", [(0, b"k", b"thawed")], "none")
        got = consume_confluent(broker.bootstrap, "frozen", 1, 11)
        assert got[-1][1:] == (10, b"k", b"thawed")
    finally:
        broker.stop()


def test_a_segment_deleted_under_the_broker_is_refused_and_reported(tmp_path: Path) -> None:
    settings = dict(_BASE_SETTINGS, **{"log.flush.offset.checkpoint.interval.ms": 200})
    broker = BrokerProcess(tmp_path / "data", settings, wrapper=_wrapper())
    broker.start()
    try:
        create_topic(broker.bootstrap, "victim", 1)
        produce_confluent(broker.bootstrap, "victim", [(0, b"k", b"v%d" % i) for i in range(6)],
                          "none")
        checkpoint = broker.data_dir / RECOVERY_POINT_CHECKPOINT
        wait_for(lambda: read_checkpoint(checkpoint).get(("victim", 0)) == 6, 20,
                 what="the recovery point checkpoint to include the 6 records")
        part = broker.data_dir / "victim-0"
        for f in part.glob("00000000000000000000.*"):
            f.unlink()  # the whole segment, indexes too
        _not_acknowledged(broker.bootstrap, "victim", 0)  # written to a deleted file: refused
        assert "victim-0 is offline" in broker.log()
        broker.kill()
        broker.restart()
        assert "partition victim-0 lost offsets 0 to 5" in broker.log()
        produce_confluent(broker.bootstrap, "victim", [(0, b"k", b"again")], "none")
        assert consume_confluent(broker.bootstrap, "victim", 1, 1)[0][3] == b"again"
    finally:
        broker.stop()
