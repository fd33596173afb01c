"""Producer ids that are never handed out twice, across restarts too.

Like Kafka's producer id blocks (KIP-730), ids are taken from blocks of ``BLOCK_SIZE``: before
the first id of a block is given out, the end of that block is written durably to the storage
engine's document ``producer-ids``. A block is taken as a change of the document as stored
(``Documents.update_document``): it starts at the end recorded there and records its own end,
so ids of a block a crashed broker had begun are skipped, never reused, and two nodes of a
cluster never take the same block. A block that cannot be recorded (a full disk, the database
unreachable) gives no id: :class:`ProducerIdsUnavailable`.

Taking a block waits on the engine (an fsync, a database transaction), and InitProducerId is
answered on the event loop: so once nine tenths of a block are given out, the next one is taken
in a thread of its own, and the event loop waits only when ids go faster than that (or the
spare could not be taken: then it tries itself, and reports the failure).
"""

from __future__ import annotations

import logging
import threading

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
        self._next = self._end = _recorded_end(documents.read_document(FILE_NAME))
        self._spare: tuple[int, int] | None = None  # the next block, taken ahead
        self._taking: threading.Thread | None = None  # taking it

    def allocate(self) -> int:
        if self._next >= self._end:
            taking = self._taking
            if taking is not None:
                taking.join()
            spare, self._spare = self._spare, None
            self._next, self._end = spare if spare is not None else self._take()
        pid = self._next
        self._next += 1
        if self._end - self._next == self.block_size // 10 and self._taking is None:
            self._taking = threading.Thread(
                target=self._take_spare, name="kcoord-producer-ids", daemon=True
            )
            self._taking.start()
        return pid

    def _take_spare(self) -> None:
        try:
            self._spare = self._take()
        except ProducerIdsUnavailable:
            pass  # logged; the event loop tries again when the block runs out
        finally:
            self._taking = None

    def _take(self) -> tuple[int, int]:
        """A new block, recorded (any thread)."""
        start = 0

        def take_block(stored: bytes | None) -> bytes:
            nonlocal start
            start = _recorded_end(stored)
            return f"{_KEY}={start + self.block_size}\n".encode()

        try:
            self.documents.update_document(FILE_NAME, take_block)
        except OSError as e:
            log.error("could not record a producer id block: %s", describe_error(e))
            raise ProducerIdsUnavailable(str(e)) from e
        except ValueError as e:  # a document this code did not write
            log.error("could not take a producer id block: %s", e)
            raise ProducerIdsUnavailable(str(e)) from e
        return start, start + self.block_size


def _recorded_end(stored: bytes | None) -> int:
    """The end of the last block taken, as the document records it (0: none yet)."""
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
