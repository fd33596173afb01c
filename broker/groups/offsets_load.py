"""Reading one ``__consumer_offsets`` partition at start-up, batch by batch, into the loader.

Plain batches are folded into :class:`coordinator.loading.LatestRecords` (newest record per
key, ``add_batch``: the hot path, no tuple per offset commit), which hands back their other
records for the rebalance history; transactional ones (TxnOffsetCommit) are held there per
producer until the producer's marker, and control batches carry the markers.
A batch that cannot be decoded is logged and skipped; an I/O error is the caller's. The event
loop gets a turn every few milliseconds (``offload.SliceTimer``): the broker serves while it
loads.
"""

from __future__ import annotations

import logging

from kcoord.coordinator.loading import LatestRecords
from kcoord.coordinator.rebalance_replay import HistoryReplay
from kcoord.protocol.batch import HEADER_SIZE, BatchHeader, CorruptBatch
from kcoord.protocol.control import decode_marker
from kcoord.protocol.key_values import decode_key_values
from kcoord.storage.engine import Log

from ..data.topics import OFFSETS_TOPIC
from ..net.offload import SliceTimer, pause

log = logging.getLogger("kcoord.coordinator")


async def read_partition(
    plog: Log, partition: int, latest: LatestRecords, history: HistoryReplay
) -> None:
    """Feed every batch of ``plog`` to ``latest`` and ``history``; OSError propagates."""
    turns = SliceTimer()
    for base, header, data in plog.iter_batches():
        txn = header.is_transactional and header.producer_id >= 0
        plain = not header.is_control and not txn
        try:
            if plain:  # the hot path: folded into ``latest``, the other records returned
                pairs = latest.add_batch(header, data[HEADER_SIZE:])
            else:
                pairs = decode_key_values(header, data[HEADER_SIZE:])
        except CorruptBatch as e:  # e.g. expands past the decompression bound
            log.error("%s-%d: batch at offset %d skipped: %s", OFFSETS_TOPIC, partition, base, e)
            pairs = []
        if header.is_control:
            _markers(latest, header, pairs)
        elif txn:
            latest.add_transactional(header.producer_id, header.producer_epoch, pairs)
            history.add(pairs, header.max_timestamp)
        else:
            history.add(pairs, header.max_timestamp)
        if turns.due():
            await pause()


def _markers(
    latest: LatestRecords, header: BatchHeader, pairs: list[tuple[bytes | None, bytes | None]]
) -> None:
    """A control batch: a transaction marker ends the producer's pending offsets (other
    control records are skipped, as readers do)."""
    if not header.is_transactional:
        return
    for key, value in pairs:
        marker = decode_marker(key, value)
        if marker is not None:
            latest.add_marker(
                header.producer_id, header.producer_epoch, marker.commit, marker.coordinator_epoch
            )
