"""Sizes of the coordinator's writes, computed before the records exist, against the bytes
really encoded: the exact sizes are exact, and the floors never exceed the real batch (so a
write that would fit in message.max.bytes is never refused on their word)."""

from __future__ import annotations

import string

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kcoord.coordinator.config import GroupConfig
from kcoord.coordinator.messages import JoinGroupRequest, OffsetCommitPartition, OffsetCommitRequest
from kcoord.coordinator.schemas import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    encode_group_metadata_value,
    encode_key,
    group_metadata_value_size,
)
from kcoord.coordinator.shard import GroupShard
from kcoord.coordinator.write_size import (
    group_record_batch_size,
    join_record_fits,
    join_record_floor,
    offset_commit_floor,
    tombstones_batch_size,
)
from kcoord.protocol.batch import HEADER_SIZE
from kcoord.protocol.record_encoding import (
    encode_kv_batch,
    kv_batch_size,
    kv_batches,
    kv_record_size,
    kv_run_size,
)

_fast = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

names = st.text(min_size=0, max_size=12)
ascii_names = st.text(alphabet=string.ascii_letters + "-._", min_size=1, max_size=12)
blobs = st.binary(max_size=300)


# ---- the batch codec's sizes --------------------------------------------------------------------


@_fast
@given(
    st.lists(
        st.tuples(st.binary(max_size=200), st.one_of(st.none(), st.binary(max_size=300))),
        max_size=80,
    )
)
def test_kv_batch_size_is_the_encoded_length(pairs: list[tuple[bytes, bytes | None]]) -> None:
    assert kv_batch_size(pairs) == len(encode_kv_batch(pairs, 1_700_000_000_000))


@_fast
@given(
    st.integers(0, 9000),
    st.integers(0, 9000),
    st.integers(0, 300),
    st.one_of(st.none(), st.integers(0, 70_000)),
)
def test_kv_run_size_sums_the_records(first: int, count: int, key: int, value: int | None) -> None:
    expected = sum(kv_record_size(d, key, value) for d in range(first, first + count))
    assert kv_run_size(first, count, key, value) == expected


def test_kv_run_size_crosses_every_varint_bound_at_once() -> None:
    # Offset deltas 0 .. 2**21 take 1, 2, 3 and 4 bytes: summed in four steps, not 2 million.
    n = (1 << 20) + 5
    by_width = [64, (1 << 13) - 64, (1 << 20) - (1 << 13), 5]
    expected = sum(
        w * kv_record_size(d, 10, 24)
        for w, d in zip(by_width, [0, 64, 1 << 13, 1 << 20], strict=True)
    )
    assert kv_run_size(0, n, 10, 24) == expected


@_fast
@given(
    st.lists(
        st.tuples(st.binary(max_size=60), st.one_of(st.none(), st.binary(max_size=120))),
        max_size=60,
    ),
    st.integers(HEADER_SIZE, 1500),
)
def test_kv_batches_cut_in_order_into_batches_that_fit(
    pairs: list[tuple[bytes, bytes | None]], limit: int
) -> None:
    runs = kv_batches(pairs, limit)
    assert [p for run in runs for p in run] == pairs
    for i, run in enumerate(runs):
        size = len(encode_kv_batch(run, 0))
        assert size <= limit or len(run) == 1  # a record too big for any batch stands alone
        if i + 1 < len(runs):  # greedy: the next record would not have fitted
            assert len(encode_kv_batch([*run, runs[i + 1][0]], 0)) > limit


# ---- group records ------------------------------------------------------------------------------

members = st.builds(
    MemberMetadata,
    member_id=names,
    group_instance_id=st.one_of(st.none(), names),
    client_id=names,
    client_host=names,
    rebalance_timeout=st.integers(-1, 2**31 - 1),
    session_timeout=st.integers(0, 2**31 - 1),
    subscription=blobs,
    assignment=blobs,
)
values = st.builds(
    GroupMetadataValue,
    protocol_type=names,
    generation=st.integers(0, 2**31 - 1),
    protocol=st.one_of(st.none(), names),
    leader=st.one_of(st.none(), names),
    current_state_timestamp=st.integers(-1, 2**62),
    members=st.lists(members, max_size=5).map(tuple),
)


@_fast
@given(values, names)
def test_group_record_sizes_are_exact(value: GroupMetadataValue, group: str) -> None:
    encoded = encode_group_metadata_value(value)
    assert group_metadata_value_size(value) == len(encoded)
    record = [(encode_key(GroupMetadataKey(group)), encoded)]
    assert group_record_batch_size(group, value) == len(encode_kv_batch(record, 0))


def _join(
    group: str,
    protocols: list[tuple[str, bytes]],
    client_id: str,
    instance: str | None,
    protocol_type: str,
) -> JoinGroupRequest:
    return JoinGroupRequest(
        group_id=group,
        member_id="",
        group_instance_id=instance,
        session_timeout_ms=10_000,
        rebalance_timeout_ms=30_000,
        protocol_type=protocol_type,
        protocols=tuple(protocols),
        client_id=client_id,
        client_host="/127.0.0.1",
        require_known_member_id=False,
    )


@_fast
@given(
    group=names,
    protocols=st.lists(st.tuples(names, blobs), min_size=1, max_size=4),
    client_id=names,
    instance=st.one_of(st.none(), names),
    protocol_type=names,
    member_id=names,
    chosen=st.integers(0, 3),
    assignment=blobs,
    others=st.lists(members, max_size=3),
    leader=st.one_of(st.none(), names),
)
def test_join_record_floor_is_below_every_group_record_holding_the_member(
    group: str,
    protocols: list[tuple[str, bytes]],
    client_id: str,
    instance: str | None,
    protocol_type: str,
    member_id: str,
    chosen: int,
    assignment: bytes,
    others: list[MemberMetadata],
    leader: str | None,
) -> None:
    req = _join(group, protocols, client_id, instance, protocol_type)
    name, metadata = protocols[chosen % len(protocols)]
    me = MemberMetadata(
        member_id, instance, client_id, "/127.0.0.1", 30_000, 10_000, metadata, assignment
    )
    for at in range(len(others) + 1):
        value = GroupMetadataValue(
            protocol_type, 3, name, leader, 12345, tuple([*others[:at], me, *others[at:]])
        )
        record = [(encode_key(GroupMetadataKey(group)), encode_group_metadata_value(value))]
        assert join_record_floor(req) <= len(encode_kv_batch(record, 0))


def test_join_record_floor_counts_only_the_smallest_metadata() -> None:
    small = _join("g", [("range", b"x" * 10)], "c", None, "consumer")
    both = _join("g", [("big", b"x" * 5_000_000), ("range", b"x" * 10)], "c", None, "consumer")
    assert join_record_floor(both) == join_record_floor(small) < 200
    big = _join("g", [("big", b"x" * 5_000_000)], "c", None, "consumer")
    assert join_record_floor(big) > 5_000_000


@_fast
@given(
    group=names,
    protocols=st.lists(st.tuples(names, st.binary(max_size=600)), max_size=3),
    client_id=names,
    instance=st.one_of(st.none(), names),
    protocol_type=names,
    slack=st.integers(-3, 700),
)
def test_join_record_fits_answers_as_the_floor_does(
    group: str,
    protocols: list[tuple[str, bytes]],
    client_id: str,
    instance: str | None,
    protocol_type: str,
    slack: int,
) -> None:
    req = _join(group, protocols, client_id, instance, protocol_type)
    limit = join_record_floor(req) + slack
    assert join_record_fits(req, limit) == (slack >= 0)


# ---- offset commits: the floor against what the shard really writes ---------------------------


metadata = st.one_of(
    st.none(),
    st.text(max_size=8),
    st.text(alphabet="é€😀a", min_size=0, max_size=40),  # 2, 3 and 4 UTF-8 bytes per character
    st.just("m" * 60),
)
commit_topics = st.lists(
    st.tuples(
        st.one_of(ascii_names, st.text(min_size=1, max_size=6)),
        st.lists(
            st.builds(
                OffsetCommitPartition,
                partition=st.integers(0, 2**31 - 1),
                offset=st.integers(-1, 2**62),
                leader_epoch=st.integers(-1, 100),
                metadata=metadata,
            ),
            max_size=30,
        ).map(tuple),
    ),
    max_size=4,
).map(tuple)


def _written_batch(
    group: str, topics: tuple[tuple[str, tuple[OffsetCommitPartition, ...]], ...], md_max: int
) -> int:
    """The size of the batch a standalone commit of ``topics`` really makes the shard write."""
    shard = GroupShard(0, GroupConfig(offset_metadata_max_bytes=md_max, max_batch_bytes=1 << 40))
    shard.finish_loading(0)
    out = shard.offset_commit(
        "h", OffsetCommitRequest(group, -1, "", None, topics), 1_700_000_000_000
    )
    return len(encode_kv_batch(out.records, 0)) if out.records else 0


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.one_of(ascii_names, names.filter(bool)), commit_topics, st.sampled_from([0, 10, 50, 4096])
)
def test_J6_commit_floor_never_exceeds_the_batch_written(
    group: str, topics: tuple[tuple[str, tuple[OffsetCommitPartition, ...]], ...], md_max: int
) -> None:
    floor = offset_commit_floor(group, topics, md_max)
    written = _written_batch(group, topics, md_max)
    assert floor <= written
    plain = all(
        p.metadata is None or (p.metadata.isascii() and len(p.metadata) <= md_max)
        for _, parts in topics
        for p in parts
    )
    if plain:  # ASCII metadata within the limit: the floor is the exact size
        assert floor == written


def test_J6_commit_floor_of_a_huge_commit_is_quick_and_exact() -> None:
    parts = tuple(OffsetCommitPartition(i % 16, i, -1, None) for i in range(100_000))
    topics = (("t", parts),)
    floor = offset_commit_floor("g", topics, 4096)
    assert floor == _written_batch("g", topics, 4096)
    assert floor > 4_000_000


def test_commit_floor_is_zero_when_nothing_would_be_written() -> None:
    too_long = (("t", (OffsetCommitPartition(0, 1, -1, "x" * 100),)),)
    assert offset_commit_floor("g", too_long, 50) == 0
    assert (
        offset_commit_floor("g" * 40_000, (("t", (OffsetCommitPartition(0, 1, -1, None),)),), 50)
        == 0
    )


# ---- tombstones ---------------------------------------------------------------------------------


@_fast
@given(
    st.lists(
        st.tuples(
            names,
            st.lists(st.tuples(names, st.integers(0, 2**31 - 1)), max_size=20),
            st.booleans(),
        ),
        max_size=5,
    )
)
def test_tombstones_batch_size_is_exact(
    groups: list[tuple[str, list[tuple[str, int]], bool]],
) -> None:
    records: list[tuple[bytes, bytes | None]] = []
    for group, offsets, with_group in groups:
        records += [(encode_key(OffsetCommitKey(group, t, p)), None) for t, p in offsets]
        if with_group:
            records.append((encode_key(GroupMetadataKey(group)), None))
    expected = len(encode_kv_batch(records, 0)) if records else 0
    assert tombstones_batch_size(groups) == expected
