"""storage.retention: the log start offset, rolls by time, deleting old segments (issue 19)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kcoord.storage.engine import OffsetOutOfRange
from kcoord.storage.log import PartitionLog
from tests.unit.test_log import make_batch

PAYLOAD = 100
BATCH = len(make_batch(payload_size=PAYLOAD))


def _log(path: Path, per_segment: int = 2) -> PartitionLog:
    return PartitionLog.open(path, segment_bytes=BATCH * per_segment)


def _fill(plog: PartitionLog, n: int, ts: int = 1_000) -> None:
    for i in range(n):
        plog.append(make_batch(payload_size=PAYLOAD, base_ts=ts + i))
    plog.flush()


def test_delete_records_moves_the_log_start_inside_a_segment(tmp_path: Path) -> None:
    with _log(tmp_path / "t-0") as plog:
        _fill(plog, 6)  # segments at 0, 2, 4
        assert plog.segment_base_offsets == [0, 2, 4]
        assert plog.advance_log_start(3)
        assert not plog.advance_log_start(2)  # never backwards
        assert plog.log_start_offset == 3
        with pytest.raises(OffsetOutOfRange):
            plog.read(2, 1000)
        assert plog.read(3, 1000)  # the batch holding 3 (it starts there)
        plan = plog.plan_deletion(10_000)
        assert plan is not None and plan.new_log_start == 3
        assert [s.base_offset for s in plan.segments] == [0]  # 2..3 still holds offset 3
        assert plog.delete_planned(plan) == 1
        assert plog.segment_base_offsets == [2, 4] and plog.log_start_offset == 3
        assert not (tmp_path / "t-0" / "00000000000000000000.log").exists()
        with pytest.raises(ValueError):
            plog.advance_log_start(99)


def test_the_log_start_comes_back_from_its_checkpoint(tmp_path: Path) -> None:
    with _log(tmp_path / "t-0") as plog:
        _fill(plog, 6)
    with _log(tmp_path / "t-0") as plog:
        assert plog.log_start_offset == 0
        plog.restore_log_start(5)
        assert plog.log_start_offset == 5
        plog.restore_log_start(50)  # past the end (lost data): kept within the log
        assert plog.log_start_offset == 6


def test_log_start_at_the_end_deletes_everything_but_a_new_active_segment(tmp_path: Path) -> None:
    with _log(tmp_path / "t-0") as plog:
        _fill(plog, 5)  # 0-1, 2-3, 4 (active)
        plog.advance_log_start(5)
        plan = plog.plan_deletion(10_000)
        assert plan is not None and [s.base_offset for s in plan.segments] == [0, 2]
        plog.delete_planned(plan)
        assert plog.segment_base_offsets == [4] and plog.log_start_offset == 5
        plog.append(make_batch(payload_size=PAYLOAD))
        assert plog.log_end_offset == 6


def test_retention_ms_deletes_old_segments_the_active_one_too(tmp_path: Path) -> None:
    with _log(tmp_path / "t-0") as plog:
        _fill(plog, 5, ts=1_000)  # 0-1, 2-3, 4 (active), timestamps 1000..1004
        assert plog.plan_deletion(1_003, retention_ms=1_000) is None  # nothing that old
        plan = plog.plan_deletion(2_003, retention_ms=1_000)  # 0-1 (max ts 1001) is older
        assert plan is not None and [s.base_offset for s in plan.segments] == [0]
        plan = plog.plan_deletion(10_000, retention_ms=1_000)
        assert plan is not None and [s.base_offset for s in plan.segments] == [0, 2, 4]
        assert plan.new_log_start == 5
        plog.advance_log_start(plan.new_log_start)
        assert plog.delete_planned(plan) == 3
        assert plog.segment_base_offsets == [5] and plog.log_start_offset == 5
        assert plog.log_end_offset == 5
        assert plog.plan_deletion(10_000, retention_ms=1_000) is None  # the empty active stays
    with _log(tmp_path / "t-0") as plog:  # and it reopens at 5
        assert plog.segment_base_offsets == [5] and plog.log_end_offset == 5


def test_retention_bytes_keeps_the_log_at_or_above_the_limit(tmp_path: Path) -> None:
    with _log(tmp_path / "t-0") as plog:
        _fill(plog, 5)  # 2 + 2 + 1 batches
        plan = plog.plan_deletion(0, retention_bytes=2 * BATCH)
        assert plan is not None and [s.base_offset for s in plan.segments] == [0]
        plan = plog.plan_deletion(0, retention_bytes=BATCH)
        assert plan is not None and [s.base_offset for s in plan.segments] == [0, 2]
        assert plog.plan_deletion(0, retention_bytes=5 * BATCH) is None


def test_only_durable_segments_are_deleted(tmp_path: Path) -> None:
    with PartitionLog.open(tmp_path / "t-0", segment_bytes=BATCH * 2, fsync=True) as plog:
        for i in range(3):
            plog.append(make_batch(payload_size=PAYLOAD, base_ts=i))
        assert plog.flushed_offset == 0
        assert plog.plan_deletion(10_000, retention_ms=1) is None
        plog.flush()
        plan = plog.plan_deletion(10_000, retention_ms=1)
        assert plan is not None and len(plan.segments) == 2


def test_segment_ms_rolls_a_non_empty_active_segment(tmp_path: Path) -> None:
    with PartitionLog.open(tmp_path / "t-0") as plog:
        assert not plog.roll_if_due(10**12, 1)  # empty: nothing to roll
        plog.append(make_batch(payload_size=PAYLOAD, base_ts=1_000))
        assert not plog.roll_if_due(1_500, 1_000)
        assert plog.roll_if_due(2_000, 1_000)
        assert plog.segment_base_offsets == [0, 1]
        assert not plog.roll_if_due(5_000, 1_000)  # the new active segment is empty


def test_the_pipeline_reads_the_log_start_from_the_checkpoint(tmp_path: Path) -> None:
    """The pipeline's lag counts from the log start a DeleteRecords left in the checkpoint."""
    from kcoord.pipeline.logs import checkpointed_starts, topic_log
    from kcoord.storage.checkpoint import LOG_START_CHECKPOINT, write_checkpoint

    with _log(tmp_path / "t-0") as plog:
        _fill(plog, 6)  # segments 0, 2, 4; ends at 6
    assert topic_log(str(tmp_path), "t", 0, "t-0").log_start_offset == 0
    write_checkpoint(tmp_path / LOG_START_CHECKPOINT, {("t", 0): 3})
    checkpointed_starts.cache_clear()
    found = topic_log(str(tmp_path), "t", 0, "t-0")
    assert (found.log_start_offset, found.log_end_offset) == (3, 6)
