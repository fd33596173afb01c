"""ACLs on a real broker (``authorizer.class.name`` set, Kafka's StandardAuthorizer name) with
real clients: AdminClient creates, lists and deletes ACLs; a principal allowed to read a topic
but not the group gets GROUP_AUTHORIZATION_FAILED on join and commit and the group is
untouched; DENY wins over ALLOW; PREFIXED patterns match; DeleteGroups and ``kcoord offsets
reset`` are refused without the rights; Metadata and ListGroups show only what the principal may
describe, in the web console too, whose actions need the rights of the APIs they stand for;
ACLs and users survive SIGKILL; changes apply to the next request."""

from __future__ import annotations

import base64
import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kcoord.admin.client import exchange
from kcoord.admin.security import connect
from kcoord.protocol.apis import ApiKey
from kcoord.protocol.errors import ErrorCode

from .browser import browser  # noqa: F401 - the fixture
from .harness import ROOT, BrokerProcess, free_port, wait_for
from .rawclient import once_coordinator_exists
from .test_sasl import kcoord_users

PASSWORDS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[tuple[BrokerProcess, int]]:
    data = tmp_path / "data"
    for user, password in PASSWORDS.items():
        assert kcoord_users("add", user, "--password", password, "--data-dir", str(data)).returncode == 0
    plain, sasl = free_port(), free_port()
    b = BrokerProcess(
        data,
        {
            "group.initial.rebalance.delay.ms": 0,
            "listeners": f"PLAINTEXT://127.0.0.1:{plain},SASL_PLAINTEXT://127.0.0.1:{sasl}",
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:admin",
        },
        metrics_port=free_port(),
    )
    b.port = plain
    b.start()
    wait_for(lambda: _accepting(sasl), 30, what="the SASL listener")
    try:
        yield b, sasl
    finally:
        b.stop()


def _accepting(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def conf(port: int, user: str, **extra: Any) -> dict[str, Any]:
    return {
        "bootstrap.servers": f"127.0.0.1:{port}",
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": user,
        "sasl.password": PASSWORDS[user],
        **extra,
    }


def admin_of(port: int, user: str) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient(conf(port, user))


def allow(admin: Any, *bindings: tuple[str, str, str, str, str]) -> None:
    """(resource type, name, pattern, operation, ALLOW|DENY) for User:alice, any host."""
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    acls = [
        AclBinding(ResourceType[rtype], name, ResourcePatternType[pattern], "User:alice", "*",
                   AclOperation[op], AclPermissionType[permission])
        for rtype, name, pattern, op, permission in bindings
    ]
    for f in admin.create_acls(acls).values():
        f.result(20)


def create_topic(port: int, name: str) -> None:
    """As the super user: the PLAINTEXT listener's anonymous principal may not create."""
    from confluent_kafka.admin import NewTopic

    admin = admin_of(port, "admin")
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(30)


def raw(port: int, user: str, api_key: int, version: int, **fields: Any) -> Any:
    """One request as ``user`` on a connection of its own (SCRAM by the admin commands' code)."""
    settings = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                "sasl.username": user, "sasl.password": PASSWORDS[user]}
    with connect("127.0.0.1", port, 10, settings, exchange) as sock:
        return exchange(sock, api_key, version, fields)


def join(port: int, user: str, group: str) -> Any:
    return raw(port, user, ApiKey.JOIN_GROUP, 5, group_id=group, session_timeout=10000,
               rebalance_timeout=10000, member_id="", group_instance_id=None,
               protocol_type="consumer", protocols=[dict(name="range", metadata=b"")])


def commit(port: int, user: str, group: str, offset: int) -> Any:
    return raw(port, user, ApiKey.OFFSET_COMMIT, 8, group_id=group, generation_id_or_member_epoch=-1,
               member_id="", group_instance_id=None,
               topics=[dict(name="t", partitions=[dict(partition_index=0, committed_offset=offset,
                                                       committed_leader_epoch=-1, committed_metadata="")])])


def committed(admin: Any, group: str) -> dict[int, int]:
    from confluent_kafka import ConsumerGroupTopicPartitions

    got = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(20)
    return {tp.partition: tp.offset for tp in got.topic_partitions if tp.offset >= 0}


def set_offsets(admin: Any, group: str, offset: int) -> None:
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    admin.alter_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group, [TopicPartition("t", 0, offset)])]
    )[group].result(20)


def test_admin_client_creates_lists_and_deletes_acls(broker: tuple[BrokerProcess, int]) -> None:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import (
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    _b, sasl = broker
    admin = admin_of(sasl, "admin")
    allow(admin, ("TOPIC", "t", "LITERAL", "READ", "ALLOW"), ("GROUP", "team-", "PREFIXED", "READ", "ALLOW"))
    any_acl = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                               AclOperation.ANY, AclPermissionType.ANY)
    listed = admin.describe_acls(any_acl).result(20)
    assert sorted((a.restype.name, a.name, a.resource_pattern_type.name, a.operation.name) for a in listed) == [
        ("GROUP", "team-", "PREFIXED", "READ"), ("TOPIC", "t", "LITERAL", "READ"),
    ]
    # MATCH: every ACL that applies to the group named.
    match = AclBindingFilter(ResourceType.GROUP, "team-a", ResourcePatternType.MATCH, None, None,
                             AclOperation.ANY, AclPermissionType.ANY)
    assert [a.name for a in admin.describe_acls(match).result(20)] == ["team-"]
    # Without ALTER on the cluster, alice may not change ACLs, nor list them without DESCRIBE.
    # (librdkafka drops DescribeAcls' top-level error: asked on the wire.)
    refused = raw(sasl, "alice", ApiKey.DESCRIBE_ACLS, 3, resource_type_filter=1,
                  resource_name_filter=None, pattern_type_filter=1, principal_filter=None,
                  host_filter=None, operation=1, permission_type=1)
    assert (refused.error_code, refused.resources) == (ErrorCode.cluster_authorization_failed, ())
    alice = admin_of(sasl, "alice")
    with pytest.raises(KafkaException, match="(?i)cluster.?authorization"):
        allow(alice, ("TOPIC", "t", "LITERAL", "WRITE", "ALLOW"))
    topic_acls = AclBindingFilter(ResourceType.TOPIC, None, ResourcePatternType.ANY, None, None,
                                  AclOperation.ANY, AclPermissionType.ANY)
    (deleted,) = admin.delete_acls([topic_acls]).values()
    assert [a.name for a in deleted.result(20)] == ["t"]
    assert [a.name for a in admin.describe_acls(any_acl).result(20)] == ["team-"]


def test_read_on_the_topic_but_not_the_group_is_refused_and_the_group_untouched(
    broker: tuple[BrokerProcess, int],
) -> None:
    from confluent_kafka import Consumer, KafkaError

    b, sasl = broker
    admin = admin_of(sasl, "admin")
    create_topic(sasl, "t")
    set_offsets(admin, "g", 5)
    allow(admin, ("TOPIC", "t", "LITERAL", "READ", "ALLOW"))
    assert join(sasl, "alice", "g").error_code == ErrorCode.group_authorization_failed
    answer = commit(sasl, "alice", "g", 9)
    assert answer.topics[0].partitions[0].error_code == ErrorCode.group_authorization_failed
    consumer = Consumer(conf(sasl, "alice", **{"group.id": "g", "enable.auto.commit": False}))
    try:
        consumer.subscribe(["t"])
        deadline, error = time.monotonic() + 30, None
        while error is None and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is not None:
                error = msg.error()
        assert error is not None and error.code() == KafkaError.GROUP_AUTHORIZATION_FAILED, error
    finally:
        consumer.close()
    assert committed(admin, "g") == {0: 5}
    # The same OffsetFetch v6, byte for byte after the header, from admin and from alice: with
    # an authorizer no answer is given again unchecked (broker/groups/fetch_answers.py).
    for user in ("admin", "alice", "admin", "alice"):
        r = raw(sasl, user, ApiKey.OFFSET_FETCH, 6, group_id="g",
                topics=[dict(name="t", partition_indexes=[0])])  # fmt: skip
        if user == "admin":
            assert (r.error_code, r.topics[0].partitions[0].committed_offset) == (0, 5)
        else:
            assert (r.error_code, len(r.topics)) == (ErrorCode.group_authorization_failed, 0)
    (described,) = admin.describe_consumer_groups(["g"]).values()
    assert described.result(20).members == []
    metrics = urllib.request.urlopen(f"http://127.0.0.1:{b.metrics_port}/metrics", timeout=10).read().decode()
    denials = [line for line in metrics.splitlines()
               if line.startswith("kcoord_authorization_denied_total") and 'principal="User:alice"' in line
               and 'resource_type="GROUP"' in line]
    assert denials and float(denials[0].rsplit(" ", 1)[1]) >= 2


def test_deny_wins_over_allow_and_prefixed_patterns_match(broker: tuple[BrokerProcess, int]) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    b, sasl = broker
    admin = admin_of(sasl, "admin")
    create_topic(sasl, "t")
    allow(
        admin,
        ("TOPIC", "t", "LITERAL", "READ", "ALLOW"),
        ("GROUP", "team-", "PREFIXED", "READ", "ALLOW"),
        ("GROUP", "team-secret", "LITERAL", "READ", "DENY"),
    )
    assert join(sasl, "alice", "team-secret").error_code == ErrorCode.group_authorization_failed
    assert join(sasl, "alice", "other").error_code == ErrorCode.group_authorization_failed
    producer = Producer(conf(sasl, "admin"))
    for i in range(3):
        producer.produce("t", value=b"%d" % i)
    assert producer.flush(30) == 0
    consumer = Consumer(conf(sasl, "alice", **{"group.id": "team-a", "enable.auto.commit": False,
                                                "auto.offset.reset": "earliest"}))
    try:
        consumer.subscribe(["t"])
        got, deadline = 0, time.monotonic() + 30
        while got < 3 and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and not msg.error():
                got += 1
                consumer.commit(message=msg, asynchronous=False)
        assert got == 3
        assert consumer.committed([TopicPartition("t", 0)], timeout=10)[0].offset == 3
    finally:
        consumer.close()
    # Alice may not write: her producer's records are refused.
    refused = Producer(conf(sasl, "alice", **{"message.timeout.ms": 10000}))
    failures: list[Any] = []
    refused.produce("t", value=b"x", on_delivery=lambda err, _m: failures.append(err))
    refused.flush(30)
    assert failures and failures[0] is not None and "AUTHORIZATION" in failures[0].name()


def test_deleting_a_group_and_resetting_offsets_need_the_rights(
    broker: tuple[BrokerProcess, int], tmp_path: Path
) -> None:
    b, sasl = broker
    admin = admin_of(sasl, "admin")
    create_topic(sasl, "t")
    set_offsets(admin, "g", 5)
    allow(admin, ("TOPIC", "t", "LITERAL", "READ", "ALLOW"), ("GROUP", "g", "LITERAL", "READ", "ALLOW"))
    alice = admin_of(sasl, "alice")
    (deleting,) = alice.delete_consumer_groups(["g"]).values()
    with pytest.raises(Exception, match="(?i)group.?authorization"):
        deleting.result(20)

    def kcoord_as(user: str, *args: str) -> subprocess.CompletedProcess[str]:
        config = tmp_path / f"{user}.properties"
        config.write_text(f"security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\n"
                          f"sasl.username={user}\nsasl.password={PASSWORDS[user]}\n")
        return subprocess.run(
            [sys.executable, "-m", "kcoord", *args, "--bootstrap-server", f"127.0.0.1:{sasl}",
             "--command-config", str(config)],
            capture_output=True, text=True, cwd=ROOT, timeout=60,
        )

    reset = ("offsets", "reset", "g", "--topic", "t", "--to-offset", "0", "--execute")
    refused = kcoord_as("bob", *reset)
    assert refused.returncode != 0 and "authorization" in (refused.stderr + refused.stdout).lower()
    assert committed(admin, "g") == {0: 5}
    allowed = kcoord_as("alice", *reset)
    assert allowed.returncode == 0, allowed.stderr
    assert committed(admin, "g") == {0: 0}
    (deleted,) = admin.delete_consumer_groups(["g"]).values()
    deleted.result(20)


def test_metadata_and_group_lists_show_only_what_may_be_described(
    broker: tuple[BrokerProcess, int],
) -> None:
    from confluent_kafka.admin import AclOperation

    b, sasl = broker
    admin = admin_of(sasl, "admin")
    for name in ("t", "hidden"):
        create_topic(sasl, name)
    for group in ("g", "hidden-group"):
        set_offsets(admin, group, 1)
    allow(admin, ("TOPIC", "t", "LITERAL", "READ", "ALLOW"), ("GROUP", "g", "LITERAL", "READ", "ALLOW"))
    alice = admin_of(sasl, "alice")
    assert set(alice.list_topics(timeout=20).topics) == {"t"}
    assert set(admin.list_topics(timeout=20).topics) >= {"t", "hidden"}
    listed = alice.list_consumer_groups().result(20)
    assert [g.group_id for g in listed.valid] == ["g"]
    (described,) = alice.describe_consumer_groups(["g"], include_authorized_operations=True).values()
    assert set(described.result(20).authorized_operations) == {AclOperation.READ, AclOperation.DESCRIBE}
    (hidden,) = alice.describe_consumer_groups(["hidden-group"]).values()
    with pytest.raises(Exception, match="(?i)group.?authorization"):
        hidden.result(20)

    # The web console asks for a login and shows the same.
    status, headers, _ = console(b, "/api/groups", None)
    assert status == 401 and headers["WWW-Authenticate"].startswith("Basic")
    assert console(b, "/", None)[0] == 401
    assert console(b, "/api/groups", "alice", "wrong")[0] == 401
    assert console(b, "/metrics", None)[0] == 200  # Prometheus scrapes without a login
    status, _, groups = console(b, "/api/groups", "alice")
    assert status == 200 and [g["group"] for g in groups["groups"]] == ["g"]
    assert console(b, "/api/groups/hidden-group", "alice")[0] == 404
    assert [t["topic"] for t in console(b, "/api/topics", "alice")[2]["topics"]] == ["t"]
    everything = console(b, "/api/groups", "admin")[2]
    assert sorted(g["group"] for g in everything["groups"]) == ["g", "hidden-group"]


def test_console_actions_need_the_rights_of_their_apis(
    broker: tuple[BrokerProcess, int], browser: Any  # noqa: F811
) -> None:
    """Logged in as alice (READ on group g and topic t, no DELETE): the console's delete is
    refused and changes nothing; reading messages (Fetch's READ) and a reset dry run pass.
    A CSRF token is only good for its own login."""
    from selenium.webdriver.support.ui import WebDriverWait

    b, sasl = broker
    admin = admin_of(sasl, "admin")
    create_topic(sasl, "t")
    set_offsets(admin, "g", 0)
    allow(admin, ("TOPIC", "t", "LITERAL", "READ", "ALLOW"), ("GROUP", "g", "LITERAL", "READ", "ALLOW"))
    browser.execute_cdp_cmd("Network.enable", {})
    browser.execute_cdp_cmd("Network.setExtraHTTPHeaders", {"headers": {"Authorization": basic("alice")}})
    browser.get(f"http://127.0.0.1:{b.metrics_port}/#/group/g")

    def shown(css: str) -> str:
        return str(browser.execute_script(
            "const e = document.querySelector(arguments[0]); return e ? e.textContent : '';", css))

    WebDriverWait(browser, 20, 0.1).until(lambda d: shown("#delete-group"), "the group's actions")
    browser.execute_script("document.getElementById('delete-group').click();"
                           "document.getElementById('delete-group-confirm').click();")
    WebDriverWait(browser, 20, 0.1).until(lambda d: "refused" in shown("#action-message"), "the refusal")
    assert "User:alice may not DELETE group 'g'" in shown("#action-message")
    assert committed(admin, "g") == {0: 0} and console(b, "/api/groups/g", "alice")[0] == 200
    browser.execute_script("document.getElementById('reset-preview').click();")  # READ suffices
    WebDriverWait(browser, 20, 0.1).until(lambda d: shown("#reset-plan"), "the dry run")
    assert console(b, "/api/messages?topic=t", "alice")[0] == 200
    assert console(b, "/api/messages?topic=t", "bob")[0] == 404  # bob may not even describe it

    # over HTTP: alice's token is refused for bob, and bob may not see the group
    token = console(b, "/api/session", "alice")[2]["csrf_token"]
    origin = f"http://127.0.0.1:{b.metrics_port}"
    headers = {"X-CSRF-Token": token, "Origin": origin}
    assert console(b, "/api/groups/g/delete", "alice", body={}, headers=headers)[0] == 403
    assert console(b, "/api/groups/g/delete", "bob", body={}, headers=headers)[0] == 403
    assert console(b, "/api/groups/g/delete", None, body={}, headers=headers)[0] == 401
    bob_token = console(b, "/api/session", "bob")[2]["csrf_token"]
    assert bob_token != token
    reset = {"to": "latest", "execute": True}
    assert console(b, "/api/groups/g/reset-offsets", "bob", body=reset,
                   headers={"X-CSRF-Token": bob_token, "Origin": origin})[0] == 404  # fmt: skip
    assert committed(admin, "g") == {0: 0}


def basic(user: str, password: str | None = None) -> str:
    token = base64.b64encode(f"{user}:{password or PASSWORDS[user]}".encode()).decode()
    return f"Basic {token}"


def console(
    b: BrokerProcess,
    path: str,
    user: str | None,
    password: str | None = None,
    body: Any = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, Any, Any]:
    """(status, headers, JSON body or None) of a console request, logged in as ``user``."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{b.metrics_port}{path}", data=data, headers=headers or {}
    )
    if user is not None:
        request.add_header("Authorization", basic(user, password))
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            body = r.read()
            is_json = r.headers.get("Content-Type", "").startswith("application/json")
            return r.status, r.headers, json.loads(body) if is_json else None
    except urllib.error.HTTPError as e:
        return e.code, e.headers, None


def test_the_plaintext_listener_is_anonymous_and_acls_apply_at_once(
    broker: tuple[BrokerProcess, int],
) -> None:
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        AdminClient,
        ResourcePatternType,
        ResourceType,
    )

    b, sasl = broker
    create_topic(sasl, "t")
    anonymous = AdminClient({"bootstrap.servers": b.bootstrap})
    assert "t" not in anonymous.list_topics(timeout=20).topics
    binding = AclBinding(ResourceType.TOPIC, "t", ResourcePatternType.LITERAL, "User:ANONYMOUS", "*",
                         AclOperation.DESCRIBE, AclPermissionType.ALLOW)
    admin = admin_of(sasl, "admin")
    for f in admin.create_acls([binding]).values():
        f.result(20)
    assert "t" in anonymous.list_topics(timeout=20).topics


def test_acls_and_users_survive_sigkill(broker: tuple[BrokerProcess, int]) -> None:
    from confluent_kafka.admin import (
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    b, sasl = broker
    admin = admin_of(sasl, "admin")
    create_topic(sasl, "t")
    allow(admin, ("TOPIC", "t", "LITERAL", "DESCRIBE", "ALLOW"))
    upsert = UserScramCredentialUpsertion(
        "carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"carol-secret"
    )
    for f in admin.alter_user_scram_credentials([upsert]).values():
        f.result(20)
    b.kill()
    b.restart()
    PASSWORDS["carol"] = "carol-secret"
    try:
        any_acl = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                   AclOperation.ANY, AclPermissionType.ANY)
        admin = admin_of(sasl, "admin")
        kept = wait_for(lambda: admin.describe_acls(any_acl).result(20), 30, what="ACLs after restart")
        assert [(a.name, a.principal, a.operation.name) for a in kept] == [("t", "User:alice", "DESCRIBE")]
        assert set(admin_of(sasl, "alice").list_topics(timeout=20).topics) == {"t"}
        assert admin_of(sasl, "carol").list_topics(timeout=20).topics == {}
    finally:
        del PASSWORDS["carol"]


def test_bad_acls_are_refused_one_by_one_and_without_an_authorizer_acls_are_disabled(
    broker: tuple[BrokerProcess, int], tmp_path: Path
) -> None:
    from .rawclient import RawClient

    b, sasl = broker
    good = dict(resource_type=2, resource_name="t", resource_pattern_type=3, principal="User:alice",
                host="*", operation=3, permission_type=3)
    bad = [
        dict(good, resource_type=99),  # no such resource type
        dict(good, resource_pattern_type=1),  # ANY is a filter, not a pattern
        dict(good, principal="alice"),  # no principal type
        dict(good, resource_type=4),  # the cluster resource is LITERAL kafka-cluster
        dict(good, operation=4, resource_type=3, resource_name="g"),  # WRITE is no group operation
    ]
    answer = raw(sasl, "admin", ApiKey.CREATE_ACLS, 3, creations=[*bad, good])
    codes = [r.error_code for r in answer.results]
    assert codes == [ErrorCode.invalid_request] * len(bad) + [ErrorCode.none]
    assert all(r.error_message for r in answer.results[:-1])
    listed = raw(sasl, "admin", ApiKey.DESCRIBE_ACLS, 3, resource_type_filter=1, resource_name_filter=None,
                 pattern_type_filter=1, principal_filter=None, host_filter=None, operation=1, permission_type=1)
    assert [(r.resource_name, len(r.acls)) for r in listed.resources] == [("t", 1)]
    unknown = raw(sasl, "admin", ApiKey.DESCRIBE_ACLS, 3, resource_type_filter=0, resource_name_filter=None,
                  pattern_type_filter=1, principal_filter=None, host_filter=None, operation=1, permission_type=1)
    assert unknown.error_code == ErrorCode.invalid_request

    plain = BrokerProcess(tmp_path / "plain").start()
    try:
        with RawClient(plain.port) as c:
            r = c.request(ApiKey.DESCRIBE_ACLS, 3, resource_type_filter=1, resource_name_filter=None,
                          pattern_type_filter=1, principal_filter=None, host_filter=None, operation=1,
                          permission_type=1)
        assert r.error_code == ErrorCode.security_disabled
    finally:
        plain.stop()


def test_txn_offset_commit_needs_write_on_the_transactional_id_and_read_on_group_and_topic(
    broker: tuple[BrokerProcess, int],
) -> None:
    _b, sasl = broker
    admin = admin_of(sasl, "admin")
    create_topic(sasl, "t")

    def txn_commit() -> int:
        r = raw(sasl, "alice", ApiKey.TXN_OFFSET_COMMIT, 3, transactional_id="tx", group_id="tg",
                producer_id=42, producer_epoch=0, generation_id=-1, member_id="",
                group_instance_id=None,
                topics=[dict(name="t", partitions=[dict(partition_index=0, committed_offset=7,
                                                        committed_leader_epoch=-1, committed_metadata="")])])
        return int(r.topics[0].partitions[0].error_code)

    assert txn_commit() == ErrorCode.transactional_id_authorization_failed
    allow(admin, ("TRANSACTIONAL_ID", "tx", "LITERAL", "WRITE", "ALLOW"))
    assert txn_commit() == ErrorCode.group_authorization_failed
    allow(admin, ("GROUP", "tg", "LITERAL", "READ", "ALLOW"))
    assert txn_commit() == ErrorCode.topic_authorization_failed
    allow(admin, ("TOPIC", "t", "LITERAL", "READ", "ALLOW"))
    assert txn_commit() == ErrorCode.none
    assert committed(admin, "tg") == {}  # pending until the transaction's marker


def test_a_produce_creates_no_topic_only_metadata_with_create_does(
    broker: tuple[BrokerProcess, int],
) -> None:
    """WRITE on a PREFIXED pattern once let a Produce create any topic under it, around the
    CREATE ACL. As in Kafka, a Produce creates no topic; Metadata's auto-creation needs CREATE."""
    from kcoord.protocol.record_encoding import build_batch

    _b, sasl = broker
    admin = admin_of(sasl, "admin")
    allow(admin, ("TOPIC", "p-", "PREFIXED", "WRITE", "ALLOW"))
    batch = build_batch([(None, b"v", (), 1_700_000_000_000)])

    def metadata(user: str, auto_create: bool) -> int:
        answer = raw(sasl, user, ApiKey.METADATA, 12, topics=[dict(name="p-new", topic_id=None)],
                     allow_auto_topic_creation=auto_create,
                     include_topic_authorized_operations=False)
        return int(answer.topics[0].error_code)

    answer = raw(sasl, "alice", ApiKey.PRODUCE, 9, transactional_id=None, acks=-1, timeout=5000,
                 topic_data=[dict(name="p-new", partition_data=[dict(index=0, records=batch)])])
    assert answer.responses[0].partition_responses[0].error_code == ErrorCode.unknown_topic_or_partition
    assert metadata("admin", auto_create=False) == ErrorCode.unknown_topic_or_partition
    assert metadata("alice", auto_create=True) == ErrorCode.topic_authorization_failed
    allow(admin, ("TOPIC", "p-", "PREFIXED", "CREATE", "ALLOW"))
    assert metadata("alice", auto_create=True) == ErrorCode.none


def test_transaction_apis_check_what_kafka_checks(broker: tuple[BrokerProcess, int]) -> None:
    """WriteTxnMarkers needs CLUSTER_ACTION on the cluster, DescribeProducers READ on the
    topic, a transactional Produce WRITE on its transactional id (issue 16)."""
    from kcoord.protocol.record_encoding import build_batch

    _b, sasl = broker
    admin = admin_of(sasl, "admin")
    create_topic(sasl, "t")
    allow(admin, ("TOPIC", "t", "LITERAL", "WRITE", "ALLOW"))
    pid = 77  # a made-up one, until alice's transactional id has its own

    def produce(user: str, txn_id: str) -> int:
        batch = build_batch([(None, b"v", (), 1_700_000_000_000)], producer_id=pid,
                            producer_epoch=0, base_sequence=0, is_transactional=True)
        answer = raw(sasl, user, ApiKey.PRODUCE, 9, transactional_id=txn_id, acks=-1,
                     timeout=5000,
                     topic_data=[dict(name="t", partition_data=[dict(index=0, records=batch)])])
        return int(answer.responses[0].partition_responses[0].error_code)

    def markers(user: str) -> int:
        answer = raw(sasl, user, ApiKey.WRITE_TXN_MARKERS, 1, markers=[dict(
            producer_id=pid, producer_epoch=0, transaction_result=False, coordinator_epoch=0,
            topics=[dict(name="t", partition_indexes=[0])])])
        return int(answer.markers[0].topics[0].partitions[0].error_code)

    def producers(user: str) -> tuple[int, list[int]]:
        answer = raw(sasl, user, ApiKey.DESCRIBE_PRODUCERS, 0,
                     topics=[dict(name="t", partition_indexes=[0])])
        part = answer.topics[0].partitions[0]
        return int(part.error_code), [int(p.producer_id) for p in part.active_producers]

    assert produce("alice", "tx-a") == ErrorCode.transactional_id_authorization_failed
    allow(admin, ("TRANSACTIONAL_ID", "tx-a", "LITERAL", "WRITE", "ALLOW"))
    # Allowed, but a made-up producer id is in no transaction of tx-a (KIP-890).
    assert produce("alice", "tx-a") == ErrorCode.invalid_producer_id_mapping
    init = once_coordinator_exists(lambda: raw(
        sasl, "alice", ApiKey.INIT_PRODUCER_ID, 4, transactional_id="tx-a",
        transaction_timeout=60_000, producer_id=-1, producer_epoch=-1))
    assert (init.error_code, init.producer_epoch) == (ErrorCode.none, 0)
    pid = int(init.producer_id)
    added = raw(sasl, "alice", ApiKey.ADD_PARTITIONS_TO_TXN, 3, v3_and_below_transactional_id="tx-a",
                v3_and_below_producer_id=pid, v3_and_below_producer_epoch=0,
                v3_and_below_topics=[dict(name="t", partitions=[0])])
    assert added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == 0
    assert produce("alice", "tx-a") == ErrorCode.none
    # AddPartitionsToTxn v4 is between brokers: CLUSTER_ACTION on the cluster, as in Kafka.
    for user, top, codes in (("alice", ErrorCode.cluster_authorization_failed, []),
                             ("admin", ErrorCode.none, [ErrorCode.none])):
        verified = raw(sasl, user, ApiKey.ADD_PARTITIONS_TO_TXN, 4, transactions=[dict(
            transactional_id="tx-a", producer_id=pid, producer_epoch=0, verify_only=True,
            topics=[dict(name="t", partitions=[0])])])
        assert verified.error_code == top
        assert [p.partition_error_code for r in verified.results_by_transaction
                for t in r.topic_results for p in t.results_by_partition] == codes
    assert markers("alice") == ErrorCode.cluster_authorization_failed
    assert producers("alice")[0] == ErrorCode.topic_authorization_failed
    assert producers("admin") == (ErrorCode.none, [pid])
    assert markers("admin") == ErrorCode.none


def test_share_state_apis_need_cluster_action(broker: tuple[BrokerProcess, int]) -> None:
    """The share coordinator's APIs (83-87) are between brokers: CLUSTER_ACTION on the
    cluster, as Kafka checks; refused, every partition answers CLUSTER_AUTHORIZATION_FAILED."""
    import uuid

    _b, sasl = broker
    topic = dict(topic_id=uuid.UUID(int=5), partitions=[dict(partition=0, leader_epoch=-1)])
    calls: list[tuple[int, int, dict[str, Any]]] = [
        (ApiKey.INITIALIZE_SHARE_GROUP_STATE, 0, dict(topics=[dict(
            topic_id=uuid.UUID(int=5), partitions=[dict(partition=0, state_epoch=0, start_offset=3)]
        )])),
        (ApiKey.WRITE_SHARE_GROUP_STATE, 1, dict(topics=[dict(
            topic_id=uuid.UUID(int=5), partitions=[dict(partition=0, state_epoch=0, leader_epoch=0,
                                                       start_offset=4, state_batches=[])]
        )])),
        (ApiKey.READ_SHARE_GROUP_STATE, 0, dict(topics=[topic])),
        (ApiKey.READ_SHARE_GROUP_STATE_SUMMARY, 1, dict(topics=[topic])),
        (ApiKey.DELETE_SHARE_GROUP_STATE, 0, dict(topics=[dict(
            topic_id=uuid.UUID(int=5), partitions=[dict(partition=0)]
        )])),
    ]

    def answers(user: str) -> list[tuple[int, int]]:
        """(error code, start offset or 0) of each call in turn."""
        out = []
        for api_key, version, fields in calls:
            p = raw(sasl, user, api_key, version, group_id="g", **fields).results[0].partitions[0]
            out.append((int(p.error_code), int(getattr(p, "start_offset", 0))))
        return out

    refused = ErrorCode.cluster_authorization_failed
    assert answers("alice") == [(refused, 0), (refused, 0), (refused, -1), (refused, -1), (refused, 0)]
    # The first allowed call creates __share_group_state (in a worker thread); until it exists
    # the calls answer COORDINATOR_NOT_AVAILABLE, as Kafka's share coordinator does then.
    once_coordinator_exists(lambda: raw(
        sasl, "admin", ApiKey.READ_SHARE_GROUP_STATE, 0, group_id="g", topics=[topic]
    ).results[0].partitions[0])
    assert answers("admin") == [(0, 0), (0, 0), (0, 4), (0, 4), (0, 0)]
    allow(admin_of(sasl, "admin"), ("BROKER", "kafka-cluster", "LITERAL", "CLUSTER_ACTION", "ALLOW"))
    assert answers("alice") == [(0, 0), (0, 0), (0, 4), (0, 4), (0, 0)]


def test_offsets_by_topic_id_are_authorised_by_the_topic_name(broker: tuple[BrokerProcess, int]) -> None:
    """OffsetCommit/OffsetFetch v10 name topics by id; ACLs name topics: the id is resolved
    first, then the name authorised. An id no topic has is UNKNOWN_TOPIC_ID whatever the ACLs."""
    _b, sasl = broker
    admin = admin_of(sasl, "admin")
    create_topic(sasl, "t")
    set_offsets(admin, "g", 5)
    allow(admin, ("GROUP", "g", "LITERAL", "READ", "ALLOW"))
    (topic,) = raw(sasl, "admin", ApiKey.METADATA, 12, topics=[dict(name="t", topic_id=None)],
                   allow_auto_topic_creation=False, include_topic_authorized_operations=False).topics
    nowhere = uuid.UUID(int=77)

    def commit_v10() -> dict[uuid.UUID, int]:
        r = raw(sasl, "alice", ApiKey.OFFSET_COMMIT, 10, group_id="g", member_id="",
                topics=[dict(topic_id=tid, partitions=[dict(partition_index=0, committed_offset=9,
                                                            committed_metadata="")])
                        for tid in (topic.topic_id, nowhere)])
        return {t.topic_id: t.partitions[0].error_code for t in r.topics}

    def fetch_v10(by_id: bool) -> dict[uuid.UUID, tuple[int, int]]:
        topics = ([dict(topic_id=tid, partition_indexes=[0]) for tid in (topic.topic_id, nowhere)]
                  if by_id else None)
        r = raw(sasl, "alice", ApiKey.OFFSET_FETCH, 10, require_stable=False,
                groups=[dict(group_id="g", member_id=None, topics=topics)])
        assert r.groups[0].error_code == 0
        return {t.topic_id: (t.partitions[0].committed_offset, t.partitions[0].error_code)
                for t in r.groups[0].topics}

    assert commit_v10() == {topic.topic_id: ErrorCode.topic_authorization_failed,
                            nowhere: ErrorCode.unknown_topic_id}
    assert fetch_v10(by_id=True) == {topic.topic_id: (-1, ErrorCode.topic_authorization_failed),
                                     nowhere: (-1, ErrorCode.unknown_topic_id)}
    assert fetch_v10(by_id=False) == {}  # the topic it may not describe is left out
    allow(admin, ("TOPIC", "t", "LITERAL", "READ", "ALLOW"))
    assert commit_v10() == {topic.topic_id: ErrorCode.none, nowhere: ErrorCode.unknown_topic_id}
    assert fetch_v10(by_id=False) == {topic.topic_id: (9, ErrorCode.none)}
    assert committed(admin, "g") == {0: 9}
