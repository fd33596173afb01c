"""The pipeline over share groups (no Spark): records 9-15 of a hand-built __consumer_offsets
segment as state rows replayed into share_group_epochs; a __share_group_state segment written
by the share coordinator's own shard, decoded and replayed into history and latest rows."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from kcoord.coordinator.share.records import (
    ShareGroupCurrentMemberAssignmentKey,
    ShareGroupCurrentMemberAssignmentValue,
    ShareGroupMemberMetadataKey,
    ShareGroupMemberMetadataValue,
    ShareGroupMetadataKey,
    ShareGroupMetadataValue,
    ShareGroupPartitionMetadataKey,
    ShareGroupPartitionMetadataValue,
    ShareGroupStatePartitionMetadataKey,
    ShareGroupStatePartitionMetadataValue,
    ShareGroupTargetAssignmentMemberKey,
    ShareGroupTargetAssignmentMemberValue,
    ShareGroupTargetAssignmentMetadataKey,
    ShareGroupTargetAssignmentMetadataValue,
    ShareRecordKey,
    ShareRecordValue,
    StateTopic,
    encode_share_key,
    encode_share_value,
)
from kcoord.pipeline.consumer_groups import replay_epochs
from kcoord.pipeline.decode import SegmentError, segment_state, state_batch
from kcoord.pipeline.logs import offsets_segments, topic_names
from kcoord.pipeline.share_state import (
    REPLAY_SCHEMA,
    SHARE_STATE_TOPIC,
    OffsetSet,
    replay_share_state,
    segment_share_state,
    share_state_batch,
)
from kcoord.protocol.batch import set_base_offset
from kcoord.protocol.record_encoding import encode_kv_batch
from kcoord.share.model import UNINITIALIZED, RecordState, SharePartitionKey, StateBatch, StateWrite
from kcoord.share.state_shard import ShareStateShard, delivery_complete_count
from kcoord.storage.partition_metadata import topic_id_to_str, write_partition_metadata

T0 = 1_700_000_000_000
ORDERS = uuid.UUID("11111111-2222-3333-4444-555555555555")
AVAILABLE, ACKNOWLEDGED, ARCHIVED = RecordState.AVAILABLE, RecordState.ACKNOWLEDGED, RecordState.ARCHIVED

Record = tuple[bytes, bytes | None]


def write_log(data: Path, topic: str, batches: list[list[Record]]) -> None:
    d = data / f"{topic}-0"
    d.mkdir(parents=True)
    raw, offset = bytearray(), 0
    for i, records in enumerate(batches):
        batch = bytearray(encode_kv_batch(records, T0 + 1000 * i))
        set_base_offset(batch, 0, offset)
        raw += batch
        offset += len(records)
    (d / f"{0:020d}.log").write_bytes(bytes(raw))
    if not (data / "orders-0").exists():
        (data / "orders-0").mkdir()
        write_partition_metadata(data / "orders-0", ORDERS, fsync=False)


# ----------------------------------------------------------------------------- records 9-15


def rec(key: ShareRecordKey, value: ShareRecordValue | None) -> Record:
    return encode_share_key(key), None if value is None else encode_share_value(value)


def member(g: str, m: str) -> Record:
    return rec(ShareGroupMemberMetadataKey(g, m), ShareGroupMemberMetadataValue("r1", f"cli-{m}", "/10.0.0.2", ("orders",)))


def epoch(g: str, e: int) -> Record:
    return rec(ShareGroupMetadataKey(g), ShareGroupMetadataValue(e, 99))


def target(g: str, m: str, *parts: int) -> Record:
    return rec(ShareGroupTargetAssignmentMemberKey(g, m), ShareGroupTargetAssignmentMemberValue(((ORDERS, parts),)))


def target_epoch(g: str, e: int) -> Record:
    return rec(ShareGroupTargetAssignmentMetadataKey(g), ShareGroupTargetAssignmentMetadataValue(e))


def current(g: str, m: str, e: int, prev: int, *parts: int) -> Record:
    return rec(ShareGroupCurrentMemberAssignmentKey(g, m),
               ShareGroupCurrentMemberAssignmentValue(e, prev, 0, ((ORDERS, parts),)))


STATE_META = rec(ShareGroupStatePartitionMetadataKey("sg"), ShareGroupStatePartitionMetadataValue(
    initialized=(StateTopic(ORDERS, "orders", (0, 1), T0),)))
LEGACY = rec(ShareGroupPartitionMetadataKey("sg"), ShareGroupPartitionMetadataValue(()))

SHARE_BATCHES: list[list[Record]] = [
    # A joins: epoch 1, target and current assignment of both partitions.
    [member("sg", "A"), epoch("sg", 1), target("sg", "A", 0, 1), target_epoch("sg", 1),
     current("sg", "A", 1, 0, 0, 1), STATE_META],
    # B joins: epoch 2, each gets one partition; B reaches it, A not yet.
    [member("sg", "B"), epoch("sg", 2), target("sg", "A", 0), target("sg", "B", 1),
     target_epoch("sg", 2), current("sg", "B", 2, 0, 1)],
    [current("sg", "A", 2, 1, 0)],
    # a group written by an older Kafka, then deleted with everything it had
    [LEGACY, member("old", "X"), epoch("old", 1)],
    [rec(ShareGroupMemberMetadataKey("old", "X"), None), rec(ShareGroupPartitionMetadataKey("old"), None),
     rec(ShareGroupMetadataKey("old"), None)],
]


def share_rows(data: Path) -> list[dict[str, Any]]:
    refs, problems = offsets_segments(str(data))
    assert problems == [] and len(refs) == 1
    rows, stats = segment_state(refs[0])
    assert (stats.share_group_records, stats.share_group_tombstones) == (16, 3)
    assert stats.other_records == 0 and stats.consumer_group_records == 0
    return [r for r in rows if r["kind"] == "share"]


def test_share_group_records_are_state_rows_like_consumer_group_records(tmp_path: Path) -> None:
    write_log(tmp_path, "__consumer_offsets", SHARE_BATCHES)
    rows = share_rows(tmp_path)
    # every record but the state metadata (15) and the legacy partition metadata (9, twice)
    assert len(rows) == 19 - 3
    a = rows[0]
    assert (a["record_type"], a["member_id"], a["group"]) == ("member", "A", "sg")
    assert a["consumer_member"]["client_id"] == "cli-A" and a["consumer_member"]["instance_id"] is None
    assignment = rows[4]
    assert (assignment["record_type"], assignment["epoch"], assignment["previous_epoch"]) == ("assignment", 1, 0)
    assert assignment["partitions"] == [{"topic_id": topic_id_to_str(ORDERS), "partitions": [0, 1]}]
    assert assignment["pending_partitions"] == []
    assert [r["record_type"] for r in rows if r["tombstone"]] == ["member", "group_epoch"]
    assert state_batch(rows).num_rows == len(rows)  # they fit the source's schema


def test_share_group_epochs_replay(tmp_path: Path) -> None:
    write_log(tmp_path, "__consumer_offsets", SHARE_BATCHES)
    # as Spark hands them to the replay: through Arrow, sorted by (log partition, group, offset)
    rows = state_batch(share_rows(tmp_path)).to_pylist()
    rows.sort(key=lambda r: (r["log_partition"], r["group"], r["log_offset"]))
    epochs = list(replay_epochs(rows, topic_names(str(tmp_path))))
    got = [
        (e["group"], e["group_epoch"], e["assignment_epoch"], e["converged"],
         [(m["member_id"], m["member_epoch"], m["assigned_partitions"], m["target_partitions"]) for m in e["members"]])
        for e in epochs
    ]
    assert got == [
        ("sg", 1, 1, True, [("A", 1, 2, 2)]),
        ("sg", 2, 2, True, [("A", 2, 1, 1), ("B", 2, 1, 1)]),
    ]  # "old" was deleted: its epoch is left out
    b = epochs[1]["members"][1]
    assert b["assignment"] == [{"topic": "orders", "topic_id": topic_id_to_str(ORDERS), "partitions": [1]}]
    assert (b["client_id"], b["rack_id"], b["subscribed_topic_names"]) == ("cli-B", "r1", ["orders"])


def test_a_malformed_share_group_value_makes_the_segment_a_problem(tmp_path: Path) -> None:
    key, value = epoch("sg", 1)
    assert value is not None
    write_log(tmp_path, "__consumer_offsets", [[(key, value[:-3])]])
    refs, _ = offsets_segments(str(tmp_path))
    with pytest.raises(SegmentError, match="corrupt"):
        segment_state(refs[0])


# ----------------------------------------------------------------------------- __share_group_state


K1 = SharePartitionKey("sg", ORDERS, 0)
K2 = SharePartitionKey("sg", ORDERS, 1)


def sb(first: int, last: int, state: RecordState, count: int) -> StateBatch:
    return StateBatch(first, last, state, count)


def state_log() -> tuple[list[list[Record]], list[tuple[SharePartitionKey, Any]]]:
    """What the share coordinator writes (a snapshot every 2 updates), one batch per call,
    and after each record the state its shard holds (None: deleted)."""
    shard = ShareStateShard(snapshot_every=2)
    batches: list[list[Record]] = []
    states: list[tuple[SharePartitionKey, Any]] = []

    def call(key: SharePartitionKey, records: list[Record]) -> None:
        batches.append(records)
        for _ in records:
            state = shard.read(key)
            states.append((key, None if state is UNINITIALIZED else state))

    call(K1, shard.initialize(K1, 0, 0, T0))
    # offset 0 released, 1 rejected, 2-3 accepted: the SPSO stays at 0
    call(K1, shard.write(K1, 0, 0, StateWrite(0, (sb(0, 0, AVAILABLE, 1), sb(1, 1, ARCHIVED, 1),
                                                   sb(2, 3, ACKNOWLEDGED, 1))), T0 + 1))
    # offset 0 accepted on its second delivery: the SPSO moves to 4
    call(K1, shard.write(K1, 0, 0, StateWrite(4, (sb(0, 0, ACKNOWLEDGED, 2),)), T0 + 2))
    # 4-5 rejected, 6 released twice: the third write is a snapshot again
    call(K1, shard.write(K1, 0, 0, StateWrite(4, (sb(4, 5, ARCHIVED, 1), sb(6, 6, AVAILABLE, 2))), T0 + 3))
    call(K2, shard.initialize(K2, 0, 10, T0 + 4))
    call(K2, shard.write(K2, 0, 0, StateWrite(10, (sb(10, 12, ARCHIVED, 1),)), T0 + 5))
    call(K2, shard.delete(K2))
    batches.append([(b"\x00\x07other", b"x")])  # a record type this reader does not know
    return batches, states


def replayed(data: Path) -> list[dict[str, Any]]:
    refs, problems = offsets_segments(str(data), SHARE_STATE_TOPIC)
    assert problems == [] and len(refs) == 1
    rows, stats = segment_share_state(refs[0])
    assert (stats.share_snapshots, stats.share_updates, stats.share_state_tombstones) == (3, 3, 2)
    assert stats.other_records == 1 and stats.records == 9
    records = [r for r in share_state_batch(rows).to_pylist() if r["kind"] == "share_state"]
    records.sort(key=lambda r: (r["log_partition"], r["group"], r["topic_id"], r["partition"], r["log_offset"]))
    return list(replay_share_state(records, topic_names(str(data))))


def test_share_state_history_is_the_share_coordinators_replay(tmp_path: Path) -> None:
    batches, states = state_log()
    write_log(tmp_path, SHARE_STATE_TOPIC, batches)
    history = replayed(tmp_path)
    assert [(r["partition"], r["log_offset"], r["record_type"]) for r in history] == [
        (0, 0, "snapshot"), (0, 1, "update"), (0, 2, "update"), (0, 3, "snapshot"),
        (1, 4, "snapshot"), (1, 5, "update"), (1, 6, "delete"), (1, 7, "delete"),
    ]
    for row, (key, state) in zip(history, states, strict=True):
        assert row["partition"] == key.partition
        if state is None:
            assert row.get("start_offset") is None and row["record_type"] == "delete"
            continue
        assert (row["start_offset"], row["state_epoch"]) == (state.start_offset, state.state_epoch)
        assert row["delivery_complete_count"] == delivery_complete_count(state)
    k1 = history[:4]
    assert [r["start_offset"] for r in k1] == [0, 0, 4, 4]
    assert [r["delivery_complete_count"] for r in k1] == [0, 3, 0, 2]
    assert [(r["available_records"], r["acknowledged_records"], r["archived_records"]) for r in k1] == [
        (0, 0, 0), (1, 2, 1), (0, 0, 0), (1, 0, 2)]
    # the rejected offsets: 1, then 4 and 5 (offset 1 is below the SPSO by then)
    assert [r["archived_total"] for r in k1] == [0, 1, 1, 3]
    assert [r["record_timestamp"] for r in k1] == [T0 + 1000 * i for i in range(4)]
    assert k1[0]["write_timestamp"] == T0 and k1[1]["write_timestamp"] is None
    assert all(r["topic"] == "orders" for r in history)
    assert pa.Table.from_pylist(history, schema=REPLAY_SCHEMA).num_rows == len(history)


def test_share_state_latest_is_the_last_row_of_each_live_share_partition(tmp_path: Path) -> None:
    batches, _ = state_log()
    write_log(tmp_path, SHARE_STATE_TOPIC, batches)
    latest = [r for r in replayed(tmp_path) if r["is_latest"]]
    assert len(latest) == 1  # the second share partition was deleted
    (r,) = latest
    assert (r["partition"], r["log_offset"], r["start_offset"], r["snapshot_epoch"]) == (0, 3, 4, 1)
    assert r["state_batches"] == [
        {"first_offset": 4, "last_offset": 5, "state": "archived", "delivery_count": 1},
        {"first_offset": 6, "last_offset": 6, "state": "available", "delivery_count": 2},
    ]
    assert (r["max_delivery_count"], r["updates_since_snapshot"], r["records"]) == (2, 0, 4)
    assert (r["first_start_offset"], r["first_start_timestamp"], r["create_timestamp"]) == (0, T0, T0)


def test_a_malformed_share_state_record_makes_the_segment_a_problem(tmp_path: Path) -> None:
    batches, _ = state_log()
    key, value = batches[1][0]
    assert value is not None
    write_log(tmp_path, SHARE_STATE_TOPIC, [batches[0], [(key, value + b"\x01")]])
    refs, _ = offsets_segments(str(tmp_path), SHARE_STATE_TOPIC)
    with pytest.raises(SegmentError, match=f"{SHARE_STATE_TOPIC}-0/.*corrupt"):
        segment_share_state(refs[0])


def test_offsets_set_merges_touching_and_overlapping_intervals() -> None:
    s = OffsetSet()
    for first, last in [(10, 12), (20, 20), (13, 14), (0, 2), (11, 21), (30, 31), (1, 1)]:
        s.add(first, last)
    assert (s.firsts, s.lasts, s.count) == ([0, 10, 30], [2, 21, 31], 3 + 12 + 2)
