"""Producers' state in one partition: sequence and epoch checks, open transactions, the LSO.

An idempotent or transactional producer numbers its batches (producer id, epoch, sequence
numbers). :class:`ProducerState` is what one partition knows of each producer that wrote to it,
as Kafka's ``ProducerStateManager`` keeps it:

* the epoch, the coordinator epoch of its last marker, the timestamp of its last batch, and the
  sequence range and base offset of its last ``RECENT_BATCHES`` batches (Kafka keeps five): a
  retried batch among them is answered with the offset it got instead of being appended twice;
* :meth:`ProducerState.check` decides a new batch as Kafka's ``ProducerAppendInfo`` does: an
  older epoch is INVALID_PRODUCER_EPOCH, a gap or a step back in the sequence (or a new epoch not
  starting at 0) is OUT_OF_ORDER_SEQUENCE_NUMBER, a plain batch from a producer with an open
  transaction is INVALID_TXN_STATE; a producer never seen may start anywhere;
* the open transactions (first offset per producer): a transactional batch opens one, a marker
  (:meth:`ProducerState.apply` with the marker) closes it and, for an ABORT, yields the
  :class:`CompletedTxn` that the aborted-transaction index records. The *last stable offset*
  is the first offset of the earliest open transaction, else the high watermark; a transaction
  whose marker is not yet durable still holds it back.

The state is a function of the log: the partition log applies every batch it appends
(``storage.txn_log``), writes :meth:`ProducerState.snapshot` at each segment roll and rebuilds
the state at open from the last snapshot plus the batches after it.

A producer that writes nothing for ``expiration_ms`` (Kafka's ``producer.id.expiration.ms``) and
has no open transaction is forgotten by :meth:`ProducerState.expire`.

Memory: one dict entry per producer id whose value is one bytes object (head, then 16 bytes per
remembered batch) -- about 250 bytes in all. Entries are kept in the order of their last write.

Sans-IO: time comes from the ``clock`` given at construction (milliseconds, wall clock).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from crc32c import crc32c

from kcoord.protocol.batch import BatchHeader
from kcoord.protocol.errors import ErrorCode

RECENT_BATCHES = 5
NO_SEQUENCE = -1
SEQUENCE_WRAP = 2**31  # sequence numbers wrap to 0 after int32 max, as in Kafka

# last write (clock ms), epoch, coordinator epoch, open transaction's first offset (-1: none),
# last batch timestamp
_HEAD = struct.Struct(">qhiqq")
_BATCH = struct.Struct(">iiq")  # first sequence, last sequence, base offset
_KEEP = RECENT_BATCHES * _BATCH.size

_SNAP_HEAD = struct.Struct(">hIqi")  # version, crc32c of what follows, offset, producers
_SNAP_ENTRY = struct.Struct(">qhiqqqb")  # id, epoch, coord epoch, txn first, txn start, ts, n
_SNAP_VERSION = 1


class CorruptSnapshot(ValueError):
    """A producer snapshot that is torn or not ours."""


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    """A transaction ended by a marker at ``last_offset``."""

    producer_id: int
    first_offset: int
    last_offset: int
    aborted: bool


@dataclass(frozen=True, slots=True)
class ProducerInfo:
    """One producer as DescribeProducers shows it."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    txn_start_offset: int


@dataclass(frozen=True, slots=True)
class Verdict:
    """What :meth:`ProducerState.check` decided: an error code, or the offset of the earlier
    batch a retry duplicates (``duplicate_of`` >= 0), or neither (append it)."""

    error_code: int = 0
    duplicate_of: int = -1
    message: str = ""


ACCEPT = Verdict()


def in_sequence(last_seq: int, first_seq: int) -> bool:
    return first_seq == last_seq + 1 or (first_seq == 0 and last_seq == SEQUENCE_WRAP - 1)


def last_sequence(h: BatchHeader) -> int:
    return (h.base_sequence + h.last_offset_delta) % SEQUENCE_WRAP


class ProducerState:
    """The producers of one partition (module docstring)."""

    def __init__(self, expiration_ms: int, clock: Callable[[], int]) -> None:
        if expiration_ms <= 0:
            raise ValueError("expiration_ms must be positive")
        self.expiration_ms = expiration_ms
        self._clock = clock
        self._entries: dict[int, bytes] = {}
        self._open: dict[int, tuple[int, int]] = {}  # producer id -> (first offset, start ms)
        self._ending: list[tuple[int, int]] = []  # (first offset, marker offset) not yet durable
        self.offset = 0  # the state covers every batch below this offset

    def __len__(self) -> int:
        """Producers held."""
        return len(self._entries)

    # -- the recent batches --------------------------------------------------------------

    def find(self, producer_id: int, epoch: int, first_seq: int, last_seq: int) -> int | None:
        """The base offset given to an earlier batch with this epoch and sequence range, if it
        is one of the producer's last few."""
        entry = self._entries.get(producer_id)
        if entry is None or _HEAD.unpack_from(entry)[1] != epoch:
            return None
        for first, last, base in _BATCH.iter_unpack(memoryview(entry)[_HEAD.size :]):
            if first == first_seq and last == last_seq:
                return int(base)
        return None

    def record(
        self,
        producer_id: int,
        epoch: int,
        first_seq: int,
        last_seq: int,
        base_offset: int,
        timestamp: int = -1,
    ) -> None:
        """Remember a batch just appended (the oldest of RECENT_BATCHES + 1 is dropped)."""
        old = self._entries.pop(producer_id, None)  # re-inserted: the dict stays in write order
        coordinator_epoch, txn_first = -1, -1
        batch = _BATCH.pack(first_seq, last_seq, base_offset)
        if old is not None:
            _, old_epoch, coordinator_epoch, txn_first, _ = _HEAD.unpack_from(old)
            if old_epoch == epoch:
                batch = old[_HEAD.size :][-(_KEEP - _BATCH.size) :] + batch
        head = _HEAD.pack(self._clock(), epoch, coordinator_epoch, txn_first, timestamp)
        self._entries[producer_id] = head + batch

    def expire(self) -> int:
        """Forget producers idle for ``expiration_ms`` or longer with no open transaction;
        returns how many."""
        cutoff = self._clock() - self.expiration_ms
        doomed: list[int] = []
        for pid, entry in self._entries.items():
            if _HEAD.unpack_from(entry)[0] > cutoff:
                break  # written later than this one: the rest are younger still
            if pid not in self._open:
                doomed.append(pid)
        for pid in doomed:
            del self._entries[pid]
        return len(doomed)

    # -- checks ----------------------------------------------------------------------------

    def check(self, h: BatchHeader) -> Verdict:
        """Decide a produced batch of producer ``h.producer_id`` before it is appended."""
        entry = self._entries.get(h.producer_id)
        if entry is None:
            return ACCEPT  # never seen (or forgotten): any sequence starts it
        _, epoch, _, txn_first, _ = _HEAD.unpack_from(entry)
        pid = h.producer_id
        if h.producer_epoch < epoch:
            return Verdict(
                ErrorCode.invalid_producer_epoch,
                message=f"epoch {h.producer_epoch} of producer {pid} is older than {epoch}",
            )
        last = last_sequence(h)
        earlier = self.find(pid, h.producer_epoch, h.base_sequence, last)
        if earlier is not None:
            return Verdict(duplicate_of=earlier)
        if h.producer_epoch != epoch:
            if h.base_sequence != 0:
                return Verdict(
                    ErrorCode.out_of_order_sequence_number,
                    message=f"new epoch {h.producer_epoch} of producer {pid} starts at sequence"
                    f" {h.base_sequence}, not 0",
                )
        else:
            batches = len(entry) - _HEAD.size
            current = _BATCH.unpack_from(entry, len(entry) - _BATCH.size)[1] if batches else -1
            if not in_sequence(current, h.base_sequence):
                return Verdict(
                    ErrorCode.out_of_order_sequence_number,
                    message=f"producer {pid}: sequence {h.base_sequence} after {current}",
                )
        if not h.is_transactional and txn_first >= 0:
            return Verdict(
                ErrorCode.invalid_txn_state,
                message=f"producer {pid} has an open transaction: expected a transactional batch",
            )
        return ACCEPT

    def check_marker(self, producer_id: int, epoch: int, coordinator_epoch: int) -> Verdict:
        """Decide a transaction marker before it is appended."""
        entry = self._entries.get(producer_id)
        if entry is None:
            return ACCEPT
        _, known_epoch, known_coordinator, _, _ = _HEAD.unpack_from(entry)
        if epoch < known_epoch:
            return Verdict(
                ErrorCode.invalid_producer_epoch,
                message=f"marker epoch {epoch} of producer {producer_id} is older than"
                f" {known_epoch}",
            )
        if coordinator_epoch < known_coordinator:
            return Verdict(
                ErrorCode.transaction_coordinator_fenced,
                message=f"coordinator epoch {coordinator_epoch} older than {known_coordinator}",
            )
        return ACCEPT

    # -- applying what the log holds ---------------------------------------------------------

    def apply(
        self, h: BatchHeader, marker: tuple[bool, int] | None = None, *, replay: bool = False
    ) -> CompletedTxn | None:
        """Account for a batch the log now holds at ``h.base_offset`` (appended, or met while
        rebuilding: ``replay``). ``marker``: (commit, coordinator epoch) of a control batch
        holding a transaction marker. Returns the transaction a marker ended."""
        if h.next_offset > self.offset:
            self.offset = h.next_offset
        pid = h.producer_id
        if pid < 0:
            return None
        if h.is_control:
            if marker is None:
                return None
            return self._end(h, marker[0], marker[1])
        self.record(pid, h.producer_epoch, h.base_sequence, last_sequence(h), h.base_offset,
                    h.max_timestamp)
        if h.is_transactional and pid not in self._open:
            started = h.max_timestamp if replay else self._clock()
            self._open[pid] = (h.base_offset, started)
            self._set_txn(pid, h.base_offset)
        return None

    def _end(self, h: BatchHeader, commit: bool, coordinator_epoch: int) -> CompletedTxn | None:
        pid = h.producer_id
        opened = self._open.pop(pid, None)
        old = self._entries.pop(pid, None)
        batches = b""
        if old is not None and _HEAD.unpack_from(old)[1] == h.producer_epoch:
            batches = old[_HEAD.size :]
        self._entries[pid] = (
            _HEAD.pack(self._clock(), h.producer_epoch, coordinator_epoch, -1, h.max_timestamp)
            + batches
        )
        if opened is None:
            return None
        self._ending.append((opened[0], h.base_offset))
        return CompletedTxn(pid, opened[0], h.base_offset, aborted=not commit)

    def _set_txn(self, pid: int, first_offset: int) -> None:
        entry = self._entries[pid]
        written, epoch, coordinator_epoch, _, ts = _HEAD.unpack_from(entry)
        self._entries[pid] = (
            _HEAD.pack(written, epoch, coordinator_epoch, first_offset, ts) + entry[_HEAD.size :]
        )

    # -- reading -----------------------------------------------------------------------------

    def last_stable_offset(self, high_watermark: int) -> int:
        """The first offset of the earliest open transaction (or of one whose marker is not
        below ``high_watermark`` yet), else ``high_watermark``."""
        self.forget_ended(high_watermark)
        return self.stable_offset_at(high_watermark)

    def stable_offset_at(self, high_watermark: int) -> int:
        """:meth:`last_stable_offset` without forgetting anything (the LSO recorded with an
        aborted transaction, whose marker is not durable yet)."""
        lso = high_watermark
        for first, _ in self._open.values():
            lso = min(lso, first)
            break  # opened in offset order: the first is the earliest
        for first, marker in self._ending:
            if marker >= high_watermark:
                lso = min(lso, first)
        return lso

    def forget_ended(self, high_watermark: int) -> None:
        """Transactions whose marker lies below ``high_watermark`` no longer hold the LSO."""
        if self._ending and self._ending[0][1] < high_watermark:
            self._ending = [(f, m) for f, m in self._ending if m >= high_watermark]

    def open_transactions(self) -> list[tuple[int, int, int]]:
        """(producer id, first offset, start time ms) of each open transaction, oldest first."""
        return [(pid, first, started) for pid, (first, started) in self._open.items()]

    def producers(self) -> Iterator[ProducerInfo]:
        for pid, entry in self._entries.items():
            _, epoch, coordinator_epoch, txn_first, ts = _HEAD.unpack_from(entry)
            last_seq = (
                _BATCH.unpack_from(entry, len(entry) - _BATCH.size)[1]
                if len(entry) > _HEAD.size
                else NO_SEQUENCE
            )
            yield ProducerInfo(pid, epoch, last_seq, ts, coordinator_epoch, txn_first)

    # -- snapshots ---------------------------------------------------------------------------

    def snapshot(self) -> bytes:
        """The state as bytes (a producer snapshot file's content), at :attr:`offset`."""
        parts = []
        for pid, entry in self._entries.items():
            _, epoch, coordinator_epoch, txn_first, ts = _HEAD.unpack_from(entry)
            started = self._open[pid][1] if pid in self._open else -1
            batches = entry[_HEAD.size :]
            parts.append(
                _SNAP_ENTRY.pack(
                    pid, epoch, coordinator_epoch, txn_first, started, ts,
                    len(batches) // _BATCH.size,
                )
                + batches
            )
        body = struct.pack(">q", self.offset) + struct.pack(">i", len(parts)) + b"".join(parts)
        return struct.pack(">hI", _SNAP_VERSION, crc32c(body)) + body

    def restore(self, data: bytes) -> None:
        """Replace the state with a :meth:`snapshot`'s; raises CorruptSnapshot."""
        if len(data) < _SNAP_HEAD.size:
            raise CorruptSnapshot("truncated")
        version, crc, offset, count = _SNAP_HEAD.unpack_from(data)
        if version != _SNAP_VERSION or crc32c(memoryview(data)[6:]) != crc:
            raise CorruptSnapshot("bad version or checksum")
        entries: dict[int, bytes] = {}
        opened: list[tuple[int, int, int]] = []
        now = self._clock()
        pos = _SNAP_HEAD.size
        try:
            for _ in range(count):
                pid, epoch, coord, txn_first, started, ts, n = _SNAP_ENTRY.unpack_from(data, pos)
                pos += _SNAP_ENTRY.size
                batches = data[pos : pos + n * _BATCH.size]
                pos += n * _BATCH.size
                entries[pid] = _HEAD.pack(now, epoch, coord, txn_first, ts) + batches
                if txn_first >= 0:
                    opened.append((txn_first, pid, started))
        except struct.error as e:
            raise CorruptSnapshot(str(e)) from None
        if pos != len(data):
            raise CorruptSnapshot("trailing bytes")
        self._entries = entries
        self._open = {pid: (first, started) for first, pid, started in sorted(opened)}
        self._ending = []
        self.offset = offset

    def reset(self, offset: int = 0) -> None:
        """Forget everything (a rebuild from the log's start)."""
        self._entries = {}
        self._open = {}
        self._ending = []
        self.offset = offset
