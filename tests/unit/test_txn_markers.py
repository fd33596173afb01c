"""The marker writer (broker/txn/markers.py) in a real in-process Broker: one marker per data
partition, durable on return, ``__consumer_offsets`` partitions handed to the injected offsets
marker, an error code per partition (unknown partition, older producer or coordinator epoch);
and the open-transaction metrics read from the partitions' state."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from kcoord.broker.app import Broker
from kcoord.broker.config import Config
from kcoord.broker.metrics.prometheus import _transaction_metrics
from kcoord.broker.txn.markers import MarkerWriter
from kcoord.protocol.errors import ErrorCode
from kcoord.protocol.record_encoding import build_batch
from kcoord.storage.txn_index import AbortedTxn

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


def _txn_batch(pid: int, seq: int = 0, epoch: int = 0) -> bytes:
    return build_batch([(None, b"v", (), T0)], producer_id=pid, producer_epoch=epoch,
                       base_sequence=seq, is_transactional=True)


async def test_markers_are_written_durably_and_offsets_partitions_delegated(
    broker: Broker,
) -> None:
    calls: list[tuple[int, int, int, bool, int]] = []

    async def offsets_marker(
        partition: int, pid: int, epoch: int, commit: bool, coordinator_epoch: int
    ) -> int:
        calls.append((partition, pid, epoch, commit, coordinator_epoch))
        return ErrorCode.none if partition != 9 else ErrorCode.not_coordinator

    broker.markers.offsets_marker = offsets_marker
    p0 = broker.topics.partition("t", 0)
    assert p0 is not None
    first, _ = p0.append(_txn_batch(9))
    assert broker.data.producers.open_transactions()[0].partition == 0
    got = await broker.markers.write_markers(
        9, 0, False, 3,
        [("t", 0), ("t", 1), ("__consumer_offsets", 7), ("__consumer_offsets", 9), ("nope", 0)],
    )
    assert got == {
        ("t", 0): ErrorCode.none,
        ("t", 1): ErrorCode.none,  # a partition the producer never wrote: a marker all the same
        ("__consumer_offsets", 7): ErrorCode.none,
        ("__consumer_offsets", 9): ErrorCode.not_coordinator,
        ("nope", 0): ErrorCode.unknown_topic_or_partition,
    }
    assert calls == [(7, 9, 0, False, 3), (9, 9, 0, False, 3)]
    assert p0.flushed_offset == p0.log_end_offset == first + 2  # durable on return
    assert p0.aborted_transactions(0, 10) == [AbortedTxn(9, first, first + 1, first + 2)]
    assert p0.last_stable_offset(p0.flushed_offset) == p0.log_end_offset
    assert broker.data.producers.open_transactions() == []

    # an older producer epoch, then an older coordinator epoch, are refused
    await broker.markers.write_markers(9, 2, True, 3, [("t", 0)])
    older = await broker.markers.write_markers(9, 1, True, 3, [("t", 0)])
    assert older == {("t", 0): ErrorCode.invalid_producer_epoch}
    fenced = await broker.markers.write_markers(9, 2, True, 2, [("t", 0)])
    assert fenced == {("t", 0): ErrorCode.transaction_coordinator_fenced}


async def test_without_an_offsets_marker_the_offsets_partitions_are_not_available(
    broker: Broker,
) -> None:
    writer = MarkerWriter(broker.topics, broker.flusher)  # no offsets_marker given
    got = await writer.write_markers(5, 0, True, 0, [("__consumer_offsets", 1)])
    assert got == {("__consumer_offsets", 1): ErrorCode.coordinator_not_available}


async def test_open_transaction_metrics(broker: Broker) -> None:
    p1 = broker.topics.partition("t", 1)
    assert p1 is not None
    p1.append(_txn_batch(1))
    p1.append(_txn_batch(2))
    opened = broker.data.producers.open_transactions()
    assert [(o.topic, o.partition, o.count) for o in opened] == [("t", 1, 2)]
    ongoing, age = _transaction_metrics(opened)
    assert [(s.labels, s.value) for s in ongoing.samples] == [
        ({"topic": "t", "partition": "1"}, 2)
    ]
    assert 0 <= age.samples[0].value < 60
