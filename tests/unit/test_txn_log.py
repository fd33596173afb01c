"""Transactions in a partition log (storage.txn_log): the producer state follows every append,
the last stable offset moves with open transactions and durable markers, ABORT markers fill the
segment's ``.txnindex``, and all of it is rebuilt after a restart -- from the snapshots written
at rolls, without them, with a ``.txnindex`` or a snapshot lost or torn, after a truncation --
and follows retention and compaction."""

from __future__ import annotations

import os
import random
from pathlib import Path

from kcoord.protocol.batch import iter_headers
from kcoord.protocol.control import encode_marker
from kcoord.protocol.record_encoding import build_batch
from kcoord.protocol.records import decode_batches
from kcoord.storage.compaction import compact
from kcoord.storage.log import PartitionLog
from kcoord.storage.txn_index import AbortedTxn

T0 = 1_700_000_000_000


def open_log(path: Path, segment_bytes: int = 1 << 20) -> PartitionLog:
    return PartitionLog.open(path, segment_bytes=segment_bytes, fsync=False, compacted=True)


class Writer:
    """Appends what producers would, keeping their sequences."""

    def __init__(self, log: PartitionLog) -> None:
        self.log = log
        self.seq: dict[int, int] = {}

    def data(self, pid: int, n: int = 1, *, txn: bool = True, key: bytes = b"k",
             value: bytes = b"v", epoch: int = 0) -> int:
        seq = self.seq.get(pid, 0)
        self.seq[pid] = seq + n
        batch = build_batch([(key, value, (), T0)] * n, producer_id=pid, producer_epoch=epoch,
                            base_sequence=seq, is_transactional=txn)
        first, _ = self.log.append(batch)
        return first

    def plain(self, key: bytes = b"p", value: bytes | None = b"v") -> int:
        return self.log.append(build_batch([(key, value, (), T0)]))[0]

    def marker(self, pid: int, commit: bool, epoch: int = 0) -> int:
        return self.log.append(encode_marker(pid, epoch, commit, 0, T0))[0]


def state_of(log: PartitionLog) -> tuple[object, ...]:
    s = log.producer_state
    return (
        sorted(s.producers(), key=lambda p: p.producer_id),
        [t[:2] for t in s.open_transactions()],  # (start times: the clock live, batches rebuilt)
        log.last_stable_offset(log.log_end_offset),
        log.aborted_transactions(log.log_start_offset, log.log_end_offset),
        [(seg, open_index(log, seg)) for seg in log.segment_base_offsets],
    )


def open_index(log: PartitionLog, base: int) -> list[AbortedTxn]:
    path = log.path / f"{base:020d}.txnindex"
    from kcoord.storage.txn_index import decode_entries

    return decode_entries(path.read_bytes()) if path.exists() else []


def test_lso_moves_with_transactions_and_aborts_are_indexed(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    w = Writer(log)
    a = w.data(1, 2)  # 0-1
    b = w.data(2)  # 2
    w.plain()  # 3
    assert log.last_stable_offset(log.log_end_offset) == a
    commit = w.marker(1, True)  # 4
    assert log.last_stable_offset(commit) == a  # marker not below the high watermark yet
    assert log.last_stable_offset(log.log_end_offset) == b
    abort = w.marker(2, False)  # 5
    assert log.last_stable_offset(abort) == b  # the abort's marker is not durable yet
    assert log.last_stable_offset(log.log_end_offset) == log.log_end_offset == 6
    entry = AbortedTxn(2, b, abort, 6)
    assert log.aborted_transactions(0, 6) == [entry]
    assert log.aborted_transactions(0, b) == []  # nothing of it below the upper bound
    assert log.aborted_transactions(abort + 1, 6) == []  # its marker lies before the start
    assert open_index(log, 0) == [entry]
    log.close()


def _random_history(log: PartitionLog, rng: random.Random, steps: int) -> None:
    w = Writer(log)
    open_txns: set[int] = set()
    for _ in range(steps):
        r = rng.random()
        pid = rng.randrange(1, 6)
        if r < 0.15:
            w.plain(value=b"x" * rng.randrange(1, 200))
        elif r < 0.35 and open_txns:
            p = rng.choice(sorted(open_txns))
            w.marker(p, rng.random() < 0.5)
            open_txns.discard(p)
        elif pid in (1, 2) and pid not in open_txns:
            w.data(pid, rng.randrange(1, 4), txn=False)  # idempotent only
        else:
            w.data(pid, rng.randrange(1, 4), value=b"y" * rng.randrange(1, 200))
            open_txns.add(pid)


def test_state_and_indexes_are_rebuilt_at_open(tmp_path: Path) -> None:
    path = tmp_path / "t-0"
    log = open_log(path, segment_bytes=2_000)
    _random_history(log, random.Random(16), 400)
    w = Writer(log)
    w.data(9)
    w.marker(9, False)  # an abort in the active segment
    assert len(log.segment_base_offsets) > 10
    live = state_of(log)
    live_end = log.log_end_offset
    assert live[3], "some transactions were aborted"
    assert live[4][-1][1], "the active segment has aborted transactions"  # type: ignore[index]
    log.close()

    log = open_log(path, segment_bytes=2_000)  # after a clean close: from its snapshot
    assert state_of(log) == live
    log.close()

    for name in os.listdir(path):  # as after a crash: no snapshot at the log end, and the
        if name.endswith(".snapshot") and int(name[:20]) == live_end:  # active .txnindex lost
            os.remove(path / name)
    active = log.segment_base_offsets[-1]
    (path / f"{active:020d}.txnindex").unlink(missing_ok=True)
    log = open_log(path, segment_bytes=2_000)  # from the snapshot of the last roll
    assert state_of(log) == live
    log.close()

    for name in os.listdir(path):  # no snapshot at all: replayed from the start
        if name.endswith(".snapshot"):
            os.remove(path / name)
    log = open_log(path, segment_bytes=2_000)
    assert state_of(log) == live
    log.close()

    bases = log.segment_base_offsets
    lost = next(b for b, entries in live[4] if entries)  # type: ignore[attr-defined]
    os.remove(path / f"{lost:020d}.txnindex")  # a sealed segment's index lost
    snaps = sorted(n for n in os.listdir(path) if n.endswith(".snapshot"))
    with open(path / snaps[-1], "r+b") as f:  # and the newest snapshot torn
        f.truncate(10)
    log = open_log(path, segment_bytes=2_000)
    assert (path / f"{lost:020d}.txnindex").exists()
    assert state_of(log) == live
    assert log.segment_base_offsets == bases
    log.close()


def test_truncation_reopens_the_transaction(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    w = Writer(log)
    first = w.data(3, 2)
    abort = w.marker(3, False)
    assert log.aborted_transactions(0, 10) != []
    log.truncate_to(abort)
    assert log.aborted_transactions(0, 10) == []
    assert open_index(log, 0) == []
    assert log.producer_state.open_transactions()[0][:2] == (3, first)
    assert log.last_stable_offset(log.log_end_offset) == first
    log.close()


def test_retention_deletes_indexes_and_old_snapshots(tmp_path: Path) -> None:
    path = tmp_path / "t-0"
    log = open_log(path, segment_bytes=1_000)
    _random_history(log, random.Random(3), 200)
    log.flush()
    bases = log.segment_base_offsets
    assert all((path / f"{b:020d}.txnindex").exists() for b in bases[:-1])
    keep = bases[4]
    log.advance_log_start(keep)
    plan = log.plan_deletion(T0)
    assert plan is not None
    log.delete_planned(plan)
    assert log.segment_base_offsets[0] == keep
    names = os.listdir(path)
    for b in bases[:4]:
        assert f"{b:020d}.txnindex" not in names and f"{b:020d}.log" not in names
    snaps = sorted(int(n[:20]) for n in names if n.endswith(".snapshot"))
    assert len([s for s in snaps if s < keep]) <= 1  # the newest one below is kept
    log.close()


def test_compaction_judges_transactions_by_their_markers(
    tmp_path: Path,
) -> None:
    path = tmp_path / "t-0"
    log = open_log(path, segment_bytes=400)
    w = Writer(log)
    w.plain(b"a", b"old")  # superseded by nothing transactional that aborted
    aborted = w.data(1, key=b"a", value=b"aborted")
    w.marker(1, False)
    committed = w.data(2, key=b"b", value=b"committed")
    w.marker(2, True)
    w.plain(b"c", b"1")
    w.plain(b"c", b"2")  # supersedes c=1
    w.plain(b"e", b"old")
    w.data(4, key=b"e", value=b"new")
    w.marker(4, True)  # committed: e=new supersedes e=old
    still_open = w.data(3, key=b"d", value=b"open")
    for _ in range(6):
        w.plain(b"z", b"x" * 100)  # roll past everything above
    log.flush()
    before = log.aborted_transactions(0, log.log_end_offset)
    assert [a.first_offset for a in before] == [aborted]
    compact(log, now_ms=T0)
    seen: dict[int, tuple[bool, list[tuple[bytes | None, bytes | None]]]] = {}
    for _, h, data in log.iter_batches(0):
        for b in decode_batches(bytes(data)):
            seen[h.base_offset] = (h.is_control, [(r.key, r.value) for r in b.records])
    assert aborted not in seen  # the aborted transaction's batch is gone
    assert seen[committed][1] == [(b"b", b"committed")]
    assert seen[still_open][1] == [(b"d", b"open")]
    assert seen[0][1] == [(b"a", b"old")]  # not superseded by the aborted write
    assert sum(1 for c, _ in seen.values() if c) == 3  # every marker kept
    assert [v for c, recs in seen.values() if not c for k, v in recs if k == b"e"] == [b"new"]
    assert [v for c, recs in seen.values() if not c for k, v in recs if k == b"c"] == [b"2"]
    assert log.aborted_transactions(0, log.log_end_offset) == before  # carried over
    log.close()
    log = open_log(path, segment_bytes=400)
    assert log.aborted_transactions(0, log.log_end_offset) == before
    assert log.producer_state.open_transactions()[0][:2] == (3, still_open)
    headers = [h for _, h in iter_headers(log.read(0, 1 << 20), verify_crc=True)]
    assert headers
    log.close()


def test_snapshots_stay_one_per_segment_and_the_newest(tmp_path: Path) -> None:
    path = tmp_path / "t-0"
    for round_ in range(8):  # clean closes inside segments, and rolls
        log = open_log(path, segment_bytes=3_000)
        w = Writer(log)
        w.seq = {p.producer_id: p.last_sequence + 1 for p in log.producer_state.producers()}
        for _ in range(5):
            w.data(1, 2, txn=False, value=b"v" * 100)
        if round_ == 7:
            live = state_of(log)
        log.close()
    log = open_log(path, segment_bytes=3_000)
    assert state_of(log) == live
    snaps = sorted(int(n[:20]) for n in os.listdir(path) if n.endswith(".snapshot"))
    bases = log.segment_base_offsets
    assert len(bases) > 3
    assert len(snaps) <= len(bases) + 1
    assert snaps[-1] == log.log_end_offset
    log.close()
