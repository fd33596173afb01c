"""Replaying a __consumer_offsets partition into a shard: the newest record per key wins.

The partition is a compacted log, and a shard's persisted state depends only on the newest
record of every key (group metadata or committed offset). So loading first reduces the log to
those records, in order of their last occurrence, and replays only them; a key whose newest
record is a tombstone needs no replay at all. The property test in
tests/unit/test_log_state_property.py checks this against a full replay, with compaction and
restarts in between.

Transactional offset commits (TxnOffsetCommit) are held per producer until that producer's
marker: COMMIT makes each of its records the newest of its key unless a visible record of the
key came after it (Kafka's newest-record-offset rule), ABORT drops them. A plain tombstone
removes the pending records of its key. What is still pending at the end of the log (a
transaction left open by a crash, completed later by the transaction coordinator) is handed
to the shard as pending, with the positions it needs to apply the same rules live.
"""

from __future__ import annotations

from collections.abc import Generator, Iterable

from kcoord.protocol.batch import BatchHeader
from kcoord.protocol.compression import Buffer
from kcoord.protocol.key_values import decode_key_values, split_key_values

from .schemas import OffsetCommitKey, decode_key
from .shard import GroupShard


class LatestRecords:
    """Collects (key, value) pairs of a partition in log order, keeping the newest per key
    (and the transactional ones pending until their marker; see the module docstring)."""

    __slots__ = ("_epochs", "_latest", "_pending", "_pending_keys", "_visible", "records")

    def __init__(self) -> None:
        self._latest: dict[bytes, bytes | None] = {}
        self.records = 0  # records seen, keyless ones included; also the position counter
        self._pending: dict[int, dict[bytes, tuple[bytes | None, int]]] = {}
        """producer id -> key -> (value, position); value None: removed by a tombstone."""
        self._pending_keys: dict[bytes, set[int]] = {}
        """key -> producers holding a pending value of it."""
        self._visible: dict[bytes, int] = {}
        """Position of the newest visible record of each key that is pending somewhere."""
        self._epochs: dict[int, tuple[int, int]] = {}

    def add(self, pairs: Iterable[tuple[bytes | None, bytes | None]]) -> None:
        latest = self._latest
        pending_keys = self._pending_keys
        n = 0
        for key, value in pairs:
            n += 1
            if key is not None:
                latest.pop(key, None)  # re-inserting moves the key to its last occurrence
                latest[key] = value
                if pending_keys and key in pending_keys:
                    self._visible_write(key, value, self.records + n)
        self.records += n

    def add_batch(
        self, header: BatchHeader, payload: Buffer
    ) -> list[tuple[bytes | None, bytes | None]]:
        """A plain batch (``payload``: its records section), as :meth:`add` of its decoded
        records; returns those that are not offset commits, in order (the rebalance history
        reads them). Raises CorruptBatch, having added nothing, if the batch cannot be decoded.

        The start-up load's hot path: most records are offset commits whose key comes again
        later, so the records are folded straight into the newest-per-key map, without a tuple
        per record."""
        if self._pending_keys:  # a transaction is open: the per-record rules of add()
            pairs = decode_key_values(header, payload)
            self.add(pairs)
            return pairs
        flat = split_key_values(header, payload)
        latest = self._latest
        others: list[tuple[bytes | None, bytes | None]] = []
        for i in range(0, len(flat), 2):
            key = flat[i]
            if key is None:
                continue
            value = flat[i + 1]
            latest.pop(key, None)  # re-inserting moves the key to its last occurrence
            latest[key] = value
            # offset commit keys (versions 0 and 1) are most records; the rest go on
            if len(key) < 2 or key[0] != 0 or key[1] > 1:
                others.append((key, value))
        self.records += len(flat) >> 1
        return others

    def _visible_write(self, key: bytes, value: bytes | None, position: int) -> None:
        if value is None:  # a tombstone: the pending values of the key go
            for pid in self._pending_keys.pop(key):
                self._pending[pid][key] = (None, self._pending[pid][key][1])
            self._visible.pop(key, None)
        else:
            self._visible[key] = position

    def add_transactional(
        self, producer_id: int, producer_epoch: int, pairs: Iterable[tuple[bytes | None, bytes | None]]
    ) -> None:
        """A transactional batch of ``producer_id``: pending until its marker."""
        held = self._pending.setdefault(producer_id, {})
        for key, value in pairs:
            self.records += 1
            if key is None:
                continue
            if value is None:  # not written by TxnOffsetCommit: applies at once, as in Kafka
                self.records -= 1
                self.add([(key, None)])
                continue
            held[key] = (value, self.records)
            self._pending_keys.setdefault(key, set()).add(producer_id)
        self._seen_epoch(producer_id, producer_epoch, -1)

    def add_marker(
        self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int
    ) -> None:
        """The COMMIT or ABORT marker of ``producer_id``'s transaction."""
        self.records += 1
        self._seen_epoch(producer_id, producer_epoch, coordinator_epoch)
        held = self._pending.pop(producer_id, None)
        if not held:
            return
        latest, visible, pending_keys = self._latest, self._visible, self._pending_keys
        for key, (value, position) in held.items():
            holders = pending_keys.get(key)
            if holders is not None:
                holders.discard(producer_id)
                if not holders:
                    del pending_keys[key]
            if commit and value is not None and position > visible.get(key, -1):
                latest.pop(key, None)
                latest[key] = value
                visible[key] = position
            if key not in pending_keys:
                visible.pop(key, None)

    def _seen_epoch(self, producer_id: int, epoch: int, coordinator_epoch: int) -> None:
        known = self._epochs.get(producer_id)
        if known is None:
            self._epochs[producer_id] = (epoch, coordinator_epoch)
        else:
            self._epochs[producer_id] = (max(known[0], epoch), max(known[1], coordinator_epoch))

    def __len__(self) -> int:
        return len(self._latest)

    def replay_into(self, shard: GroupShard, now_ms: int) -> int:
        """Replay the surviving records; returns how many were replayed."""
        steps = self.replay_sliced(shard, now_ms, len(self._latest) + 1)
        while True:
            try:
                next(steps)
            except StopIteration as done:
                return int(done.value)

    def replay_sliced(
        self, shard: GroupShard, now_ms: int, every: int
    ) -> Generator[None, None, int]:
        """:meth:`replay_into` in slices: yields after every ``every`` records (the caller
        lets others in between: the shard answers COORDINATOR_LOAD_IN_PROGRESS until it
        finishes loading); returns how many were replayed."""
        replay = shard.replay
        n = 0
        for key, value in self._latest.items():
            if value is not None:
                replay(key, value, now_ms)
                n += 1
                if n % every == 0:
                    yield
        txn = shard.txn
        for pid, held in self._pending.items():
            for key, (value, position) in held.items():
                decoded = decode_key(key)
                if isinstance(decoded, OffsetCommitKey):
                    txn.replay_pending(pid, decoded, value, position)
                    n += 1
        for key, position in self._visible.items():
            decoded = decode_key(key)
            if isinstance(decoded, OffsetCommitKey):
                txn.replay_visible(decoded, position)
        for pid, (epoch, coordinator_epoch) in self._epochs.items():
            txn.replay_producer(pid, epoch, coordinator_epoch)
        return n
