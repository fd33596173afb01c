"""GroupRuntime bounds every write to __consumer_offsets by message.max.bytes, in process: an
atomic write that does not fit in one batch is refused whole and undone by the shard
(append_failed), nothing reaching the log; independent records (expired offsets' tombstones)
are cut into as many batches as they need."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from kcoord.broker.app import Broker
from kcoord.broker.config import Config
from kcoord.coordinator.schemas import OffsetCommitKey, encode_key
from kcoord.coordinator.shard import Output
from kcoord.protocol.batch import HEADER_SIZE
from kcoord.protocol.errors import ErrorCode
from kcoord.protocol.javahash import partition_for
from kcoord.protocol.key_values import decode_key_values
from tests.integration.rawclient import RawClient

GROUP = "limited"
LIMIT = 2_000


def _commit(client: RawClient, metadata: str | None, partitions: int) -> list[int]:
    r = client.request(
        8, 8, group_id=GROUP, generation_id_or_member_epoch=-1, member_id="",
        group_instance_id=None,
        topics=[dict(name="t", partitions=[
            dict(partition_index=p, committed_offset=100 + p, committed_leader_epoch=-1,
                 committed_metadata=metadata) for p in range(partitions)])],
    )  # fmt: skip
    return [int(p.error_code) for t in r.topics for p in t.partitions]


def _fetch(client: RawClient) -> list[int]:
    r = client.request(9, 6, group_id=GROUP, topics=[dict(name="t", partition_indexes=[0, 1])])
    return [int(p.committed_offset) for t in r.topics for p in t.partitions]


async def _broker(tmp_path: Path) -> Broker:
    config = Config.load(
        port=0,
        data_dir=tmp_path / "data",
        environ={},
        overrides=["group.initial.rebalance.delay.ms=0", f"message.max.bytes={LIMIT}"],
    )
    broker = Broker(config)
    await broker.start()
    broker.topics.create("t", 16)
    return broker


async def test_atomic_write_over_the_limit_is_refused_whole_and_undone(tmp_path: Path) -> None:
    broker = await _broker(tmp_path)
    client: Any = None
    try:
        client = await asyncio.to_thread(RawClient, broker.bound_port)
        assert await asyncio.to_thread(_commit, client, None, 2) == [0, 0]
        plog = broker.groups.shards[partition_for(GROUP, 50)].log
        assert plog is not None
        size = plog.size_bytes
        # 15 partitions with 60 two-byte characters of metadata each: the shard's floor counts
        # a byte per character (about 1.6 KB, under the limit), the batch is about 2.6 KB.
        errors = await asyncio.to_thread(_commit, client, "é" * 60, 15)
        assert errors == [ErrorCode.unknown_server_error] * 15
        assert plog.size_bytes == size  # nothing appended
        assert await asyncio.to_thread(_fetch, client) == [100, 101]  # the cache undone
        assert await asyncio.to_thread(_commit, client, "é" * 60, 5) == [0] * 5  # fits
    finally:
        if client is not None:
            client.close()
        await broker.stop()


async def test_independent_records_are_cut_into_batches_that_fit(tmp_path: Path) -> None:
    broker = await _broker(tmp_path)
    try:
        runtime = broker.groups
        sr = runtime.shards[0]
        keys = [encode_key(OffsetCommitKey("expired", "t", p)) for p in range(300)]
        runtime._process(sr, Output(records=[(k, None) for k in keys]))  # as a retention check
        pending = runtime.pending(0)
        assert pending is not None
        await asyncio.wait_for(asyncio.shield(pending), 10)  # appended and flushed
        assert sr.log is not None
        batches = list(sr.log.iter_batches())
        assert len(batches) > 1
        assert all(len(data) <= LIMIT for _base, _header, data in batches)
        written = [
            key
            for _base, header, data in batches
            for key, _value in decode_key_values(header, data[HEADER_SIZE:])
        ]
        assert written == keys
    finally:
        await broker.stop()
