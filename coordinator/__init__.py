"""The group coordinator, sans-IO: shard state machines, offsets, __consumer_offsets schemas."""
