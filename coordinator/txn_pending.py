"""The pending transactional offsets of one shard, and the epochs of its transactional producers.

A TxnOffsetCommit (KIP-98, KIP-447) writes ordinary offset-commit records in a transactional
batch of its producer; they stay pending, invisible to OffsetFetch, until the producer's
COMMIT marker makes them the group's committed offsets, or its ABORT marker drops them.
:class:`PendingTxnOffsets` holds them per producer id and group, which groups have open
transactions, and, for partitions pending somewhere, the position of the newest visible write:
a pending offset is only made visible by its COMMIT if nothing visible was written to the same
partition after it (a plain OffsetCommit, or another transaction committed after it was
written), which is Kafka's "newest record offset wins" rule. Positions are a counter in log
order (the shard's single writer appends in emission order; replay passes log positions).

``epochs`` keeps each producer's newest (producer epoch, coordinator epoch) seen in this
partition: a transactional write of an older producer epoch is INVALID_PRODUCER_EPOCH and a
marker of an older coordinator epoch TRANSACTION_COORDINATOR_FENCED, as Kafka's producer state
for the partition answers.

No I/O and no knowledge of records: :mod:`coordinator.txn_offsets` drives it.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Iterator
from dataclasses import dataclass
from typing import NamedTuple

from kcoord.coordinator.messages import FetchedOffset, OffsetCommitResponse
from kcoord.coordinator.schemas import OffsetCommitValue
from kcoord.protocol.errors import ErrorCode

TopicPartition = tuple[str, int]


class PendingOffset(NamedTuple):
    """A pending offset and its position; ``value`` None: removed by a tombstone (OffsetDelete,
    DeleteGroups) while the transaction stays open for its group."""

    value: OffsetCommitValue | None
    position: int


@dataclass(frozen=True, slots=True)
class TxnCommitWriteFailed:
    """The transactional batch of a TxnOffsetCommit failed: drop the pending offsets it added
    (putting back those of the same producer they replaced), restore the producer's epochs,
    and answer the stored partitions with the mapped error."""

    handle: Hashable
    response: OffsetCommitResponse
    group_id: str
    producer_id: int
    written: tuple[tuple[TopicPartition, PendingOffset, PendingOffset | None], ...]
    epochs: tuple[int, int] | None

    @property
    def handles(self) -> tuple[Hashable, ...]:
        return (self.handle,)


def unstable(
    topics: tuple[tuple[str, tuple[FetchedOffset, ...]], ...], pending: Iterable[tuple[str, int]]
) -> tuple[tuple[str, tuple[FetchedOffset, ...]], ...]:
    """An OffsetFetch answer with UNSTABLE_OFFSET_COMMIT for the ``pending`` partitions."""
    marked = set(pending)
    if not marked:
        return topics
    refused = ErrorCode.unstable_offset_commit
    return tuple(
        (
            topic,
            tuple(
                FetchedOffset(f.partition, -1, -1, "", refused)
                if (topic, f.partition) in marked
                else f
                for f in parts
            ),
        )
        for topic, parts in topics
    )


class PendingTxnOffsets:
    """See the module docstring."""

    __slots__ = ("_by_producer", "_open_by_group", "_position", "_visible", "epochs")

    def __init__(self) -> None:
        self._by_producer: dict[int, dict[str, dict[TopicPartition, PendingOffset]]] = {}
        self._open_by_group: dict[str, set[int]] = {}
        self._visible: dict[tuple[str, TopicPartition], int] = {}
        self._position = 0
        self.epochs: dict[int, tuple[int, int]] = {}
        """producer id -> (producer epoch, coordinator epoch), the newest seen."""

    # ---- positions ------------------------------------------------------------------------

    def next_position(self) -> int:
        self._position += 1
        return self._position

    def seen_position(self, position: int) -> None:
        """Replay: later positions must come after ``position``."""
        if position >= self._position:
            self._position = position + 1

    # ---- queries ----------------------------------------------------------------------------

    def has_open(self, group_id: str) -> bool:
        """Whether ``group_id`` has a transaction that wrote offsets and is not complete."""
        return group_id in self._open_by_group

    def is_pending(self, group_id: str, tp: TopicPartition) -> bool:
        """Whether an open transaction holds a pending offset of ``tp`` for ``group_id``."""
        producers = self._open_by_group.get(group_id)
        if not producers:
            return False
        by_producer = self._by_producer
        for pid in producers:
            entry = by_producer.get(pid, {}).get(group_id, {}).get(tp)
            if entry is not None and entry.value is not None:
                return True
        return False

    def pending_partitions(self, group_id: str) -> set[TopicPartition]:
        """The partitions of ``group_id`` with a pending offset."""
        out: set[TopicPartition] = set()
        for pid in self._open_by_group.get(group_id, ()):
            for tp, entry in self._by_producer.get(pid, {}).get(group_id, {}).items():
                if entry.value is not None:
                    out.add(tp)
        return out

    def pending_of(self, producer_id: int) -> dict[str, dict[TopicPartition, PendingOffset]]:
        """The pending offsets of one producer by group (read-only by convention)."""
        return self._by_producer.get(producer_id, {})

    def producers(self) -> Iterator[int]:
        return iter(self._by_producer)

    def open_groups(self) -> Iterator[str]:
        return iter(self._open_by_group)

    def count(self) -> int:
        return sum(
            1
            for groups in self._by_producer.values()
            for tps in groups.values()
            for e in tps.values()
            if e.value is not None
        )

    # ---- changes ----------------------------------------------------------------------------

    def add(
        self,
        producer_id: int,
        group_id: str,
        tp: TopicPartition,
        value: OffsetCommitValue | None,
        position: int,
    ) -> PendingOffset | None:
        """Hold a pending offset; returns the one of the same producer it replaces."""
        groups = self._by_producer.setdefault(producer_id, {})
        tps = groups.setdefault(group_id, {})
        previous = tps.get(tp)
        tps[tp] = PendingOffset(value, position)
        self._open_by_group.setdefault(group_id, set()).add(producer_id)
        return previous

    def hold(
        self,
        producer_id: int,
        producer_epoch: int,
        group_id: str,
        written: list[tuple[str, int, OffsetCommitValue, OffsetCommitValue | None]],
    ) -> tuple[
        tuple[tuple[TopicPartition, PendingOffset, PendingOffset | None], ...], tuple[int, int] | None
    ]:
        """A transactional commit's offsets (``written``, in order) become pending offsets of
        the producer, whose epoch is now ``producer_epoch``. Returns what
        :class:`TxnCommitWriteFailed` needs to undo it: (partition, added, replaced) of each
        and the epochs before."""
        held = []
        for topic, partition, value, _ in written:
            tp = (topic, partition)
            previous = self.add(producer_id, group_id, tp, value, self.next_position())
            held.append((tp, self._by_producer[producer_id][group_id][tp], previous))
        epochs = self.epochs.get(producer_id)
        self.epochs[producer_id] = (producer_epoch, epochs[1] if epochs is not None else -1)
        return tuple(held), epochs

    def undo_add(
        self,
        producer_id: int,
        group_id: str,
        tp: TopicPartition,
        added: PendingOffset,
        previous: PendingOffset | None,
    ) -> None:
        """Undo :meth:`add` whose records could not be written (if nothing replaced it)."""
        tps = self._by_producer.get(producer_id, {}).get(group_id)
        if tps is None or tps.get(tp) is not added:
            return
        if previous is not None:
            tps[tp] = previous
            return
        del tps[tp]
        if not tps:
            groups = self._by_producer[producer_id]
            del groups[group_id]
            producers = self._open_by_group.get(group_id)
            if producers is not None:
                producers.discard(producer_id)
                if not producers:
                    del self._open_by_group[group_id]
            if not groups:
                del self._by_producer[producer_id]

    def note_visible(self, group_id: str, tp: TopicPartition, position: int) -> None:
        """A visible write of ``tp`` at ``position``: pending offsets written before it lose."""
        if self.is_pending(group_id, tp):
            key = (group_id, tp)
            if position > self._visible.get(key, -1):
                self._visible[key] = position

    def remove_partition(self, group_id: str, tp: TopicPartition) -> None:
        """A tombstone of ``tp``: every pending offset of it goes; the transactions stay open
        for the group (Kafka keeps the group among those with open transactions)."""
        for pid in self._open_by_group.get(group_id, ()):
            tps = self._by_producer.get(pid, {}).get(group_id)
            if tps is not None and tp in tps:
                tps[tp] = PendingOffset(None, tps[tp].position)
        self._visible.pop((group_id, tp), None)

    def remove_group(self, group_id: str) -> None:
        """Every pending offset of ``group_id`` goes (it was deleted); open stays as above."""
        for tp in self.pending_partitions(group_id):
            self.remove_partition(group_id, tp)

    def group_snapshot(self, group_id: str) -> dict[int, dict[TopicPartition, PendingOffset]]:
        """The pending offsets of ``group_id`` by producer (for an undo of its deletion)."""
        return {
            pid: dict(self._by_producer[pid][group_id])
            for pid in self._open_by_group.get(group_id, ())
            if group_id in self._by_producer.get(pid, {})
        }

    def restore_group(
        self, group_id: str, snapshot: dict[int, dict[TopicPartition, PendingOffset]]
    ) -> None:
        """Undo :meth:`remove_group` (its tombstones failed) where nothing changed since."""
        for pid, entries in snapshot.items():
            tps = self._by_producer.get(pid, {}).get(group_id)
            if tps is None:
                continue
            for tp, entry in entries.items():
                now = tps.get(tp)
                if now is not None and now.value is None and now.position == entry.position:
                    tps[tp] = entry

    def complete(
        self, producer_id: int, commit: bool
    ) -> list[tuple[str, TopicPartition, OffsetCommitValue, int]]:
        """End ``producer_id``'s transaction in this shard: on COMMIT, the (group, partition,
        value, position) of the pending offsets that become visible (those no visible write
        came after); on ABORT nothing. The producer's pending offsets are gone either way."""
        groups = self._by_producer.pop(producer_id, None)
        if groups is None:
            return []
        winners: list[tuple[str, TopicPartition, OffsetCommitValue, int]] = []
        visible = self._visible
        for group_id, tps in groups.items():
            producers = self._open_by_group.get(group_id)
            if producers is not None:
                producers.discard(producer_id)
                if not producers:
                    del self._open_by_group[group_id]
            for tp, entry in tps.items():
                key = (group_id, tp)
                if entry.value is not None and commit and entry.position > visible.get(key, -1):
                    winners.append((group_id, tp, entry.value, entry.position))
                    visible[key] = entry.position
                if not self.is_pending(group_id, tp):
                    visible.pop(key, None)
        return winners

    def restore(
        self,
        producer_id: int,
        groups: dict[str, dict[TopicPartition, PendingOffset]],
        visible: dict[tuple[str, TopicPartition], int],
    ) -> None:
        """Undo :meth:`complete` whose marker could not be written (``groups`` and
        ``visible`` as they were before it)."""
        if not groups:
            return
        self._by_producer[producer_id] = groups
        for group_id, tps in groups.items():
            self._open_by_group.setdefault(group_id, set()).add(producer_id)
            for tp in tps:
                self._visible.pop((group_id, tp), None)
        self._visible.update(visible)

    def visible_snapshot(self, producer_id: int) -> dict[tuple[str, TopicPartition], int]:
        """The visible positions :meth:`complete` of ``producer_id`` may change."""
        out: dict[tuple[str, TopicPartition], int] = {}
        for group_id, tps in self._by_producer.get(producer_id, {}).items():
            for tp in tps:
                key = (group_id, tp)
                if key in self._visible:
                    out[key] = self._visible[key]
        return out

    def clear(self) -> None:
        self._by_producer.clear()
        self._open_by_group.clear()
        self._visible.clear()
        self.epochs.clear()
        self._position = 0
