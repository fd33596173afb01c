"""How big a shard's write to ``__consumer_offsets`` will be, known before its records exist.

Every write of a shard must fit in one record batch of at most ``message.max.bytes``
(:attr:`coordinator.config.GroupConfig.max_batch_bytes`), as in Kafka's coordinator runtime;
the broker's runtime enforces that where it encodes the batch. The functions here let the shard
turn away a request whose records could not fit before building any of them:

- :func:`offset_commit_floor` and :func:`join_record_floor` are *floors*, computed from a
  request's sizes alone: never more than the batch the request would really produce, so a
  request whose write would have fit is never refused on their word (:func:`join_record_fits`
  compares the join's floor with a limit, from the request's lengths alone when they are small);
- :func:`group_record_batch_size` and :func:`tombstones_batch_size` are exact, for records
  about to be written: a group record, and the tombstones of a deletion (which must be
  refused before anything is forgotten, since a deletion cannot be undone).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from kcoord.coordinator.messages import JoinGroupRequest, OffsetCommitPartition
from kcoord.coordinator.schemas import (
    GroupMetadataValue,
    MemberMetadata,
    group_metadata_key_size,
    group_metadata_value_size,
    offset_commit_key_size,
    offset_commit_value_size,
)
from kcoord.protocol.batch import HEADER_SIZE
from kcoord.protocol.record_encoding import kv_record_size, kv_run_size

__all__ = [
    "group_record_batch_size",
    "join_record_fits",
    "join_record_floor",
    "offset_commit_floor",
    "tombstones_batch_size",
]

_MAX_STRING = 0x7FFF  # longest string (in UTF-8 bytes) a record field can hold


def _utf8_size(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8"))


def offset_commit_floor(
    group_id: str,
    topics: Iterable[tuple[str, Iterable[OffsetCommitPartition]]],
    metadata_max_bytes: int,
    by_id: Collection[str] = (),
) -> int:
    """A floor on the batch an OffsetCommit of ``topics`` writes (0 if it writes nothing);
    the values of the topics in ``by_id`` carry a topic id.

    Follows the shard's rules for which partitions get a record (J6): none when the group id
    is too long for a key, none for a topic too long for one, none for metadata over
    ``metadata_max_bytes`` UTF-8 bytes (or over a string field's limit). A partition that
    certainly gets one counts its exact record size, except that non-ASCII metadata counts one
    byte per character; one that might not (metadata that could be too long once encoded) is
    encoded to find out. Partitions without metadata are summed per run, not one by one.
    """
    group_size = _utf8_size(group_id)
    if group_size > _MAX_STRING:
        return 0
    sure_chars = min(metadata_max_bytes, _MAX_STRING) // 4  # stored whatever their encoding
    total = 0
    delta = 0  # offset delta of the next record
    for topic, partitions in topics:
        topic_size = _utf8_size(topic)
        if topic_size > _MAX_STRING:
            continue
        with_id = topic in by_id
        plain_value = offset_commit_value_size(0, with_id)
        key = offset_commit_key_size(group_size, topic_size)
        run = 0  # partitions without metadata not yet counted
        for p in partitions:
            metadata = p[3]
            if not metadata:
                run += 1
                continue
            chars = len(metadata)
            if chars <= sure_chars:
                size = chars  # at least one UTF-8 byte per character
            else:
                size = len(metadata.encode("utf-8"))
                if size > metadata_max_bytes or size > _MAX_STRING:
                    continue  # OFFSET_METADATA_TOO_LARGE: no record
            if run:
                total += kv_run_size(delta, run, key, plain_value)
                delta += run
                run = 0
            total += kv_record_size(delta, key, offset_commit_value_size(size, with_id))
            delta += 1
        if run:
            total += kv_run_size(delta, run, key, plain_value)
            delta += run
    return HEADER_SIZE + total if delta else 0


def join_record_floor(req: JoinGroupRequest) -> int:
    """A floor on the batch of any group record that holds the member joining with ``req``:
    the record of a group with this member alone, its id unknown (empty), no protocol and no
    leader named, subscribed with the smallest metadata it offers, nothing assigned. Strings
    too long for a record field count as the longest they could be (the join is then refused
    by its metadata or not at all)."""
    smallest = min(req.protocols, key=lambda p: len(p[1]))[1] if req.protocols else b""
    member = MemberMetadata(
        member_id="",
        group_instance_id=_clip(req.group_instance_id),
        client_id=_clip(req.client_id) or "",
        client_host=_clip(req.client_host) or "",
        rebalance_timeout=req.rebalance_timeout_ms,
        session_timeout=req.session_timeout_ms,
        subscription=smallest,
        assignment=b"",
    )
    value = GroupMetadataValue(
        protocol_type=_clip(req.protocol_type) or "",
        generation=0,
        protocol=None,
        leader=None,
        current_state_timestamp=-1,
        members=(member,),
    )
    key = group_metadata_key_size(min(_utf8_size(req.group_id), _MAX_STRING))
    return HEADER_SIZE + kv_record_size(0, key, group_metadata_value_size(value))


_JOIN_RECORD_FIXED = 256
"""More than a one-member group record's batch takes besides its strings and its metadata
(the batch header aside): lengths, counts, timeouts, the record's own framing."""


def join_record_fits(req: JoinGroupRequest, limit: int) -> bool:
    """``join_record_floor(req) <= limit``, answered from the request's lengths when they are
    clearly small enough (every join but the largest): at most 4 UTF-8 bytes per character."""
    chars = len(req.group_id) + len(req.client_id) + len(req.client_host) + len(req.protocol_type)
    if req.group_instance_id is not None:
        chars += len(req.group_instance_id)
    smallest = min((len(metadata) for _, metadata in req.protocols), default=0)
    if HEADER_SIZE + _JOIN_RECORD_FIXED + 4 * chars + smallest <= limit:
        return True
    return join_record_floor(req) <= limit


def _clip(text: str | None) -> str | None:
    """``text``, or a stand-in of the longest size a string field holds if it is longer."""
    if text is None or _utf8_size(text) <= _MAX_STRING:
        return text
    return "x" * _MAX_STRING


def group_record_batch_size(group_id: str, value: GroupMetadataValue) -> int:
    """The exact size of the batch holding the one group record ``value`` of ``group_id``;
    SchemaError if the record cannot be encoded at all (a string too long for its field)."""
    key = group_metadata_key_size(_utf8_size(group_id))
    return HEADER_SIZE + kv_record_size(0, key, group_metadata_value_size(value))


def tombstones_batch_size(
    groups: Iterable[tuple[str, Iterable[tuple[str, int]], bool]],
) -> int:
    """The exact size of the batch of tombstones written, in this order, for each
    ``(group id, offsets as (topic, partition), with its group record)``: the offsets' keys,
    then the group's key if asked; 0 if that is no record at all."""
    total = 0
    delta = 0
    for group_id, offsets, with_group in groups:
        group_size = _utf8_size(group_id)
        topic: str | None = None
        key = run = 0
        for t, _partition in offsets:
            if t != topic:
                if run:
                    total += kv_run_size(delta, run, key, None)
                    delta += run
                topic, key, run = t, offset_commit_key_size(group_size, _utf8_size(t)), 0
            run += 1
        if run:
            total += kv_run_size(delta, run, key, None)
            delta += run
        if with_group:
            total += kv_record_size(delta, group_metadata_key_size(group_size), None)
            delta += 1
    return HEADER_SIZE + total if delta else 0
