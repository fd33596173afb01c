"""Cluster mode: two nodes changing one shared document at the same moment lose nothing (issue 28).

ACLs and topic configs are each one document in PostgreSQL. Two nodes over the test run's
PostgreSQL receive, at once (one admin client thread per node), many CreateAcls (different
bindings) and IncrementalAlterConfigs (different keys of one topic); afterwards every node
describes every binding and every key's last value.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from .harness import BrokerProcess, wait_for
from .test_cluster import Cluster

ROUNDS = 20
TOPIC = "shared-configs"
KEYS = {
    # each node changes keys of its own, again and again (so the writes overlap)
    1: ("retention.ms", "segment.ms", "delete.retention.ms"),
    2: ("retention.bytes", "max.message.bytes", "message.timestamp.after.max.ms"),
}


def value_of(node: int, key: str, round_: int) -> str:
    return str(100_000 * node + 1000 * KEYS[node].index(key) + round_ + 1)


@pytest.fixture
def two_nodes(tmp_path: Path, postgres_url: str) -> Iterator[Cluster]:
    cluster = Cluster(tmp_path, postgres_url, {
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:ANONYMOUS",  # the PLAINTEXT listener's principal (and the nodes')
    })
    try:
        for n in KEYS:
            cluster.start(n)
        yield cluster
    finally:
        cluster.stop()


def binding(node: int, i: int) -> AclBinding:
    return AclBinding(ResourceType.TOPIC, f"from-{node}-{i}", ResourcePatternType.LITERAL,
                      "User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW)


def change(admin: AdminClient, node: int, errors: list[BaseException]) -> None:
    """Round after round: one new ACL, then one of this node's keys set anew."""
    try:
        for i in range(ROUNDS):
            for f in admin.create_acls([binding(node, i)]).values():
                f.result(20)
            key = KEYS[node][i % len(KEYS[node])]
            resource = ConfigResource(ResourceType.TOPIC, TOPIC, incremental_configs=[
                ConfigEntry(key, value_of(node, key, i),
                            incremental_operation=AlterConfigOpType.SET)])
            admin.incremental_alter_configs([resource])[resource].result(20)
    except BaseException as e:  # (reported by the test's thread)
        errors.append(e)


def expected_configs() -> dict[str, str]:
    last: dict[str, str] = {}
    for node, keys in KEYS.items():
        for i in range(ROUNDS):
            key = keys[i % len(keys)]
            last[key] = value_of(node, key, i)
    return last


def described(b: BrokerProcess) -> tuple[set[str], dict[str, str]]:
    """The ACLs' resource names and the topic's overrides, as node ``b`` describes them."""
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    everything = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                  AclOperation.ANY, AclPermissionType.ANY)
    acls = {a.name for a in admin.describe_acls(everything).result(10)}
    resource = ConfigResource(ResourceType.TOPIC, TOPIC)
    entries = admin.describe_configs([resource])[resource].result(10)
    return acls, {k: str(e.value) for k, e in entries.items() if k in expected_configs()}


def test_concurrent_changes_of_one_document_on_two_nodes_are_all_kept(two_nodes: Cluster) -> None:
    nodes = [two_nodes.nodes[n] for n in KEYS]
    admins = {n: AdminClient({"bootstrap.servers": two_nodes.nodes[n].bootstrap}) for n in KEYS}
    for f in admins[1].create_topics([NewTopic(TOPIC, 1, 1)]).values():
        f.result(20)
    for b in nodes:  # both nodes know the topic before they are asked to change it
        wait_for(lambda b=b: TOPIC in AdminClient({"bootstrap.servers": b.bootstrap})
                 .list_topics(timeout=10).topics, 20, 0.1, f"{TOPIC} on {b.bootstrap}")

    errors: list[BaseException] = []
    threads = [threading.Thread(target=change, args=(admins[n], n, errors)) for n in KEYS]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    assert not any(t.is_alive() for t in threads)

    # Every change was acknowledged; each node takes the other's at its next member round.
    wanted = ({binding(n, i).name for n in KEYS for i in range(ROUNDS)}, expected_configs())
    for b in nodes:
        try:
            wait_for(lambda b=b: described(b) == wanted, 10, 0.2, f"every change on {b.bootstrap}")
        except AssertionError:
            acls, configs = described(b)
            missing = sorted(wanted[0] - acls), {
                k: (configs.get(k), v) for k, v in wanted[1].items() if configs.get(k) != v}
            raise AssertionError(f"{b.bootstrap} lacks (has, wanted): {missing}") from None
