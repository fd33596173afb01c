"""A share consumer process for tests/integration/shares.py: explicit acknowledgement; prints
[partition, offset] per record received (flushed at once) to the file named; ``hold`` never
acknowledges (the records stay acquired until the process dies and their locks expire),
``accept`` accepts everything."""

from __future__ import annotations

import json
import sys
import time

from confluent_kafka import AcknowledgeType, ShareConsumer


def main() -> None:
    bootstrap, group, topic, out, mode = sys.argv[1:6]
    consumer = ShareConsumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "share.acknowledgement.mode": "explicit"}
    )
    consumer.subscribe([topic])
    with open(out, "a", buffering=1) as f:
        while True:
            batch = consumer.poll(0.5)
            for msg in batch:
                if msg.error() is not None:
                    continue
                f.write(json.dumps([msg.partition(), msg.offset()]) + "\n")
                if mode == "accept":
                    consumer.acknowledge(msg, AcknowledgeType.ACCEPT)
            if mode == "accept" and len(batch):
                consumer.commit_sync()
            if mode == "hold" and len(batch):
                # Holding: never poll again (explicit mode refuses a poll with records
                # unacknowledged); the test kills the process.
                while True:
                    time.sleep(60)


if __name__ == "__main__":
    main()
