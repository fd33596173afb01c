"""State is a function of the log, through the real storage: random group and offset activity
is written to a PartitionLog with small segments; at random points the log is compacted (or
not), closed, and the shard rebuilt from it as at a restart, and activity carries on with the
rebuilt shard. At the end the newest-record-per-key replay of the (compacted) log, and a plain
replay of every record, rebuild exactly the live shard's persisted state (I1, I5, I6, J2–J4, K3)."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kcoord.broker.groups.offsets_load import read_partition
from kcoord.coordinator.loading import LatestRecords
from kcoord.coordinator.messages import (
    OffsetCommitPartition,
    TxnMarkerRequest,
    TxnMarkerResponse,
    TxnOffsetCommitRequest,
)
from kcoord.coordinator.output import Output
from kcoord.coordinator.rebalance_replay import HistoryReplay
from kcoord.coordinator.shard import GroupShard
from kcoord.protocol.batch import HEADER_SIZE
from kcoord.protocol.control import encode_marker
from kcoord.protocol.key_values import decode_key_values
from kcoord.protocol.record_encoding import encode_kv_batch
from kcoord.storage.compaction import compact
from kcoord.storage.log import PartitionLog

from .test_group_harness import Harness
from .test_group_persistence import (
    _COMMIT_GROUPS,
    _PROPERTY_CONFIG,
    _TOPICS,
    _all_offsets,
    _apply,
    _op,
    _view,
)


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


# ---- transactions: TxnOffsetCommit batches and markers, compaction, restarts ---------------

_PIDS = [1000, 2000]
_txn_op = st.one_of(
    _op,
    st.tuples(
        st.just("txn_commit"),
        st.sampled_from(_PIDS),
        st.sampled_from(_COMMIT_GROUPS),
        st.lists(st.tuples(st.sampled_from(_TOPICS), st.integers(0, 1)), min_size=1, max_size=3),
        st.integers(0, 1000),
    ),
    st.tuples(st.just("txn_end"), st.sampled_from(_PIDS), st.booleans()),
)


def _apply_txn(h: Harness, op: tuple[Any, ...]) -> None:
    if op[0] == "txn_commit":
        _, pid, group, tps, offset = op
        by_topic: dict[str, list[OffsetCommitPartition]] = {}
        for topic, p in dict.fromkeys(tps):
            by_topic.setdefault(topic, []).append(OffsetCommitPartition(p, offset, -1, None))
        req = TxnOffsetCommitRequest(
            group, f"tx-{pid}", pid, 0, -1, "", None, tuple((t, tuple(ps)) for t, ps in by_topic.items())
        )
        h.absorb(h.shard.txn_offset_commit(h.handle("txn"), req, h.now))
    elif op[0] == "txn_end":
        h.absorb(h.shard.txn_marker(h.handle("marker"), TxnMarkerRequest(op[1], 0, op[2], 0), h.now))
    else:
        _apply(h, op)


def _write_outputs(log: PartitionLog, outputs: list[Output], chunks: list[int], ts: int) -> None:
    """Append each Output as the runtime does: a marker, one transactional batch, or plain
    records cut into batches of the given sizes."""
    sizes = iter(chunks)
    for out in outputs:
        if out.marker is not None:
            m = out.marker
            log.append(encode_marker(m.producer_id, m.producer_epoch, m.commit, m.coordinator_epoch, ts))
        elif out.records and out.producer_id >= 0:
            log.append(
                encode_kv_batch(
                    out.records, ts, producer_id=out.producer_id, producer_epoch=out.producer_epoch,
                    is_transactional=True,
                )
            )
        else:
            i = 0
            while i < len(out.records):
                n = max(1, next(sizes, 3))
                log.append(encode_kv_batch(out.records[i : i + n], ts))
                i += n
    log.flush()


def _load(path: Path, now: int) -> GroupShard:
    """A restart: the partition read by the broker's own loader (broker/groups/offsets_load.py)."""
    shard = GroupShard(0, _PROPERTY_CONFIG, now_ms=now)
    latest = LatestRecords()
    with PartitionLog.open(path, segment_bytes=600) as log:
        asyncio.run(read_partition(log, 0, latest, HistoryReplay()))
    latest.replay_into(shard, now)
    shard.finish_loading(now)
    return shard


def _pending(shard: GroupShard) -> dict[int, dict[str, dict[tuple[str, int], Any]]]:
    pending = shard.offsets.pending
    out: dict[int, dict[str, dict[tuple[str, int], Any]]] = {}
    for pid in pending.producers():
        groups = {
            g: {tp: e.value for tp, e in tps.items() if e.value is not None}
            for g, tps in pending.pending_of(pid).items()
        }
        out[pid] = {g: tps for g, tps in groups.items() if tps}
    return {pid: groups for pid, groups in out.items() if groups}


def _open_groups(shard: GroupShard) -> set[str]:
    return set(shard.offsets.pending.open_groups())


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    ops=st.lists(_txn_op, max_size=40),
    restarts=st.lists(st.tuples(st.integers(0, 40), st.booleans()), max_size=3),
    chunks=st.lists(st.integers(1, 6), max_size=30),
    drop_tombstones=st.booleans(),
    finally_commit=st.booleans(),
)
def test_transactional_offsets_compacted_and_reloaded_rebuild_the_live_state(
    ops: list[tuple[Any, ...]],
    restarts: list[tuple[int, bool]],
    chunks: list[int],
    drop_tombstones: bool,
    finally_commit: bool,
) -> None:
    """Transactional commits, commits and aborts mixed with all group activity: after
    compactions and restarts (transactions left open across them) the reloaded shard holds
    the live committed offsets, the same pending offsets and open transactions, and, when
    every open transaction is then ended the same way on both, the same offsets again (so an
    aborted commit never comes back and a committed one is never lost)."""
    h = Harness(_PROPERTY_CONFIG)
    cut_points = {at: do_compact for at, do_compact in restarts}
    retention = 0 if drop_tombstones else 10**12
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "__consumer_offsets-0"
        written = 0
        log = PartitionLog.open(path, segment_bytes=600)
        try:
            for i, op in enumerate(ops):
                _apply_txn(h, op)
                if i in cut_points:
                    _write_outputs(log, h.outputs[written:], chunks, h.now)
                    written = len(h.outputs)
                    if cut_points[i]:
                        compact(log, now_ms=h.now + 10**9, delete_retention_ms=retention)
                    log.close()
                    h.shard = _load(path, h.now)
                    log = PartitionLog.open(path, segment_bytes=600)
            _write_outputs(log, h.outputs[written:], chunks, h.now)
            compact(log, now_ms=h.now + 10**9, delete_retention_ms=retention)
        finally:
            log.close()
        rebuilt = _load(path, h.now)

    assert _all_offsets(rebuilt) == _all_offsets(h.shard)
    assert _pending(rebuilt) == _pending(h.shard)
    assert _open_groups(rebuilt) == _open_groups(h.shard)
    assert rebuilt.offsets.pending.epochs == h.shard.offsets.pending.epochs
    for g in rebuilt.groups():
        assert h.shard.group(g.group_id) is not None, f"deleted group {g.group_id} came back"
    # End every open transaction the same way on both: the same offsets become visible.
    for shard in (h.shard, rebuilt):
        for pid in list(shard.offsets.pending.producers()):
            out = shard.txn_marker("end", TxnMarkerRequest(pid, 0, finally_commit, 0), h.now)
            assert out.replies == [("end", TxnMarkerResponse(0))]
    assert _all_offsets(rebuilt) == _all_offsets(h.shard)
