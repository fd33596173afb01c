"""The shared journal of the files engine (``storage.journal``): one fsync per round for every
journaled log, and what a crash takes from the segment files given back at the next start.

A crash that loses the page cache is played by cutting the active segment's file (and
overwriting its tail) before a second engine opens the directory; the first is abandoned
without ``close``, as a dead process leaves it.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from kcoord.protocol.record_encoding import build_batch
from kcoord.protocol.records import decode_batch
from kcoord.storage.engine import Log, LogSpec
from kcoord.storage.file_engine import FileEngine
from kcoord.storage.journal import JOURNAL_FILE, SharedJournal, replay
from kcoord.storage.log import PartitionLog

TOPIC_ID = uuid.UUID("00000000-0000-4000-8000-00000000000a")
SPEC = LogSpec(segment_bytes=1 << 20, journaled=True)
NOW = 1_700_000_000_000


def batch(*values: bytes) -> bytes:
    return build_batch((b"k", v, [], NOW) for v in values)  # type: ignore[arg-type]


def values(plog: Log) -> list[bytes | None]:
    out = []
    for _, _, data in plog.iter_batches(None):
        out += [r.value for _, _, r in decode_batch(bytes(data)).iter_records()]
    return out


def journal_of(plog: Log) -> SharedJournal:
    journal = plog.shared_flush
    assert isinstance(journal, SharedJournal)
    return journal


def active_segment(data: Path, name: str) -> Path:
    return sorted((data / name).glob("*.log"))[-1]


@pytest.fixture
def data(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def syncs(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, int]]:
    """Counts of os.fsync and os.fdatasync calls."""
    counts = {"fsync": 0, "fdatasync": 0}
    for name in counts:
        real = getattr(os, name)

        def counting(fd: int, real=real, name=name) -> None:  # type: ignore[no-untyped-def]
            counts[name] += 1
            real(fd)

        monkeypatch.setattr(os, name, counting)
    yield counts


def started(data: Path) -> FileEngine:
    engine = FileEngine(data)
    engine.start()
    return engine


def test_one_journal_fsync_makes_a_round_of_logs_durable(data: Path, syncs: dict[str, int]) -> None:
    engine = started(data)
    logs = engine.create_logs("__consumer_offsets", TOPIC_ID, range(3), SPEC)
    for i, plog in enumerate(logs):
        plog.append(batch(b"a%d" % i) + batch(b"b%d" % i))
    journal = journal_of(logs[0])
    assert all(journal_of(plog) is journal for plog in logs)
    syncs.update(fsync=0, fdatasync=0)
    assert journal.flush_all(logs) == {}
    assert syncs == {"fsync": 0, "fdatasync": 1}  # the journal's, no segment file's
    assert [plog.flushed_offset for plog in logs] == [2, 2, 2]
    assert (data / JOURNAL_FILE).stat().st_size > 0
    # a log of an ordinary topic keeps its own fsync
    (other,) = engine.create_logs("t", TOPIC_ID, range(1), LogSpec(1 << 20))
    assert other.shared_flush is None


@pytest.mark.parametrize("loss", ["all", "torn"])
def test_batches_the_segment_file_lost_are_replayed(
    data: Path, loss: str, caplog: pytest.LogCaptureFixture
) -> None:
    engine = started(data)
    (plog, other) = engine.create_logs("__consumer_offsets", TOPIC_ID, range(2), SPEC)
    plog.append(batch(b"1", b"2"))
    journal_of(plog).flush_all([plog])
    plog.flush()  # its own fsync too: the journal's later records follow what is on disk
    durable = active_segment(data, plog.name).stat().st_size
    plog.append(batch(b"3"))
    plog.append(batch(b"4", b"5"))
    other.append(batch(b"x"))
    assert journal_of(plog).flush_all([plog, other]) == {}
    assert plog.flushed_offset == 5
    # the crash: the page cache held the segments' tails
    segment = active_segment(data, plog.name)
    if loss == "all":
        os.truncate(segment, durable)
    else:  # the first lost batch reached the disk half-written, the rest as zeros
        size = segment.stat().st_size
        with open(segment, "r+b") as f:
            f.seek(durable + 20)
            f.write(b"\0" * (size - durable - 20))
    os.truncate(active_segment(data, other.name), 0)

    caplog.set_level(logging.INFO)
    engine = started(data)
    plog = engine.open_log("__consumer_offsets", 0, TOPIC_ID, SPEC)
    other = engine.open_log("__consumer_offsets", 1, TOPIC_ID, SPEC)
    assert values(plog) == [b"1", b"2", b"3", b"4", b"5"]
    assert values(other) == [b"x"]
    assert plog.flushed_offset == 5 and other.flushed_offset == 1
    assert "2 batches (offsets 2 to 4) replayed from the journal" in caplog.text
    # the journal is emptied at a clean close; nothing is replayed again
    for one in (plog, other):
        one.close()
    engine.close()
    assert (data / JOURNAL_FILE).stat().st_size == 0
    engine = started(data)
    assert values(engine.open_log("__consumer_offsets", 0, TOPIC_ID, SPEC)) == [
        b"1",
        b"2",
        b"3",
        b"4",
        b"5",
    ]


def test_a_torn_journal_record_is_cut_and_not_replayed(data: Path) -> None:
    engine = started(data)
    (plog,) = engine.create_logs("__consumer_offsets", TOPIC_ID, range(1), SPEC)
    plog.append(batch(b"1"))
    journal_of(plog).flush_all([plog])
    whole = (data / JOURNAL_FILE).stat().st_size
    plog.append(batch(b"2"))
    journal_of(plog).flush_all([plog])
    # the second record's write was cut short by the crash (its fsync never returned)
    os.truncate(data / JOURNAL_FILE, whole + 10)
    os.truncate(active_segment(data, plog.name), 0)

    engine = started(data)
    assert (data / JOURNAL_FILE).stat().st_size == whole
    assert values(engine.open_log("__consumer_offsets", 0, TOPIC_ID, SPEC)) == [b"1"]


def test_a_checkpoint_fsyncs_the_logs_and_empties_the_journal(
    data: Path, syncs: dict[str, int]
) -> None:
    engine = started(data)
    logs = engine.create_logs("__consumer_offsets", TOPIC_ID, range(2), SPEC)
    journal = journal_of(logs[0])
    journal.checkpoint_bytes = 1
    for plog in logs:
        plog.append(batch(b"v"))
    syncs.update(fsync=0, fdatasync=0)
    journal.flush_all(logs[:1])
    assert (data / JOURNAL_FILE).stat().st_size == 0
    assert syncs["fdatasync"] == 1 and syncs["fsync"] >= 3  # both logs' segments, the journal
    # what the checkpoint synced is on disk in the segments: nothing is left to replay
    engine = started(data)
    assert [values(engine.open_log("__consumer_offsets", p, TOPIC_ID, SPEC)) for p in (0, 1)] == [
        [b"v"],
        [b"v"],
    ]


def test_a_log_that_rolled_a_segment_is_fsynced_whole(data: Path, syncs: dict[str, int]) -> None:
    engine = started(data)
    spec = LogSpec(segment_bytes=250, journaled=True)
    (plog,) = engine.create_logs("__consumer_offsets", TOPIC_ID, range(1), spec)
    (other,) = engine.create_logs("t", TOPIC_ID, range(1), LogSpec(segment_bytes=250))
    plog.append(batch(b"a" * 60))
    other.append(batch(b"a" * 60))
    assert journal_of(plog).flush_all([plog]) == {}  # acknowledged through the journal
    other.flush()
    syncs.update(fsync=0, fdatasync=0)
    other.append(batch(b"b" * 60))  # does not fit: a new segment
    unjournaled = syncs["fsync"]
    plog.append(batch(b"b" * 60))
    # one more: the sealed segment, before anything is written after it
    assert syncs["fsync"] - unjournaled == unjournaled + 1
    syncs.update(fsync=0, fdatasync=0)
    assert journal_of(plog).flush_all([plog]) == {}
    assert syncs["fsync"] >= 2  # the sealed segment's indexes, the new one
    assert plog.flushed_offset == 2
    # journaled again; then the crash takes what the new segment got since
    durable = active_segment(data, plog.name).stat().st_size
    plog.append(batch(b"c"))
    syncs.update(fsync=0, fdatasync=0)
    assert journal_of(plog).flush_all([plog]) == {}
    assert syncs == {"fsync": 0, "fdatasync": 1}
    os.truncate(active_segment(data, plog.name), durable)
    engine = started(data)
    assert values(engine.open_log("__consumer_offsets", 0, TOPIC_ID, spec)) == [
        b"a" * 60,
        b"b" * 60,
        b"c",
    ]


def test_a_failed_journal_write_falls_back_to_fsyncing_the_logs(
    data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = started(data)
    (plog,) = engine.create_logs("__consumer_offsets", TOPIC_ID, range(1), SPEC)
    plog.append(batch(b"1"))
    journal = journal_of(plog)
    journal.flush_all([plog])
    before = (data / JOURNAL_FILE).stat().st_size

    def failing(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fdatasync", failing)
    plog.append(batch(b"2"))
    assert journal.flush_all([plog]) == {}
    assert plog.flushed_offset == 2
    assert (data / JOURNAL_FILE).stat().st_size == before  # cut back to its last whole record


def test_without_fsync_nothing_is_journaled(data: Path) -> None:
    engine = FileEngine(data, fsync=False)
    engine.start()
    (plog,) = engine.create_logs("__consumer_offsets", TOPIC_ID, range(1), SPEC)
    assert plog.shared_flush is None and not (data / JOURNAL_FILE).exists()


def test_a_journal_that_cannot_be_cut_back_is_given_up(
    data: Path, monkeypatch: pytest.MonkeyPatch, syncs: dict[str, int]
) -> None:
    engine = started(data)
    (plog,) = engine.create_logs("__consumer_offsets", TOPIC_ID, range(1), SPEC)
    journal = journal_of(plog)

    def failing(fd: int) -> None:
        raise OSError(5, "Input/output error")

    with monkeypatch.context() as patched:
        # the journal's fdatasync fails, then the fsync of its cut: it is not used again
        patched.setattr(os, "fdatasync", failing)
        patched.setattr(os, "fsync", failing)
        plog.append(batch(b"1"))
        assert isinstance(journal.flush_all([plog])[plog], OSError)  # the log's own fsync too
    plog.append(batch(b"2"))
    syncs.update(fsync=0, fdatasync=0)
    assert journal.flush_all([plog]) == {}
    assert syncs["fdatasync"] == 0 and syncs["fsync"] >= 1  # the log's files, no journal
    assert plog.flushed_offset == 2


def test_a_replay_that_fails_keeps_the_journal_for_the_next_start(
    data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = started(data)
    (plog,) = engine.create_logs("__consumer_offsets", TOPIC_ID, range(1), SPEC)
    plog.append(batch(b"1"))
    journal_of(plog).flush_all([plog])
    os.truncate(active_segment(data, plog.name), 0)

    engine = started(data)
    with monkeypatch.context() as patched:
        def failing(self: object, batches: bytes) -> None:
            raise OSError(28, "No space left on device")

        patched.setattr(PartitionLog, "append", failing)
        plog = engine.open_log("__consumer_offsets", 0, TOPIC_ID, SPEC)
    assert values(plog) == []
    plog.close()
    engine.close()
    assert (data / JOURNAL_FILE).stat().st_size > 0  # not emptied: the replay is owed
    engine = started(data)
    assert values(engine.open_log("__consumer_offsets", 0, TOPIC_ID, SPEC)) == [b"1"]


def test_a_journaled_batch_past_the_log_end_stops_the_replay(
    data: Path, caplog: pytest.LogCaptureFixture
) -> None:
    engine = started(data)
    (plog,) = engine.create_logs("__consumer_offsets", TOPIC_ID, range(1), SPEC)
    plog.append(batch(b"1"))
    plog.flush()
    plog.append(batch(b"2"))
    journal_of(plog).flush_all([plog])  # journals both batches
    # the log lost offsets 0 and 1 with a journal that holds only offset 1 (never expected)
    os.truncate(active_segment(data, plog.name), 0)
    journal = SharedJournal.open(data / JOURNAL_FILE)
    (chunk,) = journal.replay_of(plog.name)
    second = bytes(chunk[len(batch(b"1")) :])
    assert replay(PartitionLog.open(data / plog.name, fsync=False), [memoryview(second)]) == 0
    assert "does not follow the log's end, 0" in caplog.text
