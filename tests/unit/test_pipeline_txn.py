"""The pipeline over transactional offset commits (no Spark): control batches are skipped, and
so are the TxnOffsetCommit batches whose transaction was aborted or is still open; a committed
one counts, its marker in the same segment or in a later one."""

from __future__ import annotations

from pathlib import Path

from kcoord.coordinator.schemas import (
    OffsetCommitKey,
    OffsetCommitValue,
    encode_key,
    encode_offset_commit_value,
)
from kcoord.pipeline.decode import segment_commits, segment_state
from kcoord.pipeline.logs import offsets_segments
from kcoord.protocol.batch import set_base_offset
from kcoord.protocol.control import encode_marker
from kcoord.protocol.record_encoding import encode_kv_batch

T0 = 1_700_000_000_000


def commit(partition: int, offset: int) -> tuple[bytes, bytes]:
    return (
        encode_key(OffsetCommitKey("g", "t", partition)),
        encode_offset_commit_value(OffsetCommitValue(offset, "", T0, -1, -1)),
    )


def plain(*records: tuple[bytes, bytes]) -> bytes:
    return encode_kv_batch(list(records), T0)


def txn(pid: int, *records: tuple[bytes, bytes]) -> bytes:
    return encode_kv_batch(list(records), T0, producer_id=pid, producer_epoch=0, is_transactional=True)


def end(pid: int, commit: bool) -> bytes:
    return encode_marker(pid, 0, commit, 0, T0)


def write_segments(data: Path, segments: list[list[bytes]]) -> None:
    d = data / "__consumer_offsets-0"
    d.mkdir(parents=True)
    offset = 0
    for batches in segments:
        base, raw = offset, bytearray()
        for b in batches:
            batch = bytearray(b)
            set_base_offset(batch, 0, offset)
            raw += batch
            offset += int.from_bytes(batch[23:27], "big") + 1  # lastOffsetDelta + 1
        (d / f"{base:020d}.log").write_bytes(bytes(raw))


def test_aborted_and_open_transactions_are_skipped_committed_ones_kept(tmp_path: Path) -> None:
    data = tmp_path / "data"
    write_segments(
        data,
        [
            [
                plain(commit(0, 1)),
                txn(5, commit(0, 50)),  # aborted in the next segment
                txn(6, commit(1, 60)),  # committed in this segment
                end(6, True),
                txn(8, commit(3, 80)),  # committed in the next segment
            ],
            [end(5, False), txn(7, commit(2, 70)), end(8, True)],  # 7: still open
        ],
    )
    refs, problems = offsets_segments(str(data))
    assert problems == [] and len(refs) == 2

    batches, stats = segment_commits(refs[0])
    rows = [r for b in batches for r in b.to_pylist()]
    assert sorted((r["partition"], r["offset"]) for r in rows) == [(0, 1), (1, 60), (3, 80)]
    assert (stats.control_batches, stats.transactional_batches, stats.uncommitted_batches) == (1, 3, 1)

    state, _ = segment_state(refs[0])
    offsets = {(r["partition"], r["offset"]) for r in state if r["kind"] == "offset"}
    assert offsets == {(0, 1), (1, 60), (3, 80)}

    batches, stats = segment_commits(refs[1])
    assert [r for b in batches for r in b.to_pylist()] == []
    assert (stats.control_batches, stats.uncommitted_batches) == (2, 1)


def test_a_segment_without_transactions_is_read_as_before(tmp_path: Path) -> None:
    data = tmp_path / "data"
    write_segments(data, [[plain(commit(0, 1))], [txn(9, commit(0, 2))]])
    refs, _ = offsets_segments(str(data))
    batches, stats = segment_commits(refs[0])
    assert [r["offset"] for b in batches for r in b.to_pylist()] == [1]
    assert stats.uncommitted_batches == 0
