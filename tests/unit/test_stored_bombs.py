"""Readers of stored batches and a compression bomb already on disk (written before the limit
existed): each refuses it within the bound and carries on. The coordinator's replay skips it and
finishes loading, compaction reports it, the pipeline's lag-in-time lookup skips it."""

from __future__ import annotations

import asyncio
import logging
import struct
from pathlib import Path

import pytest

from kcoord.broker.app import Broker
from kcoord.broker.config import Config
from kcoord.pipeline.logs import first_record_at_or_after
from kcoord.protocol.batch import HEADER_SIZE, compute_crc, parse_header
from kcoord.protocol.compression import Compression, DecompressionLimitExceeded, compress
from kcoord.protocol.key_values import decode_key_values
from kcoord.protocol.record_encoding import build_batch
from kcoord.storage.compaction import compact
from kcoord.storage.log import PartitionLog

T0 = 1_700_000_000_000


def _bomb(base_offset: int, key: bytes | None = b"k") -> bytes:
    """A zstd batch of one record whose records section expands to 3 GiB; CRC valid."""
    batch = bytearray(
        build_batch([(key, b"v", (), T0 + 100)], compression=Compression.ZSTD, base_offset=base_offset)
    )
    payload = compress(Compression.ZSTD, bytes(64 << 20), 19) * 48
    batch[HEADER_SIZE:] = payload
    struct.pack_into(">i", batch, 8, len(batch) - 12)
    struct.pack_into(">I", batch, 17, compute_crc(batch, 0, len(batch)))
    return bytes(batch)


def test_record_decoding_refuses_the_bomb() -> None:
    bomb = _bomb(0)
    with pytest.raises(DecompressionLimitExceeded):
        decode_key_values(parse_header(bomb), memoryview(bomb)[HEADER_SIZE:])


def test_pipeline_lag_lookup_skips_the_bomb(tmp_path: Path) -> None:
    part = tmp_path / "t-0"
    part.mkdir()
    before = build_batch([(b"a", b"1", (), T0), (b"b", b"2", (), T0 + 1)], base_offset=0)
    after = build_batch([(b"c", b"3", (), T0 + 7)], base_offset=3)
    (part / f"{0:020d}.log").write_bytes(before + _bomb(2) + after)
    assert first_record_at_or_after(str(tmp_path), "t-0", [0], 1) == (1, T0 + 1)
    assert first_record_at_or_after(str(tmp_path), "t-0", [0], 2) == (3, T0 + 7)


def test_compaction_reports_the_bomb_and_leaves_the_log_alone(tmp_path: Path) -> None:
    with PartitionLog.open(tmp_path / "c-0", segment_bytes=1024) as plog:
        for i in range(5):
            plog.append(build_batch([(b"k%d" % i, b"v" * 600, (), T0)]))
        plog.append(_bomb(0))
        plog.append(build_batch([(b"k", b"v" * 600, (), T0)]))
        plog.flush()
        end, segments = plog.log_end_offset, plog.segment_base_offsets
        for _ in range(2):  # refused each time (the broker logs it and retries later)
            with pytest.raises(DecompressionLimitExceeded):
                compact(plog, now_ms=T0)
            assert (plog.log_end_offset, plog.segment_base_offsets) == (end, segments)


async def test_coordinator_replay_skips_the_bomb_and_loads(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data = tmp_path / "data"
    with PartitionLog.open(data / "__consumer_offsets-0") as plog:
        plog.append(_bomb(0))
    config = Config.load(port=0, data_dir=data, environ={})
    broker = Broker(config)
    caplog.set_level(logging.ERROR, logger="kcoord")
    await broker.start()
    try:
        for _ in range(200):
            if all(sr.loaded for sr in broker.groups.shards):
                break
            await asyncio.sleep(0.05)
        assert all(sr.loaded for sr in broker.groups.shards)
        assert any("skipped" in r.getMessage() for r in caplog.records)
    finally:
        await broker.stop()
