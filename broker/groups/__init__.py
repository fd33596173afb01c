"""The group coordinator on the wire: the runtime that drives the sans-IO shards with real I/O
and time, and the group, consumer-group (KIP-848), offset and transactional-offset APIs."""
