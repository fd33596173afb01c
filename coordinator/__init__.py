"""The group coordinator, sans-IO: shard state machines, offsets, __consumer_offsets schemas.

Modules: ``config`` (GroupConfig), ``schemas`` (__consumer_offsets key/value records),
``messages`` (version-independent requests/responses), ``group`` (the classic group model),
``subscription`` (topics of a consumer-protocol subscription), ``shard`` (GroupShard, the
sans-IO state machine of one __consumer_offsets partition, groups and committed offsets).
"""
