"""The I/O layer: asyncio server, connections, dispatch, data plane, config and CLI."""
