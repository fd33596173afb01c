"""State is a function of the log, through the real storage: random group and offset activity
is written to a PartitionLog with small segments; at random points the log is compacted (or
not), closed, and the shard rebuilt from it as at a restart, and activity carries on with the
rebuilt shard. At the end the newest-record-per-key replay of the (compacted) log, and a plain
replay of every record, rebuild exactly the live shard's persisted state (I1, I5, I6, J2–J4, K3)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coordinator.loading import LatestRecords
from coordinator.shard import GroupShard
from protocol.batch import HEADER_SIZE
from protocol.record_encoding import encode_kv_batch
from protocol.records import decode_key_values
from storage.compaction import compact
from storage.log import PartitionLog

from .test_group_harness import Harness
from .test_group_persistence import _PROPERTY_CONFIG, _all_offsets, _apply, _op, _view


def _write(log: PartitionLog, records: list[tuple[bytes, bytes | None]], chunks: list[int], ts: int) -> None:
    """Append the records as batches of the given sizes (as outputs of several requests)."""
    i = 0
    sizes = iter(chunks)
    while i < len(records):
        n = max(1, next(sizes, 3))
        log.append(encode_kv_batch(records[i : i + n], ts))
        i += n
    log.flush()


def _reload(path: Path, now: int) -> GroupShard:
    shard = GroupShard(0, _PROPERTY_CONFIG, now_ms=now)
    latest = LatestRecords()
    with PartitionLog.open(path, segment_bytes=600) as log:
        for _base, header, data in log.iter_batches(verify_crc=True):
            latest.add(decode_key_values(header, data[HEADER_SIZE:]))
    latest.replay_into(shard, now)
    shard.finish_loading(now)
    return shard


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    ops=st.lists(_op, max_size=40),
    restarts=st.lists(st.tuples(st.integers(0, 40), st.booleans()), max_size=3),
    chunks=st.lists(st.integers(1, 6), max_size=30),
    drop_tombstones=st.booleans(),
)
def test_compacted_and_reloaded_log_rebuilds_the_live_state(
    ops: list[tuple[Any, ...]],
    restarts: list[tuple[int, bool]],
    chunks: list[int],
    drop_tombstones: bool,
) -> None:
    h = Harness(_PROPERTY_CONFIG)
    cut_points = {at: do_compact for at, do_compact in restarts}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "__consumer_offsets-0"
        written = 0
        log = PartitionLog.open(path, segment_bytes=600)
        try:
            for i, op in enumerate(ops):
                _apply(h, op)
                if i in cut_points:
                    # A restart point: what was emitted so far is on disk; maybe compact it.
                    _write(log, h.records[written:], chunks, h.now)
                    written = len(h.records)
                    if cut_points[i]:
                        compact(log, now_ms=h.now + 10**9, delete_retention_ms=0 if drop_tombstones else 10**12)
                    log.close()
                    # The broker restarts: the shard is rebuilt from the log and carries on.
                    h.shard = _reload(path, h.now)
                    log = PartitionLog.open(path, segment_bytes=600)
            _write(log, h.records[written:], chunks, h.now)
            compact(log, now_ms=h.now + 10**9, delete_retention_ms=0 if drop_tombstones else 10**12)
        finally:
            log.close()
        rebuilt = _reload(path, h.now)

    full = GroupShard(0, _PROPERTY_CONFIG, now_ms=h.now)  # the plain replay of every record
    for key, value in h.records:
        full.replay(key, value, h.now)
    full.finish_loading(h.now)

    live_view = _view(h.shard)
    for shard in (rebuilt, full):
        view = _view(shard)
        for gid, expected in live_view.items():
            assert view.get(gid) == expected, gid
        assert _all_offsets(shard) == _all_offsets(h.shard)
        for g in shard.groups():
            assert h.shard.group(g.group_id) is not None, f"deleted group {g.group_id} came back"
