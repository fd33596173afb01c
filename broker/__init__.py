"""The I/O layer: asyncio server, connections, dispatch, data plane, config and CLI."""

import compiled  # noqa: F401  (first: where a compiled build exists, its modules load in place of ours)
