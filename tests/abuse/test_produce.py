"""Hostile producers against a real broker (under prlimit, a healthy group beside it).

* CRC-valid but inconsistent batches (offset deltas, counts, control flag, codecs, garbage
  records) are refused with Kafka's codes, nothing is appended, and a consumer still reads every
  acknowledged message of the partition afterwards.
* Compression bombs (zstd ~100 KB -> 3 GiB, gzip ~1 MB -> ~1 GiB) are refused with
  MESSAGE_TOO_LARGE and the broker's memory stays bounded.
* A bomb already in a segment file before start-up (as written by an older broker) does not
  kill the broker on ListOffsets by timestamp, -3 or a restart.
* Many idempotent producer ids are forgotten after producer.id.expiration.ms (the
  kcoord_producer_ids gauge falls back).
"""

from __future__ import annotations

import struct
import urllib.request
from pathlib import Path

from kcoord.protocol.apis import ApiKey
from kcoord.protocol.batch import HEADER_SIZE, compute_crc
from kcoord.protocol.codec import encode_body, request_type
from kcoord.protocol.compression import Compression, compress
from kcoord.protocol.errors import ErrorCode
from kcoord.protocol.record_encoding import build_batch, encode_batch
from kcoord.protocol.records import Record
from kcoord.protocol.responses import build
from tests.integration.clients import consume_confluent, create_topic, produce_confluent
from tests.integration.harness import BrokerProcess, wait_for
from tests.integration.rawclient import RawClient

from .conftest import RSS_BOUND, assert_survived, peak_rss
from .healthy import HealthyGroup

BROKER_SETTINGS = {
    "producer.id.expiration.ms": 10000,
    "producer.id.expiration.check.interval.ms": 500,
}

T0 = 1_700_000_000_000


# -- helpers ----------------------------------------------------------------------------------


def _fix(batch: bytearray) -> bytes:
    """Fix the batch length and CRC after an edit: the CRC is valid, the content is not."""
    struct.pack_into(">i", batch, 8, len(batch) - 12)
    struct.pack_into(">I", batch, 17, compute_crc(batch, 0, len(batch)))
    return bytes(batch)


def _edit(batch: bytes, fmt: str, at: int, value: int) -> bytes:
    out = bytearray(batch)
    struct.pack_into(fmt, out, at, value)
    return _fix(out)


def _with_payload(batch: bytes, payload: bytes, codec: int | None = None) -> bytes:
    out = bytearray(batch[:HEADER_SIZE]) + payload
    if codec is not None:
        attributes = struct.unpack_from(">h", out, 21)[0]
        struct.pack_into(">h", out, 21, (attributes & ~7) | codec)
    return _fix(out)


def _produce(c: RawClient, topic: str, records: bytes, version: int = 9) -> tuple[int, str | None]:
    resp = c.request(
        ApiKey.PRODUCE,
        version,
        transactional_id=None,
        acks=-1,
        timeout=5000,
        topic_data=[dict(name=topic, partition_data=[dict(index=0, records=records)])],
    )
    part = resp.responses[0].partition_responses[0]
    return int(part.error_code), getattr(part, "error_message", None)


def _list_offset(c: RawClient, topic: str, timestamp: int) -> tuple[int, int]:
    resp = c.request(
        ApiKey.LIST_OFFSETS,
        7,
        replica_id=-1,
        isolation_level=0,
        topics=[
            dict(
                name=topic,
                partitions=[dict(partition_index=0, current_leader_epoch=-1, timestamp=timestamp)],
            )
        ],
    )
    p = resp.topics[0].partitions[0]
    return int(p.offset), int(p.timestamp)


def _entries(n: int, tag: str) -> list[tuple[bytes, bytes, tuple[()], int]]:
    return [(f"{tag}-{i}".encode(), f"value {tag} {i}".encode(), (), T0 + i) for i in range(n)]


def _gauge(broker: BrokerProcess, name: str) -> float:
    url = f"http://127.0.0.1:{broker.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    raise AssertionError(f"no {name} in /metrics")


# -- probes -----------------------------------------------------------------------------------


def _inconsistent_batches() -> dict[str, tuple[bytes, int, int]]:
    """name -> (records, Produce version, expected error)."""
    good = build_batch(_entries(3, "x"))
    bad_deltas = encode_batch(
        [Record(0, 0, b"a", b"1"), Record(0, 1, b"b", b"2"), Record(0, 2, b"c", b"3")],
        base_timestamp=T0,
        last_offset_delta=2,
    )
    garbage = bytes(range(7, 250)) * 2
    return {
        "lastOffsetDelta 0 on 3 records": (_edit(good, ">i", 23, 0), 9, ErrorCode.invalid_record),
        "lastOffsetDelta 2^31-1": (_edit(good, ">i", 23, 2**31 - 1), 9, ErrorCode.invalid_record),
        "record count 5 for 3 records": (
            _edit(_edit(good, ">i", 57, 5), ">i", 23, 4),
            9,
            ErrorCode.invalid_record,
        ),
        "record count 2 for 3 records": (
            _edit(_edit(good, ">i", 57, 2), ">i", 23, 1),
            9,
            ErrorCode.invalid_record,
        ),
        "every record at offset delta 0": (bad_deltas, 9, ErrorCode.invalid_record),
        "control flag from a client": (
            build_batch(_entries(1, "c"), is_control=True),
            9,
            ErrorCode.invalid_record,
        ),
        "unknown codec 5": (
            _with_payload(good, good[HEADER_SIZE:], codec=5),
            9,
            ErrorCode.unsupported_compression_type,
        ),
        "zstd on Produce v6": (
            build_batch(_entries(3, "z"), compression=Compression.ZSTD),
            6,
            ErrorCode.unsupported_compression_type,
        ),
        "garbage records, CRC fixed up": (_with_payload(good, garbage), 9, ErrorCode.invalid_record),
        "garbage gzip records, CRC fixed up": (
            _with_payload(good, garbage, codec=Compression.GZIP),
            9,
            ErrorCode.corrupt_message,
        ),
        "gzip records with a byte left over": (
            _with_payload(
                good,
                compress(Compression.GZIP, good[HEADER_SIZE:] + b"\x00"),
                codec=Compression.GZIP,
            ),
            9,
            ErrorCode.invalid_record,
        ),
        "two batches": (good + good, 9, ErrorCode.invalid_record),
        "producer id without a sequence": (
            build_batch(_entries(2, "p"), producer_id=99, producer_epoch=0, base_sequence=-1),
            9,
            ErrorCode.invalid_record,
        ),
    }


def test_inconsistent_batches_are_refused_and_consumers_see_every_acknowledged_message(
    abuse_broker: BrokerProcess, healthy: HealthyGroup
) -> None:
    topic = "inconsistent"
    create_topic(abuse_broker.bootstrap, topic, 1)
    acknowledged = [(0, f"k{i}".encode(), f"before {i}".encode()) for i in range(50)]
    produce_confluent(abuse_broker.bootstrap, topic, acknowledged, "lz4")
    with RawClient(abuse_broker.port) as c:
        assert _list_offset(c, topic, -1)[0] == 50
        for name, (records, version, expected) in _inconsistent_batches().items():
            error, message = _produce(c, topic, records, version)
            assert error == expected, (name, ErrorCode(error).name, message)
            assert _list_offset(c, topic, -1)[0] == 50, f"{name}: something was appended"
    after = [(0, f"k{i}".encode(), f"after {i}".encode()) for i in range(50)]
    produce_confluent(abuse_broker.bootstrap, topic, after, "none")
    acknowledged += after
    consumed = consume_confluent(abuse_broker.bootstrap, topic, 1, len(acknowledged))
    assert [o for _, o, _, _ in consumed] == list(range(len(acknowledged)))
    assert [(k, v) for _, _, k, v in consumed] == [(k, v) for _, k, v in acknowledged]
    assert_survived(abuse_broker, healthy, "inconsistent batches")


def _bomb_batch(codec: Compression, payload: bytes) -> bytes:
    return _with_payload(build_batch(_entries(1, "bomb"), compression=codec), payload)


def test_compression_bombs_are_refused_in_bounded_memory(
    abuse_broker: BrokerProcess, healthy: HealthyGroup
) -> None:
    topic = "bombs"
    create_topic(abuse_broker.bootstrap, topic, 1)
    zeros = bytes(64 << 20)
    zstd_bomb = _bomb_batch(Compression.ZSTD, compress(Compression.ZSTD, zeros, 19) * 48)
    gzip_bomb = _bomb_batch(Compression.GZIP, compress(Compression.GZIP, zeros, 9) * 15)
    del zeros
    assert len(zstd_bomb) < 150_000  # ~100 KB for 3 GiB of records
    assert len(gzip_bomb) < 1_048_588  # within message.max.bytes, ~1 GiB of records
    with RawClient(abuse_broker.port, timeout=60) as c:
        for name, bomb in (("zstd", zstd_bomb), ("gzip", gzip_bomb)):
            for _ in range(3):
                error, message = _produce(c, topic, bomb)
                assert error == ErrorCode.message_too_large, (name, ErrorCode(error).name, message)
            assert _list_offset(c, topic, -1)[0] == 0
        assert _produce(c, topic, build_batch(_entries(2, "ok")))[0] == ErrorCode.none
    assert peak_rss(abuse_broker.pid) < RSS_BOUND, peak_rss(abuse_broker.pid)
    assert_survived(abuse_broker, healthy, "compression bombs")


def test_idle_idempotent_producers_are_forgotten(
    abuse_broker: BrokerProcess, healthy: HealthyGroup
) -> None:
    topic = "idempotent"
    create_topic(abuse_broker.bootstrap, topic, 1)
    producers = 3000
    first = build_batch(_entries(2, "i"), producer_id=10**9, producer_epoch=0, base_sequence=0)
    with RawClient(abuse_broker.port) as c:
        assert _produce(c, topic, first)[0] == ErrorCode.none
        assert _produce(c, topic, first)[0] == ErrorCode.none  # a retry: de-duplicated
        assert _list_offset(c, topic, -1)[0] == 2
        for pid in range(10**9 + 1, 10**9 + producers):  # pipelined, then all answers read
            batch = build_batch(_entries(1, "i"), producer_id=pid, producer_epoch=0, base_sequence=0)
            c.send(ApiKey.PRODUCE, 9, _produce_body(topic, batch))
        for _ in range(producers - 1):
            c.recv_frame()
        assert _list_offset(c, topic, -1)[0] == producers + 1
    assert _gauge(abuse_broker, "kcoord_producer_ids") >= producers
    wait_for(
        lambda: _gauge(abuse_broker, "kcoord_producer_ids") == 0,
        timeout=30,
        what="idle producer ids to be forgotten",
    )
    with RawClient(abuse_broker.port) as c:
        # Forgotten: a late retry of the first batch is appended again, as Kafka does.
        assert _produce(c, topic, first)[0] == ErrorCode.none
        assert _list_offset(c, topic, -1)[0] == producers + 3
    assert_survived(abuse_broker, healthy, "many idempotent producer ids")


def _produce_body(topic: str, records: bytes) -> bytes:
    fields = dict(
        transactional_id=None,
        acks=-1,
        timeout=5000,
        topic_data=[dict(name=topic, partition_data=[dict(index=0, records=records)])],
    )
    return encode_body(build(request_type(ApiKey.PRODUCE, 9), **fields))


def _planted_segment(path: Path) -> tuple[int, int]:
    """A partition directory whose only segment holds a good batch, a zstd bomb (3 GiB of
    records, with the largest timestamp) and another good batch, offsets and CRCs correct:
    what an older broker may have left. Returns the bomb's (base offset, max timestamp)."""
    path.mkdir(parents=True)
    before = build_batch(_entries(3, "a"), base_offset=0)
    bomb_ts = T0 + 10_000
    records = compress(Compression.ZSTD, bytes(64 << 20), 19) * 48
    bomb = build_batch(
        [(None, b"x", (), bomb_ts)], compression=Compression.ZSTD, base_offset=3
    )
    bomb = _with_payload(bomb, records)
    after = build_batch(_entries(2, "b"), base_offset=4)
    (path / f"{0:020d}.log").write_bytes(before + bomb + after)
    return 3, bomb_ts


def test_a_bomb_already_on_disk_does_not_kill_the_broker(
    abuse_broker: BrokerProcess, healthy: HealthyGroup
) -> None:
    abuse_broker.stop()
    bomb_offset, bomb_ts = _planted_segment(abuse_broker.data_dir / "planted-0")
    abuse_broker.restart()
    for _ in range(2):
        with RawClient(abuse_broker.port, timeout=60) as c:
            assert _list_offset(c, "planted", -1)[0] == 6
            # The bomb's batch holds the first record at or after bomb_ts - 1, and the largest
            # timestamp: both answers come at batch granularity, without decompressing it all.
            assert _list_offset(c, "planted", bomb_ts - 1) == (bomb_offset, bomb_ts)
            assert _list_offset(c, "planted", -3) == (bomb_offset, bomb_ts)
            assert _list_offset(c, "planted", T0 + 1) == (1, T0 + 1)  # a good batch: exact
        assert peak_rss(abuse_broker.pid) < RSS_BOUND
        abuse_broker.kill()
        abuse_broker.restart()
    assert "cannot be decoded" in abuse_broker.log_path.read_text(errors="replace")
    assert_survived(abuse_broker, healthy, "a bomb planted in a segment")
