"""OffsetFetch in the shard (BEHAVIOR.md J6 last sentence, K3): answered in every group state,
for unknown groups, and with a group-level error only while loading or for foreign groups."""

from __future__ import annotations

from kcoord.coordinator.classic.group import GroupState
from kcoord.coordinator.messages import FetchedOffset, OffsetFetchResponse
from kcoord.protocol.javahash import partition_for
from tests.unit.test_group_harness import E, Harness

S = GroupState
NONE = E.none


def _fetch_t0(h: Harness, group: str = "g") -> FetchedOffset:
    resp = h.fetch({"t": [0]}, group=group)
    assert resp.error == NONE
    ((topic, (fetched,)),) = resp.topics
    assert topic == "t"
    return fetched


def test_J6_fetch_is_answered_in_every_state() -> None:
    h = Harness()
    ja, jb = h.join(), h.join()
    assert h.group().state is S.PREPARING_REBALANCE
    assert _fetch_t0(h) == FetchedOffset(0, -1, -1, "", NONE)  # nothing committed yet
    h.run_until(lambda: h.answered(ja) and h.answered(jb))
    a, b = h.join_response(ja).member_id, h.join_response(jb).member_id
    assert h.group().state is S.COMPLETING_REBALANCE
    assert _fetch_t0(h).offset == -1
    h.sync(a, 1, [(a, b"x"), (b, b"y")])
    assert h.group().state is S.STABLE
    h.commit({("t", 0): (42, "m")}, generation=1, member=a, leader_epoch=7)
    assert _fetch_t0(h) == FetchedOffset(0, 42, 7, "m", NONE)
    h.join(a)  # leader rejoin: Preparing again, b not rejoined yet
    assert h.group().state is S.PREPARING_REBALANCE
    assert _fetch_t0(h).offset == 42
    h.leave(b)
    h.leave(a)  # nobody left: Empty
    assert h.group().state is S.EMPTY
    assert _fetch_t0(h) == FetchedOffset(0, 42, 7, "m", NONE)


def test_J6_fetch_unknown_group_and_unknown_partitions() -> None:
    h = Harness()
    resp = h.fetch({"t": [0, 1], "u": [3]}, group="nobody")
    assert resp == OffsetFetchResponse(
        NONE,
        (
            ("t", (FetchedOffset(0, -1, -1, "", NONE), FetchedOffset(1, -1, -1, "", NONE))),
            ("u", (FetchedOffset(3, -1, -1, "", NONE),)),
        ),
    )
    assert h.fetch(None, group="nobody") == OffsetFetchResponse(NONE, ())
    assert h.group("nobody") is None  # fetching creates nothing


def test_J6_fetch_requested_partitions_in_request_order() -> None:
    h = Harness()
    h.commit({("t", 1): 11, ("t", 0): 10}, group="s")
    resp = h.fetch({"t": [2, 1, 0]}, group="s")
    assert [f.offset for f in resp.topics[0][1]] == [-1, 11, 10]


def test_J6_fetch_all_offsets_sorted_by_topic_then_partition() -> None:
    h = Harness()
    h.commit({("b", 2): 3, ("a", 1): 2, ("b", 0): 1, ("a", 0): 0}, group="s")
    resp = h.fetch(None, group="s")
    assert resp.error == NONE
    assert [(t, [(f.partition, f.offset) for f in parts]) for t, parts in resp.topics] == [
        ("a", [(0, 0), (1, 2)]),
        ("b", [(0, 1), (2, 3)]),
    ]


def test_J6_fetch_require_stable_is_a_plain_fetch() -> None:
    h = Harness()
    h.commit({("t", 0): 5}, group="s")
    assert h.fetch({"t": [0]}, group="s", require_stable=True) == h.fetch({"t": [0]}, group="s")


def test_K3_fetch_while_loading_is_a_group_level_error() -> None:
    h = Harness(load=False)
    assert h.fetch({"t": [0]}) == OffsetFetchResponse(E.coordinator_load_in_progress, ())
    assert h.fetch(None) == OffsetFetchResponse(E.coordinator_load_in_progress, ())


def test_A_fetch_for_another_partitions_group_is_not_coordinator() -> None:
    h = Harness(partition_for=lambda g: partition_for(g, 50))
    h.shard.partition = 12
    assert h.fetch({"t": [0]}, group="group1") == OffsetFetchResponse(E.not_coordinator, ())
    assert h.fetch({"t": [0]}, group="my-group").error == NONE


def test_J6_fetch_allows_the_empty_group_id_like_kafka() -> None:
    h = Harness()
    assert h.fetch({"t": [0]}, group="").error == NONE


def test_J6_fetch_sees_a_commit_emitted_earlier() -> None:
    """The cache is applied on emit; the runtime delivers the fetch after the commit's
    records are durable, so this is never an uncommitted read."""
    h = Harness()
    h.commit({("t", 0): 1}, group="s")
    out_commit = h.last
    assert out_commit.records
    assert _fetch_t0(h, "s").offset == 1
