"""The group coordinator, sans-IO: one shard per ``__consumer_offsets`` partition.

The pieces::

    broker/group_runtime.py  (I/O: appends records, fsyncs, delivers replies, arms timers)
            |  request + handle + now      ^  Output: records, replies, failure actions
            v                              |
    shard.GroupShard ---- routes: is it this shard's group? loaded? then to its manager
      |-- output.Operation    the Output of the operation under way; every manager writes into it
      |-- timers.Timers       one lazy deadline heap; each manager registers its timer kinds
      |-- classic.manager.ClassicGroupManager    classic groups (JoinGroup/SyncGroup/Heartbeat/
      |     |-- classic.groups.ClassicGroups     LeaveGroup, List/Describe, the group side of
      |     |-- classic.join.JoinGroupHandler    DeleteGroups), their records and timers
      |     `-- classic.group.ClassicGroup       the model (states, members, protocol vote)
      `-- offsets.OffsetManager                  committed offsets: commit, fetch, delete,
                                                 retention; sees groups through OffsetGroups

What flows: the runtime calls one method of the shard per request (or timer round, or failed
append) with an opaque handle and the time; the shard checks routing and hands the request to
its manager, which changes state at once and writes records and replies into the shared
:class:`output.Operation`; the shard returns the resulting :class:`output.Output`. If the
records cannot be appended, the runtime hands the Output back (``GroupShard.append_failed``)
and each failure action goes to the manager that attached it. At start-up the runtime replays
the partition's newest record per key (``loading.LatestRecords``) into ``GroupShard.replay``,
which routes each record by its key's type (``schemas``: Kafka's key/value layouts) to its
manager, then calls ``finish_loading``.

Where a new group type plugs in (KIP-848 consumer groups): a package beside ``classic/`` with
its model and manager; its record types (keys 3-8 and 16, ``consumer.records``, today skipped
by the shard) routed to it in ``GroupShard.replay``; its requests (ConsumerGroupHeartbeat,
ConsumerGroupDescribe) routed to it by the shard; its timer kinds registered in the shared
``Timers``; and its groups offered to the offsets manager through ``offsets.OffsetGroups``
(a group answers ``validate_offset_commit`` with its member epoch instead of a generation). The
group id space is shared: the shard is where a request for a group of the other type is
refused.

Other modules: ``config`` (GroupConfig, Kafka's setting names), ``messages`` (requests and
responses independent of the wire version), ``subscription`` (topics of a consumer-protocol
subscription), ``write_size`` (how big a write will be before its records exist), ``loading``.
"""
