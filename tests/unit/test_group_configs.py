"""broker/groups/group_configs.py: the group configs' checks (Kafka's GroupConfig rules, bounded
by the broker's settings), their sources in DescribeConfigs, their document, and their effect on
a KIP-848 consumer group (coordinator/consumer/manager.py and the steady path)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kcoord.broker.config import SETTINGS
from kcoord.broker.groups.group_configs import (
    CONFIGS_FILE,
    DEFS,
    SOURCE_DEFAULT,
    SOURCE_GROUP,
    GroupConfigProblem,
    GroupConfigs,
    auto_offset_reset,
    check_group_configs,
    iso_duration_ms,
)
from kcoord.protocol.errors import ErrorCode
from kcoord.storage.file_engine import FileEngine
from tests.unit.test_consumer_group import SESSION, Group


def broker(**changed: Any) -> Any:
    """A broker's settings: Kafka's defaults, some changed (names with _ for .)."""
    values = {k.replace("_", "."): v for k, v in changed.items()}
    return lambda name: values.get(name, SETTINGS[name].default)


KAFKA = broker()


def check(**configs: str | None) -> dict[str, str]:
    return check_group_configs(((k.replace("_", "."), v) for k, v in configs.items()), KAFKA)


def test_values_in_bounds_are_kept_in_their_stored_form() -> None:
    assert check(consumer_session_timeout_ms=" 50000", consumer_heartbeat_interval_ms="+6000") == {
        "consumer.session.timeout.ms": "50000",
        "consumer.heartbeat.interval.ms": "6000",
    }
    assert check(
        share_auto_offset_reset="by_duration:P1DT2H",
        share_isolation_level="read_committed",
        share_record_lock_duration_ms="15000",
        share_session_timeout_ms="60000",
        share_heartbeat_interval_ms="15000",
    )["share.auto.offset.reset"] == "by_duration:P1DT2H"


@pytest.mark.parametrize(
    ("name", "value", "says"),
    [
        # Kafka's ConfigDef parsing: a 32-bit integer at least the config's floor.
        ("consumer.session.timeout.ms", "45s", "not a 32-bit integer"),
        ("consumer.session.timeout.ms", "1_000", "not a 32-bit integer"),
        ("consumer.session.timeout.ms", str(2**31), "not a 32-bit integer"),
        ("consumer.session.timeout.ms", "0", "least allowed is 1"),
        ("share.record.lock.duration.ms", "999", "least allowed is 1000"),
        ("consumer.session.timeout.ms", None, "null"),
        # Then the broker's bounds (Kafka's defaults: 45000..60000, 5000..15000, 15000..60000).
        ("consumer.session.timeout.ms", "44999", "at least group.consumer.min.session.timeout.ms"),
        ("consumer.session.timeout.ms", "60001", "at most group.consumer.max.session.timeout.ms"),
        ("consumer.heartbeat.interval.ms", "4999", "group.consumer.min.heartbeat.interval.ms"),
        ("share.session.timeout.ms", "60001", "at most group.share.max.session.timeout.ms"),
        ("share.heartbeat.interval.ms", "15001", "group.share.max.heartbeat.interval.ms"),
        ("share.record.lock.duration.ms", "14999", "group.share.min.record.lock.duration.ms"),
        ("share.record.lock.duration.ms", "60001", "group.share.max.record.lock.duration.ms"),
        # The strings: Kafka's values only, in lower case.
        ("share.auto.offset.reset", "EARLIEST", "allowed are latest, earliest"),
        ("share.auto.offset.reset", "none", "allowed are"),
        ("share.auto.offset.reset", "by_duration", "allowed are"),
        ("share.auto.offset.reset", "by_duration:", "allowed are"),
        ("share.auto.offset.reset", "by_duration:-PT1H", "not negative"),
        ("share.auto.offset.reset", "by_duration:P1Y", "allowed are"),
        ("share.isolation.level", "READ_COMMITTED", "read_committed, read_uncommitted"),
        # Names: unknown ones, and Kafka's streams configs, which kcoord has no groups for.
        ("consumer.max.size", "5", "unknown group config name"),
        ("streams.num.standby.replicas", "1", "kcoord has no streams groups"),
    ],
)
def test_kafkas_rules_refuse_with_a_message_naming_the_rule(
    name: str, value: str | None, says: str
) -> None:
    with pytest.raises(GroupConfigProblem, match=says):
        check_group_configs([(name, value)], KAFKA)


def test_the_session_timeout_must_stay_above_the_heartbeat_interval_broker_values_included() -> None:
    lax = broker(group_consumer_min_session_timeout_ms=1000, group_consumer_min_heartbeat_interval_ms=1)
    assert check_group_configs([("consumer.session.timeout.ms", "6000")], lax)
    with pytest.raises(GroupConfigProblem, match=r"consumer.session.timeout.ms \(5000\) must be greater"):
        check_group_configs([("consumer.session.timeout.ms", "5000")], lax)  # broker's interval 5000
    with pytest.raises(GroupConfigProblem, match="must be greater"):
        check_group_configs(
            [("consumer.session.timeout.ms", "3000"), ("consumer.heartbeat.interval.ms", "3000")], lax
        )
    with pytest.raises(GroupConfigProblem, match=r"share.session.timeout.ms \(45000\) must be greater"):
        check_group_configs(
            [("share.heartbeat.interval.ms", "45000")],
            broker(group_share_max_heartbeat_interval_ms=50000),
        )


def test_iso_durations_read_as_java_reads_them() -> None:
    assert iso_duration_ms("PT1H") == 3_600_000
    assert iso_duration_ms("P2D") == 172_800_000
    assert iso_duration_ms("pt0.5s") == 500
    assert iso_duration_ms("P1DT1H1M1.001S") == 90_061_001
    assert iso_duration_ms("P1DT2M3.5S") == 86_400_000 + 120_000 + 3_500
    assert iso_duration_ms("PT-1H30M") == -1_800_000
    assert iso_duration_ms("-PT1S") == -1000
    for bad in ("P", "PT", "P1DT", "PT1.S1", "1H", "P1W", "PT1H1H"):
        with pytest.raises(ValueError):
            iso_duration_ms(bad)
    assert auto_offset_reset("by_duration:PT10M") == ("by_duration", 600_000)
    assert auto_offset_reset("earliest") == ("earliest", None)


def test_describe_lists_every_config_the_groups_own_or_the_brokers(tmp_path: Path) -> None:
    store = GroupConfigs(FileEngine(tmp_path, fsync=False), broker(group_consumer_session_timeout_ms=50000))
    store.set("g", check(share_auto_offset_reset="earliest", consumer_heartbeat_interval_ms="6000"))
    described = {v.name: v for v in store.describe("g")}
    assert sorted(described) == sorted(DEFS)
    assert (described["share.auto.offset.reset"].value, described["share.auto.offset.reset"].source) == (
        "earliest", SOURCE_GROUP,
    )
    assert described["share.auto.offset.reset"].synonyms == (("share.auto.offset.reset", "earliest", 8),)
    # Not set: the broker's setting, or the built-in default where no setting backs it.
    assert (described["consumer.session.timeout.ms"].value, described["consumer.session.timeout.ms"].source) == (
        "50000", SOURCE_DEFAULT,
    )
    assert described["consumer.session.timeout.ms"].synonyms == ()
    assert described["share.isolation.level"].value == "read_uncommitted"
    # Any group id has configs, set or not.
    assert {v.source for v in store.describe("never-seen")} == {SOURCE_DEFAULT}
    assert store.of("never-seen") == {}


def test_the_document_survives_a_restart_and_a_bad_entry_is_skipped(tmp_path: Path) -> None:
    engine = FileEngine(tmp_path, fsync=False)
    store = GroupConfigs(engine, KAFKA)
    store.set("a", {"consumer.heartbeat.interval.ms": "6000"})
    store.set("b", {"share.isolation.level": "read_committed"})
    store.set("b", {})  # every config deleted: the group is forgotten
    again = GroupConfigs(engine, KAFKA)
    again.read()
    assert again.of("a") == {"consumer.heartbeat.interval.ms": "6000"} and again.of("b") == {}
    assert json.loads(engine.read_document(CONFIGS_FILE) or b"") == {
        "a": {"consumer.heartbeat.interval.ms": "6000"}
    }
    engine.write_document(
        CONFIGS_FILE, json.dumps({"a": {"nonsense": "1"}, "c": {"share.isolation.level": "read_committed"}}).encode()
    )
    again.read()
    assert again.of("a") == {} and again.of("c") == {"share.isolation.level": "read_committed"}
    again.stored_elsewhere(b"not json")  # changes nothing
    assert again.of("c") == {"share.isolation.level": "read_committed"}


def test_a_change_is_made_on_the_stored_configs(tmp_path: Path) -> None:
    """Two stores over one document (as two nodes): each one's change of a group is made on
    what the other stored, so neither loses the other's."""
    engine = FileEngine(tmp_path, fsync=False)
    mine, theirs = GroupConfigs(engine, KAFKA), GroupConfigs(engine, KAFKA)
    mine.set("g", {"consumer.heartbeat.interval.ms": "6000"})
    theirs.set("h", {"share.isolation.level": "read_committed"})  # never read mine's change
    both = theirs.alter("g", lambda current: {**current, "share.auto.offset.reset": "earliest"})
    assert both == {"consumer.heartbeat.interval.ms": "6000", "share.auto.offset.reset": "earliest"}
    assert mine.alter("g", dict) == both  # no change: nothing written, the stored set taken
    assert mine.of("h") == {"share.isolation.level": "read_committed"}
    assert json.loads(engine.read_document(CONFIGS_FILE) or b"") == {
        "g": both, "h": {"share.isolation.level": "read_committed"}}


def test_a_stored_value_outside_todays_bounds_applies_at_the_nearest_bound(tmp_path: Path) -> None:
    engine = FileEngine(tmp_path, fsync=False)
    GroupConfigs(engine, KAFKA).set("g", {"consumer.heartbeat.interval.ms": "15000"})
    narrower = GroupConfigs(engine, broker(group_consumer_max_heartbeat_interval_ms=8000))
    narrower.read()
    assert narrower.of("g") == {"consumer.heartbeat.interval.ms": "8000"}
    assert narrower.stored("g") == {"consumer.heartbeat.interval.ms": "15000"}  # as described


def test_a_consumer_group_gets_its_own_heartbeat_interval_and_session_timeout() -> None:
    configs: dict[str, dict[str, str]] = {}
    g = Group(overrides=lambda group_id: configs.get(group_id, {}))
    reply = g.hb("a", 0)
    assert reply.heartbeat_interval_ms == 500  # the broker's
    configs["g"] = {"consumer.heartbeat.interval.ms": "1234", "consumer.session.timeout.ms": str(3 * SESSION)}
    epoch = g.group().members["a"].member_epoch
    reply = g.hb("a", epoch, topic_partitions=g.owned(reply))
    assert reply.heartbeat_interval_ms == 1234
    # The steady path answers the group's interval too.
    assert g.shard.consumer_heartbeat_now("g", "a", epoch, "", "", g.now) == 1234
    # The session is the group's: silent past the broker's timeout, the member stays.
    g.advance(2 * SESSION)
    assert set(g.group().members) == {"a"}
    g.advance(SESSION + 1)
    assert set(g.group().members) == set()  # fenced after the group's session timeout
    # Another group keeps the broker's values.
    other = g.hb("b", 0, group_id="h")
    assert (other.error, other.heartbeat_interval_ms) == (ErrorCode.none, 500)
