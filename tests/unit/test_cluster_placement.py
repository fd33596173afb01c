"""broker/cluster/placement.py and view.py: one placement every node computes alike, spread
evenly, moving little when a node joins or leaves; the view Metadata answers from."""

from __future__ import annotations

import itertools

from kcoord.broker.cluster.placement import placement
from kcoord.broker.cluster.view import ClusterView, NodeInfo
from kcoord.storage.engine import LeaderFence

OFFSETS = [("__consumer_offsets", p) for p in range(50)]


def test_every_partition_gets_a_live_node_and_each_topic_is_spread_evenly() -> None:
    parts = OFFSETS + [("orders", p) for p in range(7)]
    placed = placement(parts, [1, 2, 3])
    assert set(placed) == set(parts)
    for topic, count in (("__consumer_offsets", 50), ("orders", 7)):
        loads = [sum(1 for (t, _), n in placed.items() if t == topic and n == node) for node in (1, 2, 3)]
        assert max(loads) - min(loads) <= 1, (topic, loads)
        assert sum(loads) == count


def test_the_placement_depends_only_on_its_inputs() -> None:
    """Nodes agree without talking: any order of partitions and nodes gives the same answer."""
    expected = placement(OFFSETS, [1, 2, 3])
    for nodes in itertools.permutations([1, 2, 3]):
        assert placement(list(reversed(OFFSETS)), list(nodes)) == expected


def test_a_node_joining_or_leaving_moves_few_partitions() -> None:
    two = placement(OFFSETS, [1, 2])
    three = placement(OFFSETS, [1, 2, 3])
    moved_away_from_old = sum(1 for k in OFFSETS if two[k] != three[k] and three[k] != 3)
    # Mostly the new node's share moves to it; bounded loads move a few more, never most.
    assert moved_away_from_old <= 8, moved_away_from_old
    assert sum(1 for k in OFFSETS if three[k] == 3) in (16, 17)
    after_loss = placement(OFFSETS, [1, 3])
    kept = sum(1 for k in OFFSETS if three[k] in (1, 3) and after_loss[k] == three[k])
    assert kept >= 28  # of the 33 that node 1 and node 3 led


def test_no_nodes_no_placement() -> None:
    assert placement(OFFSETS, []) == {}


def test_the_view_names_live_leaders_only() -> None:
    view = ClusterView(1, (("PLAINTEXT", "h1", 9092),), None, clustered=True)
    view.update(
        [NodeInfo(1, (("PLAINTEXT", "h1", 9092),), None), NodeInfo(2, (("PLAINTEXT", "h2", 9093),), "r2")],
        [(("t", 0), LeaderFence(2, 4)), (("t", 1), LeaderFence(3, 1))],
    )
    assert view.leader("t", 0) == LeaderFence(2, 4)
    assert view.leader("t", 1) is None  # node 3 is not alive
    assert view.leader("t", 2) is None
    assert view.nodes[2].address("PLAINTEXT") == ("h2", 9093)
    assert view.nodes[2].address("SSL") is None
    assert view.controller_id == 1
    single = ClusterView(7, (), None, clustered=False)
    assert single.leader("anything", 3) == LeaderFence(7, 0)
