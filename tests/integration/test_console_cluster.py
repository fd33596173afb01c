"""The console's cluster page (``/api/cluster``, ``#/cluster``) over three nodes on the
PostgreSQL the test run starts (issue 28).

One cluster for the module, with a classic group of confluent-kafka consumers coordinated by each
node and a KIP-848 group. From any node the JSON lists every node (alive, its console's URL,
a recent heartbeat, its share of partitions and coordinator shards) and every group with the
node FindCoordinator names. Headless Chromium renders the page and follows a group's link to
its coordinator's console. Last, a node that stops answering (SIGSTOP) is shown unreachable
within the page's bound, and once SIGKILLed and its session over, dead, its group coordinated
elsewhere.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest

from kcoord.broker.console.cluster_views import PEER_TIMEOUT_S
from kcoord.protocol.javahash import partition_for

from .browser import browser  # noqa: F401 - the fixture
from .groups import ConfluentMember, wait_balanced
from .harness import wait_for
from .test_cluster import NODES, SESSION_MS, Cluster, coordinator_of, create_topic, started
from .test_console_api import api
from .test_console_browser import hrefs, texts, until

TOPIC = "orders"
SHARDS = 6  # offsets.topic.num.partitions of test_cluster's nodes


class Scene:
    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.members: list[ConfluentMember] = []
        self.classic: dict[int, str] = {}  # a group coordinated by each node

    def console(self, node_id: int) -> str:
        return f"http://127.0.0.1:{self.cluster.nodes[node_id].metrics_port}/"

    def page(self, node_id: int) -> dict[str, Any]:
        status, body = api(self.cluster.nodes[node_id], "/api/cluster")
        assert status == 200, body
        return body  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def scene(tmp_path_factory: pytest.TempPathFactory, postgres: Any) -> Iterator[Scene]:
    cluster = Cluster(tmp_path_factory.mktemp("console-cluster"), postgres.database())
    s = Scene(cluster)
    try:
        create_topic(started(cluster), TOPIC, 3)
        shards = wait_for(
            lambda: cluster.settled("__consumer_offsets", SHARDS, 3), 30, 0.1, "shards"
        )
        assert isinstance(shards, dict)
        for i in range(100):
            s.classic.setdefault(shards[partition_for(f"shop-{i}", SHARDS)], f"shop-{i}")
        assert sorted(s.classic) == list(NODES)
        bootstrap = cluster.bootstrap
        s.members = [ConfluentMember(bootstrap, g, TOPIC, g) for g in s.classic.values()]
        s.members.append(
            ConfluentMember(bootstrap, "kip", TOPIC, "kip", "uniform", protocol="consumer")
        )
        for m in s.members:
            wait_balanced([m], 3)
        yield s
    finally:
        for m in s.members:
            m.stop()
        cluster.stop()


def groups_by_id(page: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {g["group"]: g for g in page["groups"]}


def test_every_node_shows_every_node_and_every_group_with_its_coordinator(scene: Scene) -> None:
    expected = {g: coordinator_of(scene.cluster, g) for g in [*scene.classic.values(), "kip"]}
    assert {expected[g] for g in scene.classic.values()} == set(NODES)
    for node_id in NODES:
        page = scene.page(node_id)
        assert page["clustered"] and page["node_id"] == node_id and page["unreachable"] == []
        nodes = {n["node_id"]: n for n in page["nodes"]}
        assert sorted(nodes) == list(NODES) and all(n["alive"] for n in nodes.values())
        for n in nodes.values():
            assert n["console"] == scene.console(n["node_id"])
            assert n["port"] == scene.cluster.nodes[n["node_id"]].port
            assert n["this"] == (n["node_id"] == node_id)
            assert 0 <= n["heartbeat_age_ms"] < SESSION_MS
            assert n["group_shards"] == SHARDS // len(NODES)
            assert n["partitions"] >= n["group_shards"] + n["transaction_shards"]
        assert nodes[node_id]["figures"]["led"] == nodes[node_id]["partitions"]
        orders = [e for e in page["leadership"] if e["topic"] == TOPIC]
        assert sorted(p for e in orders for p, _ in e["partitions"]) == [0, 1, 2]
        assert all(e["node_id"] in NODES and e["count"] == 1 for e in orders)
        listed = groups_by_id(page)
        assert set(listed) == set(expected), listed
        for group, coordinator in expected.items():
            row = listed[group]
            assert row["coordinator"] == coordinator, (node_id, row)
            assert row["shard"] == partition_for(group, SHARDS)
        assert {listed[g]["type"] for g in scene.classic.values()} == {"classic"}
        assert listed["kip"]["type"] == "consumer"
        assert sum(n["groups"] for n in nodes.values()) == len(expected)


def test_the_page_renders_the_nodes_and_links_a_group_to_its_coordinators_console(
    scene: Scene,
    browser: Any,  # noqa: F811
) -> None:
    browser.get(scene.console(1) + "#/cluster")
    until(browser, "three live nodes", lambda d: len(texts(d, "#nodes-table tr.alive")) == 3)
    assert texts(browser, "#nodes-table td.node-state") == ["alive"] * 3
    assert hrefs(browser, "#nodes-table a.console") == [scene.console(n) for n in NODES]
    assert (
        texts(browser, "#cluster-summary")
        and "3 live node(s)" in texts(browser, "#cluster-summary")[0]
    )
    until(
        browser, "the groups", lambda d: len(texts(d, "#cluster-groups tbody tr")) == len(NODES) + 1
    )
    shown = browser.execute_script("return document.getElementById('view').innerText;")
    assert "null" not in shown and "undefined" not in shown  # every empty value drawn as such
    elsewhere = scene.classic[2]
    link = f'#cluster-groups tr[data-group="{elsewhere}"] a'
    assert hrefs(browser, link) == [scene.console(2) + "#/group/" + elsewhere]
    assert hrefs(browser, f'#cluster-groups tr[data-group="{scene.classic[1]}"] a') == [
        scene.console(1) + "#/group/" + scene.classic[1]
    ]
    browser.get(hrefs(browser, link)[0])  # node 2's console, its group page
    until(browser, "the group page on node 2", lambda d: texts(d, "#group-name") == [elsewhere])


def test_a_stopped_node_is_unreachable_then_dead_and_its_group_moves(scene: Scene) -> None:
    cluster = scene.cluster
    victim = cluster.nodes[3]
    moved = scene.classic[3]
    os.kill(victim.pid, signal.SIGSTOP)
    cluster.paused.add(3)
    started_at = time.monotonic()
    page = scene.page(1)
    assert time.monotonic() - started_at < PEER_TIMEOUT_S + 3  # bounded: never hangs
    assert [u["node_id"] for u in page["unreachable"]] == [3]
    assert moved not in groups_by_id(page)
    victim.kill()
    cluster.paused.discard(3)

    def dead() -> dict[str, Any] | None:
        page = scene.page(1)
        nodes = {n["node_id"]: n for n in page["nodes"]}
        taken = sum(n["group_shards"] for n in nodes.values() if n["alive"])
        if nodes[3]["alive"] or moved not in groups_by_id(page) or taken < SHARDS:
            return None
        return page

    after = wait_for(dead, SESSION_MS / 1000 + 15, 0.2, "node 3 dead, its shards and group taken")
    assert isinstance(after, dict)
    nodes = {n["node_id"]: n for n in after["nodes"]}
    assert nodes[3]["heartbeat_age_ms"] >= SESSION_MS and nodes[3]["partitions"] == 0
    assert after["unreachable"] == []
    assert groups_by_id(after)[moved]["coordinator"] == coordinator_of(cluster, moved) != 3
