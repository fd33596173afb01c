"""The share coordinator of one ``__share_group_state`` partition (Kafka's ShareCoordinatorShard).

:class:`ShareStateShard` holds the persisted state of every share partition whose key routes to
its partition, and turns each state call into the records to append. It is pure: the runtime
(broker/share/state_runtime.py) appends the records, waits for them to be durable, and replays
the partition's log into a fresh shard at start-up.

The rules, as Kafka's share coordinator has them:

- **State is a function of the log.** A ShareSnapshot record replaces a share partition's state,
  a ShareUpdate is laid over it (:func:`share.state_merge.apply_write`), a tombstone (of either
  key type) forgets it. Every call that changes state builds its record and applies it through
  the same :meth:`ShareStateShard.replay` step, so the state held after a call is the state a
  replay of its records gives.
- **Snapshot or update.** A write becomes a ShareSnapshot when the share partition has no
  snapshot yet, or when ``snapshot_every`` updates have been written since its last one
  (``share.coordinator.snapshot.update.records.per.snapshot``, 500; 0: every write is a
  snapshot); otherwise a ShareUpdate holding only the write's runs. Kafka's count starts one
  late after the first snapshot (its first cycle has one update more); here every cycle has
  exactly ``snapshot_every`` updates. A snapshot's epoch is the previous one plus one.
- **Fencing** (WriteShareGroupState): a leader epoch below the one held is refused with
  FENCED_LEADER_EPOCH, then a state epoch below the one held with FENCED_STATE_EPOCH; -1 means
  "not given" (no check, the held value stays). InitializeShareGroupState refuses a state
  epoch below the held one with FENCED_STATE_EPOCH. A negative partition, a negative or
  reversed run, a delivery state other than 0, 2 or 4, a delivery count outside int16 or an
  epoch outside int32 is INVALID_REQUEST. Refusals raise :class:`StateRefused` and change
  nothing.
- **Initialize** (first use, AlterShareGroupOffsets): a snapshot with the given state epoch
  and start offset and no batches, whatever was held. It keeps the held leader epoch (-1 for
  a new share partition), so that every snapshot holds all a reader needs.
- **Delete**: tombstones for both keys of a share partition held here; nothing for one that
  is not.
- **Pruning.** ``__share_group_state`` is not compacted (its updates are deltas: keeping only
  the newest record per key would lose state); instead everything below the oldest snapshot
  still needed is redundant (:meth:`ShareStateShard.redundant_below`), and the runtime moves
  the log start there, as Kafka's share coordinator deletes records up to its "last
  redundant offset".
- **DeliveryCompleteCount** (KIP-1226, tagged field 0 of both values): the acknowledged and
  archived offsets at or past the start offset after the record; written in every record,
  not read back (it follows from the batches).

If an append of a shard's records fails, the runtime drops the shard and replays the log into
a new one (the log, not memory, says what is durable): there is no undo here.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace

from kcoord.coordinator.schema_errors import SchemaError
from kcoord.protocol.errors import ErrorCode
from kcoord.share.model import (
    UNINITIALIZED,
    PersistedState,
    RecordState,
    SharePartitionKey,
    StateBatch,
    StateSummary,
    StateWrite,
)
from kcoord.share.state_merge import apply_write
from kcoord.share.state_records import (
    SHARE_SNAPSHOT,
    SHARE_UPDATE,
    ShareSnapshotKey,
    ShareSnapshotValue,
    ShareStateValue,
    ShareUpdateKey,
    ShareUpdateValue,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)

__all__ = ["Record", "ShareStateShard", "StateRefused", "delivery_complete_count"]

Record = tuple[bytes, bytes | None]
"""A record to append: key and value bytes (None: a tombstone)."""

_PERSISTED_STATES = frozenset({RecordState.AVAILABLE, RecordState.ACKNOWLEDGED, RecordState.ARCHIVED})
_COMPLETE = (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)
_INT16_MAX = 0x7FFF
_INT32_MAX = 0x7FFFFFFF


class StateRefused(Exception):
    """A state call refused with Kafka error ``code``; nothing changed."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True, slots=True)
class _Held:
    """What the shard keeps of one share partition."""

    state: PersistedState
    snapshot_epoch: int
    create_timestamp: int
    updates: int
    """ShareUpdate records since the last snapshot."""
    snapshotted: bool
    """A snapshot of it is in the log (False: it was replayed from updates only)."""
    needed_from: int | None
    """The lowest offset of the log its state needs (its snapshot's, or its first update's
    when no snapshot was seen); None until the runtime says where its snapshot went."""


def delivery_complete_count(state: PersistedState) -> int:
    """The offsets at or past the start offset whose delivery is complete (acknowledged or
    archived): KIP-1226's DeliveryCompleteCount."""
    start = state.start_offset
    return sum(
        b.last_offset - max(b.first_offset, start) + 1
        for b in state.batches
        if b.delivery_state in _COMPLETE and b.last_offset >= start
    )


def summary_of(state: PersistedState) -> StateSummary:
    """What ReadShareGroupStateSummary tells of ``state``."""
    return StateSummary(
        state.state_epoch, state.leader_epoch, state.start_offset, delivery_complete_count(state)
    )


class ShareStateShard:
    def __init__(self, snapshot_every: int) -> None:
        self.snapshot_every = snapshot_every
        self._held: dict[SharePartitionKey, _Held] = {}

    def __len__(self) -> int:
        return len(self._held)

    # reading -----------------------------------------------------------------------------------
    def read(self, key: SharePartitionKey) -> PersistedState:
        """The state held for ``key``, ``UNINITIALIZED`` if none."""
        held = self._held.get(key)
        return UNINITIALIZED if held is None else held.state

    def updates_since_snapshot(self, key: SharePartitionKey) -> int:
        held = self._held.get(key)
        return 0 if held is None else held.updates

    # the log ------------------------------------------------------------------------------------
    def replay(self, key: bytes, value: bytes | None, offset: int) -> None:
        """Apply one record of the partition's log, at ``offset`` (a batch's base offset will
        do: it only bounds pruning). SchemaError if it cannot be decoded (nothing changes)."""
        decoded = decode_key(key)
        record_type = SHARE_SNAPSHOT if isinstance(decoded, ShareSnapshotKey) else SHARE_UPDATE
        parsed = None if value is None else decode_value(record_type, value)
        self._apply(decoded.share_key, parsed, offset)

    def _apply(
        self, key: SharePartitionKey, value: ShareStateValue | None, offset: int | None
    ) -> None:
        old = self._held.get(key)
        if value is None:
            self._held.pop(key, None)
        elif isinstance(value, ShareSnapshotValue):
            leader_epoch = value.leader_epoch if old is None else max(
                old.state.leader_epoch, value.leader_epoch
            )
            state = PersistedState(
                value.state_epoch, value.start_offset, value.state_batches, leader_epoch
            )
            self._held[key] = _Held(
                state, value.snapshot_epoch, value.create_timestamp, 0, True, offset
            )
        else:
            base = UNINITIALIZED if old is None else old.state
            state = apply_write(base, StateWrite(value.start_offset, value.state_batches))
            # An update replayed without its snapshot (pruned) carries the epoch alone: the
            # blank state's 0 is no epoch a snapshot ever held.
            leader_epoch = value.leader_epoch if old is None else max(
                base.leader_epoch, value.leader_epoch
            )
            state = replace(state, leader_epoch=leader_epoch)
            if old is None:  # its snapshot is not in the log (pruned before a tombstone)
                self._held[key] = _Held(state, value.snapshot_epoch, 0, 1, False, offset)
            else:
                self._held[key] = replace(old, state=state, updates=old.updates + 1)

    def appended(self, records: Sequence[Record], first_offset: int) -> None:
        """The runtime appended ``records`` (as returned by a call) from ``first_offset`` on:
        note where each snapshot went, for pruning."""
        for i, (key, value) in enumerate(records):
            if value is None or key[:2] != b"\x00\x00":  # SHARE_SNAPSHOT
                continue
            spk = decode_key(key).share_key
            held = self._held.get(spk)
            if held is not None:
                self._held[spk] = replace(held, needed_from=first_offset + i)

    def redundant_below(self, end_offset: int) -> int:
        """Every record below this offset is redundant: the oldest offset a held share
        partition still needs, or ``end_offset`` if none is held."""
        needed = (0 if h.needed_from is None else h.needed_from for h in self._held.values())
        return min(needed, default=end_offset)

    # calls --------------------------------------------------------------------------------------
    def write(
        self,
        key: SharePartitionKey,
        state_epoch: int,
        leader_epoch: int,
        change: StateWrite,
        now_ms: int,
    ) -> list[Record]:
        """Apply ``change`` (WriteShareGroupState) and return its record: a ShareSnapshot or a
        ShareUpdate (module docstring). StateRefused if refused."""
        _check_key(key)
        _check_epoch("state epoch", state_epoch)
        _check_epoch("leader epoch", leader_epoch)
        _check_write(change)
        held = self._held.get(key)
        if held is not None:
            if leader_epoch != -1 and held.state.leader_epoch > leader_epoch:
                raise StateRefused(
                    ErrorCode.fenced_leader_epoch,
                    f"leader epoch {leader_epoch} is below the held {held.state.leader_epoch}",
                )
            if state_epoch != -1 and held.state.state_epoch > state_epoch:
                raise StateRefused(
                    ErrorCode.fenced_state_epoch,
                    f"state epoch {state_epoch} is below the held {held.state.state_epoch}",
                )
        base = UNINITIALIZED if held is None else held.state
        after = apply_write(base, change)
        complete = delivery_complete_count(after)
        value: ShareStateValue
        if held is None or not held.snapshotted or held.updates >= self.snapshot_every:
            value = ShareSnapshotValue(
                snapshot_epoch=0 if held is None else held.snapshot_epoch + 1,
                state_epoch=base.state_epoch if state_epoch == -1 else state_epoch,
                leader_epoch=base.leader_epoch if leader_epoch == -1 else leader_epoch,
                start_offset=after.start_offset,
                create_timestamp=now_ms if held is None else held.create_timestamp,
                write_timestamp=now_ms,
                state_batches=after.batches,
                delivery_complete_count=complete,
            )
            record_key: ShareSnapshotKey | ShareUpdateKey = ShareSnapshotKey(*_fields(key))
        else:
            # Only the write's runs, with overlaps among them resolved (later over earlier).
            own = apply_write(PersistedState(0, change.start_offset), change).batches
            value = ShareUpdateValue(
                snapshot_epoch=held.snapshot_epoch,
                leader_epoch=leader_epoch,
                start_offset=change.start_offset,
                state_batches=own,
                delivery_complete_count=complete,
            )
            record_key = ShareUpdateKey(*_fields(key))
        return [self._made(key, record_key, value)]

    def initialize(
        self, key: SharePartitionKey, state_epoch: int, start_offset: int, now_ms: int
    ) -> list[Record]:
        """A fresh state (InitializeShareGroupState): a snapshot of ``start_offset`` (-1: not
        yet known) in ``state_epoch``, no batches. StateRefused if refused."""
        _check_key(key)
        _check_epoch("state epoch", state_epoch)
        if start_offset < -1:
            raise StateRefused(ErrorCode.invalid_request, f"start offset {start_offset}")
        held = self._held.get(key)
        if held is not None and held.state.state_epoch > state_epoch:
            raise StateRefused(
                ErrorCode.fenced_state_epoch,
                f"state epoch {state_epoch} is below the held {held.state.state_epoch}",
            )
        value = ShareSnapshotValue(
            snapshot_epoch=0 if held is None else held.snapshot_epoch + 1,
            state_epoch=state_epoch,
            leader_epoch=-1 if held is None else held.state.leader_epoch,
            start_offset=start_offset,
            create_timestamp=now_ms,
            write_timestamp=now_ms,
            state_batches=(),
            delivery_complete_count=0,
        )
        return [self._made(key, ShareSnapshotKey(*_fields(key)), value)]

    def delete(self, key: SharePartitionKey) -> list[Record]:
        """Forget ``key`` (DeleteShareGroupState): tombstones of both its keys, or nothing if
        it is not held."""
        if key not in self._held:
            return []
        self._held.pop(key)
        fields = _fields(key)
        return [(encode_key(ShareSnapshotKey(*fields)), None), (encode_key(ShareUpdateKey(*fields)), None)]

    def _made(
        self, key: SharePartitionKey, record_key: ShareSnapshotKey | ShareUpdateKey,
        value: ShareStateValue,
    ) -> Record:
        """Encode a record built by a call and apply it (its offset is not known yet:
        :meth:`appended`)."""
        record = (encode_key(record_key), encode_value(value))
        self._apply(key, value, None)
        return record


def _fields(key: SharePartitionKey) -> tuple[str, uuid.UUID, int]:
    return key.group_id, key.topic_id, key.partition


def _check_key(key: SharePartitionKey) -> None:
    if key.partition < 0 or key.partition > _INT32_MAX:
        raise StateRefused(ErrorCode.invalid_request, f"partition {key.partition}")
    try:
        encode_key(ShareSnapshotKey(*_fields(key)))
    except SchemaError as e:
        raise StateRefused(ErrorCode.invalid_request, str(e)) from None


def _check_epoch(what: str, epoch: int) -> None:
    if not -1 <= epoch <= _INT32_MAX:
        raise StateRefused(ErrorCode.invalid_request, f"{what} {epoch}")


def _check_write(change: StateWrite) -> None:
    if change.start_offset < -1:
        raise StateRefused(ErrorCode.invalid_request, f"start offset {change.start_offset}")
    for b in change.batches:
        if not _valid_batch(b):
            raise StateRefused(ErrorCode.invalid_request, f"invalid state batch {b}")


def _valid_batch(b: StateBatch) -> bool:
    return (
        0 <= b.first_offset <= b.last_offset
        and b.delivery_state in _PERSISTED_STATES
        and 0 <= b.delivery_count <= _INT16_MAX
    )
