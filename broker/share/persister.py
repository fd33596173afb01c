"""How the share partitions reach the share coordinator: Kafka's ReadShareGroupState,
WriteShareGroupState, InitializeShareGroupState, DeleteShareGroupState and
ReadShareGroupStateSummary (APIs 83-87) as calls. On one node
:class:`~broker.share.state_runtime.ShareStateRuntime` answers them directly; in a cluster
:class:`~broker.share.remote_persister.RoutingPersister` sends each to the node leading the
key's ``__share_group_state`` partition (broker/share/state_api.py answers them there).
:class:`RetryingPersister` is how the share partitions call it: refusals that pass (a
partition loading or not yet led here) are retried for a while, and the rest become the
errors Kafka's share partition shows its consumers."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Protocol, TypeVar

from kcoord.protocol.errors import ErrorCode
from kcoord.share.model import PersistedState, SharePartitionKey, StateSummary, StateWrite

T = TypeVar("T")


class ShareStateError(Exception):
    """A state call failed with Kafka error ``code`` (COORDINATOR_LOAD_IN_PROGRESS,
    NOT_COORDINATOR, FENCED_STATE_EPOCH, FENCED_LEADER_EPOCH, KAFKA_STORAGE_ERROR, ...)."""

    def __init__(self, code: int, message: str = "") -> None:
        super().__init__(message or f"share state error {code}")
        self.code = code


class SharePersister(Protocol):
    async def read(self, key: SharePartitionKey) -> PersistedState:
        """The state held for ``key`` (``share.model.UNINITIALIZED`` if none)."""
        ...

    async def read_summary(self, key: SharePartitionKey) -> StateSummary:
        """The state held for ``key`` without its batches (start offset -1 if none)."""
        ...

    async def write(
        self, key: SharePartitionKey, state_epoch: int, leader_epoch: int, change: StateWrite
    ) -> None:
        """Persist ``change``; returns once it is durable."""
        ...

    async def initialize(self, key: SharePartitionKey, state_epoch: int, start_offset: int) -> None:
        """Set (or reset, AlterShareGroupOffsets) the start offset, dropping every in-flight
        batch; durable on return."""
        ...

    async def delete(self, keys: Iterable[SharePartitionKey]) -> None:
        """Forget these share partitions (a group or topic deleted, DeleteShareGroupOffsets)."""
        ...


_RETRIABLE = frozenset(
    {ErrorCode.not_coordinator, ErrorCode.coordinator_not_available, ErrorCode.coordinator_load_in_progress}
)


def client_error(code: int) -> int:
    """What a share consumer is told when the share coordinator refused a call (as Kafka's
    share partition maps the persister's errors): a coordinator moving or loading is
    COORDINATOR_NOT_AVAILABLE, a fenced epoch NOT_LEADER_OR_FOLLOWER, an unknown group or
    partition itself, anything else UNKNOWN_SERVER_ERROR."""
    if code in _RETRIABLE:
        return ErrorCode.coordinator_not_available
    if code in (ErrorCode.fenced_leader_epoch, ErrorCode.fenced_state_epoch):
        return ErrorCode.not_leader_or_follower
    if code in (ErrorCode.group_id_not_found, ErrorCode.unknown_topic_or_partition):
        return code
    return ErrorCode.unknown_server_error


class RetryingPersister:
    """A :class:`SharePersister` that retries the calls the share coordinator refused for a
    while only (not yet led here after a topic was created or a node took the partition over,
    loading, reloading after a failed append), with a growing pause, for up to ``patience_s``;
    then, and for every other refusal, it raises the error a client should see
    (:func:`client_error`). As Kafka's persister retries these before the share partition
    sees them: a consumer must not be told NOT_COORDINATOR for a partition it fetches."""

    def __init__(self, inner: SharePersister, patience_s: float = 5.0) -> None:
        self.inner = inner
        self.patience_s = patience_s

    async def _call(self, call: Callable[[], Awaitable[T]]) -> T:
        deadline = time.monotonic() + self.patience_s
        pause = 0.02
        while True:
            try:
                return await call()
            except ShareStateError as e:
                if e.code not in _RETRIABLE or time.monotonic() + pause > deadline:
                    raise ShareStateError(client_error(e.code), str(e)) from e
            await asyncio.sleep(pause)
            pause = min(pause * 2, 0.5)

    async def read(self, key: SharePartitionKey) -> PersistedState:
        return await self._call(lambda: self.inner.read(key))

    async def read_summary(self, key: SharePartitionKey) -> StateSummary:
        return await self._call(lambda: self.inner.read_summary(key))

    async def write(
        self, key: SharePartitionKey, state_epoch: int, leader_epoch: int, change: StateWrite
    ) -> None:
        await self._call(lambda: self.inner.write(key, state_epoch, leader_epoch, change))

    async def initialize(self, key: SharePartitionKey, state_epoch: int, start_offset: int) -> None:
        await self._call(lambda: self.inner.initialize(key, state_epoch, start_offset))

    async def delete(self, keys: Iterable[SharePartitionKey]) -> None:
        keys = list(keys)
        await self._call(lambda: self.inner.delete(keys))
