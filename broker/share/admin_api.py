"""The share offsets admin APIs on the wire: DescribeShareGroupOffsets (90) v0-v1,
AlterShareGroupOffsets (91) v0 and DeleteShareGroupOffsets (92) v0, as Kafka 4.2 answers them.

Each handler checks what Kafka's KafkaApis checks, asks the group's shard for its part
(:mod:`coordinator.share.offsets`: the group's checks and record 15), then does the share
state's part through the persister and drops the share partitions it changed from the broker's
memory (:meth:`SharePartitionManager.forget`), so that their next fetch loads the new state.

- **Describe**: DESCRIBE on the group (else GROUP_AUTHORIZATION_FAILED for that group). Named
  topics: one the client may not DESCRIBE comes back with a zero topic id and, per partition,
  start offset -1 and TOPIC_AUTHORIZATION_FAILED; one that does not exist with a zero topic id
  and start offset -1 (no error). No topics named (null): every partition in the group's record
  15, less the topics the client may not DESCRIBE. Per partition: the share-partition start
  offset and leader epoch the share coordinator holds (-1 and 0 when it holds none, or cannot
  answer: absence, not an error, as Kafka treats it) and, from v1, the lag as KIP-1226 defines
  it: high watermark - start offset - records at or past the start offset already delivered
  (acknowledged or archived), -1 while the start offset is unknown. The group itself is not
  looked at for named topics, as in Kafka: an unknown group's partitions have no state.
- **Alter**: READ on the group (else a top-level GROUP_AUTHORIZATION_FAILED), READ on each
  topic (else TOPIC_AUTHORIZATION_FAILED on its partitions), the topic must exist (else
  UNKNOWN_TOPIC_OR_PARTITION); the coordinator's errors are top-level and answered alone. Each
  accepted partition's state is then initialized at its new start offset in a new state epoch
  (dropping its in-flight records); a failure is that partition's error.
- **Delete**: DELETE on the group (else a top-level GROUP_AUTHORIZATION_FAILED), READ on each
  topic (else TOPIC_AUTHORIZATION_FAILED on it); the coordinator's errors are top-level. The
  named topics' state is deleted, then taken out of record 15; a failed deletion is that
  topic's error. The next consumer of such a partition starts from ``share.auto.offset.reset``.
- **DeleteGroups of a share group** (:meth:`ShareOffsetsApi.delete_group_state`, called by
  broker/groups/api.py before the group itself goes): an Empty share group's state is deleted
  first, as Kafka does, so that a failure leaves the group there to be deleted again.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from kcoord.coordinator.share import messages as sm
from kcoord.protocol.errors import ErrorCode
from kcoord.share.model import SharePartitionKey, StateSummary

from ..data.log_read import high_watermark
from ..data.topics import storage_error_code
from ..net.connection import RequestContext
from ..security.acl.model import Operation, ResourceType
from .partitions import SharePartitionManager
from .persister import ShareStateError

if TYPE_CHECKING:
    from ..data.topics import TopicStore
    from ..groups.runtime import GroupRuntime

ZERO_UUID = uuid.UUID(int=0)
NO_LAG = -1
_GROUP = ResourceType.GROUP
_TOPIC = ResourceType.TOPIC
_TOPIC_REFUSED = "Not authorized to access the topic."


def share_lag(summary: StateSummary, high_watermark: int) -> int:
    """KIP-1226's lag of a share partition: the records between its start offset and the high
    watermark not yet delivered for good; -1 while the start offset is unknown."""
    if summary.start_offset < 0:
        return NO_LAG
    return high_watermark - summary.start_offset - summary.delivery_complete_count


class ShareOffsetsApi:
    def __init__(
        self, runtime: GroupRuntime, manager: SharePartitionManager, topics: TopicStore
    ) -> None:
        self.runtime = runtime
        self.manager = manager
        self.persister = manager.persister
        self.topics = topics

    async def _shard_call(self, group_id: str, request: sm.ShareOffsetsRequest) -> Any:
        runtime = self.runtime
        p = runtime.partition_of(group_id)
        return await runtime.call(p, runtime.shard(p).share_offsets, request)

    # DescribeShareGroupOffsets ----------------------------------------------------------------
    async def describe(self, ctx: RequestContext, req: Any) -> Any:
        groups = [await self._describe_group(ctx, g.group_id, g.topics) for g in req.groups]
        return ctx.respond(throttle_time=0, groups=groups)

    async def _describe_group(
        self, ctx: RequestContext, group_id: str, topics: Any
    ) -> dict[str, Any]:
        if not ctx.allowed(Operation.DESCRIBE, _GROUP, group_id):
            return dict(
                group_id=group_id, topics=[], error_code=ErrorCode.group_authorization_failed
            )
        wanted: list[tuple[str, Sequence[int]]] = []
        out: list[dict[str, Any]] = []
        refused: list[dict[str, Any]] = []
        if topics is None:
            read: sm.Initialized = await self._shard_call(group_id, sm.InitializedRead(group_id))
            if read.error:
                return dict(group_id=group_id, topics=[], error_code=read.error)
            for topic_id, (_name, held) in read.topics.items():
                topic = self.topics.by_id.get(topic_id)
                if topic is not None and ctx.allowed(
                    Operation.DESCRIBE, _TOPIC, topic.name, quiet=True
                ):
                    wanted.append((topic.name, sorted(held)))
            wanted.sort()
        else:
            unknown: list[dict[str, Any]] = []
            for t in topics:
                if not ctx.allowed(Operation.DESCRIBE, _TOPIC, t.topic_name):
                    parts = [
                        dict(
                            partition_index=p,
                            start_offset=-1,
                            leader_epoch=0,
                            error_code=ErrorCode.topic_authorization_failed,
                            error_message=_TOPIC_REFUSED,
                        )
                        for p in t.partitions
                    ]
                    refused.append(
                        dict(topic_name=t.topic_name, topic_id=ZERO_UUID, partitions=parts)
                    )
                elif self.topics.get(t.topic_name) is None:
                    parts = [
                        dict(partition_index=p, start_offset=-1, leader_epoch=0, error_code=0)
                        for p in t.partitions
                    ]
                    unknown.append(
                        dict(topic_name=t.topic_name, topic_id=ZERO_UUID, partitions=parts)
                    )
                else:
                    wanted.append((t.topic_name, t.partitions))
            refused = unknown + refused
        for name, partitions in wanted:
            topic = self.topics.get(name)
            assert topic is not None
            described = await asyncio.gather(
                *(self._describe_partition(group_id, topic.topic_id, p) for p in partitions)
            )
            out.append(dict(topic_name=name, topic_id=topic.topic_id, partitions=list(described)))
        return dict(group_id=group_id, topics=out + refused, error_code=ErrorCode.none)

    async def _describe_partition(
        self, group_id: str, topic_id: uuid.UUID, index: int
    ) -> dict[str, Any]:
        absent = dict(
            partition_index=index, start_offset=-1, leader_epoch=0, lag=NO_LAG, error_code=0
        )
        try:
            summary = await self.persister.read_summary(
                SharePartitionKey(group_id, topic_id, index)
            )
        except ShareStateError:
            return absent
        if summary.start_offset < 0:
            return absent
        answer = dict(
            partition_index=index,
            start_offset=summary.start_offset,
            leader_epoch=max(summary.leader_epoch, 0),
            lag=NO_LAG,
            error_code=0,
        )
        topic = self.topics.by_id.get(topic_id)
        plog = (
            topic.partitions[index]
            if topic is not None and 0 <= index < len(topic.partitions)
            else None
        )
        if plog is not None and plog.offline is not None:
            answer["error_code"] = storage_error_code(plog.offline)
        elif plog is not None:
            answer["lag"] = share_lag(summary, high_watermark(plog))
        return answer

    # AlterShareGroupOffsets ---------------------------------------------------------------------
    async def alter(self, ctx: RequestContext, req: Any) -> Any:
        group_id = req.group_id
        if not ctx.allowed(Operation.READ, _GROUP, group_id):
            return self._alter_error(ctx, ErrorCode.group_authorization_failed)
        refused: list[dict[str, Any]] = []
        accepted: list[tuple[str, tuple[tuple[int, int], ...]]] = []
        for t in req.topics:
            topic = self.topics.get(t.topic_name)
            if not ctx.allowed(Operation.READ, _TOPIC, t.topic_name):
                error, message = ErrorCode.topic_authorization_failed, _TOPIC_REFUSED
            elif topic is None:
                error, message = (
                    ErrorCode.unknown_topic_or_partition,
                    f"Topic {t.topic_name} does not exist.",
                )
            else:
                accepted.append(
                    (t.topic_name, tuple((p.partition_index, p.start_offset) for p in t.partitions))
                )
                continue
            parts = [
                dict(partition_index=p.partition_index, error_code=error, error_message=message)
                for p in t.partitions
            ]
            refused.append(
                dict(
                    topic_name=t.topic_name,
                    topic_id=topic.topic_id if topic else ZERO_UUID,
                    partitions=parts,
                )
            )
        plan: sm.AlterPlan = await self._shard_call(
            group_id, sm.OffsetsAlter(group_id, tuple(accepted))
        )
        if plan.error:
            return self._alter_error(ctx, plan.error, plan.message)
        failed = await self._initialize(group_id, plan.initialize)
        answered = [
            dict(
                topic_name=t.name,
                topic_id=t.topic_id or ZERO_UUID,
                partitions=[
                    _partition(
                        failed.get((t.topic_id, r.partition)) or (r.error, r.message), r.partition
                    )
                    for r in t.partitions
                ],
            )
            for t in plan.topics
        ]
        return ctx.respond(throttle_time=0, error_code=0, responses=refused + answered)

    async def _initialize(
        self, group_id: str, plan: Sequence[tuple[uuid.UUID, int, int]]
    ) -> dict[tuple[uuid.UUID | None, int], tuple[int, str]]:
        """Set each planned partition's start offset in a new state epoch; the failures."""
        failed: dict[tuple[uuid.UUID | None, int], tuple[int, str]] = {}

        async def one(topic_id: uuid.UUID, index: int, offset: int) -> None:
            key = SharePartitionKey(group_id, topic_id, index)
            try:
                held = await self.persister.read_summary(key)
                await self.persister.initialize(key, held.state_epoch + 1, offset)
            except ShareStateError as e:
                failed[(topic_id, index)] = (e.code, str(e))

        await asyncio.gather(*(one(*entry) for entry in plan))
        await self.manager.forget(SharePartitionKey(group_id, t, p) for t, p, _ in plan)
        return failed

    @staticmethod
    def _alter_error(ctx: RequestContext, code: int, message: str | None = None) -> Any:
        return ctx.respond(throttle_time=0, error_code=code, error_message=message, responses=[])

    # DeleteShareGroupOffsets --------------------------------------------------------------------
    async def delete(self, ctx: RequestContext, req: Any) -> Any:
        group_id = req.group_id
        if not ctx.allowed(Operation.DELETE, _GROUP, group_id):
            return self._delete_error(ctx, ErrorCode.group_authorization_failed)
        refused: list[dict[str, Any]] = []
        names: list[str] = []
        for t in req.topics:
            if ctx.allowed(Operation.READ, _TOPIC, t.topic_name):
                names.append(t.topic_name)
            else:
                refused.append(
                    dict(
                        topic_name=t.topic_name,
                        topic_id=ZERO_UUID,
                        error_code=ErrorCode.topic_authorization_failed,
                        error_message=_TOPIC_REFUSED,
                    )
                )
        plan: sm.DeletePlan = await self._shard_call(
            group_id, sm.OffsetsDeleteCheck(group_id, tuple(names))
        )
        if plan.error:
            return self._delete_error(ctx, plan.error, plan.message)
        deleted: list[dict[str, Any]] = []
        failed: list[dict[str, Any]] = []
        for topic_id, name, partitions in plan.delete:
            keys = [SharePartitionKey(group_id, topic_id, p) for p in partitions]
            await self.manager.forget(keys)
            try:
                await self.persister.delete(keys)
            except ShareStateError as e:
                failed.append(
                    dict(
                        topic_name=name, topic_id=topic_id, error_code=e.code, error_message=str(e)
                    )
                )
                continue
            await self.manager.forget(keys)  # a change under way meanwhile may have loaded it
            deleted.append(dict(topic_name=name, topic_id=topic_id, error_code=0))
        if deleted:
            done = sm.OffsetsDeleted(group_id, tuple(d["topic_id"] for d in deleted))
            answer: sm.OffsetsDeletedResponse = await self._shard_call(group_id, done)
            if answer.error:
                return self._delete_error(ctx, answer.error)
        coordinator_refused = [
            dict(
                topic_name=t.name,
                topic_id=t.topic_id or ZERO_UUID,
                error_code=t.error,
                error_message=t.message,
            )
            for t in plan.refused
        ]
        return ctx.respond(
            throttle_time=0,
            error_code=0,
            responses=refused + deleted + failed + coordinator_refused,
        )

    async def delete_group_state(self, group_id: str) -> int:
        """Before DeleteGroups deletes ``group_id``: if it is an Empty share group, delete the
        state of every partition it initialized; the error to answer for the group instead of
        deleting it (0: go on; a group with members is left to the coordinator's
        NON_EMPTY_GROUP)."""
        runtime = self.runtime
        group = runtime.shard(runtime.partition_of(group_id)).share_group(group_id)
        if group is None or group.members:
            return 0
        keys = [
            SharePartitionKey(group_id, topic_id, p)
            for topic_id, (_, partitions, _) in group.initialized.items()
            for p in partitions
        ]
        if not keys:
            return 0
        await self.manager.forget(keys)
        try:
            await self.persister.delete(keys)
        except ShareStateError as e:
            return e.code
        return 0

    @staticmethod
    def _delete_error(ctx: RequestContext, code: int, message: str | None = None) -> Any:
        return ctx.respond(throttle_time=0, error_code=code, error_message=message, responses=[])


def _partition(result: tuple[int, str | None], index: int) -> dict[str, Any]:
    error, message = result
    return dict(partition_index=index, error_code=error, error_message=message)
