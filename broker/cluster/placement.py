"""Where each partition should be led: one placement every node computes the same way.

Given the live node ids, :func:`placement` names a node for every partition. It depends on
nothing but its inputs (no clock, no order of arrival), so nodes that see the same live nodes
agree without talking to each other; while their views differ for a moment, the database's
take and release (``storage.postgres.cluster``) keep leadership single, and the views meet at
the next heartbeat.

The rule is rendezvous hashing with bounded loads, topic by topic: each partition ranks the
nodes by a hash of (topic, partition, node) and goes to the first-ranked node that still has room,
the room being ``partitions // nodes`` each and one more for ``partitions % nodes`` of them. Every
topic is spread evenly (``__consumer_offsets``' 50 shards 17/17/16 over three nodes), and a node
joining or leaving moves few partitions.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence


def _rank(topic: str, partition: int, node: int) -> int:
    digest = hashlib.blake2b(f"{topic}\0{partition}\0{node}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def placement(
    partitions: Iterable[tuple[str, int]], nodes: Sequence[int]
) -> dict[tuple[str, int], int]:
    """The node each (topic, partition) should be led by; empty without nodes."""
    if not nodes:
        return {}
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    placed: dict[tuple[str, int], int] = {}
    for topic, indexes in by_topic.items():
        # Every node gets ``low`` of the topic's partitions, and ``extra`` of them one more.
        low, extra = divmod(len(indexes), len(nodes))
        load = dict.fromkeys(nodes, 0)
        for partition in sorted(indexes):
            ranked = sorted(nodes, key=lambda n: (-_rank(topic, partition, n), n))
            for node in ranked:
                if load[node] < low:
                    break
                if load[node] == low and extra > 0:
                    extra -= 1
                    break
            load[node] += 1
            placed[(topic, partition)] = node
    return placed
