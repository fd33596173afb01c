"""broker/share/persister.py's RetryingPersister: refusals that pass are retried for a while,
the rest reach the share partitions as the errors Kafka's share partition shows consumers."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from kcoord.broker.share.persister import RetryingPersister, ShareStateError, client_error
from kcoord.protocol.errors import ErrorCode
from kcoord.share.model import SharePartitionKey, StateWrite

from .share_memory_persister import MemoryPersister

KEY = SharePartitionKey("g", uuid.UUID(int=1), 0)


def test_a_coordinator_not_yet_serving_is_waited_for() -> None:
    async def run() -> None:
        inner = MemoryPersister()
        inner.fail_with = ErrorCode.not_coordinator
        loop = asyncio.get_running_loop()
        loop.call_later(0.1, lambda: setattr(inner, "fail_with", None))
        await RetryingPersister(inner, patience_s=5).write(KEY, 0, 0, StateWrite(3, ()))
        assert inner.states[KEY].start_offset == 3

    asyncio.run(run())


def test_past_its_patience_the_client_sees_coordinator_not_available() -> None:
    async def run() -> None:
        inner = MemoryPersister()
        inner.fail_with = ErrorCode.coordinator_load_in_progress
        with pytest.raises(ShareStateError) as refused:
            await RetryingPersister(inner, patience_s=0.05).read(KEY)
        assert refused.value.code == ErrorCode.coordinator_not_available

    asyncio.run(run())


def test_other_refusals_are_not_retried_and_are_mapped_as_kafka_maps_them() -> None:
    async def run() -> None:
        inner = MemoryPersister()
        inner.fail_with = ErrorCode.fenced_state_epoch
        with pytest.raises(ShareStateError) as refused:
            await RetryingPersister(inner, patience_s=60).initialize(KEY, 1, 0)
        assert refused.value.code == ErrorCode.not_leader_or_follower

    asyncio.run(asyncio.wait_for(run(), 5))
    assert client_error(ErrorCode.kafka_storage_error) == ErrorCode.unknown_server_error
    assert client_error(ErrorCode.group_id_not_found) == ErrorCode.group_id_not_found
