"""Probes against KIP-848 regex subscriptions (ConsumerGroupHeartbeat v1 ``SubscribedTopicRegex``).

- 600 distinct invalid regexes of 400 KB each (once kept, with their messages, in a cache of
  1,024 entries: RSS grew past a gigabyte, and RE2 logged each pattern whole), then 300
  distinct invalid regexes just under the length bound (these reach RE2): every one answered
  INVALID_REGULAR_EXPRESSION, the broker's resident memory and its log stay small;
- a valid regex longer than the 32,767 bytes a record key holds: INVALID_REGULAR_EXPRESSION
  rather than a record that cannot be written;
- after all that a member subscribing with a sound regex joins and gets its partitions (once
  the regex is resolved, after the join, as in Kafka).
"""

from __future__ import annotations

from typing import Any

from kcoord.protocol.apis import ApiKey
from kcoord.protocol.errors import ErrorCode
from tests.integration.harness import BrokerProcess, wait_for
from tests.integration.rawclient import RawClient

from .conftest import RSS_BOUND, assert_survived, peak_rss, rss
from .healthy import TOPIC as HEALTHY_TOPIC
from .healthy import HealthyGroup

GROUP = "abuse-regex"
INVALID = ErrorCode.invalid_regular_expression


def join(client: RawClient, member: str, regex: str) -> Any:
    return client.request(
        ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, group_id=GROUP, member_id=member, member_epoch=0,
        instance_id=None, rack_id=None, rebalance_timeout=30000, subscribed_topic_names=None,
        subscribed_topic_regex=regex, server_assignor=None, topic_partitions=[],
    )  # fmt: skip


def beat(client: RawClient, member: str, epoch: int) -> Any:
    return client.request(
        ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, group_id=GROUP, member_id=member, member_epoch=epoch,
        instance_id=None, rack_id=None, rebalance_timeout=-1, subscribed_topic_names=None,
        subscribed_topic_regex=None, server_assignor=None, topic_partitions=None,
    )  # fmt: skip


def test_many_large_invalid_regexes_leave_nothing_behind(
    abuse_broker: BrokerProcess, healthy: HealthyGroup
) -> None:
    before = rss(abuse_broker.pid)
    log_before = abuse_broker.log_path.stat().st_size
    with RawClient(abuse_broker.port, timeout=60) as client:
        for i in range(600):
            # unbalanced: invalid, and far over the length bound
            r = join(client, f"m-{i}", f"({i}-" + "x" * 400_000)
            assert (int(r.error_code), r.member_epoch) == (INVALID, 0), i
            assert r.error_message and len(r.error_message) < 1000
        for i in range(300):
            # under the bound, so RE2 parses each and fails at its end
            r = join(client, f"n-{i}", f"{i}-" + "[a-z]" * 6000 + "(")
            assert int(r.error_code) == INVALID, i
        r = join(client, "long", "a" * 40_000)  # valid, but no record key can hold it
        assert int(r.error_code) == INVALID and "32767" in r.error_message
        grown = rss(abuse_broker.pid) - before
        assert grown < 64 << 20, f"RSS grew by {grown >> 20} MiB"
        assert peak_rss(abuse_broker.pid) < RSS_BOUND
        logged = abuse_broker.log_path.stat().st_size - log_before
        assert logged < 1 << 20, f"the broker logged {logged} bytes"

        # the group was never created, and a sound regex subscription still works
        r = join(client, "sound", f"{HEALTHY_TOPIC}|nothing-[0-9]+")
        assert int(r.error_code) == ErrorCode.none and r.member_epoch >= 1
        # The regex is resolved after the join (as in Kafka): its partitions come with a
        # later heartbeat.
        epoch, got = r.member_epoch, set[int]()

        def resolved() -> bool:
            nonlocal epoch
            b = beat(client, "sound", epoch)
            assert int(b.error_code) == ErrorCode.none
            epoch = b.member_epoch
            if b.assignment is not None:
                got.clear()
                got.update(p for t in b.assignment.topic_partitions for p in t.partitions)
            return got == {0, 1}

        wait_for(resolved, 30, what="the sound regex's partitions")
        left = client.request(
            ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, group_id=GROUP, member_id="sound",
            member_epoch=-1, instance_id=None, rack_id=None, rebalance_timeout=-1,
            subscribed_topic_names=None, subscribed_topic_regex=None, server_assignor=None,
            topic_partitions=None,
        )  # fmt: skip
        assert int(left.error_code) == ErrorCode.none
    assert_survived(abuse_broker, healthy, "large invalid regex subscriptions")
