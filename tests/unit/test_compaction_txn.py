"""Compaction around transactions (``storage.compaction``): an aborted transaction's records
are dropped and never shadow older values, a committed one's compete by offset, a pending one's
are kept (and supersede nothing), as is the tombstone that removes a pending record; markers are
kept."""

from __future__ import annotations

from pathlib import Path

from kcoord.protocol.control import encode_marker
from kcoord.storage.compaction import compact
from kcoord.storage.log import PartitionLog

from .test_compaction import DAY, NOW, append, fill, open_log, records


def txn(log: PartitionLog, pid: int, key: bytes, value: bytes | None) -> int:
    return append(log, [(key, value)], producer_id=pid, producer_epoch=0, is_transactional=True)[0]


def end(log: PartitionLog, pid: int, commit: bool) -> int:
    return log.append(encode_marker(pid, 0, commit, 0, NOW))[0]


def values(log: PartitionLog, key: bytes) -> list[bytes | None]:
    return [v for _, k, v in records(log) if k == key]


def test_aborted_records_go_and_the_older_value_stays(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p")
    append(log, [(b"k", b"old")])
    txn(log, 7, b"k", b"aborted")
    end(log, 7, False)
    fill(log, 300, 5)  # seal the segments
    compact(log, now_ms=NOW)
    assert values(log, b"k") == [b"old"]
    log.close()


def test_committed_records_supersede_older_ones_and_lose_to_newer_ones(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p")
    append(log, [(b"a", b"old"), (b"b", b"old")])
    txn(log, 7, b"a", b"txn")
    txn(log, 7, b"b", b"txn")
    append(log, [(b"b", b"newer")])  # written after the txn record, before its marker
    end(log, 7, True)
    fill(log, 300, 5)
    compact(log, now_ms=NOW)
    assert values(log, b"a") == [b"txn"] and values(log, b"b") == [b"newer"]
    log.close()


def test_pending_records_are_kept_with_the_values_they_would_shadow(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p")
    append(log, [(b"k", b"old")])
    txn(log, 7, b"k", b"pending")
    fill(log, 300, 5)
    compact(log, now_ms=NOW)
    assert values(log, b"k") == [b"old", b"pending"]
    end(log, 7, False)  # aborted later: the old value is still there
    fill(log, 300, 5)
    compact(log, now_ms=NOW)
    assert values(log, b"k") == [b"old"]
    log.close()


def test_the_tombstone_after_a_pending_record_is_kept_even_when_superseded(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p")
    txn(log, 7, b"k", b"pending")
    append(log, [(b"k", None)], ts=NOW - 2 * DAY)  # removes the pending value on replay
    append(log, [(b"k", b"plain")])
    fill(log, 300, 5)
    compact(log, now_ms=NOW, delete_retention_ms=0)
    assert values(log, b"k") == [b"pending", None, b"plain"]
    log.close()


def test_markers_are_kept(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p")
    txn(log, 7, b"k", b"v")
    at = end(log, 7, False)
    fill(log, 300, 5)
    compact(log, now_ms=NOW)
    assert [off for off, h, _ in log.iter_batches() if h.is_control] == [at]
    log.close()
