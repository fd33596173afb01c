"""Classic consumer groups (the JoinGroup/SyncGroup/Heartbeat/LeaveGroup protocol).

``group`` (the model: a group, its members and states), ``groups`` (the shard's classic groups
and their rebalance machinery and timers), ``join`` (JoinGroup), ``manager`` (the rest of the
protocol, loading, and the face the shard and the offsets manager see).
"""
