"""The committed offsets of one shard: OffsetCommit, OffsetFetch, OffsetDelete, retention (J, I6).

:class:`OffsetManager` owns the offsets cache (group id -> (topic, partition) -> value), the
offset records it writes to the shard's partition (OffsetCommitKey v1 -> OffsetCommitValue v4,
v1 for a commit with a retention time; tombstones), their replay at start-up, the undo of a
commit whose records could not be appended, the periodic retention check (its own timer kind)
and the tombstones of deleted topics' offsets. Transactional commits are
written by the same store into :class:`coordinator.txn_pending.PendingTxnOffsets` instead of the
cache (``coordinator.txn_offsets`` handles TxnOffsetCommit and the markers); fetches with
RequireStable, expiry, OffsetDelete and DeleteGroups take the pending ones into account.

It sees groups only through a narrow interface that every group type implements (classic
groups and KIP-848 consumer groups), in :mod:`coordinator.offset_interface`:
:class:`~coordinator.offset_interface.OffsetGroup` (may this member commit, may offsets be
deleted, which offsets may expire) and :class:`~coordinator.offset_interface.OffsetGroups` (find
a group, create a standalone consumer's group for a commit, tell the group type that a commit
kept a member alive or that a group has no offsets left). Routing checks (not coordinator,
loading) are the shard's.
"""

from __future__ import annotations

import itertools
import logging
import operator
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass

from kcoord.coordinator.commit_records import CommitKeys, stored_answer, stored_before
from kcoord.coordinator.config import GroupConfig
from kcoord.coordinator.messages import (
    FetchedOffset,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetFetchResponse,
    TxnOffsetCommitRequest,
)
from kcoord.coordinator.offset_interface import OffsetGroups, PartitionCheck, committing_group
from kcoord.coordinator.output import Operation
from kcoord.coordinator.schemas import (
    OffsetCommitKey,
    OffsetCommitValue,
    SchemaError,
    decode_offset_commit_value,
    encode_key,
    encode_offset_commit_fields,
    encode_offset_commit_value,
)
from kcoord.coordinator.timers import TimerEntry, TimerKind, Timers
from kcoord.coordinator.txn_pending import PendingTxnOffsets, TxnCommitWriteFailed, unstable
from kcoord.coordinator.write_size import offset_commit_floor, tombstones_batch_size
from kcoord.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

RETENTION_TIMER = 3
"""The timer kind of the retention check (key and subkey ""): one per shard."""

Offsets = dict[tuple[str, int], OffsetCommitValue]

_NONE = ErrorCode.none
_NO_OFFSETS: Offsets = {}  # never written
_new_tuple = tuple.__new__  # a named tuple without its constructor's frame (per partition)
_first = operator.itemgetter(0)


@dataclass(frozen=True, slots=True)
class CommitWriteFailed:
    """The offset records of an OffsetCommit failed: put back the cached offsets they
    replaced (where nothing newer has been written since) and answer the commit with the
    mapped error for every partition it stored (J6)."""

    handle: Hashable
    response: OffsetCommitResponse
    group_id: str
    written: tuple[tuple[str, int, OffsetCommitValue, OffsetCommitValue | None], ...]
    """(topic, partition, value written, value it replaced), in emission order."""

    @property
    def handles(self) -> tuple[Hashable, ...]:
        return (self.handle,)


def commit_error(
    req: OffsetCommitRequest | TxnOffsetCommitRequest, error: int
) -> OffsetCommitResponse:
    """``error`` on every partition of ``req``."""
    return OffsetCommitResponse(
        tuple(
            (topic, tuple(zip(map(_first, parts), itertools.repeat(error))))
            for topic, parts in req.topics
        )
    )


def expire_timestamp(req: OffsetCommitRequest | TxnOffsetCommitRequest, now_ms: int) -> int:
    """The expire timestamp a commit gives its offsets (Kafka's expireTimestampMs): -1 (none:
    the group's retention rule applies) unless an OffsetCommit v2-v4 set a retention time
    other than -1, then the commit time plus it. TxnOffsetCommit has no retention time."""
    if isinstance(req, TxnOffsetCommitRequest) or req.retention_ms == -1:
        return -1
    return now_ms + req.retention_ms


def _fetched(partition: int, value: OffsetCommitValue | None) -> FetchedOffset:
    if value is None:
        return _new_tuple(FetchedOffset, (partition, -1, -1, "", _NONE))
    return _new_tuple(
        FetchedOffset, (partition, value.offset, value.leader_epoch, value.metadata, _NONE)
    )


def fetched_offsets(
    offsets: Mapping[tuple[str, int], OffsetCommitValue],
    wanted: Iterable[tuple[str, Iterable[int]]] | None,
) -> tuple[tuple[str, tuple[FetchedOffset, ...]], ...]:
    """The topics of an OffsetFetch answer from a group's committed ``offsets``: every
    requested partition in request order (-1 where nothing is committed), or, ``wanted``
    None, every committed offset by topic, then partition."""
    if wanted is not None:
        return tuple(
            (topic, tuple([_fetched(p, offsets.get((topic, p))) for p in partitions]))
            for topic, partitions in wanted
        )
    by_topic: dict[str, list[tuple[int, OffsetCommitValue]]] = {}
    for (topic, partition), value in offsets.items():
        by_topic.setdefault(topic, []).append((partition, value))
    # Sorted topic by topic, on the partition numbers alone: a sort of one big list of
    # (topic, partition) keys compares strings and holds the interpreter far longer.
    return tuple(
        (topic, tuple([_fetched(p, v) for p, v in sorted(by_topic[topic], key=_first)]))
        for topic in sorted(by_topic)
    )


class OffsetManager:
    """The committed offsets of one shard (see the module docstring)."""

    def __init__(
        self,
        partition: int,
        config: GroupConfig,
        op: Operation,
        timers: Timers,
        groups: OffsetGroups,
    ) -> None:
        self.partition = partition
        self.config = config
        self._op = op
        self._timers = timers
        self._groups = groups
        self._offsets: dict[str, Offsets] = {}
        self.pending = PendingTxnOffsets()
        """Offsets of open transactions (TxnOffsetCommit), invisible until their COMMIT."""
        self._retention_token = 0
        self._keys = CommitKeys()
        self.committed_count = 0
        """Partition offsets accepted by OffsetCommit since start (a metrics counter)."""
        self.expired_count = 0
        """Offsets removed by the retention check since start (Kafka's offset-expiration-count)."""
        self.deleted_count = 0
        """Offsets removed by OffsetDelete since start (Kafka's offset-deletion-count; not those
        of groups deleted whole by DeleteGroups, which Kafka does not count either)."""
        timers.register(
            RETENTION_TIMER,
            TimerKind(live=self._retention_live, fire=self._on_retention_timer),
        )

    # ---- what is held ---------------------------------------------------------------------

    def of(self, group_id: str) -> Offsets:
        """The cached offsets of ``group_id`` (read-only by convention)."""
        return self._offsets.get(group_id, _NO_OFFSETS)

    def count(self) -> int:
        return sum(len(offsets) for offsets in self._offsets.values())

    def group_ids(self) -> Iterable[str]:
        """Groups that hold offsets."""
        return self._offsets.keys()

    # ---- OffsetCommit (J6, M3) --------------------------------------------------------------

    def commit(self, handle: Hashable, req: OffsetCommitRequest, now_ms: int) -> int | None:
        """Validate and store an OffsetCommit (J6, M3); returns the error for every partition,
        or None if it replied (the reply rides with the records; :meth:`commit_write_failed`
        undoes the cache update if they cannot be appended).

        As in Kafka, an unknown group is created before the member checks run: a commit with
        generation < 0 creates an Empty standalone group (C2), one with a generation gets
        ILLEGAL_GENERATION; so an anonymous-generation commit carrying a member or instance id
        leaves an Empty group behind (removed by the next retention check)."""
        groups = self._groups
        found = committing_group(groups, req.group_id, req.generation_id, now_ms)
        if isinstance(found, int):
            return found
        group, created = found
        error = group.validate_offset_commit(
            req.member_id, req.group_instance_id, req.generation_id, req.api_version
        )
        if error is not None:
            return error
        limit = self.config.max_batch_bytes
        floor = offset_commit_floor(
            req.group_id,
            req.topics,
            self.config.offset_metadata_max_bytes,
            {name for name, _ in req.topic_ids},
        )
        if floor > limit:
            # Its records cannot fit in one batch: Kafka's runtime fails the write before
            # applying any of it, and the commit is answered UNKNOWN_SERVER_ERROR throughout.
            log.warning(
                "group %s: OffsetCommit refused: its records need at least %d bytes, more than"
                " the %d of one batch",
                req.group_id,
                floor,
                limit,
            )
            if created:
                groups.forget(req.group_id)  # nothing was written: as if never created
            return ErrorCode.unknown_server_error
        check = groups.commit_partition_check(req.group_id, req.member_id, req.generation_id)
        groups.commit_accepted(req.group_id, req.member_id, now_ms)
        self._store(handle, req.group_id, req, now_ms, check=check)
        return None

    def _store(
        self,
        handle: Hashable,
        group_id: str,
        req: OffsetCommitRequest | TxnOffsetCommitRequest,
        now_ms: int,
        producer_id: int = -1,
        check: PartitionCheck | None = None,
    ) -> None:
        """Storing: partitions that fail ``check`` get its error (KIP-1251) and partitions whose
        metadata exceeds ``offset_metadata_max_bytes`` UTF-8 bytes
        get OFFSET_METADATA_TOO_LARGE, both skipped; every other partition gets one record
        (commit time ``now_ms``) and is applied to the cache at once, or, for a transactional
        commit (``producer_id`` >= 0), held pending for that producer."""
        max_bytes = self.config.offset_metadata_max_bytes
        transactional = producer_id >= 0
        # A transactional commit is staged in a dict of its own, then held pending.
        cache = {} if transactional else self._offsets.get(group_id)
        op = self._op
        assert op.out is not None
        # The hot loop, one pass per partition: its key comes from the shard's CommitKeys, its
        # value is encoded once, and a topic whose partitions were all stored is answered with
        # shared pairs (no (partition, error) pair is built unless one is refused).
        records: list[tuple[bytes, bytes | None]] = op.out.records
        keys = self._keys
        new_value = tuple.__new__  # OffsetCommitValue without its constructor's frame
        value_type = OffsetCommitValue
        too_large, no_topic = (
            ErrorCode.offset_metadata_too_large,
            ErrorCode.unknown_topic_or_partition,
        )
        results: list[tuple[str, tuple[tuple[int, int], ...]]] = []
        written: list[tuple[str, int, OffsetCommitValue, OffsetCommitValue | None]] = []
        # Named by id (OffsetCommit v10): the records keep the id, as Kafka's do.
        ids = dict(req.topic_ids) if isinstance(req, OffsetCommitRequest) else {}
        expire_at = expire_timestamp(req, now_ms)
        for topic, partitions in req.topics:
            errors: list[tuple[int, int]] | None = None  # made at the first refusal
            topic_id = ids.get(topic) if ids else None
            topic_keys = keys.of(group_id, topic)
            for i, (partition, offset, leader_epoch, metadata) in enumerate(partitions):
                if check is not None:
                    refused = check(topic, partition)
                    if refused is not None:
                        if errors is None:
                            errors = stored_before(partitions, i)
                        errors.append((partition, refused))
                        continue
                if metadata is None:
                    metadata = ""
                elif len(metadata) * 4 > max_bytes and len(metadata.encode("utf-8")) > max_bytes:
                    if errors is None:
                        errors = stored_before(partitions, i)
                    errors.append((partition, too_large))
                    continue
                if topic_keys is None:
                    # A topic or group name too long for the record key: no such topic exists.
                    if errors is None:
                        errors = stored_before(partitions, i)
                    errors.append((partition, no_topic))
                    continue
                try:
                    if expire_at == -1:
                        value_bytes = encode_offset_commit_fields(
                            offset, leader_epoch, metadata, now_ms, topic_id
                        )
                        value = new_value(
                            value_type, (offset, metadata, now_ms, leader_epoch, -1, topic_id)
                        )
                    else:  # value v1, as Kafka writes it: no leader epoch, no topic id
                        value = OffsetCommitValue(offset, metadata, now_ms, -1, expire_at)
                        value_bytes = encode_offset_commit_value(value)
                except SchemaError:
                    if errors is None:
                        errors = stored_before(partitions, i)
                    errors.append((partition, no_topic))  # metadata over an int16 length
                    continue
                if cache is None:
                    cache = self._offsets.setdefault(group_id, {})
                tp = (topic, partition)
                written.append((topic, partition, value, cache.get(tp)))
                cache[tp] = value
                records.append((topic_keys.key(partition), value_bytes))
                if errors is not None:
                    errors.append((partition, _NONE))
            if errors is None:
                results.append((topic, stored_answer(partitions)))
            else:
                results.append((topic, tuple(errors)))
        response = OffsetCommitResponse(tuple(results))
        op.reply(handle, response)
        if not written:
            return
        self.committed_count += len(written)
        pending = self.pending
        if transactional:
            assert isinstance(req, TxnOffsetCommitRequest)
            held, epochs = pending.hold(producer_id, req.producer_epoch, group_id, written)
            op.on_failure(
                TxnCommitWriteFailed(handle, response, group_id, producer_id, held, epochs)
            )
            return
        if pending.has_open(group_id):  # pending offsets written before these now lose
            for topic, partition, _, _ in written:
                pending.note_visible(group_id, (topic, partition), pending.next_position())
        op.on_failure(CommitWriteFailed(handle, response, group_id, tuple(written)))

    def commit_write_failed(self, action: CommitWriteFailed, error: int) -> None:
        """Undo the cache update of a failed OffsetCommit, newest first, wherever the cache
        still holds the value it wrote (a later commit or tombstone wins), then answer the
        stored partitions with ``error``.

        Known limit: when two in-flight commits of the same partition both fail, the later
        one's undo restores the earlier (also failed) value; nothing durable is lost and
        the next successful commit or a reload corrects it."""
        cache = self._offsets.get(action.group_id)
        if cache is not None:
            for topic, partition, value, previous in reversed(action.written):
                tp = (topic, partition)
                if cache.get(tp) is value:
                    if previous is None:
                        del cache[tp]
                    else:
                        cache[tp] = previous
            if not cache:
                del self._offsets[action.group_id]
        log.warning(
            "group %s: storing %d committed offsets failed (%s)",
            action.group_id,
            len(action.written),
            error,
        )
        self._op.reply(
            action.handle,
            OffsetCommitResponse(
                tuple(
                    (topic, tuple((p, error if e == ErrorCode.none else e) for p, e in parts))
                    for topic, parts in action.response.topics
                )
            ),
        )

    def materialize(self, group_id: str, tp: tuple[str, int], value: OffsetCommitValue) -> None:
        """A committed transaction's offset becomes the group's committed offset."""
        self._offsets.setdefault(group_id, {})[tp] = value

    def unmaterialize(
        self,
        group_id: str,
        tp: tuple[str, int],
        value: OffsetCommitValue,
        previous: OffsetCommitValue | None,
    ) -> None:
        """Undo :meth:`materialize` (its marker failed) unless something newer was stored."""
        cache = self._offsets.get(group_id)
        if cache is None or cache.get(tp) is not value:
            return
        if previous is not None:
            cache[tp] = previous
        else:
            del cache[tp]
            if not cache:
                del self._offsets[group_id]

    # ---- OffsetFetch --------------------------------------------------------------------------

    def fetch(
        self,
        group_id: str,
        wanted: Iterable[tuple[str, Iterable[int]]] | None,
        require_stable: bool = False,
    ) -> OffsetFetchResponse:
        """The committed offsets; with ``require_stable`` a partition with a pending
        transactional offset is UNSTABLE_OFFSET_COMMIT (offset -1), as Kafka answers."""
        topics = fetched_offsets(self._offsets.get(group_id, _NO_OFFSETS), wanted)
        if require_stable and self.pending.has_open(group_id):
            topics = unstable(topics, self.pending.pending_partitions(group_id))
        return OffsetFetchResponse(ErrorCode.none, topics)

    # ---- OffsetDelete, DeleteGroups --------------------------------------------------------

    def delete(self, handle: Hashable, req: OffsetDeleteRequest, now_ms: int) -> None:
        """OffsetDelete (Kafka's handleDeleteOffsets), after the shard's routing checks.

        Group-level errors (then no topics): unknown group -> GROUP_ID_NOT_FOUND, and the
        group's own check
        (:meth:`coordinator.offset_interface.OffsetGroup.validate_offset_delete`). An Empty
        group loses every requested offset; a group with members keeps the offsets of topics
        it subscribes to (GROUP_SUBSCRIBED_TO_TOPIC per partition) and loses the others.

        Each removed offset gets a tombstone; partitions without an offset still answer
        NONE. A group left without offsets is then told so (I6: an Empty one goes Dead). Like
        Kafka, a failed tombstone append does not change the (successful) reply."""
        op = self._op
        group = self._groups.offset_group(req.group_id)
        error = (
            ErrorCode.group_id_not_found if group is None else group.validate_offset_delete()
        )
        if error is not None:
            op.reply(handle, OffsetDeleteResponse(error, ()))
            return
        assert group is not None
        empty = group.is_empty
        cache = self._offsets.get(req.group_id, {})
        found: dict[tuple[str, int], None] = {}  # offsets to delete, in request order
        any_eligible = False
        results: list[tuple[str, tuple[tuple[int, int], ...]]] = []
        for topic, partitions in req.topics:
            if not empty and group.is_subscribed_to(topic):
                results.append(
                    (topic, tuple((p, ErrorCode.group_subscribed_to_topic) for p in partitions))
                )
                continue
            for p in partitions:
                any_eligible = True
                if (topic, p) in cache or self.pending.is_pending(req.group_id, (topic, p)):
                    found[(topic, p)] = None
            results.append((topic, tuple((p, ErrorCode.none) for p in partitions)))
        # The group's own tombstone comes too if the deletion leaves an Empty group that had
        # a generation without offsets (I6).
        with_group = (
            any_eligible
            and empty
            and sum(1 for tp in found if tp in cache) == len(cache)
            and group.may_have_record
            and not self.pending.has_open(req.group_id)
        )
        size = tombstones_batch_size([(req.group_id, found, with_group)])
        if size > self.config.max_batch_bytes:
            # Kafka writes these tombstones atomically and, when they do not fit in one batch,
            # fails the request before deleting anything: a group-level UNKNOWN_SERVER_ERROR.
            log.warning(
                "group %s: OffsetDelete of %d offsets refused: %d bytes of tombstones exceed"
                " one batch of at most %d bytes",
                req.group_id,
                len(found),
                size,
                self.config.max_batch_bytes,
            )
            op.reply(handle, OffsetDeleteResponse(ErrorCode.unknown_server_error, ()))
            return
        removed = list(found)
        if any_eligible:
            self._remove(req.group_id, removed, now_ms)
            self.deleted_count += len(removed)
            log.info("group %s: %d offsets deleted by OffsetDelete", req.group_id, len(removed))
        op.reply(handle, OffsetDeleteResponse(ErrorCode.none, tuple(results)))

    def _remove(self, group_id: str, removed: list[tuple[str, int]], now_ms: int) -> None:
        """Drop ``removed`` offsets of ``group_id`` with a tombstone each (Kafka's
        cleanupGroupMetadata); a group left without offsets is told so."""
        self.drop(group_id, removed)
        if group_id not in self._offsets and not self.pending.has_open(group_id):
            # A group with an open transaction stays until it completes (as in Kafka).
            self._groups.offsets_gone(group_id, now_ms)

    def drop(self, group_id: str, removed: Iterable[tuple[str, int]]) -> None:
        """Drop ``removed`` offsets of ``group_id``, committed and pending ones, with a
        tombstone each; the group is not told (see :meth:`_remove`)."""
        emit = self._op.emit
        cache = self._offsets.get(group_id)
        pending = self.pending
        has_open = pending.has_open(group_id)
        for topic, partition in removed:
            if cache is not None:
                cache.pop((topic, partition), None)
            if has_open:
                pending.remove_partition(group_id, (topic, partition))
            emit(encode_key(OffsetCommitKey(group_id, topic, partition)), None)
        if cache is not None and not cache:
            del self._offsets[group_id]

    def holders(self) -> list[str]:
        """The groups holding committed offsets or pending ones of open transactions."""
        held = self._offsets
        return [*held, *(g for g in self.pending.open_groups() if g not in held)]

    def delete_all(self, group_id: str) -> None:
        """Drop every offset of a group being deleted, with a tombstone each (DeleteGroups);
        pending transactional offsets too (a tombstone for those not also committed), while
        their transactions stay open for the group, as in Kafka (``coordinator.deletion``
        puts them back if the tombstones cannot be written)."""
        emit = self._op.emit
        committed = self._offsets.pop(group_id, {})
        for topic, partition in committed:
            emit(encode_key(OffsetCommitKey(group_id, topic, partition)), None)
        if self.pending.has_open(group_id):
            for topic, partition in sorted(self.pending.pending_partitions(group_id)):
                if (topic, partition) not in committed:
                    emit(encode_key(OffsetCommitKey(group_id, topic, partition)), None)
            self.pending.remove_group(group_id)

    def restore_deleted(self, group_id: str, offsets: Offsets) -> None:
        """Undo :meth:`delete_all` after its tombstones failed (none committed since)."""
        if offsets and group_id not in self._offsets:
            self._offsets[group_id] = offsets

    # ---- retention (J2-J4, I6) -----------------------------------------------------------

    def arm_retention(self, deadline_ms: int) -> None:
        self._retention_token = self._timers.push(deadline_ms, RETENTION_TIMER, "")

    def _retention_live(self, entry: TimerEntry) -> bool:
        return entry[1] == self._retention_token

    def _on_retention_timer(self, entry: TimerEntry, now_ms: int) -> None:
        self.expire(now_ms)
        self.arm_retention(now_ms + self.config.offsets_retention_check_interval_ms)

    def expire(self, now_ms: int) -> None:
        """The periodic retention check: expire offsets (J2-J4) and let groups left without
        offsets go (Kafka's cleanupGroupMetadata with removeExpiredOffsets). There are no
        pending commits to exclude: a commit is in the cache from the moment its record is
        emitted, and any tombstone this check emits is appended after that record."""
        expired_total = 0
        retention = self.config.offsets_retention_ms
        groups = self._groups
        for group_id in groups.offset_group_ids():
            group = groups.offset_group(group_id)
            if group is None:
                continue
            expiry = group.offset_expiry()
            cache = self._offsets.get(group_id)
            expired: list[tuple[str, int]] = []
            if cache and expiry is not None:
                kept, since = expiry.kept_topics, expiry.since
                has_open = self.pending.has_open(group_id)
                for tp, value in cache.items():
                    if tp[0] in kept:
                        continue
                    if has_open and self.pending.is_pending(group_id, tp):
                        continue  # not while a transaction may still commit it
                    if value.expire_timestamp >= 0:
                        if now_ms >= value.expire_timestamp:
                            expired.append(tp)
                        continue
                    base = since if since is not None else value.commit_timestamp
                    if now_ms - base >= retention:
                        expired.append(tp)
            expired_total += len(expired)
            self._remove(group_id, expired, now_ms)
        self.expired_count += expired_total
        if expired_total:
            log.info("partition %d: %d offsets expired", self.partition, expired_total)

    # ---- loading and unloading (K3) -------------------------------------------------------

    def replay(self, key: OffsetCommitKey, value: bytes | None) -> None:
        """Apply one offset record (the newest value per key wins, I5; None: a tombstone).
        Transactional records come through :mod:`coordinator.txn_offsets`' replay."""
        tp = (key.topic, key.partition)
        if value is None:
            offsets = self._offsets.get(key.group)
            if offsets is not None:
                offsets.pop(tp, None)
                if not offsets:
                    del self._offsets[key.group]
        else:
            self._offsets.setdefault(key.group, {})[tp] = decode_offset_commit_value(value)

    def clear(self) -> None:
        self._offsets.clear()
        self.pending.clear()
        self._retention_token = 0
