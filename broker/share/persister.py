"""How the share partitions reach the share coordinator: Kafka's ReadShareGroupState,
WriteShareGroupState, InitializeShareGroupState and DeleteShareGroupState (APIs 83-87) as
internal calls. On one node :class:`~broker.share.state_runtime.ShareStateRuntime` answers them
directly; in a cluster an implementation may send them to the node leading the key's
``__share_group_state`` partition."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from kcoord.share.model import PersistedState, SharePartitionKey, StateWrite


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
