"""A :class:`~broker.share.persister.SharePersister` that keeps share state in memory: the
share coordinator's stand-in in the unit tests of the share partition manager (which can also
make it refuse). Nothing survives a restart. Writes are combined as the share coordinator combines them
(``share.state_merge.apply_write``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from kcoord.broker.share.persister import ShareStateError
from kcoord.share.model import (
    UNINITIALIZED,
    PersistedState,
    SharePartitionKey,
    StateSummary,
    StateWrite,
)
from kcoord.share.state_merge import apply_write
from kcoord.share.state_shard import summary_of


class MemoryPersister:
    def __init__(self) -> None:
        self.states: dict[SharePartitionKey, PersistedState] = {}
        self.writes = 0
        self.fail_with: int | None = None
        """Tests: every call raises ShareStateError with this code while set."""

    def _check(self) -> None:
        if self.fail_with is not None:
            raise ShareStateError(self.fail_with)

    async def read(self, key: SharePartitionKey) -> PersistedState:
        self._check()
        return self.states.get(key, UNINITIALIZED)

    async def read_summary(self, key: SharePartitionKey) -> StateSummary:
        return summary_of(await self.read(key))

    async def write(
        self, key: SharePartitionKey, state_epoch: int, leader_epoch: int, change: StateWrite
    ) -> None:
        self._check()
        held = self.states.get(key, UNINITIALIZED)
        self.states[key] = replace(apply_write(held, change), leader_epoch=leader_epoch)
        self.writes += 1

    async def initialize(self, key: SharePartitionKey, state_epoch: int, start_offset: int) -> None:
        self._check()
        self.states[key] = PersistedState(state_epoch=state_epoch, start_offset=start_offset)

    async def delete(self, keys: Iterable[SharePartitionKey]) -> None:
        self._check()
        for key in keys:
            self.states.pop(key, None)
