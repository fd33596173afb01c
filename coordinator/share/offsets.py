"""The group coordinator's part of the share offsets admin APIs (Kafka 4.2):
DescribeShareGroupOffsets (90), AlterShareGroupOffsets (91) and DeleteShareGroupOffsets (92).

Each of them spans the group coordinator (the share group, its members, record 15: which topic
partitions have share state) and the share coordinator (the state itself). The part here is
sans-IO and runs in the shard owning the group (:meth:`coordinator.shard.GroupShard.share_offsets`):
it checks the request against the group, writes what the group must remember, and answers with
what the broker must then do with the share state (broker/share/admin_api.py does it, then
answers the client).

- **Describe every partition** (:class:`InitializedRead`): the group's record 15. Kafka reads it
  for any id: an unknown group, or a group of another type, has nothing initialized, and is no
  error.
- **Alter** (:class:`OffsetsAlter`): a group of another type is GROUP_ID_NOT_FOUND; a share group
  with members is NON_EMPTY_GROUP; a group that does not exist is created (Kafka 4.2 lets offsets
  be set before a share group is first used). Per partition: a topic or partition index that does
  not exist is UNKNOWN_TOPIC_OR_PARTITION, a negative start offset INVALID_REQUEST. Record 15
  then holds the altered partitions, and the answer lists the (topic id, partition, start offset)
  to initialize in the share state. Kafka writes them as "initializing" first and moves them to
  "initialized" once the share coordinator answered; here they are initialized in the one write
  (as the heartbeat does, coordinator/share/manager.py): a partition whose state could not be set
  keeps its old state, or, if it had none, starts from ``share.auto.offset.reset``.
- **Delete**, in two steps: :class:`OffsetsDeleteCheck` (no write: the group must be an empty
  share group; each named topic must exist, else UNKNOWN_TOPIC_OR_PARTITION, and have share
  state in the group, else UNKNOWN_TOPIC_OR_PARTITION "no offset information") answers which
  partitions' state to delete; once deleted, :class:`OffsetsDeleted` takes them out of record
  15. Deleting first means a failure half-way leaves record 15 naming a partition without state,
  which a retry deletes again, never state that record 15 forgot.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable

from kcoord.coordinator.consumer.topics import TopicId
from kcoord.coordinator.share.manager import ShareGroupManager
from kcoord.coordinator.share.messages import (
    AlterPlan,
    DeletePlan,
    Initialized,
    InitializedRead,
    OffsetsAlter,
    OffsetsDeleteCheck,
    OffsetsDeleted,
    OffsetsDeletedResponse,
    PartitionResult,
    ShareOffsetsRequest,
    TopicResult,
)
from kcoord.protocol.errors import ErrorCode

Gate = Callable[..., int | None]
"""The shard's routing check: ``gate(group_id, empty_id_ok=...)`` -> error code or None."""

UNKNOWN_PARTITION = ErrorCode.unknown_topic_or_partition


# ---- the shard's operation -----------------------------------------------------------------------


def share_offsets(
    share: ShareGroupManager,
    gate: Gate,
    other_type: Callable[[str], bool],
    handle: Hashable,
    req: ShareOffsetsRequest,
    now_ms: int,
) -> None:
    """Answer ``req`` into the shard's operation under way (``share.op``)."""
    op = share.op
    if isinstance(req, InitializedRead):
        op.reply(handle, _initialized(share, gate, req.group_id))
    elif isinstance(req, OffsetsAlter):
        _alter(share, gate, other_type, handle, req, now_ms)
    elif isinstance(req, OffsetsDeleteCheck):
        op.reply(handle, _delete_check(share, gate, other_type, req))
    else:
        _deleted(share, gate, handle, req)


def _initialized(share: ShareGroupManager, gate: Gate, group_id: str) -> Initialized:
    error = gate(group_id, empty_id_ok=True)
    group = share.get(group_id) if error is None else None
    if group is None:
        return Initialized(error or 0, {})
    return Initialized(0, {t: (name, parts) for t, (name, parts, _) in group.initialized.items()})


def _group_error(
    share: ShareGroupManager,
    gate: Gate,
    other_type: Callable[[str], bool],
    group_id: str,
    create: bool,
) -> tuple[int, str | None] | None:
    """Why the group's offsets may not change (Kafka's order), None if they may."""
    if group_id == "":
        return ErrorCode.invalid_group_id, "The group id is empty."
    error = gate(group_id, empty_id_ok=False)
    if error is not None:
        return error, None
    if other_type(group_id):
        return ErrorCode.group_id_not_found, f"Group {group_id} is not a share group."
    group = share.get(group_id)
    if group is None:
        return (
            None if create else (ErrorCode.group_id_not_found, f"Share group {group_id} not found.")
        )
    if group.members:
        return (
            ErrorCode.non_empty_group,
            f"Share group {group_id} has {len(group.members)} active member(s): its offsets can"
            " only change while it has none.",
        )
    return None


def _alter(
    share: ShareGroupManager,
    gate: Gate,
    other_type: Callable[[str], bool],
    handle: Hashable,
    req: OffsetsAlter,
    now_ms: int,
) -> None:
    gid = req.group_id
    refused = _group_error(share, gate, other_type, gid, create=True)
    if refused is not None:
        share.op.reply(handle, AlterPlan(*refused))
        return
    group = share.get(gid)
    initialized = dict(group.initialized) if group is not None else {}
    results: list[TopicResult] = []
    plan: list[tuple[TopicId, int, int]] = []
    for name, partitions in req.topics:
        info = share.topics.topic(name)
        if info is None:
            unknown = tuple(PartitionResult(p, UNKNOWN_PARTITION) for p, _ in partitions)
            results.append(TopicResult(name, None, unknown))
            continue
        answers: dict[int, PartitionResult] = {}
        offsets: dict[int, int] = {}
        for p, offset in partitions:
            if not 0 <= p < info.partitions:
                answers[p] = PartitionResult(p, UNKNOWN_PARTITION)
            elif offset < 0:
                answers[p] = PartitionResult(
                    p, ErrorCode.invalid_request, f"Start offset {offset} is negative."
                )
            else:
                answers[p] = PartitionResult(p)
                offsets[p] = offset
        results.append(TopicResult(name, info.topic_id, tuple(answers.values())))
        if offsets:
            plan += [(info.topic_id, p, o) for p, o in sorted(offsets.items())]
            _, held, added = initialized.get(info.topic_id, (name, frozenset(), now_ms))
            initialized[info.topic_id] = (name, held | offsets.keys(), added)
    answer = AlterPlan(0, None, tuple(results), tuple(plan))
    if plan:
        share.set_initialized(handle, gid, initialized, lambda error: AlterPlan(error))
    share.op.reply(handle, answer)


def _delete_check(
    share: ShareGroupManager, gate: Gate, other_type: Callable[[str], bool], req: OffsetsDeleteCheck
) -> DeletePlan:
    refused = _group_error(share, gate, other_type, req.group_id, create=False)
    if refused is not None:
        return DeletePlan(*refused)
    group = share.get(req.group_id)
    assert group is not None
    errors: list[TopicResult] = []
    delete: dict[TopicId, tuple[TopicId, str, tuple[int, ...]]] = {}
    for name in req.topic_names:
        info = share.topics.topic(name)
        held = group.initialized.get(info.topic_id) if info is not None else None
        if info is None:
            errors.append(TopicResult(name, None, error=UNKNOWN_PARTITION))
        elif held is None:
            errors.append(
                TopicResult(
                    name,
                    info.topic_id,
                    error=UNKNOWN_PARTITION,
                    message=f"Share group {req.group_id} has no offsets of topic {name} to delete.",
                )
            )
        else:
            delete[info.topic_id] = (info.topic_id, name, tuple(sorted(held[1])))
    return DeletePlan(0, None, tuple(errors), tuple(delete.values()))


def _deleted(share: ShareGroupManager, gate: Gate, handle: Hashable, req: OffsetsDeleted) -> None:
    error = gate(req.group_id, empty_id_ok=False)
    group = share.get(req.group_id) if error is None else None
    if group is not None and any(t in group.initialized for t in req.topic_ids):
        kept = {t: v for t, v in group.initialized.items() if t not in req.topic_ids}
        share.set_initialized(handle, req.group_id, kept, OffsetsDeletedResponse)
    share.op.reply(handle, OffsetsDeletedResponse(error or 0))
