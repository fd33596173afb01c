"""Share groups under ACLs, as Kafka 4.2's KafkaApis checks them: ShareGroupHeartbeat needs READ
on the group (GROUP_AUTHORIZATION_FAILED) and DESCRIBE on every subscribed topic
(TOPIC_AUTHORIZATION_FAILED); ShareGroupDescribe needs DESCRIBE on the group, and a group whose
members are assigned a topic the caller may not describe is answered TOPIC_AUTHORIZATION_FAILED
without its members. The broker (alice may read ``visible*`` and the groups ``g-*``) is
test_consumer_group_acls.py's."""

from __future__ import annotations

from typing import Any

from kcoord.protocol.apis import ApiKey
from kcoord.protocol.errors import ErrorCode

from .harness import BrokerProcess
from .test_acls import raw
from .test_consumer_group_acls import HIDDEN_GROUP_MESSAGE, broker  # noqa: F401 - the fixture

E = ErrorCode


def heartbeat(port: int, user: str, group: str, member: str, topics: list[str]) -> Any:
    return raw(port, user, ApiKey.SHARE_GROUP_HEARTBEAT, 1, group_id=group, member_id=member,
               member_epoch=0, rack_id=None, subscribed_topic_names=topics)  # fmt: skip


def describe(port: int, user: str, group: str) -> Any:
    (described,) = raw(port, user, ApiKey.SHARE_GROUP_DESCRIBE, 1, group_ids=[group],
                       include_authorized_operations=True).groups  # fmt: skip
    return described


def test_share_group_acls(broker: tuple[BrokerProcess, int]) -> None:  # noqa: F811
    _, port = broker
    r = heartbeat(port, "alice", "g-share", "a1", ["visible"])
    assert (r.error_code, r.member_epoch) == (E.none, 1)
    r = heartbeat(port, "alice", "g-share", "a2", ["visible", "hidden"])
    assert (r.error_code, r.error_message, r.member_epoch) == (E.topic_authorization_failed, None, 0)
    assert heartbeat(port, "alice", "other-share", "a3", ["visible"]).error_code == E.group_authorization_failed
    d = describe(port, "alice", "g-share")
    assert (d.error_code, [m.member_id for m in d.members]) == (E.none, ["a1"])
    assert d.authorized_operations not in (0, -2147483648)
    assert describe(port, "alice", "other-share").error_code == E.group_authorization_failed
    assert heartbeat(port, "admin", "g-hidden-share", "s1", ["hidden"]).error_code == E.none
    d = describe(port, "alice", "g-hidden-share")
    assert (d.error_code, d.error_message, d.members) == (E.topic_authorization_failed, HIDDEN_GROUP_MESSAGE, ())
