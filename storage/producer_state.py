"""Idempotent producers' last batches, per partition: what answers a retried batch.

An idempotent producer numbers its batches (producer id, epoch, sequence numbers). When it
retries a batch that was in fact appended, the broker must answer with the offset the batch
got instead of appending it twice; :class:`ProducerStateTable` remembers, for each (topic,
partition, producer id), the epoch and the sequence range and base offset of its last
``RECENT_BATCHES`` batches (Kafka keeps five too).

A producer that writes nothing to a partition for ``expiration_ms`` (Kafka's
``producer.id.expiration.ms``) is forgotten by :meth:`ProducerStateTable.expire`, which the
broker calls every ``producer.id.expiration.check.interval.ms``; a retry arriving after that is
appended again, as in Kafka. The table is kept in memory only: after a restart it starts empty.

Memory: one dict entry per (topic, partition, producer id) whose value is one bytes object
(last write time, epoch, then 16 bytes per remembered batch) -- about 200-270 bytes in all.
Entries are kept in the order of their last write, so expiry only looks at the expired ones.

Sans-IO: time comes from the ``clock`` given at construction (milliseconds, monotonic).
"""

from __future__ import annotations

import struct
from collections.abc import Callable

RECENT_BATCHES = 5

_HEAD = struct.Struct(">qh")  # last write (clock ms), producer epoch
_BATCH = struct.Struct(">iiq")  # first sequence, last sequence, base offset
_KEEP = RECENT_BATCHES * _BATCH.size

Key = tuple[str, int, int]


class ProducerStateTable:
    def __init__(self, expiration_ms: int, clock: Callable[[], int]) -> None:
        if expiration_ms <= 0:
            raise ValueError("expiration_ms must be positive")
        self.expiration_ms = expiration_ms
        self._clock = clock
        self._entries: dict[Key, bytes] = {}

    def __len__(self) -> int:
        """(topic, partition, producer id) states held."""
        return len(self._entries)

    def find(
        self, topic: str, partition: int, producer_id: int, epoch: int, first_seq: int, last_seq: int
    ) -> int | None:
        """The base offset given to an earlier batch with this epoch and sequence range, if it
        is one of the producer's last few on this partition."""
        entry = self._entries.get((topic, partition, producer_id))
        if entry is None:
            return None
        _, known_epoch = _HEAD.unpack_from(entry)
        if known_epoch != epoch:
            return None
        for first, last, base in _BATCH.iter_unpack(memoryview(entry)[_HEAD.size :]):
            if first == first_seq and last == last_seq:
                return int(base)
        return None

    def record(
        self,
        topic: str,
        partition: int,
        producer_id: int,
        epoch: int,
        first_seq: int,
        last_seq: int,
        base_offset: int,
    ) -> None:
        """Remember a batch just appended (the oldest of RECENT_BATCHES + 1 is dropped)."""
        key = (topic, partition, producer_id)
        old = self._entries.pop(key, None)  # re-inserted below: the dict stays in write order
        batch = _BATCH.pack(first_seq, last_seq, base_offset)
        if old is not None and _HEAD.unpack_from(old)[1] == epoch:
            batches = old[_HEAD.size :][-(_KEEP - _BATCH.size) :] + batch
        else:  # a new producer, or a new epoch: earlier batches no longer matter
            batches = batch
        self._entries[key] = _HEAD.pack(self._clock(), epoch) + batches

    def expire(self) -> int:
        """Forget producers idle for ``expiration_ms`` or longer; returns how many."""
        cutoff = self._clock() - self.expiration_ms
        doomed: list[Key] = []
        for key, entry in self._entries.items():
            if _HEAD.unpack_from(entry)[0] > cutoff:
                break  # written later than this one: the rest are younger still
            doomed.append(key)
        for key in doomed:
            del self._entries[key]
        return len(doomed)
