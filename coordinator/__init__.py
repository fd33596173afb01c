"""The group coordinator, sans-IO: one shard per ``__consumer_offsets`` partition.

The pieces::

    broker/groups/runtime.py  (I/O: appends records, fsyncs, delivers replies, arms timers)
            |  request + handle + now      ^  Output: records, replies, failure actions
            v                              |
    shard.GroupShard ---- routes: is it this shard's group? loaded? which type? then to its manager
      |-- output.Operation    the Output of the operation under way; every manager writes into it
      |-- timers.Timers       one lazy deadline heap; each manager registers its timer kinds
      |-- classic.manager.ClassicGroupManager    classic groups (JoinGroup/SyncGroup/Heartbeat/
      |     |-- classic.groups.ClassicGroups     LeaveGroup, List/Describe, the group side of
      |     |-- classic.join.JoinGroupHandler    DeleteGroups), their records and timers
      |     `-- classic.group.ClassicGroup       the model (states, members, protocol vote)
      |-- consumer.manager.ConsumerGroupManager  KIP-848 consumer groups (ConsumerGroupHeartbeat,
      |     |-- consumer.group.ConsumerGroup     its timers, ConsumerGroupDescribe): the model,
      |     |-- consumer.heartbeat_checks        Kafka's checks of a heartbeat,
      |     |-- consumer.member                  a member and its reconciliation,
      |     |-- consumer.group_epoch             the group epoch and what moves it,
      |     |-- consumer.target, .assignors      the target assignment and the server assignors,
      |     `-- consumer.persistence, .records   records 3-8 and 16 and their replay
      `-- offsets.OffsetManager                  committed offsets: commit, fetch, delete,
                                                 retention; sees groups of both types through
                                                 offset_groups.ShardOffsetGroups (the interface
                                                 it asks of them: offset_interface)

What flows: the runtime calls one method of the shard per request (or timer round, or failed
append) with an opaque handle and the time; the shard checks routing and hands the request to
its manager, which changes state at once and writes records and replies into the shared
:class:`output.Operation`; the shard returns the resulting :class:`output.Output`. If the
records cannot be appended, the runtime hands the Output back (``GroupShard.append_failed``)
and each failure action goes to the manager that attached it. At start-up the runtime replays
the partition's newest record per key (``loading.LatestRecords``) into ``GroupShard.replay``,
which routes each record by its key's type (``schemas``: Kafka's key/value layouts) to its
manager, then calls ``finish_loading``.

How the group types share a shard: each type is a package (``classic/``, ``consumer/``) with its
model and manager, its record types routed to it by ``GroupShard.replay``, its timer kinds
registered in the shared ``Timers``, and its groups offered to the offsets manager through
``offset_interface.OffsetGroups`` (a consumer group answers ``validate_offset_commit`` with its
member epoch instead of a generation). The group id space is shared: the shard is where a
request for a group of the other type is refused, or an Empty group of the other type converted.

Other modules: ``config`` (GroupConfig, Kafka's setting names), ``messages`` (requests and
responses independent of the wire version), ``subscription`` (topics of a consumer-protocol
subscription), ``write_size`` (how big a write will be before its records exist), ``loading``,
``deletion`` (DeleteGroups' undo when its tombstones cannot be appended), ``rebalances`` (the
event of each completed rebalance, both types, and the bounded per-group history the runtime
keeps of them), ``rebalance_replay`` (that history rebuilt from a partition's records at
start-up), ``shard_views`` (the shard's read-only accessors, a base of ``GroupShard``),
``append_failures`` (each failure action of an Output that could not be appended, handed back
to its owner).
"""
