"""GroupRuntime's completion chain, in process: a commit is answered only after its fsync, a
commit whose fsync fails is answered with an error and undone (the shard's append_failed), and
what a commit allocated is not left in reference cycles."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from kcoord.broker.app import Broker
from kcoord.broker.config import Config
from kcoord.protocol.errors import ErrorCode
from tests.integration.rawclient import RawClient

GROUP = "completion"


def _commit(client: RawClient, offset: int) -> list[int]:
    r = client.request(
        8, 8, group_id=GROUP, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
        topics=[dict(name="t", partitions=[
            dict(partition_index=p, committed_offset=offset + p, committed_leader_epoch=-1,
                 committed_metadata=None) for p in range(2)])],
    )
    return [int(p.error_code) for t in r.topics for p in t.partitions]


def _fetch(client: RawClient) -> list[int]:
    r = client.request(9, 6, group_id=GROUP, topics=[dict(name="t", partition_indexes=[0, 1])])
    return [int(p.committed_offset) for t in r.topics for p in t.partitions]


@contextlib.asynccontextmanager
async def _client_of_a_broker(tmp_path: Path) -> AsyncIterator[Any]:
    """A raw client of an in-process broker with a topic ``t`` of 2 partitions."""
    config = Config.load(port=0, data_dir=tmp_path / "data", environ={},
                         overrides=["group.initial.rebalance.delay.ms=0"])
    broker = Broker(config)
    await broker.start()
    client: Any = None
    try:
        broker.topics.create("t", 2)
        client = await asyncio.to_thread(RawClient, broker.bound_port)
        yield client
    finally:
        if client is not None:
            client.close()
        await broker.stop()


async def test_commit_answered_after_fsync_and_undone_when_fsync_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with _client_of_a_broker(tmp_path) as client:
        assert await asyncio.to_thread(_commit, client, 100) == [0, 0]
        assert await asyncio.to_thread(_fetch, client) == [100, 101]

        # Every fsync fails: the shared journal's (storage/journal.py), then the log's own
        # that the journal falls back to.
        failures = []

        def failing_sync(fd: int) -> None:
            failures.append(fd)
            raise OSError(5, "simulated I/O error")

        with monkeypatch.context() as patched:
            patched.setattr(os, "fsync", failing_sync)
            patched.setattr(os, "fdatasync", failing_sync)
            errors = await asyncio.to_thread(_commit, client, 200)
        assert len(failures) >= 2
        assert errors == [ErrorCode.not_coordinator] * 2  # KAFKA_STORAGE_ERROR, mapped
        assert await asyncio.to_thread(_fetch, client) == [100, 101]  # the failed commit undone
        assert await asyncio.to_thread(_commit, client, 300) == [0, 0]
        assert await asyncio.to_thread(_fetch, client) == [300, 301]


async def test_requests_leave_no_garbage_in_reference_cycles(tmp_path: Path) -> None:
    """What a commit allocated is freed by reference counting as soon as it is answered: a
    reference cycle would keep its request and answer alive until a collection of the cyclic
    garbage collector, which then costs more the more commits are in flight (compiled, closures
    that name each other make one)."""
    async with _client_of_a_broker(tmp_path) as client:
        for offset in range(5):  # warm: the offsets topic, the group, the answers kept
            assert await asyncio.to_thread(_commit, client, offset) == [0, 0]
        gc.collect()
        gc.set_debug(gc.DEBUG_SAVEALL)
        try:
            for offset in range(5, 25):
                assert await asyncio.to_thread(_commit, client, offset) == [0, 0]
                assert await asyncio.to_thread(_fetch, client) == [offset, offset + 1]
            gc.collect()
            cyclic = sorted({type(o).__qualname__ for o in gc.garbage})
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
        assert cyclic == []
