"""The share coordinator's APIs on the wire, as one node of a cluster asks another:
InitializeShareGroupState (83) v0, ReadShareGroupState (84) v0, WriteShareGroupState (85)
v0-v1, DeleteShareGroupState (86) v0 and ReadShareGroupStateSummary (87) v0-v1, answered by
this node's :class:`~broker.share.state_runtime.ShareStateRuntime`. The node asking is
:class:`~broker.share.remote_persister.RoutingPersister`.

- **Authorization**: CLUSTER_ACTION on the cluster, as Kafka checks these broker-to-broker
  APIs; refused, every partition of the request answers CLUSTER_AUTHORIZATION_FAILED.
- **Validation** (Kafka's share coordinator's): an empty group id, a null (zero) topic id or
  a negative partition is INVALID_REQUEST for that partition; the state runtime refuses the
  rest as it does for local calls (bad runs and epochs INVALID_REQUEST, FENCED_LEADER_EPOCH,
  FENCED_STATE_EPOCH, NOT_COORDINATOR where this node does not lead the key's partition of
  ``__share_group_state``, COORDINATOR_LOAD_IN_PROGRESS while it loads).
- **Durability**: a partition is answered once its change is durable here (the runtime
  appends and fsyncs, or commits to PostgreSQL, before it returns), so the asking node may
  tell its consumer that an acknowledgement is done.
- ReadShareGroupState's leader epoch is not looked at (the local read takes none): fencing
  is on the writes, which carry the data partition's leader epoch. WriteShareGroupState v1's
  delivery complete count is not taken from the request: the share coordinator computes it
  from the state it holds, as it does for local writes.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any

from kcoord.protocol.errors import ErrorCode
from kcoord.share.model import SharePartitionKey, StateBatch, StateWrite

from ..net.connection import RequestContext
from ..security.acl.model import CLUSTER_NAME, Operation, ResourceType
from .persister import ShareStateError

if TYPE_CHECKING:
    from .state_runtime import ShareStateRuntime

ZERO_UUID = uuid.UUID(int=0)

Answer = dict[str, Any]
"""One partition's result: its fields beside ``partition``, ``error_code``, ``error_message``."""


def _invalid(group_id: str, topic_id: uuid.UUID | None, partition: int) -> str | None:
    """Why the share coordinator refuses this key outright (INVALID_REQUEST), or None."""
    if not group_id:
        return "the group id is empty"
    if topic_id is None or topic_id == ZERO_UUID:
        return "the topic id is null"
    if partition < 0:
        return f"partition {partition} is negative"
    return None


Outcome = Answer | ShareStateError
Call = Callable[[list[tuple[SharePartitionKey, Any]]], Awaitable[list[Outcome]]]
"""Given the valid (key, partition data) pairs of a request, the outcome of each."""


def _each(call: Callable[[SharePartitionKey, Any], Awaitable[Answer]]) -> Call:
    """A :data:`Call` that runs ``call`` for every pair at once."""

    async def run(pairs: list[tuple[SharePartitionKey, Any]]) -> list[Outcome]:
        async def one(key: SharePartitionKey, data: Any) -> Outcome:
            try:
                return await call(key, data)
            except ShareStateError as e:
                return e

        return list(await asyncio.gather(*(one(key, data) for key, data in pairs)))

    return run


class ShareStateApi:
    def __init__(self, runtime: ShareStateRuntime) -> None:
        self.runtime = runtime

    async def _answer(self, ctx: RequestContext, req: Any, failed: Answer, call: Call) -> Any:
        """The response: the outcome of ``call`` for each valid partition, the refusal of the
        others; ``failed`` holds the other fields of a partition that has an error."""
        allowed = ctx.allowed(Operation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME)
        results: list[list[Answer | None]] = []
        valid: list[tuple[SharePartitionKey, Any]] = []
        places: list[tuple[int, int]] = []
        for t, topic in enumerate(req.topics):
            answers: list[Answer | None] = []
            for i, data in enumerate(topic.partitions):
                partition = int(data.partition)
                why = _invalid(req.group_id, topic.topic_id, partition)
                if not allowed:
                    answers.append(
                        _error(partition, failed, ErrorCode.cluster_authorization_failed, None)
                    )
                elif why is not None:
                    answers.append(_error(partition, failed, ErrorCode.invalid_request, why))
                else:
                    assert topic.topic_id is not None
                    valid.append((SharePartitionKey(req.group_id, topic.topic_id, partition), data))
                    places.append((t, i))
                    answers.append(None)
            results.append(answers)
        outcomes = await call(valid) if valid else []
        for (t, i), (key, _), outcome in zip(places, valid, outcomes, strict=True):
            if isinstance(outcome, ShareStateError):
                results[t][i] = _error(key.partition, failed, outcome.code, str(outcome))
            else:
                results[t][i] = dict(
                    partition=key.partition, error_code=0, error_message=None, **outcome
                )
        return ctx.respond(results=[
            dict(topic_id=topic.topic_id or ZERO_UUID, partitions=answers)
            for topic, answers in zip(req.topics, results, strict=True)
        ])

    # the five APIs ----------------------------------------------------------------------------
    async def read_state(self, ctx: RequestContext, req: Any) -> Any:
        async def read(key: SharePartitionKey, _: Any) -> Answer:
            state = await self.runtime.read(key)
            return dict(
                state_epoch=state.state_epoch,
                start_offset=state.start_offset,
                state_batches=batch_fields(state.batches),
            )

        failed = dict(state_epoch=0, start_offset=-1, state_batches=[])
        return await self._answer(ctx, req, failed, _each(read))

    async def read_state_summary(self, ctx: RequestContext, req: Any) -> Any:
        async def summary(key: SharePartitionKey, _: Any) -> Answer:
            s = await self.runtime.read_summary(key)
            return dict(
                state_epoch=s.state_epoch,
                leader_epoch=s.leader_epoch,
                start_offset=s.start_offset,
                delivery_complete_count=s.delivery_complete_count,
            )

        failed = dict(state_epoch=0, leader_epoch=-1, start_offset=-1, delivery_complete_count=-1)
        return await self._answer(ctx, req, failed, _each(summary))

    async def write_state(self, ctx: RequestContext, req: Any) -> Any:
        async def write(key: SharePartitionKey, data: Any) -> Answer:
            change = StateWrite(
                int(data.start_offset),
                tuple(
                    StateBatch(
                        int(b.first_offset), int(b.last_offset), int(b.delivery_state),
                        int(b.delivery_count),
                    )
                    for b in data.state_batches
                ),
            )
            await self.runtime.write(key, int(data.state_epoch), int(data.leader_epoch), change)
            return {}

        return await self._answer(ctx, req, {}, _each(write))

    async def initialize_state(self, ctx: RequestContext, req: Any) -> Any:
        async def initialize(key: SharePartitionKey, data: Any) -> Answer:
            await self.runtime.initialize(key, int(data.state_epoch), int(data.start_offset))
            return {}

        return await self._answer(ctx, req, {}, _each(initialize))

    async def delete_state(self, ctx: RequestContext, req: Any) -> Any:
        async def delete(pairs: list[tuple[SharePartitionKey, Any]]) -> list[Outcome]:
            # The keys of one __share_group_state partition go together (one append).
            by_partition: dict[int, list[SharePartitionKey]] = {}
            for key, _ in pairs:
                by_partition.setdefault(self.runtime.partition_of(key), []).append(key)

            async def delete_in(keys: list[SharePartitionKey]) -> Outcome:
                try:
                    await self.runtime.delete(keys)
                except ShareStateError as e:
                    return e
                return {}

            done = dict(zip(
                by_partition,
                await asyncio.gather(*(delete_in(keys) for keys in by_partition.values())),
                strict=True,
            ))
            return [done[self.runtime.partition_of(key)] for key, _ in pairs]

        return await self._answer(ctx, req, {}, delete)


def _error(partition: int, failed: Answer, code: int, message: str | None) -> Answer:
    return dict(partition=partition, error_code=code, error_message=message, **failed)


def batch_fields(batches: Iterable[StateBatch]) -> list[Answer]:
    """State batches as the requests' and responses' fields."""
    return [
        dict(
            first_offset=b.first_offset,
            last_offset=b.last_offset,
            delivery_state=b.delivery_state,
            delivery_count=b.delivery_count,
        )
        for b in batches
    ]
