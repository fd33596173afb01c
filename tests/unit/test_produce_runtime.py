"""The Produce path in process (a real Broker on a loopback port, raw requests): an append or an
fsync that fails with an I/O error is answered KAFKA_STORAGE_ERROR on that partition only and the
connection stays open; an idempotent producer's pipelined batches land in request order even when
the first needs a worker thread, and its retry gets the original offset; a refusal carries its
message and record errors; ListOffsets by timestamp and -3 find the exact record inside a
compressed batch."""

from __future__ import annotations

import asyncio
import errno
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from kio.serial import entity_reader

from kcoord.broker.app import Broker
from kcoord.broker.config import Config
from kcoord.protocol.apis import ApiKey
from kcoord.protocol.codec import encode_body, request_type, response_type
from kcoord.protocol.compression import Compression
from kcoord.protocol.errors import ErrorCode
from kcoord.protocol.record_encoding import build_batch, encode_batch
from kcoord.protocol.records import Record
from kcoord.protocol.responses import build
from tests.integration.rawclient import RawClient

T0 = 1_700_000_000_000


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[Broker]:
    config = Config.load(port=0, data_dir=tmp_path / "data", environ={})
    b = Broker(config)
    await b.start()
    b.topics.create("t", 2)
    try:
        yield b
    finally:
        await b.stop()


def _produce_body(parts: dict[int, bytes], acks: int = -1, version: int = 9) -> bytes:
    fields = dict(
        transactional_id=None,
        acks=acks,
        timeout=5000,
        topic_data=[
            dict(name="t", partition_data=[dict(index=i, records=r) for i, r in parts.items()])
        ],
    )
    return encode_body(build(request_type(ApiKey.PRODUCE, version), **fields))


def _read(c: RawClient, api: int, version: int) -> Any:
    frame = c.recv_frame()
    value, _ = entity_reader(response_type(api, version))(frame, 5)  # flexible header: 1 tag byte
    return value


def _produce(c: RawClient, parts: dict[int, bytes], acks: int = -1) -> list[tuple[int, int, str | None]]:
    c.send(ApiKey.PRODUCE, 9, _produce_body(parts, acks))
    resp = _read(c, ApiKey.PRODUCE, 9)
    return [
        (int(p.error_code), int(p.base_offset), p.error_message)
        for t in resp.responses
        for p in t.partition_responses
    ]


def _list_offsets(c: RawClient, partition: int, timestamp: int) -> tuple[int, int]:
    resp = c.request(
        ApiKey.LIST_OFFSETS,
        7,
        replica_id=-1,
        isolation_level=0,
        topics=[
            dict(
                name="t",
                partitions=[
                    dict(partition_index=partition, current_leader_epoch=-1, timestamp=timestamp)
                ],
            )
        ],
    )
    p = resp.topics[0].partitions[0]
    return int(p.offset), int(p.timestamp)


def _batch(n: int, *, compression: Compression = Compression.NONE, **ids: int) -> bytes:
    return build_batch(
        [(b"k%d" % i, b"value %d" % i, (), T0 + i) for i in range(n)],
        compression=compression,
        **ids,  # type: ignore[arg-type]
    )


async def _in_thread(fn: Any, *args: Any) -> Any:
    return await asyncio.to_thread(fn, *args)


async def test_append_error_is_kafka_storage_error(broker: Broker) -> None:
    plog = broker.topics.partition("t", 0)
    assert plog is not None
    append = plog.append

    def full_disk(records: Any) -> Any:
        raise OSError(errno.ENOSPC, "No space left on device")

    c = await _in_thread(RawClient, broker.bound_port)
    try:
        plog.append = full_disk  # type: ignore[method-assign]
        got = await _in_thread(_produce, c, {0: _batch(3), 1: _batch(2)})
        assert got[0][0] == ErrorCode.kafka_storage_error and got[0][1] == -1
        assert "No space left" in (got[0][2] or "")
        assert got[1][:2] == (ErrorCode.none, 0)  # the other partition is unaffected
        # acks=0: no answer, logged; the connection carries on
        c.send(ApiKey.PRODUCE, 9, _produce_body({0: _batch(1)}, acks=0))
        # a compressed batch goes through a worker thread, then fails the same way
        got = await _in_thread(_produce, c, {0: _batch(5, compression=Compression.ZSTD)})
        assert got[0][0] == ErrorCode.kafka_storage_error
        plog.append = append  # type: ignore[method-assign]
        assert await _in_thread(_produce, c, {0: _batch(3)}) == [(ErrorCode.none, 0, None)]
        assert await _in_thread(_list_offsets, c, 0, -1) == (3, -1)
    finally:
        plog.append = append  # type: ignore[method-assign]
        c.close()


async def test_fsync_error_is_kafka_storage_error_on_that_partition(broker: Broker) -> None:
    plog = broker.topics.partition("t", 0)
    assert plog is not None
    flush = plog.flush
    failures: list[int] = []

    def failing_flush() -> None:
        failures.append(1)
        raise OSError(errno.EIO, "Input/output error")

    c = await _in_thread(RawClient, broker.bound_port)
    try:
        plog.flush = failing_flush  # type: ignore[method-assign]
        got = await _in_thread(_produce, c, {0: _batch(2), 1: _batch(2)})
        assert failures
        assert got[0][0] == ErrorCode.kafka_storage_error
        assert got[1][:2] == (ErrorCode.none, 0)  # flushed in the same round, unaffected
        plog.flush = flush  # type: ignore[method-assign]
        got = await _in_thread(_produce, c, {0: _batch(1)})
        assert got == [(ErrorCode.none, 2, None)]  # the earlier records stayed in the log
        assert await _in_thread(_list_offsets, c, 0, -1) == (3, -1)
    finally:
        plog.flush = flush  # type: ignore[method-assign]
        c.close()


def _pipelined(port: int, batches: list[bytes]) -> list[tuple[int, int]]:
    """Send every batch for partition 0 before reading any answer (one connection)."""
    with RawClient(port) as c:
        for b in batches:
            c.send(ApiKey.PRODUCE, 9, _produce_body({0: b}))
        out = []
        for _ in batches:
            p = _read(c, ApiKey.PRODUCE, 9).responses[0].partition_responses[0]
            out.append((int(p.error_code), int(p.base_offset)))
        return out


async def test_idempotent_batches_land_in_request_order_and_retries_are_answered(
    broker: Broker,
) -> None:
    ids = dict(producer_id=1234, producer_epoch=0)
    big = build_batch(  # a compressed batch with many records: checked in a worker thread
        [(None, b"v%d" % i, (), T0) for i in range(20_000)],
        compression=Compression.GZIP,
        base_sequence=0,
        **ids,  # type: ignore[arg-type]
    )
    small = _batch(3, base_sequence=20_000, **ids)
    smaller = _batch(1, base_sequence=20_003, **ids)
    got = await _in_thread(_pipelined, broker.bound_port, [big, small, smaller, big, small])
    assert got == [
        (ErrorCode.none, 0),
        (ErrorCode.none, 20_000),
        (ErrorCode.none, 20_003),
        (ErrorCode.none, 0),  # retries: the original offsets, nothing appended
        (ErrorCode.none, 20_000),
    ]
    plog = broker.topics.partition("t", 0)
    assert plog is not None and plog.log_end_offset == 20_004
    assert len(broker.data.producers) == 1


async def test_list_offsets_finds_the_record_inside_a_compressed_batch(broker: Broker) -> None:
    stamps = [T0 + 50, T0 + 10, T0 + 90, T0 + 30]
    batch = build_batch(
        [(None, b"v", (), ts) for ts in stamps], compression=Compression.LZ4
    )
    c = await _in_thread(RawClient, broker.bound_port)
    try:
        assert await _in_thread(_produce, c, {1: _batch(2)}) == [(ErrorCode.none, 0, None)]
        assert await _in_thread(_produce, c, {1: batch}) == [(ErrorCode.none, 2, None)]
        assert await _in_thread(_list_offsets, c, 1, T0 + 60) == (4, T0 + 90)
        assert await _in_thread(_list_offsets, c, 1, T0 + 1) == (1, T0 + 1)
        assert await _in_thread(_list_offsets, c, 1, T0 + 2) == (2, T0 + 50)
        assert await _in_thread(_list_offsets, c, 1, -3) == (4, T0 + 90)
        assert await _in_thread(_list_offsets, c, 1, T0 + 91) == (-1, -1)
        assert await _in_thread(_list_offsets, c, 0, -3) == (-1, -1)  # empty partition
    finally:
        c.close()


async def test_a_refusal_carries_its_message_and_record_errors(broker: Broker) -> None:
    records = [Record(0, 0, b"a", b"1"), Record(0, 0, b"b", b"2")]
    bad = encode_batch(records, base_timestamp=T0, last_offset_delta=1)

    def send() -> Any:
        with RawClient(broker.bound_port) as c:
            c.send(ApiKey.PRODUCE, 9, _produce_body({0: bad}))
            return _read(c, ApiKey.PRODUCE, 9).responses[0].partition_responses[0]

    p = await _in_thread(send)
    assert p.error_code == ErrorCode.invalid_record
    assert p.error_message == "record 1: offset delta 0 where 1 was expected"
    assert [(e.batch_index, e.batch_index_error_message) for e in p.record_errors] == [
        (1, "offset delta 0 where 1 was expected")
    ]
