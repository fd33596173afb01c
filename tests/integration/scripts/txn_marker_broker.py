"""A kcoord broker that also takes transaction markers on stdin, for the group-side
transaction tests before a transaction coordinator exists: it stands in for the marker writer
by calling ``GroupRuntime.write_txn_marker`` (the interface the transaction coordinator
uses), nothing else. Run as its own process so that a test can SIGKILL it.

    python txn_marker_broker.py PORT DATA_DIR

Prints ``ready`` once serving. Each stdin line ``PARTITION PRODUCER_ID EPOCH COMMIT(0|1)
COORDINATOR_EPOCH`` writes a marker to that ``__consumer_offsets`` partition and prints
``done ERROR_CODE`` once it is durable.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from kcoord.broker.app import Broker
from kcoord.broker.config import Config


async def main() -> None:
    port, data_dir = int(sys.argv[1]), Path(sys.argv[2])
    storage = [f"storage.url={sys.argv[3]}"] if len(sys.argv) > 3 else []  # (the PostgreSQL run)
    config = Config.load(port=port, data_dir=data_dir, environ={}, overrides=storage)
    broker = Broker(config)
    await broker.start()
    print("ready", flush=True)
    loop = asyncio.get_running_loop()
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line:
            break
        partition, pid, epoch, commit, coordinator_epoch = (int(x) for x in line.split())
        error = await broker.groups.write_txn_marker(
            partition, pid, epoch, commit == 1, coordinator_epoch
        )
        print("done", error, flush=True)
    await broker.stop()


if __name__ == "__main__":
    asyncio.run(main())
