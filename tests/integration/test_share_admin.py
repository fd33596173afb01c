"""The share offsets admin APIs (DescribeShareGroupOffsets v0-v1, AlterShareGroupOffsets,
DeleteShareGroupOffsets) and the commands over them (``kcoord groups list|describe`` of share
groups, ``kcoord share reset-offsets|delete-offsets``) on a real broker with confluent-kafka
``ShareConsumer``s: the start offset and lag follow consumption, an alter is refused while a
member is active, a reset to earliest makes a new consumer read everything again, deleted
offsets make the next consumer start from ``share.auto.offset.reset``, bad input gets Kafka's
errors, and the ACLs Kafka checks (DESCRIBE, READ, DELETE on the group; DESCRIBE or READ on
the topics)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kcoord.admin.client import _wire_request
from kcoord.protocol.apis import ApiKey
from kcoord.protocol.errors import ErrorCode

from .clients import create_topic
from .harness import BrokerProcess, wait_for
from .shares import ShareMember
from .test_acls import raw
from .test_admin_cli import kcoord
from .test_consumer_group_acls import broker  # noqa: F401 - the ACL test's fixture
from .test_share_groups import SETTINGS, earliest, produce

E = ErrorCode
ZERO = uuid.UUID(int=0)
"""Kafka's zero topic id (kio reads it as None)."""


@pytest.fixture
def sbroker(tmp_path: Path) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path / "data", SETTINGS).start()
    try:
        yield b
    finally:
        b.stop()


def call(b: BrokerProcess, api_key: int, version: int, **fields: Any) -> Any:
    return _wire_request("127.0.0.1", b.port, 10, api_key, version, **fields)


def describe(
    b: BrokerProcess, group: str, topics: dict[str, list[int]] | None = None, version: int = 1
) -> Any:
    wanted = (
        None if topics is None else [dict(topic_name=t, partitions=ps) for t, ps in topics.items()]
    )
    (g,) = call(
        b,
        ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS,
        version,
        groups=[dict(group_id=group, topics=wanted)],
    ).groups
    return g


def offsets(
    b: BrokerProcess, group: str, topics: dict[str, list[int]] | None = None
) -> dict[tuple[str, int], tuple[int, int]]:
    """(topic, partition) -> (start offset, lag)."""
    g = describe(b, group, topics)
    assert g.error_code == E.none, g
    return {
        (t.topic_name, p.partition_index): (p.start_offset, p.lag)
        for t in g.topics
        for p in t.partitions
    }


def alter(b: BrokerProcess, group: str, topics: dict[str, dict[int, int]]) -> Any:
    return call(
        b,
        ApiKey.ALTER_SHARE_GROUP_OFFSETS,
        0,
        group_id=group,
        topics=[
            dict(
                topic_name=t,
                partitions=[dict(partition_index=p, start_offset=o) for p, o in ps.items()],
            )
            for t, ps in topics.items()
        ],
    )


def delete(b: BrokerProcess, group: str, *topics: str) -> Any:
    return call(
        b,
        ApiKey.DELETE_SHARE_GROUP_OFFSETS,
        0,
        group_id=group,
        topics=[dict(topic_name=t) for t in topics],
    )


def share_state(b: BrokerProcess, group: str) -> tuple[str, int]:
    (g,) = call(
        b, ApiKey.SHARE_GROUP_DESCRIBE, 1, group_ids=[group], include_authorized_operations=False
    ).groups
    return g.group_state, len(g.members)


def consume_all(b: BrokerProcess, group: str, topic: str, count: int, name: str) -> ShareMember:
    m = ShareMember(b.bootstrap, group, [topic], name)
    wait_for(lambda: len(m.received) >= count, 60, what=f"{count} records for {name}")
    return m


def stop_and_wait_empty(b: BrokerProcess, m: ShareMember, group: str) -> None:
    m.stop()
    wait_for(lambda: share_state(b, group) == ("Empty", 0), 30, what=f"{group} empty")


def test_start_offset_and_lag_follow_consumption(sbroker: BrokerProcess) -> None:
    b = sbroker
    create_topic(b.bootstrap, "t", 2)
    earliest(b, "g")
    produce(b, "t", 20, 2)
    m = consume_all(b, "g", "t", 20, "m")
    try:
        # Implicit acknowledgements go with the next poll: the start offsets reach the end.
        wait_for(
            lambda: offsets(b, "g") == {("t", 0): (10, 0), ("t", 1): (10, 0)},
            30,
            what="all acknowledged",
        )
    finally:
        stop_and_wait_empty(b, m, "g")
    produce(b, "t", 6, 2)
    assert offsets(b, "g") == {("t", 0): (10, 3), ("t", 1): (10, 3)}
    # Named topics: an unknown topic has start offset -1 and no error; v0 has no lag.
    g = describe(b, "g", {"t": [1], "nope": [0]})
    assert [
        (
            t.topic_name,
            t.topic_id in (None, ZERO),
            [(p.partition_index, p.start_offset, p.lag, p.error_code) for p in t.partitions],
        )
        for t in g.topics
    ] == [
        ("t", False, [(1, 10, 3, E.none)]),
        ("nope", True, [(0, -1, -1, E.none)]),
    ]
    (t0,) = describe(b, "g", {"t": [0]}, version=0).topics
    assert (t0.partitions[0].start_offset, hasattr(t0.partitions[0], "lag")) == (10, False)
    # Any group id is answered: an unknown one has no state, and no error (as Kafka).
    assert offsets(b, "nobody") == {}
    assert offsets(b, "nobody", {"t": [0]}) == {("t", 0): (-1, -1)}
    # The command line: kafka-share-groups.sh's columns.
    r = kcoord(b, "groups", "describe", "g")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].split() == ["GROUP", "TOPIC", "PARTITION", "START-OFFSET", "LAG"]
    assert [line.split() for line in lines[1:]] == [
        ["g", "t", "0", "10", "3"],
        ["g", "t", "1", "10", "3"],
    ]
    assert "Share group 'g' has no active members." in r.stderr


def test_alter_refused_with_a_member_then_a_reset_to_earliest_is_read_again(
    sbroker: BrokerProcess,
) -> None:
    b = sbroker
    create_topic(b.bootstrap, "t", 1)
    earliest(b, "g")
    produce(b, "t", 10, 1)
    m = consume_all(b, "g", "t", 10, "m")
    try:
        wait_for(lambda: offsets(b, "g") == {("t", 0): (10, 0)}, 30, what="all acknowledged")
        r = alter(b, "g", {"t": {0: 0}})
        assert (r.error_code, r.responses) == (E.non_empty_group, ())
        cli = kcoord(
            b,
            "share",
            "reset-offsets",
            "--group",
            "g",
            "--topic",
            "t",
            "--to-earliest",
            "--execute",
        )
        assert cli.returncode == 1 and "Error: Share group 'g' is not empty." in cli.stderr, (
            cli.stderr
        )
        members = kcoord(b, "groups", "describe", "g", "--members")
        assert members.returncode == 0, members.stderr
        assert members.stdout.split()[:7] == [
            "GROUP",
            "CONSUMER-ID",
            "HOST",
            "CLIENT-ID",
            "#PARTITIONS",
            "MEMBER-EPOCH",
            "ASSIGNMENT",
        ]
        assert members.stdout.split()[-1] == "t(0)"
        state = kcoord(b, "groups", "describe", "g", "--state", "--json")
        assert [(s["state"], s["type"], s["members"]) for s in json.loads(state.stdout)] == [
            ("Stable", "share", 1)
        ]
    finally:
        stop_and_wait_empty(b, m, "g")
    dry = kcoord(b, "share", "reset-offsets", "--group", "g", "--topic", "t", "--to-earliest")
    assert dry.returncode == 0, dry.stderr
    assert [line.split() for line in dry.stdout.splitlines()] == [
        ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"],
        ["g", "t", "0", "0"],
    ]
    assert "Dry run" in dry.stderr and offsets(b, "g") == {("t", 0): (10, 0)}
    run = kcoord(
        b, "share", "reset-offsets", "--group", "g", "--topic", "t:0", "--to-earliest", "--execute"
    )
    assert run.returncode == 0, run.stderr
    assert offsets(b, "g") == {("t", 0): (0, 10)}
    again = consume_all(b, "g", "t", 10, "m2")
    try:
        assert sorted(o for _, _, o, _ in again.received) == list(range(10))
    finally:
        again.stop()


def test_deleted_offsets_make_the_next_consumer_start_from_the_auto_offset_reset(
    sbroker: BrokerProcess,
) -> None:
    b = sbroker
    create_topic(b.bootstrap, "t", 1)
    create_topic(b.bootstrap, "u", 1)
    earliest(b, "g")
    produce(b, "t", 10, 1)
    m = consume_all(b, "g", "t", 10, "m")
    try:
        wait_for(lambda: offsets(b, "g") == {("t", 0): (10, 0)}, 30, what="all acknowledged")
        assert delete(b, "g", "t").error_code == E.non_empty_group
    finally:
        stop_and_wait_empty(b, m, "g")
    r = kcoord(b, "share", "delete-offsets", "--group", "g", "--topic", "t", "--topic", "u")
    assert r.returncode == 1, r.stderr  # u: the group has no offsets of it
    rows = dict((line.split()[0], line.split(None, 1)[1]) for line in r.stdout.splitlines()[1:])
    assert rows["t"] == "Successful" and rows["u"].startswith(
        "Error: UNKNOWN_TOPIC_OR_PARTITION"
    ), rows
    assert offsets(b, "g") == {} and offsets(b, "g", {"t": [0]}) == {("t", 0): (-1, -1)}
    again = consume_all(b, "g", "t", 10, "m2")  # share.auto.offset.reset=earliest again
    try:
        assert sorted(o for _, _, o, _ in again.received) == list(range(10))
    finally:
        again.stop()
    assert delete(b, "nobody", "t").error_code == E.group_id_not_found


def test_delete_groups_deletes_an_empty_share_groups_state_first(sbroker: BrokerProcess) -> None:
    b = sbroker
    create_topic(b.bootstrap, "t", 1)
    earliest(b, "g")
    produce(b, "t", 10, 1)
    m = consume_all(b, "g", "t", 10, "m")
    try:
        wait_for(lambda: offsets(b, "g") == {("t", 0): (10, 0)}, 30, what="all acknowledged")
        (busy,) = call(b, ApiKey.DELETE_GROUPS, 2, groups_names=["g"]).results
        assert busy.error_code == E.non_empty_group  # and its state is still there:
        assert offsets(b, "g", {"t": [0]}) == {("t", 0): (10, 0)}
    finally:
        stop_and_wait_empty(b, m, "g")
    (gone,) = call(b, ApiKey.DELETE_GROUPS, 2, groups_names=["g"]).results
    assert gone.error_code == E.none
    assert offsets(b, "g", {"t": [0]}) == {("t", 0): (-1, -1)}  # the state went with it
    # A group of that name starts afresh: from share.auto.offset.reset, every record again.
    again = consume_all(b, "g", "t", 10, "m2")
    try:
        assert sorted(o for _, _, o, _ in again.received) == list(range(10))
    finally:
        again.stop()


def test_bad_input_gets_kafkas_errors(sbroker: BrokerProcess) -> None:
    b = sbroker
    create_topic(b.bootstrap, "t", 2)
    produce(b, "t", 8, 2)
    # An alter of a group that does not exist creates it; per partition: Kafka's errors.
    r = alter(b, "fresh", {"t": {0: 3, 1: -4, 7: 0}, "nope": {0: 0}})
    assert r.error_code == E.none
    got = {
        (t.topic_name, p.partition_index): p.error_code for t in r.responses for p in t.partitions
    }
    assert got == {
        ("t", 0): E.none,
        ("t", 1): E.invalid_request,
        ("t", 7): E.unknown_topic_or_partition,
        ("nope", 0): E.unknown_topic_or_partition,
    }
    assert offsets(b, "fresh") == {("t", 0): (3, 1)}
    assert share_state(b, "fresh") == ("Empty", 0)
    listed = kcoord(b, "groups", "list", "--type", "share", "--state", "--json")
    assert json.loads(listed.stdout) == [{"group": "fresh", "state": "Empty", "type": "share"}]
    # A consumer group's id, the empty id.
    join = call(
        b,
        ApiKey.CONSUMER_GROUP_HEARTBEAT,
        0,
        group_id="cg",
        member_id="c1",
        member_epoch=0,
        instance_id=None,
        rack_id=None,
        rebalance_timeout=30000,
        subscribed_topic_names=["t"],
        server_assignor=None,
        topic_partitions=[],
    )
    assert join.error_code == E.none
    r = alter(b, "cg", {"t": {0: 0}})
    assert (r.error_code, r.error_message) == (
        E.group_id_not_found,
        "Group cg is not a share group.",
    )
    assert delete(b, "cg", "t").error_code == E.group_id_not_found
    assert alter(b, "", {"t": {0: 0}}).error_code == E.invalid_group_id
    assert delete(b, "", "t").error_code == E.invalid_group_id
    assert describe(b, "").error_code == E.none
    cli = kcoord(
        b, "share", "reset-offsets", "--group", "cg", "--topic", "t", "--to-latest", "--execute"
    )
    assert cli.returncode == 1 and "Error: Group 'cg' is not a share group." in cli.stderr, (
        cli.stderr
    )


def test_share_offsets_acls(broker: tuple[BrokerProcess, int]) -> None:  # noqa: F811
    """alice may READ (so DESCRIBE) the topics ``visible*`` and the groups ``g-*``; not DELETE."""
    _, port = broker

    def as_(user: str, api_key: int, version: int, **fields: Any) -> Any:
        return raw(port, user, api_key, version, **fields)

    def set_offsets(user: str, group: str, *topics: str) -> Any:
        parts = [dict(partition_index=0, start_offset=0)]
        return as_(
            user,
            ApiKey.ALTER_SHARE_GROUP_OFFSETS,
            0,
            group_id=group,
            topics=[dict(topic_name=t, partitions=parts) for t in topics],
        )

    def describe_as(user: str, group: str, topics: list[str] | None) -> Any:
        wanted = None if topics is None else [dict(topic_name=t, partitions=[0]) for t in topics]
        (g,) = as_(
            user,
            ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS,
            1,
            groups=[dict(group_id=group, topics=wanted)],
        ).groups
        return g

    r = set_offsets("alice", "g-adm", "visible", "hidden")
    assert r.error_code == E.none
    assert {t.topic_name: t.partitions[0].error_code for t in r.responses} == {
        "visible": E.none,
        "hidden": E.topic_authorization_failed,
    }
    assert set_offsets("alice", "other-adm", "visible").error_code == E.group_authorization_failed
    assert set_offsets("admin", "g-adm", "hidden").error_code == E.none
    g = describe_as("alice", "g-adm", ["visible", "hidden"])
    assert [
        (t.topic_name, t.partitions[0].start_offset, t.partitions[0].error_code) for t in g.topics
    ] == [("visible", 0, E.none), ("hidden", -1, E.topic_authorization_failed)]
    assert [t.topic_name for t in describe_as("alice", "g-adm", None).topics] == ["visible"]
    assert sorted(t.topic_name for t in describe_as("admin", "g-adm", None).topics) == [
        "hidden",
        "visible",
    ]
    assert describe_as("alice", "other-adm", None).error_code == E.group_authorization_failed
    d = as_(
        "alice",
        ApiKey.DELETE_SHARE_GROUP_OFFSETS,
        0,
        group_id="g-adm",
        topics=[dict(topic_name="visible")],
    )
    assert d.error_code == E.group_authorization_failed
    d = as_(
        "admin",
        ApiKey.DELETE_SHARE_GROUP_OFFSETS,
        0,
        group_id="g-adm",
        topics=[dict(topic_name="visible")],
    )
    assert [(t.topic_name, t.error_code) for t in d.responses] == [("visible", E.none)]
