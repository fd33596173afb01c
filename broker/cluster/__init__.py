"""Cluster mode: several nodes over one PostgreSQL (``../shared/DESIGN.md``, "Cluster mode").

``view`` is what this node knows of the cluster (the live nodes and every partition's leader),
what Metadata and FindCoordinator answer from; ``placement`` where each partition should be led;
``member`` the node's session and the loop that takes, hands over and drops partitions;
``led_engine`` the storage engine as the topic registry sees it in a cluster (only led
partitions open); ``identity`` the data directory's lock and the incarnation it last ran.
"""
