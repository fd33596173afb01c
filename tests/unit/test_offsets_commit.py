"""OffsetCommit in the shard (BEHAVIOR.md J6, M3, K3, I2): validation order, per-partition
metadata limits, the records written and undoing a failed write."""

from __future__ import annotations

import uuid

from kcoord.coordinator.classic.group import GroupState
from kcoord.coordinator.config import GroupConfig
from kcoord.coordinator.messages import (
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetCommitResponse,
)
from kcoord.coordinator.schemas import (
    OffsetCommitKey,
    OffsetCommitValue,
    decode_key,
    decode_offset_commit_value,
)
from kcoord.protocol.javahash import partition_for
from tests.unit.test_group_harness import E, Harness

S = GroupState


def _empty_consumer_group(h: Harness, group: str = "g") -> None:
    """A group with protocol type "consumer" whose only member left: Empty, generation 2."""
    (a,) = h.stable_group(1, group=group)
    h.leave(a, group=group)
    g = h.group(group)
    assert g.state is S.EMPTY and g.protocol_type == "consumer" and g.generation == 2


def _completing_group(h: Harness) -> list[str]:
    ja, jb = h.join(), h.join()
    h.run_until(lambda: h.answered(ja) and h.answered(jb))
    assert h.group().state is S.COMPLETING_REBALANCE
    return [h.join_response(ja).member_id, h.join_response(jb).member_id]


# ---- J6, rule by rule, in order ------------------------------------------------------------


def test_J6_unknown_group_negative_generation_creates_empty_group_and_stores() -> None:
    h = Harness()
    h.now = 1_000
    assert h.commit({("t", 0): 5, ("t", 1): 6}, group="simple") == {
        ("t", 0): E.none,
        ("t", 1): E.none,
    }
    g = h.group("simple")
    assert g is not None and g.state is S.EMPTY and g.protocol_type is None and g.generation == 0
    assert h.offsets("simple") == {("t", 0): 5, ("t", 1): 6}
    assert [h.describe("simple")[0].state] == ["Empty"]


def test_J6_unknown_group_with_generation_is_illegal_generation() -> None:
    h = Harness()
    assert h.commit({("t", 0): 5}, generation=3, member="m") == {("t", 0): E.illegal_generation}
    assert h.group() is None and h.records == []


def test_J6_unknown_group_negative_generation_with_member_id_creates_group_and_stores() -> None:
    # Kafka creates the group first; generation < 0 on an Empty group is then taken before
    # any member check (ClassicGroup.validateOffsetCommit), whatever member id it names: a
    # consumer-protocol client that only assign()s sends its own member id with epoch -1.
    h = Harness()
    assert h.commit({("t", 0): 5}, member="ghost") == {("t", 0): E.none}
    assert h.group() is not None and h.group().state is S.EMPTY and h.offsets() == {("t", 0): 5}


def test_J6_dead_group_is_coordinator_not_available() -> None:
    h = Harness()
    (a,) = h.stable_group(1)
    h.group().transition_to(S.DEAD, h.now)  # a Dead group still referenced
    assert h.commit({("t", 0): 1}, generation=1, member=a) == {
        ("t", 0): E.coordinator_not_available
    }
    assert h.commit({("t", 0): 1}) == {("t", 0): E.coordinator_not_available}


def test_J6_L7_fenced_static_instance() -> None:
    h = Harness()
    a, _ = h.stable_group(2, instances=["ia", "ib"])
    assert h.commit({("t", 0): 1}, generation=1, member="other", instance="ia") == {
        ("t", 0): E.fenced_instance_id
    }
    assert h.commit({("t", 0): 1}, generation=1, member=a, instance="nobody") == {
        ("t", 0): E.unknown_member_id
    }
    assert h.commit({("t", 0): 1}, generation=1, member=a, instance="ia") == {("t", 0): E.none}


def test_J6_negative_generation_on_empty_group_is_stored_standalone_commit() -> None:
    h = Harness()
    _empty_consumer_group(h)
    assert h.commit({("t", 0): 9}) == {("t", 0): E.none}
    assert h.offsets() == {("t", 0): 9}
    assert h.group().state is S.EMPTY and h.group().protocol_type == "consumer"


def test_J6_anonymous_commit_to_group_with_members_is_unknown_member() -> None:
    h = Harness()
    h.stable_group(1)
    assert h.commit({("t", 0): 9}) == {("t", 0): E.unknown_member_id}
    assert h.offsets() == {}


def test_J6_unknown_member() -> None:
    h = Harness()
    h.stable_group(1)
    assert h.commit({("t", 0): 9}, generation=1, member="nobody") == {("t", 0): E.unknown_member_id}
    # generation >= 0 with member "" on an Empty group: a member is named, none matches
    h2 = Harness()
    _empty_consumer_group(h2)
    assert h2.commit({("t", 0): 9}, generation=2) == {("t", 0): E.unknown_member_id}


def test_J6_wrong_generation_is_illegal_generation() -> None:
    h = Harness()
    (a,) = h.stable_group(1)
    assert h.commit({("t", 0): 9}, generation=0, member=a) == {("t", 0): E.illegal_generation}
    assert h.commit({("t", 0): 9}, generation=-1, member=a) == {("t", 0): E.illegal_generation}


def test_J6_stable_commit_stores_and_resets_session_timer() -> None:
    h = Harness()
    (a,) = h.stable_group(1, session=10_000)
    h.tick(8_000)
    assert h.commit({("t", 0): 1}, generation=1, member=a) == {("t", 0): E.none}
    h.tick(8_000)  # 16 s since the sync, 8 s since the commit: still a member
    assert h.group().has(a) and h.group().state is S.STABLE
    h.tick(2_000)
    assert not h.group().has(a)


def test_J6_M3_commit_in_preparing_rebalance_succeeds_and_resets_timer() -> None:
    h = Harness()
    a, b = h.stable_group(2, session=10_000, rebalance=60_000)
    h.join(a)  # the leader rejoins: PreparingRebalance, b has not rejoined yet
    assert h.group().state is S.PREPARING_REBALANCE
    h.tick(8_000)
    assert h.commit({("t", 0): 7}, generation=1, member=b) == {("t", 0): E.none}
    assert h.offsets() == {("t", 0): 7}
    h.tick(8_000)  # b's session was re-armed by the commit
    assert h.group().has(b)


def test_J6_completing_rebalance_is_rebalance_in_progress() -> None:
    h = Harness()
    a, _ = _completing_group(h)
    assert h.commit({("t", 0): 1}, generation=1, member=a) == {("t", 0): E.rebalance_in_progress}
    assert h.offsets() == {} and h.records == []


def test_J6_K3_commit_while_loading_not_coordinator_and_invalid_group_id() -> None:
    h = Harness(load=False)
    assert h.commit({("t", 0): 1}) == {("t", 0): E.coordinator_load_in_progress}
    h2 = Harness(partition_for=lambda g: partition_for(g, 50))
    h2.shard.partition = 12
    assert h2.commit({("t", 0): 1}, group="group1") == {("t", 0): E.not_coordinator}
    assert h2.commit({("t", 0): 1}, group="test-group") == {("t", 0): E.none}
    assert h2.commit({("t", 0): 1}, group="") == {("t", 0): E.invalid_group_id}
    h2.absorb(h2.shard.unload(h2.now))
    assert h2.commit({("t", 0): 1}, group="test-group") == {("t", 0): E.not_coordinator}


# ---- metadata size ---------------------------------------------------------------------------


def test_J6_metadata_too_large_fails_only_that_partition() -> None:
    h = Harness(GroupConfig(offset_metadata_max_bytes=8))
    result = h.commit(
        {
            ("t", 0): (1, "12345678"),  # exactly 8 bytes: fine
            ("t", 1): (2, "éééé" + "x"),  # 5 characters, 9 UTF-8 bytes: too large
            ("u", 0): (3, None),
        },
        group="s",
    )
    assert result == {
        ("t", 0): E.none,
        ("t", 1): E.offset_metadata_too_large,
        ("u", 0): E.none,
    }
    assert h.offsets("s") == {("t", 0): 1, ("u", 0): 3}
    assert [decode_key(k) for k, _ in h.records] == [
        OffsetCommitKey("s", "t", 0),
        OffsetCommitKey("s", "u", 0),
    ]


def test_J6_default_metadata_limit_is_4096_bytes() -> None:
    h = Harness()
    ok = h.commit({("t", 0): (1, "m" * 4096), ("t", 1): (1, "m" * 4097)})
    assert ok == {("t", 0): E.none, ("t", 1): E.offset_metadata_too_large}


def test_J6_every_partition_too_large_writes_nothing() -> None:
    h = Harness(GroupConfig(offset_metadata_max_bytes=1))
    assert h.commit({("t", 0): (1, "ab")}) == {("t", 0): E.offset_metadata_too_large}
    assert h.last.records == [] and h.last.on_failure == []


# ---- I2: the records ----------------------------------------------------------------------------


def test_I2_commit_writes_key_v1_value_v4_one_record_per_partition() -> None:
    h = Harness()
    h.now = 123_456
    h.commit({("t", 0): (10, "meta"), ("t", 1): (11, None)}, group="s", leader_epoch=4)
    out = h.last
    assert len(out.records) == 2 and len(out.replies) == 1  # one Output: records + reply
    (k0, v0), (k1, v1) = out.records
    assert k0[:2] == b"\x00\x01" and v0 is not None and v0[:2] == b"\x00\x04"
    assert v0.endswith(b"\x00")  # named by name: no tagged field
    assert decode_key(k0) == OffsetCommitKey("s", "t", 0)
    assert decode_offset_commit_value(v0) == OffsetCommitValue(10, "meta", 123_456, 4)
    assert v1 is not None and decode_offset_commit_value(v1) == OffsetCommitValue(
        11, "", 123_456, 4
    )
    assert h.shard.committed_offsets("s")[("t", 0)] == OffsetCommitValue(10, "meta", 123_456, 4)


def test_a_commit_naming_its_topic_by_id_keeps_the_id_in_its_records() -> None:
    """OffsetCommit v10 (KIP-848): Kafka 4.2's OffsetCommitValue v4 carries the topic id."""
    h = Harness()
    topic_id = uuid.UUID(int=0x1234)
    h.commit({("t", 0): 10, ("u", 0): 20}, group="s", topic_ids={"t": topic_id})
    (_, by_id), (_, by_name) = h.last.records
    assert by_id is not None and by_id.endswith(b"\x01\x00\x10" + topic_id.bytes)
    assert decode_offset_commit_value(by_id).topic_id == topic_id
    assert by_name is not None and decode_offset_commit_value(by_name).topic_id is None
    assert h.shard.committed_offsets("s")[("t", 0)].topic_id == topic_id


def test_J6_response_keeps_request_order() -> None:
    h = Harness()
    req = OffsetCommitRequest(
        "s",
        -1,
        "",
        None,
        (
            ("z", (OffsetCommitPartition(3, 1, -1, None), OffsetCommitPartition(0, 1, -1, None))),
            ("a", (OffsetCommitPartition(1, 1, -1, None),)),
        ),
    )
    out = h.shard.offset_commit("c", req, 0)
    assert out.reply_for("c") == OffsetCommitResponse(
        (("z", ((3, E.none), (0, E.none))), ("a", ((1, E.none),)))
    )


# ---- failed writes --------------------------------------------------------------------------------


def test_J6_failed_commit_restores_cache_and_answers_mapped_error() -> None:
    h = Harness(GroupConfig(offset_metadata_max_bytes=2))
    h.commit({("t", 0): 1}, group="s")
    req = OffsetCommitRequest(
        "s",
        -1,
        "",
        None,
        (
            (
                "t",
                (
                    OffsetCommitPartition(0, 50, -1, None),
                    OffsetCommitPartition(1, 51, -1, None),
                    OffsetCommitPartition(2, 52, -1, "long"),
                ),
            ),
        ),
    )
    out = h.shard.offset_commit("c", req, h.now)
    assert h.offsets("s") == {("t", 0): 50, ("t", 1): 51}  # applied on emit
    again = h.shard.append_failed(out, E.not_leader_or_follower, h.now)
    assert again.reply_for("c") == OffsetCommitResponse(
        (("t", ((0, E.not_coordinator), (1, E.not_coordinator), (2, E.offset_metadata_too_large))),)
    )
    assert h.offsets("s") == {("t", 0): 1}
    out = h.shard.offset_commit("c2", req, h.now)
    again = h.shard.append_failed(out, E.message_too_large, h.now)
    resp = again.reply_for("c2")
    assert isinstance(resp, OffsetCommitResponse)
    # Kafka's coordinator answers an oversized write UNKNOWN_SERVER_ERROR (the old Scala
    # coordinator said INVALID_COMMIT_OFFSET_SIZE): CoordinatorOperationExceptionHelper.
    assert resp.topics[0][1][0] == (0, E.unknown_server_error)


def test_J6_failed_commit_keeps_a_newer_commit_and_a_duplicate_partition_unwinds() -> None:
    h = Harness()
    h.commit({("t", 0): 1}, group="s")
    dup = OffsetCommitRequest(
        "s",
        -1,
        "",
        None,
        (("t", (OffsetCommitPartition(0, 2, -1, None), OffsetCommitPartition(0, 3, -1, None))),),
    )
    failed = h.shard.offset_commit("a", dup, h.now)
    h.shard.append_failed(failed, E.kafka_storage_error, h.now)
    assert h.offsets("s") == {("t", 0): 1}
    first = h.shard.offset_commit("b", dup, h.now)
    h.commit({("t", 0): 9}, group="s")  # newer, durable
    h.shard.append_failed(first, E.kafka_storage_error, h.now)
    assert h.offsets("s") == {("t", 0): 9}


def test_J6_failed_first_commit_of_standalone_group_leaves_no_offsets() -> None:
    h = Harness()
    out = h.shard.offset_commit(
        "a",
        OffsetCommitRequest("s", -1, "", None, (("t", (OffsetCommitPartition(0, 2, -1, None),)),)),
        0,
    )
    h.shard.append_failed(out, E.not_enough_replicas, 0)
    assert h.shard.committed_offsets("s") == {}
    assert h.fetch({"t": [0]}, group="s").topics[0][1][0].offset == -1
