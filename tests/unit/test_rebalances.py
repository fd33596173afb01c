"""Rebalance events (coordinator/rebalances.py): triggers, partitions moved, the bounded history,
the structured log line, and the events a shard emits for classic and consumer groups."""

from __future__ import annotations

import struct
from typing import Any

from kcoord.coordinator.output import RebalanceCompleted
from kcoord.coordinator.rebalances import (
    MEMBER_EXPIRED,
    MEMBER_JOINED,
    MEMBER_LEFT,
    METADATA_CHANGED,
    NOTHING_SETTLED,
    OTHER,
    SUBSCRIPTION_CHANGED,
    RebalanceHistory,
    as_json,
    begin,
    classify,
    decode_assignment,
    finish,
    log_fields,
    moved,
)

from .test_consumer_group import SESSION, Group, _owned
from .test_group_harness import Harness


def assignment(parts: dict[str, list[int]]) -> bytes:
    out = struct.pack(">hi", 0, len(parts))
    for topic, ps in parts.items():
        name = topic.encode()
        out += struct.pack(">h", len(name)) + name + struct.pack(f">i{len(ps)}i", len(ps), *ps)
    return out + struct.pack(">i", -1)


def test_classify_names_the_trigger_and_the_member() -> None:
    assert classify("new member c-1 joined") == (MEMBER_JOINED, "c-1")
    assert classify("member c-1 rejoined in Stable") == (MEMBER_JOINED, "c-1")
    assert classify("member c-2 left") == (MEMBER_LEFT, "c-2")
    assert classify("member c-2 left the group (LeaveGroup)") == (MEMBER_LEFT, "c-2")
    assert classify("member c-3 expired (session timeout)") == (MEMBER_EXPIRED, "c-3")
    assert classify("member x was fenced: its session expired") == (MEMBER_EXPIRED, "x")
    assert classify("member x changed its subscription") == (SUBSCRIPTION_CHANGED, "x")
    assert classify("the subscribed topics changed") == (METADATA_CHANGED, "")
    assert classify("failed to store the group assignment") == (OTHER, "")


def test_decode_assignment_and_garbage() -> None:
    data = assignment({"t": [0, 2], "u": [1]})
    assert decode_assignment(data) == [("t", 0), ("t", 2), ("u", 1)]
    assert decode_assignment(b"") == []
    assert decode_assignment(b"assign-c-1") == []
    assert decode_assignment(struct.pack(">hi", 0, 1) + b"\x00\x05ab") == []
    assert decode_assignment(struct.pack(">hih", 0, 1, 1) + b"t" + struct.pack(">i", 10**6)) == []


def test_moved_counts_changed_owners() -> None:
    before = {("t", 0): "a", ("t", 1): "a", ("t", 2): "b"}
    after = {("t", 0): "a", ("t", 1): "c", ("t", 2): "c", ("t", 3): "c"}
    assert moved(before, after) == 3
    assert moved(before, {}) == 3
    assert moved({}, {}) == 0


def event(group: str, end: int, members: int = 1) -> RebalanceCompleted:
    return RebalanceCompleted(group, 1, members, "r", 10, started_ms=end - 10)


def test_history_keeps_the_last_n_per_group_and_bounds_groups() -> None:
    h = RebalanceHistory(per_group=3, max_groups=2)
    for i in range(5):
        h.record(event("a", 100 * i, members=i))
    assert [e.started_ms + e.duration_ms for e in h.events("a")] == [200, 300, 400]
    assert h.total("a") == 5
    assert h.count_since("a", 300) == 2
    assert h.count_since("a", 0) == 5  # counted beyond the events kept
    h.record(event("b", 0))
    h.record(event("c", 0))  # "a" changed least recently: forgotten
    assert list(h) == ["b", "c"] and h.events("a") == [] and h.last("a") is None
    h.restore([event("c", -50)])  # only groups without live events
    assert len(h.events("c")) == 1


def test_history_of_one_event_then_more() -> None:
    # A group's first event is kept on its own; the second makes it a full history.
    h = RebalanceHistory(per_group=2)
    h.record(event("a", 0))
    assert h.events("a") == [event("a", 0)] and h.last("a") == event("a", 0)
    assert (h.total("a"), h.count_since("a", 0), h.count_since("a", 1)) == (1, 1, 0)
    h.record(event("a", 100))
    h.record(event("a", 200))
    assert h.events("a") == [event("a", 100), event("a", 200)] and h.last("a") == event("a", 200)
    assert (h.total("a"), h.count_since("a", 0), h.count_since("a", 101)) == (3, 3, 1)
    h.record(event("a", 201 + 3_600_000))  # the first three ended more than an hour before
    assert (h.total("a"), h.count_since("a", 0)) == (4, 1)


def test_history_of_no_events_per_group_still_counts() -> None:
    h = RebalanceHistory(per_group=0)
    h.restore([event("a", 0)])
    h.record(event("a", 100))
    assert h.events("a") == [] and h.last("a") is None
    assert (h.total("a"), h.count_since("a", 0), h.count_since("a", 100)) == (2, 2, 1)
    assert list(h) == ["a"] and len(h) == 1


def test_log_fields_is_logfmt() -> None:
    e = RebalanceCompleted(
        "g 1", 3, 2, 'member m "x" left', 25, group_type="classic", trigger=MEMBER_LEFT,
        member="m", started_ms=1000, members_before=3, partitions_moved=4,
    )  # fmt: skip
    line = log_fields(e)
    assert line.startswith('group="g 1" type=classic trigger=member_left member=m ')
    assert 'reason="member m \\"x\\" left"' in line
    assert "start_ms=1000 end_ms=1025 duration_ms=25 generation=3" in line
    assert "members_before=3 members_after=2 partitions_moved=4" in line
    assert as_json(e)["end_ms"] == 1025
    odd = RebalanceCompleted("a=b", 1, 1, "c\\d", 0, group_type="", member="")
    assert log_fields(odd).startswith('group="a=b" type="" trigger=other member="" reason="c\\\\d" ')


def observed(shard: Any) -> list[RebalanceCompleted]:
    events: list[RebalanceCompleted] = []
    shard.rebalance_observer = events.append
    return events


def test_classic_expiry_event() -> None:
    h = Harness()
    events = observed(h.shard)
    ids = h.stable_group(2)
    assert [(e.trigger, e.members, e.group_type) for e in events] == [(MEMBER_JOINED, 2, "classic")]
    # ids[1] stops heartbeating; ids[0] keeps going and rejoins when told to
    for _ in range(40):
        h.tick(500)
        hb = h.heartbeat(ids[0], h.group().generation)
        if hb != 0:
            break
    handle = h.join(ids[0])
    h.run_until(lambda: h.answered(handle))
    gen = h.join_response(handle).generation_id
    h.sync(ids[0], gen, [(ids[0], assignment({"t": [0, 1]}))])
    last = events[-1]
    assert (last.trigger, last.member) == (MEMBER_EXPIRED, ids[1])
    assert last.generation == gen and last.members == 1 and last.members_before == 2
    assert last.partitions_moved == 2  # the old assignments were not consumer-protocol ones
    assert last.started_ms + last.duration_ms == h.now


def test_consumer_expiry_event_moves_partitions() -> None:
    g = Group()
    events = observed(g.shard)
    g.hb("a", 0)
    g.hb("b", 0)
    for _ in range(3):
        g.hb("a", g.group().members["a"].member_epoch, topic_partitions=_owned(g, "a"))
        g.hb("b", g.group().members["b"].member_epoch, topic_partitions=_owned(g, "b"))
    assert events and events[-1].group_type == "consumer" and events[-1].members == 2
    g.advance(SESSION - 1000)
    g.hb("a", g.group().members["a"].member_epoch, topic_partitions=_owned(g, "a"))
    g.advance(1500)
    g.hb("a", g.group().members["a"].member_epoch, topic_partitions=_owned(g, "a"))
    last = events[-1]
    assert (last.trigger, last.member) == (MEMBER_EXPIRED, "b")
    assert last.members == 1 and last.members_before == 2 and last.partitions_moved == 3
    assert last.generation == g.group().group_epoch


def test_an_event_shares_the_member_id_its_reason_names() -> None:
    member_id = "".join(["client-", "7"])  # built, so that no literal equals it by identity
    text = f"new member {member_id} joined"
    done, _ = finish(
        begin(100, text, NOTHING_SETTLED, member_id),
        group_id="g", group_type="classic", generation=1, members=1, owners={}, now_ms=130,
    )  # fmt: skip
    assert done.member is member_id and done.trigger == MEMBER_JOINED
    assert done.reason == text and done.reason_tail is not None
    assert as_json(done)["reason"] == text and f"reason=\"{text}\"" in log_fields(done)
    # A member id the text does not give back whole (a space in it): the text is kept whole.
    spaced = "client 7-1"
    odd, _ = finish(
        begin(100, f"new member {spaced} joined", NOTHING_SETTLED, spaced),
        group_id="g", group_type="classic", generation=1, members=1, owners={}, now_ms=130,
    )  # fmt: skip
    assert odd.member == "client" and odd.reason == f"new member {spaced} joined"
    assert odd.reason_tail is None
