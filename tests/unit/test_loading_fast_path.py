"""The start-up load's fast path equals the per-record path it replaced.

``broker.groups.offsets_load.read_partition`` folds plain batches straight into
``LatestRecords.add_batch`` and decodes offset keys and v4 values without the generic reader;
the reference here is the path before it: every batch decoded to (key, value) pairs
(``decode_key_values``) and fed to ``LatestRecords.add`` record by record. Random logs of
offset commits (key versions 0 and 1; values v0-v4, with leader epochs, metadata strings,
expire timestamps and topic ids), tombstones, classic group records, keyless records,
transactional offset commits with their COMMIT and ABORT markers, and undecodable batches must
leave the same newest-per-key map (order included), pending transactions, producer epochs,
record count, rebalance history and replayed offsets.
"""

from __future__ import annotations

import asyncio
import struct
import uuid
from collections.abc import Iterator
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kcoord.broker.groups.offsets_load import read_partition
from kcoord.coordinator.loading import LatestRecords
from kcoord.coordinator.rebalance_replay import HistoryReplay
from kcoord.coordinator.schemas import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    SchemaError,
    decode_key,
    decode_offset_commit_value,
    encode_group_metadata_value,
    encode_key,
    encode_offset_commit_value,
)
from kcoord.coordinator.shard import GroupShard
from kcoord.protocol.batch import HEADER_SIZE, BatchHeader, CorruptBatch, parse_header
from kcoord.protocol.control import decode_marker, encode_marker
from kcoord.protocol.key_values import decode_key_values
from kcoord.protocol.record_encoding import build_batch, encode_kv_batch

_GROUPS = ["g", "gröup", "long-group-name-" + "x" * 70]
_TOPICS = ["t", "tópico"]
_PIDS = [1000, 2000]
_TS = 1_700_000_000_000


def _offset_key(version: int, group: str, topic: str, partition: int) -> bytes:
    if version == 1:
        return encode_key(OffsetCommitKey(group, topic, partition))
    g, t = group.encode(), topic.encode()
    return struct.pack(f">hh{len(g)}sh{len(t)}si", 0, len(g), g, len(t), t, partition)


def _offset_value(version: int, offset: int, metadata: str, epoch: int) -> bytes:
    m = metadata.encode()
    if version in (0, 2):
        return struct.pack(f">hqh{len(m)}sq", version, offset, len(m), m, _TS)
    if version == 1:
        return encode_offset_commit_value(
            OffsetCommitValue(offset, metadata, _TS, expire_timestamp=_TS + 9)
        )
    if version == 3:
        return struct.pack(f">hqih{len(m)}sq", 3, offset, epoch, len(m), m, _TS)
    topic_id = uuid.UUID(int=offset + 1) if offset % 3 == 0 else None
    return encode_offset_commit_value(
        OffsetCommitValue(offset, metadata, _TS, epoch, topic_id=topic_id)
    )


def _group_value(generation: int, members: list[str]) -> bytes:
    return encode_group_metadata_value(
        GroupMetadataValue(
            "consumer",
            generation,
            "range",
            members[0] if members else None,
            _TS + generation,
            tuple(MemberMetadata(m, None, "c", "/h", 1000, 1000, b"", b"") for m in members),
        )
    )


_offset_record = st.builds(
    lambda kv, g, t, p, vv, off, meta, ep, tomb: (
        _offset_key(kv, g, t, p),
        None if tomb else _offset_value(vv, off, meta, ep),
    ),
    st.sampled_from([0, 1]),
    st.sampled_from(_GROUPS),
    st.sampled_from(_TOPICS),
    st.integers(0, 2),
    st.sampled_from([0, 1, 2, 3, 4, 4, 4]),
    st.integers(0, 10**12),
    st.sampled_from(["", "", "m", "métä" * 40]),
    st.integers(-1, 5),
    st.integers(0, 5).map(lambda n: n == 0),
)
_group_record = st.builds(
    lambda g, gen, members, tomb: (
        encode_key(GroupMetadataKey(g)),
        None if tomb else _group_value(gen, members),
    ),
    st.sampled_from(_GROUPS),
    st.integers(1, 6),
    st.lists(st.sampled_from(["a", "b", "c"]), unique=True),
    st.integers(0, 6).map(lambda n: n == 0),
)
_record = st.one_of(_offset_record, _offset_record, _offset_record, _group_record)

_batch = st.one_of(
    st.tuples(st.just("plain"), st.lists(_record, min_size=1, max_size=8)),
    st.tuples(st.just("keyless"), st.lists(_record, min_size=1, max_size=4)),
    st.tuples(
        st.just("txn"),
        st.sampled_from(_PIDS),
        st.integers(0, 3),
        st.lists(_offset_record, min_size=1, max_size=4),
    ),
    st.tuples(
        st.just("marker"),
        st.sampled_from(_PIDS),
        st.integers(0, 3),
        st.booleans(),
        st.integers(0, 9),
    ),
    st.tuples(st.just("corrupt"), st.lists(_record, min_size=1, max_size=4)),
)


def _encode(spec: tuple[Any, ...], ts: int) -> bytes | tuple[bytes, int]:
    kind = spec[0]
    if kind == "plain":
        return encode_kv_batch(spec[1], ts)
    if kind == "keyless":  # a record without a key among keyed ones: counted, never kept
        return build_batch([(None, b"v", (), ts), *((k, v, (), ts) for k, v in spec[1])])
    if kind == "txn":
        _, pid, epoch, pairs = spec
        return encode_kv_batch(
            pairs, ts, producer_id=pid, producer_epoch=epoch, is_transactional=True, base_sequence=0
        )
    if kind == "marker":
        _, pid, epoch, commit, coordinator_epoch = spec
        return encode_marker(pid, epoch, commit, coordinator_epoch, ts)
    return encode_kv_batch(spec[1], ts), 3  # its last 3 bytes cut off: a truncated record


def _batches(specs: list[tuple[Any, ...]]) -> list[tuple[int, BatchHeader, memoryview]]:
    out = []
    for i, spec in enumerate(specs):
        raw = _encode(spec, _TS + i)
        cut = 0
        if isinstance(raw, tuple):
            raw, cut = raw
        out.append((i, parse_header(raw), memoryview(raw)[: len(raw) - cut]))
    return out


class _Log:
    """What read_partition reads of a log: its batches in order."""

    def __init__(self, batches: list[tuple[int, BatchHeader, memoryview]]) -> None:
        self.batches = batches

    def iter_batches(self) -> Iterator[tuple[int, BatchHeader, memoryview]]:
        return iter(self.batches)


def _reference(
    batches: list[tuple[int, BatchHeader, memoryview]],
) -> tuple[LatestRecords, HistoryReplay]:
    """The per-record load: every batch decoded to pairs, each pair fed to LatestRecords.add."""
    latest, history = LatestRecords(), HistoryReplay()
    for _base, header, data in batches:
        try:
            pairs = decode_key_values(header, data[HEADER_SIZE:])
        except CorruptBatch:
            pairs = []
        if header.is_control:
            if header.is_transactional:
                for key, value in pairs:
                    marker = decode_marker(key, value)
                    if marker is not None:
                        latest.add_marker(
                            header.producer_id,
                            header.producer_epoch,
                            marker.commit,
                            marker.coordinator_epoch,
                        )
        elif header.is_transactional and header.producer_id >= 0:
            latest.add_transactional(header.producer_id, header.producer_epoch, pairs)
            history.add(pairs, header.max_timestamp)
        else:
            latest.add(pairs)
            history.add(pairs, header.max_timestamp)
    return latest, history


def _state(latest: LatestRecords) -> tuple[Any, ...]:
    # every field of the loader (its private state: the result is exactly what is kept)
    return (
        list(latest._latest.items()),
        latest.records,
        latest._pending,
        latest._pending_keys,
        latest._visible,
        latest._epochs,
    )


def _replayed(latest: LatestRecords) -> dict[str, Any]:
    shard = GroupShard(0, now_ms=_TS)
    latest.replay_into(shard, _TS)
    shard.finish_loading(_TS)
    return {g.group_id: shard.committed_offsets(g.group_id) for g in shard.groups()}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_batch, max_size=25))
def test_the_batch_fold_loads_what_the_per_record_path_loads(specs: list[tuple[Any, ...]]) -> None:
    batches = _batches(specs)
    expected, expected_history = _reference(batches)
    latest, history = LatestRecords(), HistoryReplay()
    asyncio.run(read_partition(_Log(batches), 0, latest, history))  # type: ignore[arg-type]
    assert _state(latest) == _state(expected)
    assert list(history.events()) == list(expected_history.events())
    assert _replayed(latest) == _replayed(expected)


def _slow_offset_key(buf: bytes) -> OffsetCommitKey:
    """OffsetCommitKey v0/v1 read field by field, as the generic reader does."""
    version, n = struct.unpack_from(">hh", buf)
    if version not in (0, 1) or n < 0:
        raise SchemaError("bad")
    group = buf[4 : 4 + n].decode()
    (m,) = struct.unpack_from(">h", buf, 4 + n)
    if m < 0 or len(buf) != 4 + n + 2 + m + 4:
        raise SchemaError("bad")
    topic = buf[6 + n : 6 + n + m].decode()
    return OffsetCommitKey(group, topic, struct.unpack_from(">i", buf, 6 + n + m)[0])


_valid_key = st.builds(
    _offset_key,
    st.sampled_from([0, 1]),
    st.text(max_size=20),
    st.text(max_size=5),
    st.integers(-(2**31), 2**31 - 1),
)


@settings(max_examples=250, deadline=None)
@given(
    st.one_of(
        _valid_key,
        st.tuples(_valid_key, st.binary(min_size=1, max_size=3)).map(
            lambda kb: kb[0] + kb[1]
        ),  # trailing bytes
        st.tuples(_valid_key, st.integers(1, 6)).map(lambda kn: kn[0][: -kn[1]]),  # truncated
        st.binary(min_size=2, max_size=30).map(lambda b: b"\x00" + bytes([b[0] & 1]) + b[1:]),
    )
)
def test_offset_keys_straight_from_bytes_equal_the_field_by_field_read(buf: bytes) -> None:
    try:
        expected: OffsetCommitKey | type[Exception] = _slow_offset_key(buf)
    except (SchemaError, struct.error, UnicodeDecodeError):
        expected = SchemaError
    try:
        got: object = decode_key(buf)
    except SchemaError:
        got = SchemaError
    assert got == expected


def test_v4_values_are_read_before_the_generic_reader() -> None:
    value = OffsetCommitValue(7, "meta", _TS, 3, topic_id=uuid.UUID(int=5))
    raw = encode_offset_commit_value(value)
    assert decode_offset_commit_value(raw) == value
    empty = OffsetCommitValue(7, "", _TS, -1)
    assert decode_offset_commit_value(encode_offset_commit_value(empty)) == empty
