"""Group configs (Kafka's GROUP config resource) against a real broker: set with confluent-kafka's
``incremental_alter_configs`` and ``kcoord groups alter-config``, described with their sources,
refused with INVALID_CONFIG when Kafka refuses them, kept across a restart, applied to a KIP-848
consumer group's heartbeat interval, and guarded by DESCRIBE_CONFIGS / ALTER_CONFIGS on the
group."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ResourceType,
)

from kcoord.protocol.apis import ApiKey
from kcoord.protocol.errors import ErrorCode

from .harness import BrokerProcess, free_port, wait_for
from .rawclient import RawClient
from .test_acls import _accepting, admin_of, allow
from .test_admin_cli import kcoord
from .test_sasl import kcoord_users

SETTINGS = {
    "group.initial.rebalance.delay.ms": 0,
    "group.consumer.min.heartbeat.interval.ms": 500,
    "group.consumer.min.session.timeout.ms": 6000,
}
SET, DELETE, APPEND = AlterConfigOpType.SET, AlterConfigOpType.DELETE, AlterConfigOpType.APPEND


def _admin(b: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": b.bootstrap})


def alter(admin: AdminClient, group: str, *changes: tuple[str, str | None, Any], validate: bool = False) -> None:
    entries = [ConfigEntry(n, v, incremental_operation=op) for n, v, op in changes]
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=entries)
    admin.incremental_alter_configs([resource], validate_only=validate)[resource].result(timeout=30)


def described(admin: AdminClient, group: str) -> dict[str, tuple[str, str]]:
    resource = ConfigResource(ResourceType.GROUP, group)
    entries = admin.describe_configs([resource])[resource].result(timeout=30)
    return {e.name: (e.value, ConfigSource(e.source).name) for e in entries.values()}


def refused(admin: AdminClient, group: str, *changes: tuple[str, str | None, Any]) -> tuple[int, str]:
    with pytest.raises(KafkaException) as caught:
        alter(admin, group, *changes)
    error = caught.value.args[0]
    return error.code(), error.str()


def test_set_described_refused_and_kept_across_a_restart(broker_factory: Any) -> None:
    b = broker_factory(SETTINGS)
    admin = _admin(b)
    before = described(admin, "q")  # a group that does not exist: the broker's values
    assert before["consumer.session.timeout.ms"] == ("45000", "DEFAULT_CONFIG")
    assert before["share.auto.offset.reset"] == ("latest", "DEFAULT_CONFIG")
    assert set(before) == {
        "consumer.heartbeat.interval.ms", "consumer.session.timeout.ms", "share.auto.offset.reset",
        "share.heartbeat.interval.ms", "share.isolation.level", "share.record.lock.duration.ms",
        "share.session.timeout.ms", "consumer.assignment.interval.ms",
        "consumer.assignor.offload.enable",
    }  # fmt: skip
    # KIP-1263's two (the harness sets the broker's interval to 0; offload is on by default).
    assert before["consumer.assignment.interval.ms"] == ("0", "DEFAULT_CONFIG")
    assert before["consumer.assignor.offload.enable"] == ("true", "DEFAULT_CONFIG")

    alter(admin, "q", ("share.auto.offset.reset", "earliest", SET),
          ("consumer.session.timeout.ms", "50000", SET))  # fmt: skip
    now = described(admin, "q")
    assert now["share.auto.offset.reset"] == ("earliest", "GROUP_CONFIG")
    assert now["consumer.session.timeout.ms"] == ("50000", "GROUP_CONFIG")
    assert now["share.isolation.level"] == ("read_uncommitted", "DEFAULT_CONFIG")

    # Kafka's refusals: a value not of the config's kind, one outside the broker's bounds, a
    # session not above the interval, a list operation, an unknown name. Nothing changes.
    for changes, says in [
        ((("share.isolation.level", "bogus", SET),), "read_committed"),
        ((("share.auto.offset.reset", "by_duration:-PT1H", SET),), "not negative"),
        ((("consumer.session.timeout.ms", "70000", SET),), "group.consumer.max.session.timeout.ms"),
        ((("share.session.timeout.ms", "1000", SET),), "group.share.min.session.timeout.ms"),
        ((("consumer.heartbeat.interval.ms", "50000", SET),), "max.heartbeat.interval.ms"),
        ((("share.isolation.level", "read_committed", APPEND),), "not a list"),
        ((("nonsense.ms", "1", SET),), "unknown group config"),
        ((("consumer.assignor.offload.enable", "yes", SET),), "true or false"),
        ((("consumer.assignment.interval.ms", "-1", SET),), "least allowed"),
        # One bad change refuses the whole request.
        ((("share.auto.offset.reset", "latest", SET), ("share.isolation.level", "x", SET)), "x"),
    ]:
        code, message = refused(admin, "q", *changes)
        assert code == ErrorCode.invalid_config and says in message, (changes, message)
    assert described(admin, "q") == now

    alter(admin, "q", ("share.isolation.level", "read_committed", SET), validate=True)
    assert described(admin, "q") == now  # validate_only: checked, not kept
    alter(admin, "q", ("consumer.session.timeout.ms", None, DELETE),
          ("share.isolation.level", "read_committed", SET))  # fmt: skip
    after = described(admin, "q")
    assert after["consumer.session.timeout.ms"] == ("45000", "DEFAULT_CONFIG")
    assert after["share.isolation.level"] == ("read_committed", "GROUP_CONFIG")

    b.stop()
    b.restart()
    assert described(_admin(b), "q") == after


def test_raw_requests_empty_group_and_the_legacy_alter_configs(broker: BrokerProcess) -> None:
    with RawClient(broker.port) as c:
        r = c.request(ApiKey.DESCRIBE_CONFIGS, 4, resources=[dict(
            resource_type=32, resource_name="", configuration_keys=None)],
            include_synonyms=True, include_documentation=True)  # fmt: skip
        assert r.results[0].error_code == ErrorCode.invalid_request
        r = c.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, validate_only=False, resources=[dict(
            resource_type=32, resource_name="g", configs=[
                dict(name="share.isolation.level", config_operation=0, value="read_committed"),
                dict(name="share.isolation.level", config_operation=1, value=None)])])  # fmt: skip
        assert r.responses[0].error_code == ErrorCode.invalid_request  # a name twice
        # AlterConfigs replaces the group's whole set.
        for configs in (
            [dict(name="share.isolation.level", value="read_committed"),
             dict(name="share.auto.offset.reset", value="earliest")],
            [dict(name="share.auto.offset.reset", value="by_duration:PT1H")],
        ):  # fmt: skip
            r = c.request(ApiKey.ALTER_CONFIGS, 2, validate_only=False, resources=[dict(
                resource_type=32, resource_name="g", configs=configs)])  # fmt: skip
            assert r.responses[0].error_code == ErrorCode.none, r
        r = c.request(ApiKey.DESCRIBE_CONFIGS, 4, resources=[dict(
            resource_type=32, resource_name="g", configuration_keys=None)],
            include_synonyms=True, include_documentation=True)  # fmt: skip
        got = {e.name: e for e in r.results[0].configs}
        reset, level = got["share.auto.offset.reset"], got["share.isolation.level"]
        assert (reset.value, reset.config_source, reset.read_only) == ("by_duration:PT1H", 8, False)
        assert [(s.name, s.value, s.source) for s in reset.synonyms] == [
            ("share.auto.offset.reset", "by_duration:PT1H", 8)
        ]
        assert (level.value, level.config_source, list(level.synonyms)) == ("read_uncommitted", 5, [])
        assert reset.documentation and got["consumer.session.timeout.ms"].config_type == 3


def ms(interval: timedelta) -> int:
    return int(interval / timedelta(milliseconds=1))


def _heartbeat(port: int, group: str) -> Any:
    with RawClient(port) as c:
        return c.request(
            ApiKey.CONSUMER_GROUP_HEARTBEAT, 0, group_id=group, member_id="m-" + group,
            member_epoch=0, instance_id=None, rack_id=None, rebalance_timeout=30000,
            subscribed_topic_names=["t"], server_assignor=None, topic_partitions=[],
        )  # fmt: skip


def test_a_consumer_group_is_told_its_own_heartbeat_interval(broker_factory: Any) -> None:
    b = broker_factory(SETTINGS)
    admin = _admin(b)
    alter(admin, "paced", ("consumer.heartbeat.interval.ms", "700", SET))
    paced, other = _heartbeat(b.port, "paced"), _heartbeat(b.port, "other")
    assert (paced.error_code, ms(paced.heartbeat_interval)) == (ErrorCode.none, 700)
    assert (other.error_code, ms(other.heartbeat_interval)) == (ErrorCode.none, 5000)
    # A change holds from the next heartbeat of a member already in the group.
    alter(admin, "paced", ("consumer.heartbeat.interval.ms", "900", SET))
    with RawClient(b.port) as c:
        again = c.request(
            ApiKey.CONSUMER_GROUP_HEARTBEAT, 0, group_id="paced", member_id="m-paced",
            member_epoch=paced.member_epoch, instance_id=None, rack_id=None, rebalance_timeout=-1,
            subscribed_topic_names=None, server_assignor=None, topic_partitions=None,
        )  # fmt: skip
    assert (again.error_code, ms(again.heartbeat_interval)) == (ErrorCode.none, 900)


def test_the_cli_round_trips(broker: BrokerProcess) -> None:
    r = kcoord(broker, "groups", "alter-config", "billing", "--set", "share.isolation.level=read_committed",
               "--set", "share.auto.offset.reset=earliest")  # fmt: skip
    assert r.returncode == 0 and "Completed updating config for group billing" in r.stdout, r.stderr
    r = kcoord(broker, "groups", "describe-config", "billing", "--json")
    assert r.returncode == 0, r.stderr
    rows = {row["name"]: (row["value"], row["source"]) for row in json.loads(r.stdout)["configs"]}
    assert rows["share.isolation.level"] == ("read_committed", "group")
    assert rows["share.record.lock.duration.ms"] == ("30000", "default")
    r = kcoord(broker, "groups", "alter-config", "billing", "--delete", "share.isolation.level")
    assert r.returncode == 0, r.stderr
    table = kcoord(broker, "groups", "describe-config", "billing").stdout.splitlines()
    assert table[0].split() == ["CONFIG", "VALUE", "SOURCE"]
    assert "share.isolation.level read_uncommitted default" in [" ".join(x.split()) for x in table]
    assert "share.auto.offset.reset earliest group" in [" ".join(x.split()) for x in table]
    bad = kcoord(broker, "groups", "alter-config", "billing", "--set", "share.record.lock.duration.ms=10")
    assert bad.returncode == 1 and "share.record.lock.duration.ms" in bad.stderr
    assert kcoord(broker, "groups", "alter-config", "billing").returncode == 2  # nothing to change


PASSWORDS = {"admin": "admin-secret", "alice": "alice-secret"}


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[int]:
    """A broker with an authorizer; its SASL port (alice: no ACLs of her own yet)."""
    data = tmp_path / "data"
    for user, password in PASSWORDS.items():
        assert kcoord_users("add", user, "--password", password, "--data-dir", str(data)).returncode == 0
    plain, sasl = free_port(), free_port()
    b = BrokerProcess(data, {
        "listeners": f"PLAINTEXT://127.0.0.1:{plain},SASL_PLAINTEXT://127.0.0.1:{sasl}",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin",
    })  # fmt: skip
    b.port = plain
    b.start()
    wait_for(lambda: _accepting(sasl), 30, what="the SASL listener")
    try:
        yield sasl
    finally:
        b.stop()


def test_describe_and_alter_need_their_operations_on_the_group(secured: int) -> None:
    alice, admin = admin_of(secured, "alice"), admin_of(secured, "admin")
    resource = ConfigResource(ResourceType.GROUP, "g")
    for call in (lambda: described(alice, "g"),
                 lambda: alter(alice, "g", ("share.isolation.level", "read_committed", SET))):  # fmt: skip
        with pytest.raises(KafkaException) as caught:
            call()
        assert caught.value.args[0].code() == ErrorCode.group_authorization_failed
    allow(admin, ("GROUP", "g", "LITERAL", "DESCRIBE_CONFIGS", "ALLOW"))
    assert described(alice, "g")["share.isolation.level"] == ("read_uncommitted", "DEFAULT_CONFIG")
    with pytest.raises(KafkaException):
        alter(alice, "g", ("share.isolation.level", "read_committed", SET))
    allow(admin, ("GROUP", "g", "LITERAL", "ALTER_CONFIGS", "ALLOW"))
    alter(alice, "g", ("share.isolation.level", "read_committed", SET))
    assert described(admin, resource.name)["share.isolation.level"] == ("read_committed", "GROUP_CONFIG")
