"""KIP-848 consumer groups under ACLs: a member is never assigned, nor shown, a topic its
principal may not DESCRIBE (finding 4 of the hardening issue; Kafka 4.0's KAFKA-18813).

alice may read (so describe) the topics ``visible*`` and the groups ``g-*``; ``hidden`` is the
super user's only. Kafka's rules, checked here:

- a regex subscription resolves only the topics the principal of the heartbeat that resolves it
  may describe: ``.*`` gives alice ``visible`` (and ``visible-2`` once created), never ``hidden``
  (nor ``hidden-2``);
- a heartbeat naming a topic its principal may not describe is answered
  TOPIC_AUTHORIZATION_FAILED, with no error message, no member id and epoch 0, and changes
  nothing;
- ConsumerGroupDescribe of a group whose assignment names a topic the caller may not describe
  answers TOPIC_AUTHORIZATION_FAILED for that group, without its members.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kcoord.protocol.apis import ApiKey
from kcoord.protocol.errors import ErrorCode

from .harness import BrokerProcess, free_port, wait_for
from .test_acls import PASSWORDS, _accepting, admin_of, allow, conf, raw
from .test_sasl import kcoord_users

PARTITIONS = 2
HIDDEN_GROUP_MESSAGE = "The group has described topic(s) that the client is not authorized to describe."


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, int]]:
    data: Path = tmp_path_factory.mktemp("acl848") / "data"
    for user in ("admin", "alice"):
        assert kcoord_users("add", user, "--password", PASSWORDS[user], "--data-dir", str(data)).returncode == 0
    plain, sasl = free_port(), free_port()
    b = BrokerProcess(
        data,
        {
            "group.initial.rebalance.delay.ms": 0,
            "listeners": f"PLAINTEXT://127.0.0.1:{plain},SASL_PLAINTEXT://127.0.0.1:{sasl}",
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:admin",
        },
    )
    b.port = plain
    b.start()
    try:
        wait_for(lambda: _accepting(sasl), 30, what="the SASL listener")
        admin = admin_of(sasl, "admin")
        from confluent_kafka.admin import NewTopic

        for name in ("visible", "hidden"):
            admin.create_topics([NewTopic(name, PARTITIONS, 1)])[name].result(30)
        allow(
            admin,
            ("TOPIC", "visible", "PREFIXED", "READ", "ALLOW"),
            ("GROUP", "g-", "PREFIXED", "READ", "ALLOW"),
        )
        yield b, sasl
    finally:
        b.stop()


def heartbeat(port: int, user: str, group: str, member: str, epoch: int, **fields: Any) -> Any:
    """One ConsumerGroupHeartbeat v1 as ``user`` (every optional field null unless given)."""
    request: dict[str, Any] = dict(
        group_id=group, member_id=member, member_epoch=epoch, instance_id=None, rack_id=None,
        rebalance_timeout=-1, subscribed_topic_names=None, subscribed_topic_regex=None,
        server_assignor=None, topic_partitions=None,
    )  # fmt: skip
    request.update(fields)
    return raw(port, user, ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, **request)


def join(port: int, user: str, group: str, member: str, **subscription: Any) -> Any:
    return heartbeat(
        port, user, group, member, 0, rebalance_timeout=30000, topic_partitions=[], **subscription
    )


def describe(port: int, user: str, group: str) -> Any:
    answer = raw(port, user, ApiKey.CONSUMER_GROUP_DESCRIBE, 0, group_ids=[group],
                 include_authorized_operations=False)  # fmt: skip
    (described,) = answer.groups
    return described


def topic_names(described: Any) -> set[str]:
    """Every topic named in the members' assignments and target assignments."""
    return {
        tp.topic_name
        for m in described.members
        for a in (m.assignment, m.target_assignment)
        for tp in a.topic_partitions
    }


def test_a_regex_resolves_only_topics_the_member_may_describe(broker: tuple[BrokerProcess, int]) -> None:
    from confluent_kafka import Consumer
    from confluent_kafka.admin import NewTopic

    _, sasl = broker
    consumer = Consumer(conf(sasl, "alice", **{"group.id": "g-regex", "group.protocol": "consumer"}))
    consumer.subscribe(["^.*"])  # sent to the broker as SubscribedTopicRegex
    seen: set[str] = set()

    def assigned() -> set[tuple[str, int]]:
        consumer.poll(0.05)
        got = {(tp.topic, tp.partition) for tp in consumer.assignment()}
        seen.update(t for t, _ in got)
        return got

    try:
        wait_for(lambda: assigned() == {("visible", p) for p in range(PARTITIONS)}, 30, what="visible")
        # Topics created later are resolved under the same rule.
        admin = admin_of(sasl, "admin")
        for name in ("hidden-2", "visible-2"):
            admin.create_topics([NewTopic(name, PARTITIONS, 1)])[name].result(30)
        want = {(t, p) for t in ("visible", "visible-2") for p in range(PARTITIONS)}
        wait_for(lambda: assigned() == want, 30, what="visible-2 too, never hidden or hidden-2")
        assert seen == {"visible", "visible-2"}
        for user in ("alice", "admin"):
            described = describe(sasl, user, "g-regex")
            assert described.error_code == ErrorCode.none, (user, described)
            assert topic_names(described) == {"visible", "visible-2"}, user
    finally:
        consumer.close()


def test_naming_a_topic_the_member_may_not_describe_is_refused(broker: tuple[BrokerProcess, int]) -> None:
    _, sasl = broker
    refused = join(sasl, "alice", "g-names", "m1", subscribed_topic_names=["visible", "hidden"])
    assert refused.error_code == ErrorCode.topic_authorization_failed
    assert (refused.error_message, refused.member_id, refused.member_epoch) == (None, None, 0)
    assert refused.assignment is None
    # Nothing was created or changed: the group does not exist.
    assert describe(sasl, "admin", "g-names").error_code == ErrorCode.group_id_not_found
    # Only describable names: the member joins and gets its partitions.
    joined = join(sasl, "alice", "g-names", "m1", subscribed_topic_names=["visible"])
    assert joined.error_code == ErrorCode.none and joined.member_epoch >= 1
    assert {p for t in joined.assignment.topic_partitions for p in t.partitions} == set(range(PARTITIONS))
    # A member already in the group changing to an undescribable name: refused, unchanged.
    again = heartbeat(sasl, "alice", "g-names", "m1", joined.member_epoch,
                      subscribed_topic_names=["hidden"])  # fmt: skip
    assert again.error_code == ErrorCode.topic_authorization_failed
    described = describe(sasl, "admin", "g-names")
    (member,) = described.members
    assert list(member.subscribed_topic_names) == ["visible"]
    assert topic_names(described) == {"visible"}


def test_describe_hides_a_group_assigned_topics_the_caller_may_not_describe(
    broker: tuple[BrokerProcess, int],
) -> None:
    _, sasl = broker
    # The super user may describe every topic: its regex member gets hidden and visible.
    joined = join(sasl, "admin", "g-mixed", "boss", subscribed_topic_regex="hidden|visible")
    assert joined.error_code == ErrorCode.none and joined.member_epoch >= 1
    epoch = [joined.member_epoch]

    def both_assigned() -> bool:  # the regex is resolved after the join, as in Kafka
        epoch[0] = heartbeat(sasl, "admin", "g-mixed", "boss", epoch[0]).member_epoch
        described = describe(sasl, "admin", "g-mixed")
        assert described.error_code == ErrorCode.none
        return topic_names(described) == {"hidden", "visible"}

    wait_for(both_assigned, 30, what="the regex resolved to hidden and visible")
    # alice may describe the group but not hidden: the group is refused, nothing of it shown.
    hidden = describe(sasl, "alice", "g-mixed")
    assert hidden.error_code == ErrorCode.topic_authorization_failed
    assert hidden.error_message == HIDDEN_GROUP_MESSAGE
    assert list(hidden.members) == []
