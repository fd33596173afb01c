"""Rebuilding rebalances from the records a shard wrote (coordinator/rebalance_replay.py): the
same sequence of generations/epochs, members and moved partitions as the live events."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Callable
from types import FrameType

from kcoord.coordinator.consumer.group import ConsumerGroup
from kcoord.coordinator.consumer.member import ConsumerMember
from kcoord.coordinator.consumer.persistence import (
    assignment_epoch_record,
    epoch_record,
    member_record,
    target_record,
)
from kcoord.coordinator.output import RebalanceCompleted
from kcoord.coordinator.rebalance_replay import HistoryReplay
from kcoord.coordinator.rebalances import MEMBER_JOINED, RESTORED

from .test_consumer_group import SESSION, Group, _owned
from .test_group_harness import Harness
from .test_rebalances import assignment, observed


def test_classic_history_from_its_group_records() -> None:
    h = Harness()
    live = observed(h.shard)
    ids = h.stable_group(2)
    # a third member joins: everyone rejoins, the leader assigns consumer-protocol partitions
    third = h.join(client_id="c2")
    handles = [h.join(m) for m in ids]
    h.run_until(lambda: all(h.answered(x) for x in [third, *handles]))
    gen = h.join_response(third).generation_id
    new_id = h.join_response(third).member_id
    plan = {ids[0]: [0, 1], ids[1]: [2], new_id: [3]}
    h.sync(ids[0], gen, [(m, assignment({"t": ps})) for m, ps in plan.items()])
    h.sync(ids[1], gen)
    h.sync(new_id, gen)
    # ids[1] leaves
    h.leave(ids[1])
    handle = h.join(ids[0])
    h.join(new_id)
    h.run_until(lambda: h.answered(handle))
    gen = h.join_response(handle).generation_id
    h.sync(ids[0], gen, [(ids[0], assignment({"t": [0, 1, 2]})), (new_id, assignment({"t": [3]}))])
    h.sync(new_id, gen)

    replay = HistoryReplay()
    for i, (key, value) in enumerate(h.records):
        replay.add([(key, value)], 1000 + i)
    rebuilt = list(replay.events())
    assert [e.generation for e in rebuilt] == [e.generation for e in live] == [1, 2, 3]
    assert [(e.members_before, e.members) for e in rebuilt] == [(0, 2), (2, 3), (3, 2)]
    assert [e.partitions_moved for e in rebuilt] == [e.partitions_moved for e in live] == [0, 4, 1]
    assert [(e.trigger, e.member) for e in rebuilt] == [
        (MEMBER_JOINED, ids[0]),
        (MEMBER_JOINED, new_id),
        (RESTORED, ids[1]),
    ]
    assert "left or expired" in rebuilt[2].reason
    assert all(e.group_type == "classic" for e in rebuilt)


def test_consumer_history_from_its_records() -> None:
    g = Group()
    live = observed(g.shard)
    g.hb("a", 0)
    g.hb("b", 0)
    for _ in range(3):
        g.hb("a", g.group().members["a"].member_epoch, topic_partitions=_owned(g, "a"))
        g.hb("b", g.group().members["b"].member_epoch, topic_partitions=_owned(g, "b"))
    g.advance(SESSION - 1000)
    g.hb("a", g.group().members["a"].member_epoch, topic_partitions=_owned(g, "a"))
    g.advance(1500)
    g.hb("a", g.group().members["a"].member_epoch, topic_partitions=_owned(g, "a"))
    replay = HistoryReplay()
    for i, (key, value) in enumerate(g.log):
        replay.add([(key, value), (b"\x00\x01junk", b"")], 1000 + i)  # junk is skipped
    rebuilt: list[RebalanceCompleted] = list(replay.events())
    assert rebuilt[-1].generation == live[-1].generation == g.group().group_epoch
    last = rebuilt[-1]
    assert (last.trigger, last.member, last.members_before, last.members) == (RESTORED, "b", 2, 1)
    assert last.partitions_moved == live[-1].partitions_moved == 3
    assert rebuilt[0].trigger == MEMBER_JOINED and rebuilt[0].member == "a"
    assert all(e.group_type == "consumer" and e.duration_ms >= 0 for e in rebuilt)


def test_garbage_and_tombstones_add_nothing() -> None:
    replay = HistoryReplay()
    replay.add([(None, b"x"), (b"", None), (b"\x00\x02\x00", b"\xff"), (b"\x00\x05zz", b"")], 0)
    assert list(replay.events()) == []


def _joins(members: int, per_member: int) -> list[tuple[bytes, bytes | None]]:
    """A consumer group's records as ``members`` members join one per epoch, each new member's
    target taking ``per_member`` partitions of its own (the others' targets unchanged)."""
    topic_id = uuid.UUID(int=7)
    out: list[tuple[bytes, bytes | None]] = []
    for i in range(members):
        mid = f"m{i}"
        group = ConsumerGroup("g", group_epoch=i + 1, assignment_epoch=i + 1)
        out.append(member_record("g", ConsumerMember(mid, subscribed_topic_names=("t",))))
        out.append(epoch_record(group))
        out.append(target_record("g", mid, {topic_id: frozenset(range(i * per_member, (i + 1) * per_member))}))
        out.append(assignment_epoch_record(group))
    return out


def _lines_run(records: list[tuple[bytes, bytes | None]]) -> tuple[int, list[RebalanceCompleted]]:
    """Python lines executed to replay ``records`` (a count of work, not a time), and the
    events rebuilt."""
    lines = 0

    def tracer(frame: FrameType, event: str, arg: object) -> Callable[..., object]:
        nonlocal lines
        lines += event == "line"
        return tracer

    replay = HistoryReplay()
    before = sys.gettrace()
    sys.settrace(tracer)
    try:
        replay.add(records, 1000)
    finally:
        sys.settrace(before)
    return lines, list(replay.events())


def test_replaying_a_big_groups_history_costs_in_proportion_to_its_records() -> None:
    # Issue 34, finding 10: each target record used to rebuild the map of every partition's
    # owner, so twice the members cost four times the work (55 s for 1,000 members over
    # 10,000 partitions).
    small, small_events = _lines_run(_joins(200, 20))
    big, big_events = _lines_run(_joins(400, 20))
    assert big < 2.3 * small, (small, big)
    # and the events are still right: each join moved the new member's partitions only
    assert [e.partitions_moved for e in big_events] == [20] * 20  # the last 20 (per_group)
    assert [(e.members_before, e.members) for e in small_events][-1] == (199, 200)
