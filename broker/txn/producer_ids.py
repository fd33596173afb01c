"""Producer ids that are never handed out twice, across restarts too.

Like Kafka's producer id blocks (KIP-730), ids are taken from blocks of ``BLOCK_SIZE``: before
the first id of a block is given out, the end of that block is written durably to the storage
engine's document ``producer-ids``. At start-up the next id is the end recorded there, so ids of a block a crashed broker had begun are skipped, never reused. A block
that cannot be recorded (a full disk) gives no id: :class:`ProducerIdsUnavailable`.
"""

from __future__ import annotations

import logging

from kcoord.coordinator.transactions.coordinator import ProducerIdsUnavailable
from kcoord.storage.engine import Documents
from kcoord.storage.files import describe_error

log = logging.getLogger("kcoord.producer_ids")

BLOCK_SIZE = 1000
FILE_NAME = "producer-ids"
_KEY = "next.block.start"


class ProducerIdBlocks:
    def __init__(self, documents: Documents, block_size: int = BLOCK_SIZE) -> None:
        self.documents = documents
        self.block_size = block_size
        self._next = self._end = self._read()

    def _read(self) -> int:
        stored = self.documents.read_document(FILE_NAME)
        if stored is None:
            return 0
        for line in stored.decode("utf-8", "replace").splitlines():
            key, _, value = line.partition("=")
            if key.strip() == _KEY:
                try:
                    return max(0, int(value.strip()))
                except ValueError:
                    break
        raise ValueError(f"{FILE_NAME}: no valid {_KEY}= line")

    def allocate(self) -> int:
        if self._next >= self._end:
            end = self._next + self.block_size
            try:
                self.documents.write_document(FILE_NAME, f"{_KEY}={end}\n".encode())
            except OSError as e:
                log.error("could not record producer id block up to %d: %s", end, describe_error(e))
                raise ProducerIdsUnavailable(str(e)) from e
            self._end = end
        pid = self._next
        self._next += 1
        return pid
