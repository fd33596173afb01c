"""Share-group (KIP-932) membership against a real broker process: ShareGroupHeartbeat (76) and
ShareGroupDescribe (77) v1 driven with raw requests (the share fetch path is not needed for
membership), ListGroups, DescribeGroups and DeleteGroups of a share group (raw and through
confluent-kafka's AdminClient, which has no share-group calls of its own), and the members and
their assignment surviving a broker SIGKILL and restart (records 10-15 replayed from
__consumer_offsets)."""

from __future__ import annotations

import contextlib
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kcoord.protocol.apis import ApiKey
from kcoord.protocol.errors import ErrorCode

from .clients import create_topic
from .harness import BrokerProcess, wait_for
from .rawclient import RawClient

E = ErrorCode
SESSION_MS = 3000
SETTINGS = {
    "group.share.heartbeat.interval.ms": 500,
    "group.share.min.heartbeat.interval.ms": 100,
    "group.share.session.timeout.ms": SESSION_MS,
    "group.share.min.session.timeout.ms": 1000,
    "group.share.max.size": 6,
}
GROUP = "sg"


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path / "data", SETTINGS).start()
    try:
        yield b
    finally:
        b.stop()


def heartbeat(c: RawClient, member: str, epoch: int, group: str = GROUP, **kw: Any) -> Any:
    kw.setdefault("rack_id", None)
    kw.setdefault("subscribed_topic_names", ["t"] if epoch == 0 else None)
    return c.request(ApiKey.SHARE_GROUP_HEARTBEAT, 1, group_id=group, member_id=member, member_epoch=epoch, **kw)


def describe(c: RawClient, *groups: str) -> Any:
    return c.request(ApiKey.SHARE_GROUP_DESCRIBE, 1, group_ids=list(groups), include_authorized_operations=True)


def held(response: Any) -> set[int]:
    assert response.assignment is not None
    return {p for t in response.assignment.topic_partitions for p in t.partitions}


def join_all(c: RawClient, members: list[str]) -> dict[str, tuple[int, set[int]]]:
    """Join every member, then heartbeat each until every one is at the group's assignment
    epoch: (epoch, partitions) per member."""
    state: dict[str, tuple[int, set[int]]] = {}
    for m in members:
        r = heartbeat(c, m, 0)
        assert (r.error_code, r.member_id) == (E.none, m), r
        state[m] = (r.member_epoch, held(r))

    def settled() -> bool:
        for m in members:
            r = heartbeat(c, m, state[m][0])
            assert r.error_code == E.none, r
            state[m] = (r.member_epoch, held(r) if r.assignment is not None else state[m][1])
        return len({e for e, _ in state.values()}) == 1

    wait_for(settled, 10, what="members at one epoch")
    return state


def test_members_join_share_partitions_and_are_described(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "t", 4)
    members = [str(uuid.uuid4()) for _ in range(5)]
    with RawClient(broker.port) as c:
        state = join_all(c, members)
        counts = Counter(p for _, ps in state.values() for p in ps)
        assert counts == {p: 2 for p in range(4)}  # 5 members on 4 partitions: two each
        d = describe(c, GROUP, "nope").groups
        assert (d[0].error_code, d[0].group_state, d[0].assignor_name) == (E.none, "Stable", "simple")
        assert {m.member_id for m in d[0].members} == set(members)
        assert all(m.client_id == "raw" and m.subscribed_topic_names == ("t",) for m in d[0].members)
        assert {m.member_id: {p for t in m.assignment.topic_partitions for p in t.partitions} for m in d[0].members} == {
            m: ps for m, (_, ps) in state.items()
        }
        assert d[0].members[0].assignment.topic_partitions[0].topic_name == "t"
        assert (d[1].error_code, d[1].error_message) == (E.group_id_not_found, "Group nope not found.")
        # Kafka's request checks.
        r = heartbeat(c, "", 0)
        assert (r.error_code, r.error_message) == (E.invalid_request, "MemberId can't be empty.")
        r = heartbeat(c, "x", 0, subscribed_topic_names=[])
        assert r.error_message == "SubscribedTopicNames must be set in first request."
        r = heartbeat(c, members[0], state[members[0]][0] + 5)
        assert r.error_code == E.fenced_member_epoch
        # group.share.max.size is 6: a sixth joins, a seventh is refused.
        assert heartbeat(c, "sixth", 0).error_code == E.none
        r = heartbeat(c, "seventh", 0)
        assert (r.error_code, r.error_message) == (
            E.group_max_size_reached,
            "The share group has reached its maximum capacity of 6 members.",
        )
        # A leave (epoch -1), then the silent members' sessions end.
        r = heartbeat(c, members[0], -1)
        assert (r.error_code, r.member_epoch) == (E.none, -1)
        wait_for(lambda: describe(c, GROUP).groups[0].group_state == "Empty", SESSION_MS / 1000 + 10, what="Empty")


def test_share_groups_in_list_describe_and_delete_groups(broker: BrokerProcess) -> None:
    from confluent_kafka import ConsumerGroupState
    from confluent_kafka.admin import AdminClient

    create_topic(broker.bootstrap, "t", 2)
    with RawClient(broker.port) as c:
        assert heartbeat(c, "m", 0).error_code == E.none
        listed = c.request(ApiKey.LIST_GROUPS, 5, states_filter=[], types_filter=["share"]).groups
        assert [(g.group_id, g.protocol_type, g.group_state, g.group_type) for g in listed] == [
            (GROUP, "share", "Stable", "share")
        ]
        assert c.request(ApiKey.LIST_GROUPS, 5, states_filter=[], types_filter=["consumer"]).groups == ()
        # A consumer-protocol heartbeat for the share group's id, and the reverse.
        r = c.request(
            ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, group_id=GROUP, member_id="c", member_epoch=0,
            instance_id=None, rack_id=None, rebalance_timeout=30000, subscribed_topic_names=["t"],
            subscribed_topic_regex=None, server_assignor=None, topic_partitions=[],
        )  # fmt: skip
        assert (r.error_code, r.error_message) == (E.group_id_not_found, f"Group {GROUP} is not a consumer group.")
        deleted = c.request(ApiKey.DELETE_GROUPS, 2, groups_names=[GROUP]).results
        assert deleted[0].error_code == E.non_empty_group
    # librdkafka (confluent-kafka 2.16) has no share-group admin calls: its list_consumer_groups
    # keeps consumer protocol types only (as Kafka's Admin does); the old list_groups shows the
    # share group, and describing it as a consumer group finds a Dead one (DescribeGroups, after
    # ConsumerGroupDescribe's GROUP_ID_NOT_FOUND).
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    assert GROUP not in {g.group_id for g in admin.list_consumer_groups().result(20).valid}
    with pytest.warns(DeprecationWarning):
        assert GROUP in {g.id for g in admin.list_groups(timeout=20)}
    described = admin.describe_consumer_groups([GROUP])[GROUP].result(20)
    assert described.state == ConsumerGroupState.DEAD and not described.members
    with RawClient(broker.port) as c:
        assert heartbeat(c, "m", -1).error_code == E.none
        assert c.request(ApiKey.DELETE_GROUPS, 2, groups_names=[GROUP]).results[0].error_code == E.none
        assert describe(c, GROUP).groups[0].error_code == E.group_id_not_found


def test_members_and_assignment_survive_a_restart(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "t", 4)
    members = [str(uuid.uuid4()) for _ in range(3)]
    with RawClient(broker.port) as c:
        state = join_all(c, members)
        before = describe(c, GROUP).groups[0]
    broker.kill()
    broker.restart()
    with RawClient(broker.port) as c:
        def loaded() -> bool:
            return describe(c, GROUP).groups[0].error_code == E.none

        wait_for(loaded, 30, what="the share group loaded")
        after = describe(c, GROUP).groups[0]
        assert (after.group_epoch, after.assignment_epoch) == (before.group_epoch, before.assignment_epoch)
        assert {(m.member_id, m.member_epoch) for m in after.members} == {
            (m.member_id, m.member_epoch) for m in before.members
        }
        for m in members:  # every member carries on at its epoch, with the same partitions
            r = heartbeat(c, m, state[m][0])
            assert (r.error_code, r.member_epoch, r.assignment) == (E.none, state[m][0], None)


def test_confluent_share_consumers_join_split_the_partitions_and_leave(broker: BrokerProcess) -> None:
    """librdkafka's ShareConsumer (preview) joins through ShareGroupHeartbeat whether or not the
    broker serves ShareFetch yet: two consumers split four partitions, a closed one leaves."""
    from confluent_kafka import ShareConsumer

    create_topic(broker.bootstrap, "t", 4)
    consumers = [ShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": "sc"}) for _ in range(2)]
    closed: list[Any] = []
    try:
        for sc in consumers:
            sc.subscribe(["t"])

        def members(c: RawClient) -> dict[str, set[int]]:
            for sc in consumers:
                if sc not in closed:
                    with contextlib.suppress(Exception):  # fetch errors while ShareFetch is absent
                        sc.poll(0.1)
            g = describe(c, "sc").groups[0]
            if g.error_code:
                return {}
            return {m.member_id: {p for t in m.assignment.topic_partitions for p in t.partitions} for m in g.members}

        with RawClient(broker.port) as c:
            wait_for(
                lambda: sorted(map(sorted, members(c).values())) in ([[0, 1], [2, 3]], [[0, 2], [1, 3]], [[0, 3], [1, 2]]),
                30,
                what="two share consumers with two partitions each",
            )
            consumers[0].close()
            closed.append(consumers[0])
            wait_for(lambda: list(members(c).values()) == [{0, 1, 2, 3}], 30, what="the remaining consumer with all four")
    finally:
        for sc in consumers:
            if sc not in closed:
                sc.close()
