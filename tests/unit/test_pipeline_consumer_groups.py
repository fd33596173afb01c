"""The pipeline over KIP-848 consumer-group records (no Spark): hand-built __consumer_offsets
segments decoded into state rows, replayed into consumer_group_epochs, topic ids named from
partition.metadata; the single-process pass writes the table."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from kcoord.coordinator.consumer.records import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupPartitionMetadataValue,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupRegularExpressionValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    ConsumerRecordKey,
    ConsumerRecordValue,
    TopicPartitions,
    encode_consumer_key,
    encode_consumer_value,
)
from kcoord.coordinator.schemas import (
    OffsetCommitKey,
    OffsetCommitValue,
    encode_key,
    encode_offset_commit_value,
)
from kcoord.pipeline.consumer_groups import EPOCHS_SCHEMA, STATE_COLUMNS, replay_epochs
from kcoord.pipeline.decode import STATE_SCHEMA, SegmentError, segment_state, spark_ddl, state_batch
from kcoord.pipeline.logs import offsets_segments, topic_names
from kcoord.protocol.batch import set_base_offset
from kcoord.protocol.record_encoding import encode_kv_batch
from kcoord.storage.partition_metadata import topic_id_to_str, write_partition_metadata

T0 = 1_700_000_000_000
ORDERS = uuid.UUID("11111111-2222-3333-4444-555555555555")
GONE_TOPIC = uuid.UUID("99999999-8888-7777-6666-555555555555")  # no directory: unnamed

Record = tuple[bytes, bytes | None]


def rec(key: ConsumerRecordKey, value: ConsumerRecordValue | None) -> Record:
    return encode_consumer_key(key), None if value is None else encode_consumer_value(value)


def member(g: str, m: str, client: str = "cli") -> Record:
    value = ConsumerGroupMemberMetadataValue(
        None, "rack-a", client, "/10.0.0.1", ("orders",), None, 45_000, "uniform"
    )
    return rec(ConsumerGroupMemberMetadataKey(g, m), value)


def epoch(g: str, e: int) -> Record:
    return rec(ConsumerGroupMetadataKey(g), ConsumerGroupMetadataValue(e, 1234))


def target(g: str, m: str, tps: TopicPartitions) -> Record:
    return rec(ConsumerGroupTargetAssignmentMemberKey(g, m), ConsumerGroupTargetAssignmentMemberValue(tps))


def target_epoch(g: str, e: int) -> Record:
    return rec(ConsumerGroupTargetAssignmentMetadataKey(g), ConsumerGroupTargetAssignmentMetadataValue(e))


def current(g: str, m: str, e: int, prev: int, state: int, tps: TopicPartitions, pending: TopicPartitions = ()) -> Record:
    value = ConsumerGroupCurrentMemberAssignmentValue(e, prev, state, tps, pending)
    return rec(ConsumerGroupCurrentMemberAssignmentKey(g, m), value)


def gone(key: ConsumerRecordKey) -> Record:
    return rec(key, None)


def p(*parts: int, topic: uuid.UUID = ORDERS) -> TopicPartitions:
    return ((topic, parts),)


# What Kafka writes, batch by batch (one coordinator write each): member A joins, member B joins
# (A must revoke partition 1 first), both reconcile, A leaves while B has not caught up yet.
# Then group "old" is created and deleted, and created again.
BATCHES: list[list[Record]] = [
    [member("cg", "A"), epoch("cg", 1), target("cg", "A", p(0, 1)), target_epoch("cg", 1),
     current("cg", "A", 1, 0, 0, p(0, 1))],
    [member("cg", "B"), epoch("cg", 2), target("cg", "A", p(0)), target("cg", "B", p(1)),
     target_epoch("cg", 2), current("cg", "B", 2, 0, 2, ())],
    [current("cg", "A", 1, 1, 1, p(0), p(1))],
    [current("cg", "A", 2, 1, 0, p(0))],
    [current("cg", "B", 2, 0, 0, p(1) + p(7, topic=GONE_TOPIC))],
    [gone(ConsumerGroupCurrentMemberAssignmentKey("cg", "A")),
     gone(ConsumerGroupTargetAssignmentMemberKey("cg", "A")),
     gone(ConsumerGroupMemberMetadataKey("cg", "A")), epoch("cg", 3), target("cg", "B", p(0, 1)),
     target_epoch("cg", 3)],
    # Records the epochs do not need: decoded, counted, no rows.
    [rec(ConsumerGroupRegularExpressionKey("cg", "ord.*"), ConsumerGroupRegularExpressionValue(("orders",), 5, T0)),
     rec(ConsumerGroupPartitionMetadataKey("cg"), ConsumerGroupPartitionMetadataValue(())),
     gone(ConsumerGroupPartitionMetadataKey("cg"))],
    [member("old", "X"), epoch("old", 1), target("old", "X", p(0)), target_epoch("old", 1),
     current("old", "X", 1, 0, 0, p(0))],
    [gone(ConsumerGroupCurrentMemberAssignmentKey("old", "X")), gone(ConsumerGroupTargetAssignmentMemberKey("old", "X")),
     gone(ConsumerGroupMemberMetadataKey("old", "X")), gone(ConsumerGroupTargetAssignmentMetadataKey("old")),
     gone(ConsumerGroupMetadataKey("old"))],
    [member("old", "Y", client="again"), epoch("old", 1)],
    [(encode_key(OffsetCommitKey("cg", "orders", 0)), encode_offset_commit_value(OffsetCommitValue(5, "", T0)))],
]


def write_data_dir(root: Path, batches: list[list[Record]] = BATCHES) -> Path:
    data = root / "data"
    d = data / "__consumer_offsets-0"
    d.mkdir(parents=True)
    raw = bytearray()
    offset = 0
    for i, records in enumerate(batches):
        batch = bytearray(encode_kv_batch(records, T0 + i))
        set_base_offset(batch, 0, offset)
        raw += batch
        offset += len(records)
    (d / f"{0:020d}.log").write_bytes(bytes(raw))
    orders = data / "orders-0"
    orders.mkdir()
    write_partition_metadata(orders, ORDERS, fsync=False)
    return data


def offsets(batches: list[list[Record]] = BATCHES) -> list[list[int]]:
    out, n = [], 0
    for records in batches:
        out.append(list(range(n, n + len(records))))
        n += len(records)
    return out


def consumer_rows(data: Path) -> list[dict[str, Any]]:
    refs, problems = offsets_segments(str(data))
    assert problems == [] and len(refs) == 1
    rows, stats = segment_state(refs[0])
    assert stats.consumer_group_records == 26 and stats.consumer_group_tombstones == 9
    assert stats.other_records == 0 and stats.offset_commits == 1
    return [r for r in rows if r["kind"] == "consumer"]


def test_segment_state_has_a_row_per_needed_consumer_record(tmp_path: Path) -> None:
    rows = consumer_rows(write_data_dir(tmp_path))
    # Every record but the regex and partition-metadata ones (3) and the offset commit.
    assert len(rows) == 35 - 3
    first = rows[0]
    assert first["record_type"] == "member" and first["member_id"] == "A"
    assert first["consumer_member"]["client_id"] == "cli"
    assert first["consumer_member"]["classic_session_timeout_ms"] is None
    assert rows[1]["record_type"] == "group_epoch" and rows[1]["epoch"] == 1
    a_revoking = next(r for r in rows if r["record_type"] == "assignment" and r["member_state"] == 1)
    assert a_revoking["partitions"] == [{"topic_id": topic_id_to_str(ORDERS), "partitions": [0]}]
    assert a_revoking["pending_partitions"][0]["partitions"] == [1]
    tombstones = [r for r in rows if r["tombstone"]]
    assert len(tombstones) == 8 and all(set(r) >= {"record_type", "group"} for r in tombstones)
    # The rows fit the state schema (the Arrow batch the Spark source yields).
    assert state_batch(rows).num_rows == len(rows)
    assert set(STATE_COLUMNS) <= set(STATE_SCHEMA.names)


def test_topic_names_from_partition_metadata(tmp_path: Path) -> None:
    data = write_data_dir(tmp_path)
    (data / "broken-0").mkdir()
    (data / "broken-0" / "partition.metadata").write_text("version: 7\n")
    assert topic_names(str(data)) == {topic_id_to_str(ORDERS): "orders"}


def _summary(e: dict[str, Any]) -> tuple[Any, ...]:
    return (
        e["group"], e["group_epoch"], e["assignment_epoch"], e["member_count"], e["converged"],
        [(m["member_id"], m["member_epoch"], m["state"], m["assigned_partitions"],
          m["pending_revocation_partitions"], m["target_partitions"]) for m in e["members"]],
    )


EXPECTED = [
    # Epoch 1: A alone, reconciled at once.
    ("cg", 1, 1, 1, True, [("A", 1, "stable", 2, 0, 2)]),
    # Epoch 2: A and B; by the next epoch both reached it (A after revoking partition 1; A's
    # tombstones before epoch 3 do not erase what it reached in epoch 2).
    ("cg", 2, 2, 2, True, [("A", 2, "stable", 1, 0, 1), ("B", 2, "stable", 2, 0, 1)]),
    # Epoch 3: A left; B has its new target but has not caught up.
    ("cg", 3, 3, 1, False, [("B", 2, "stable", 2, 0, 2)]),
    # "old" was deleted after its first life: only the second one remains.
    ("old", 1, None, 1, False, [("Y", None, None, 0, 0, None)]),
]


def test_replay_epochs(tmp_path: Path) -> None:
    data = write_data_dir(tmp_path)
    rows = sorted(consumer_rows(data), key=lambda r: (r["log_partition"], r["group"], r["log_offset"]))
    epochs = list(replay_epochs(rows, topic_names(str(data))))
    assert [_summary(e) for e in epochs] == EXPECTED
    at = offsets()
    e1, e2, e3, old = epochs
    assert (e1["log_offset"], e1["end_log_offset"]) == (at[0][1], at[1][0])  # up to B's metadata
    assert (e2["log_offset"], e2["end_log_offset"]) == (at[1][1], at[5][2])
    assert (e2["record_timestamp"], e2["end_timestamp"]) == (T0 + 1, T0 + 5)
    assert (e3["log_offset"], e3["end_log_offset"]) == (at[5][3], at[5][5])
    assert old["log_offset"] == at[9][1] and old["members"][0]["client_id"] == "again"
    b = e2["members"][1]
    assert b["assignment"] == [
        {"topic": "orders", "topic_id": topic_id_to_str(ORDERS), "partitions": [1]},
        {"topic": None, "topic_id": topic_id_to_str(GONE_TOPIC), "partitions": [7]},
    ]
    assert (b["rack_id"], b["client_host"], b["subscribed_topic_names"], b["server_assignor"]) == (
        "rack-a", "/10.0.0.1", ["orders"], "uniform",
    )
    assert b["classic_protocol"] is False
    # The rows fit the table's schema (what the Spark mapInArrow function yields).
    import pyarrow as pa

    assert pa.Table.from_pylist(epochs, schema=EPOCHS_SCHEMA).num_rows == 4
    assert "members` array<struct<member_id: string" in spark_ddl(EPOCHS_SCHEMA)


def test_replay_is_per_group_and_log_partition() -> None:
    def row(lp: int, g: str, off: int, e: int) -> dict[str, Any]:
        return {"kind": "consumer", "log_partition": lp, "group": g, "log_offset": off,
                "record_timestamp": T0, "tombstone": False, "record_type": "group_epoch",
                "member_id": None, "epoch": e}

    rows = [row(0, "a", 1, 1), row(0, "a", 5, 2), row(0, "b", 2, 7), row(1, "a", 3, 9)]
    got = [(e["log_partition"], e["group"], e["group_epoch"], e["end_log_offset"]) for e in replay_epochs(rows, {})]
    assert got == [(0, "a", 1, 1), (0, "a", 2, 5), (0, "b", 7, 2), (1, "a", 9, 3)]


def test_python_pass_writes_consumer_group_epochs(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    from kcoord.pipeline.local import python_pass

    data = write_data_dir(tmp_path)
    out = tmp_path / "out"
    result = python_pass(str(data), str(out), as_of_ms=T0)
    assert result["problems"] == []
    assert result["rows"]["consumer_group_epochs"] == 4
    assert result["rows"]["offsets_latest"] == 1 and result["rows"]["group_generations"] == 0
    table = pq.read_table(out / "consumer_group_epochs.parquet").to_pylist()
    assert [_summary(e) for e in table] == EXPECTED


def test_a_malformed_consumer_value_makes_the_segment_a_problem(tmp_path: Path) -> None:
    key, value = epoch("cg", 1)
    assert value is not None
    data = write_data_dir(tmp_path, [[(key, value + b"\x00")]])  # a trailing byte
    refs, _ = offsets_segments(str(data))
    with pytest.raises(SegmentError, match="trailing"):
        segment_state(refs[0])
