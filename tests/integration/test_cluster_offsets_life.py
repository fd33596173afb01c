"""Offsets of a deleted topic in cluster mode: the node that deletes the topic is not the
coordinator of most groups; every node drops the offsets of the ``__consumer_offsets``
partitions it leads (Kafka's onPartitionsDeleted runs on each broker's own shards)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from kcoord.protocol.apis import ApiKey

from .harness import wait_for
from .rawclient import RawClient
from .test_admin_cli import commit
from .test_cluster import Cluster, coordinator_of, create_topic, with_topic


@pytest.fixture
def cluster(tmp_path: Path, postgres_url: str) -> Iterator[Cluster]:
    c = Cluster(tmp_path, postgres_url)
    try:
        yield c
    finally:
        c.stop()


def _fetched(cluster: Cluster, node: int, group: str, topic: str) -> dict[int, int]:
    with RawClient(cluster.nodes[node].port) as c:
        r = c.request(ApiKey.OFFSET_FETCH, 8, require_stable=False, groups=[dict(
            group_id=group, topics=[dict(name=topic, partition_indexes=[0, 1])])])
    (g,) = r.groups
    assert g.error_code == 0
    return {p.partition_index: p.committed_offset for t in g.topics for p in t.partitions}


def test_every_coordinator_drops_the_offsets_of_a_topic_deleted_elsewhere(
    cluster: Cluster,
) -> None:
    with_topic(cluster, "gone", 2)
    coordinators: dict[int, str] = {}  # a group coordinated by each node
    for i in range(30):
        group = f"cl-life-{i}"
        coordinators.setdefault(coordinator_of(cluster, group), group)
        if len(coordinators) == 3:
            break
    assert len(coordinators) == 3
    for node, group in coordinators.items():
        commit(cluster.bootstrap, group, {("gone", 0): 5 + node, ("gone", 1): 6 + node})
        assert _fetched(cluster, node, group, "gone") == {0: 5 + node, 1: 6 + node}
    deleter = cluster.nodes[1]
    admin = AdminClient({"bootstrap.servers": deleter.bootstrap})
    admin.delete_topics(["gone"], operation_timeout=20)["gone"].result(40)
    for node, group in coordinators.items():
        wait_for(lambda n=node, g=group: _fetched(cluster, n, g, "gone") == {0: -1, 1: -1}, 30,
                 what=f"node {node} dropped {group}'s offsets of the deleted topic")  # fmt: skip

    def created_again() -> bool:
        try:
            create_topic(cluster, "gone", 2)
        except Exception as e:  # the name is free once every node has seen the deletion
            if "exist" not in str(e).lower():
                raise
            return False
        return True

    wait_for(created_again, 30, what="gone created again")
    for node, group in coordinators.items():
        assert _fetched(cluster, node, group, "gone") == {0: -1, 1: -1}
