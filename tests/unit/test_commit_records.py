"""The OffsetCommit hot path (coordinator/offsets.py with coordinator/commit_records.py) writes
the same records and answers as the schema's own encoders would, commit after commit.

Random commits (standalone groups, several topics, metadata null / empty / ASCII / non-ASCII /
too long, leader epochs, topic ids as a v10 commit names them, retention times as v2-v4 do)
go through a shard; each Output's records must equal, pair for pair and then as a record batch,
the reference built from :class:`OffsetCommitKey` / :class:`OffsetCommitValue` by
``encode_key`` / ``encode_offset_commit_value`` and the generic ``build_batch``, and its answer
must name every partition in request order with the error the rules give it.
"""

from __future__ import annotations

import random
import uuid

from kcoord.coordinator.commit_records import MAX_KEYS, CommitKeys, stored_answer, stored_before
from kcoord.coordinator.config import GroupConfig
from kcoord.coordinator.messages import (
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetCommitResponse,
)
from kcoord.coordinator.schemas import (
    OffsetCommitKey,
    OffsetCommitValue,
    decode_offset_commit_value,
    encode_key,
    encode_offset_commit_value,
)
from kcoord.coordinator.shard import GroupShard
from kcoord.protocol.errors import ErrorCode
from kcoord.protocol.record_encoding import build_batch, encode_kv_batch

MAX_METADATA = 64
TOPICS = ("orders", "clicks", "ünïcode-tópic", "t" * 200)
GROUPS = ("g1", "gröup-2", "standalone-3")
METADATA = (None, "", "m", "meta-data", "naïve ✓ 日本", "x" * MAX_METADATA, "é" * 40, "y" * 65)


def _shard() -> GroupShard:
    shard = GroupShard(
        0,
        GroupConfig(offset_metadata_max_bytes=MAX_METADATA),
        now_ms=0,
        new_member_id=lambda prefix: prefix + "-1",
    )
    shard.finish_loading(0)
    return shard


def _random_commit(rng: random.Random, ids: dict[str, uuid.UUID]) -> OffsetCommitRequest:
    by_id = rng.random() < 0.3
    retention = rng.choice((-1, -1, 60_000)) if not by_id else -1
    topics = []
    for topic in rng.sample(TOPICS, rng.randint(1, 3)):
        partitions = rng.sample(range(0, 5000), rng.randint(1, 12))  # some past 4095
        topics.append(
            (
                topic,
                tuple(
                    OffsetCommitPartition(
                        p,
                        rng.randint(0, 1 << 40),
                        rng.choice((-1, 0, 7, 2**31 - 1)),
                        rng.choice(METADATA),
                    )
                    for p in partitions
                ),
            )
        )
    return OffsetCommitRequest(
        rng.choice(GROUPS),
        -1,
        "",
        None,
        tuple(topics),
        api_version=10 if by_id else (3 if retention != -1 else 8),
        topic_ids=tuple((t, ids[t]) for t, _ in topics) if by_id else (),
        retention_ms=retention,
    )


def _expected(
    req: OffsetCommitRequest, now: int
) -> tuple[list[tuple[bytes, bytes | None]], tuple[tuple[str, tuple[tuple[int, int], ...]], ...]]:
    """The records and answer of ``req`` by the schema's encoders, partition by partition."""
    ids = dict(req.topic_ids)
    records: list[tuple[bytes, bytes | None]] = []
    answer = []
    for topic, partitions in req.topics:
        errors = []
        for p in partitions:
            metadata = p.metadata or ""
            if len(metadata.encode("utf-8")) > MAX_METADATA:
                errors.append((p.partition, ErrorCode.offset_metadata_too_large))
                continue
            if req.retention_ms != -1:  # v1: the expire timestamp, no epoch, no id
                value = OffsetCommitValue(p.offset, metadata, now, -1, now + req.retention_ms)
            else:
                value = OffsetCommitValue(p.offset, metadata, now, p.leader_epoch, -1, ids.get(topic))
            encoded = encode_offset_commit_value(value)
            assert decode_offset_commit_value(encoded) == value
            records.append((encode_key(OffsetCommitKey(req.group_id, topic, p.partition)), encoded))
            errors.append((p.partition, ErrorCode.none))
        answer.append((topic, tuple(errors)))
    return records, tuple(answer)


def test_random_commits_write_the_reference_records_and_answers() -> None:
    rng = random.Random(33)
    shard = _shard()
    ids = {t: uuid.UUID(int=rng.getrandbits(128)) for t in TOPICS}
    versions_seen: set[bytes] = set()
    for handle in range(1, 250):
        req = _random_commit(rng, ids)
        now = 1_700_000_000_000 + handle
        out = shard.offset_commit(handle, req, now)
        records, answer = _expected(req, now)
        assert out.records == records
        (reply,) = [r for h, r in out.replies if h == handle]
        assert isinstance(reply, OffsetCommitResponse)
        assert reply.topics == answer
        versions_seen.update(v[:2] for _, v in records if v is not None)
        if records:
            assert encode_kv_batch(out.records, now) == build_batch(
                [(k, v, (), now) for k, v in records]
            )
    assert versions_seen == {b"\x00\x01", b"\x00\x04"}


def test_keys_are_the_schema_keys_past_the_bound() -> None:
    keys = CommitKeys()
    for n in range(MAX_KEYS + 300):
        group, topic, partition = f"g{n % 7}", f"t{n % 3}", n
        topic_keys = keys.of(group, topic)
        assert topic_keys is not None
        assert topic_keys.key(partition) == encode_key(OffsetCommitKey(group, topic, partition))
        assert keys.count <= MAX_KEYS
    assert keys.of("g", "x" * 40_000) is None  # too long for a key: no such topic


def test_stored_answers_name_each_partition_in_order() -> None:
    parts = tuple(OffsetCommitPartition(p, 1, -1, None) for p in (5, 4095, 4096, 0, 70_000))
    assert stored_answer(parts) == tuple((p.partition, ErrorCode.none) for p in parts)
    assert stored_before(parts, 3) == [(5, 0), (4095, 0), (4096, 0)]
