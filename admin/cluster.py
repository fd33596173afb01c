"""``kcoord cluster describe``: the nodes of the cluster and what each one leads.

An ordinary Kafka client (Metadata through librdkafka's AdminClient, internal topics included),
so it describes Apache Kafka too. One row per live node: its address and rack, whether it is the
controller Metadata names (kcoord: the lowest live node id; PostgreSQL decides), how many
partitions it leads, and how many of them are group coordinator shards (``__consumer_offsets``)
and transaction coordinator shards (``__transaction_state``). ``--partitions`` lists every
partition with its leader; a partition without one shows ``-``.
"""

from __future__ import annotations

import argparse
from typing import Any

from .client import Admin, AdminError
from .output import print_json, print_table

_GROUP_SHARDS = "__consumer_offsets"
_TXN_SHARDS = "__transaction_state"


def add_cluster_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    cluster = sub.add_parser("cluster", help="the nodes and what each leads")
    csub = cluster.add_subparsers(dest="action", required=True)
    p = csub.add_parser("describe", parents=[common], help="nodes, leaders and coordinators")
    p.add_argument("--partitions", action="store_true", help="list every partition's leader")


def cluster_describe(admin: Admin, args: argparse.Namespace) -> int:
    try:
        md = admin.client.list_topics(timeout=admin.timeout)
    except Exception as e:  # librdkafka's KafkaException: no broker answered
        raise AdminError(f"reading the cluster's metadata: {e}") from None
    led: dict[int, dict[str, int]] = {
        n: {"partitions": 0, _GROUP_SHARDS: 0, _TXN_SHARDS: 0} for n in md.brokers
    }
    partitions = []
    for name in sorted(md.topics):
        for index, pm in sorted(md.topics[name].partitions.items()):
            leader = pm.leader if pm.leader >= 0 else None
            partitions.append({"topic": name, "partition": index, "leader": leader})
            if leader in led:
                led[leader]["partitions"] += 1
                if name in (_GROUP_SHARDS, _TXN_SHARDS):
                    led[leader][name] += 1
    nodes = [
        {
            "node": n,
            "host": b.host,
            "port": b.port,
            "controller": n == md.controller_id,
            "partitions": led[n]["partitions"],
            "group_coordinator_shards": led[n][_GROUP_SHARDS],
            "transaction_coordinator_shards": led[n][_TXN_SHARDS],
        }
        for n, b in sorted(md.brokers.items())
    ]
    if args.json:
        print_json(
            {
                "cluster_id": md.cluster_id,
                "nodes": nodes,
                "partitions": partitions if args.partitions else None,
            }
        )
        return 0
    print(f"cluster {md.cluster_id}: {len(nodes)} live node(s)")
    print_table(
        ["NODE", "HOST", "PORT", "CONTROLLER", "PARTITIONS", "GROUP-SHARDS", "TXN-SHARDS"],
        [
            [
                r["node"],
                r["host"],
                r["port"],
                "yes" if r["controller"] else "",
                r["partitions"],
                r["group_coordinator_shards"],
                r["transaction_coordinator_shards"],
            ]
            for r in nodes
        ],
    )
    if args.partitions:
        print()
        print_table(
            ["TOPIC", "PARTITION", "LEADER"],
            [[p["topic"], p["partition"], p["leader"]] for p in partitions],
        )
    return 0
