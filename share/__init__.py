"""Share groups' record delivery (KIP-932), sans-IO: the share partition, which tracks which
records of one topic partition are available, acquired, acknowledged or archived for one share
group, and the share coordinator's durable state of it (``__share_group_state``).

- :mod:`share.model`: the types these modules and the broker exchange.
- :mod:`share.partition`: :class:`~share.partition.SharePartition`, the state machine of one
  (group, topic, partition): acquisition with locks, acknowledgement, release, lock expiry,
  delivery counts, the start offset; what it must persist after each change.
- :mod:`share.state_records`: ShareSnapshot/ShareUpdate keys and values of
  ``__share_group_state``, bit-exact with Kafka's.
- :mod:`share.state_shard`: :class:`~share.state_shard.ShareStateShard`, the share coordinator
  of one ``__share_group_state`` partition: applies writes, decides snapshot or update, replays.

The share group itself (membership, assignment, records 9-15) is a group type of the group
coordinator: :mod:`coordinator.share`. The I/O (logs, sessions, ShareFetch) is broker/share/.
"""
