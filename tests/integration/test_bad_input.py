"""Bad input gets a clear error code or a clean close of that one connection, never a crash."""

from __future__ import annotations

import random
import struct
import threading

from kio.serial import entity_reader

from kcoord.protocol.apis import ApiKey
from kcoord.protocol.codec import response_type
from kcoord.protocol.errors import ErrorCode
from kcoord.protocol.record_encoding import build_batch

from .clients import consume_confluent, create_topic, produce_confluent
from .harness import BrokerProcess
from .rawclient import RawClient


def _frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def _bad_connections(port: int) -> dict[str, RawClient]:
    rng = random.Random(1234)
    bad: dict[str, RawClient] = {}

    def open_with(name: str, data: bytes) -> None:
        c = RawClient(port)
        c.send_raw(data)
        bad[name] = c

    open_with("huge size prefix", struct.pack(">i", 2**31 - 1) + b"x" * 100)
    open_with("negative size prefix", struct.pack(">i", -5) + b"x" * 100)
    open_with("over socket.request.max.bytes", struct.pack(">i", 100 * 1024 * 1024 + 1))
    open_with("unknown api key", _frame(struct.pack(">hhih", 9999, 0, 1, -1)))
    open_with("short header", _frame(b"\x00\x03"))
    # A well-framed Metadata v12 request whose body is garbage.
    open_with(
        "garbage body",
        _frame(struct.pack(">hhih", 3, 12, 1, -1) + b"\x00" + bytes([0xFF] * 40)),
    )
    # Random bytes inside a plausible frame (their api key is whatever the dice say).
    open_with("random frame", _frame(bytes(rng.getrandbits(8) for _ in range(300))))
    # Unsupported version of an API other than ApiVersions.
    open_with("unsupported version", _frame(struct.pack(">hhih", 3, 99, 1, -1)))
    return bad


def test_malformed_input_on_some_connections_leaves_others_unaffected(
    broker: BrokerProcess,
) -> None:
    create_topic(broker.bootstrap, "healthy", 1)
    errors: list[BaseException] = []
    consumed: list[object] = []
    messages = [(0, f"k{i}".encode(), f"v{i}".encode()) for i in range(300)]

    def normal_traffic() -> None:
        try:
            produce_confluent(broker.bootstrap, "healthy", messages, "lz4")
            consumed.extend(consume_confluent(broker.bootstrap, "healthy", 1, len(messages)))
        except BaseException as e:  # reported in the main thread
            errors.append(e)

    worker = threading.Thread(target=normal_traffic)
    worker.start()
    bad = _bad_connections(broker.port)
    # A frame cut short, then the client hangs up: the broker just drops the connection.
    cut = RawClient(broker.port)
    cut.send_raw(struct.pack(">i", 500) + b"\x00\x03\x00\x0c")
    cut.close()
    worker.join(timeout=120)
    assert not worker.is_alive()
    assert not errors, errors
    assert len(consumed) == len(messages)
    for name, conn in bad.items():
        assert conn.closed_by_peer(timeout=10), f"{name}: connection was not closed"
        conn.close()
    assert broker.alive()
    # Still serving new connections.
    with RawClient(broker.port) as c:
        assert c.request(ApiKey.API_VERSIONS, 3, client_software_name="t", client_software_version="1").error_code == 0


def test_api_versions_of_unknown_version_answers_v0_with_unsupported_version(
    broker: BrokerProcess,
) -> None:
    with RawClient(broker.port) as c:
        correlation = c.send(ApiKey.API_VERSIONS, 99, b"whatever")
        frame = c.recv_frame()
        assert struct.unpack_from(">i", frame)[0] == correlation
        body, _ = entity_reader(response_type(ApiKey.API_VERSIONS, 0))(frame, 4)
        assert body.error_code == ErrorCode.unsupported_version
        keys = {k.api_key: (k.min_version, k.max_version) for k in body.api_keys}
        assert keys[ApiKey.API_VERSIONS] == (0, 4)
        assert keys[ApiKey.PRODUCE][0] == 0


def test_produce_v0_to_v2_answered_with_unsupported_version(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "old", 1)
    topic = b"old"
    body = (
        struct.pack(">hi", -1, 1000)
        + struct.pack(">i", 1)
        + struct.pack(">h", len(topic))
        + topic
        + struct.pack(">i", 1)
        + struct.pack(">i", 0)
        + struct.pack(">i", 3)
        + b"abc"
    )
    for version in (0, 1, 2):
        with RawClient(broker.port) as c:
            correlation = c.send(ApiKey.PRODUCE, version, body)
            frame = c.recv_frame()
            assert struct.unpack_from(">i", frame)[0] == correlation
            (n_topics,) = struct.unpack_from(">i", frame, 4)
            assert n_topics == 1
            name_len = struct.unpack_from(">h", frame, 8)[0]
            pos = 10 + name_len
            assert frame[10:pos] == topic
            (n_parts, partition, error) = struct.unpack_from(">iih", frame, pos)
            assert (n_parts, partition, error) == (1, 0, ErrorCode.unsupported_version)


def _produce(c: RawClient, topic: str, records: bytes) -> int:
    resp = c.request(
        ApiKey.PRODUCE,
        9,
        transactional_id=None,
        acks=-1,
        timeout=5000,
        topic_data=[dict(name=topic, partition_data=[dict(index=0, records=records)])],
    )
    part = resp.responses[0].partition_responses[0]
    return int(part.error_code)


def _latest(c: RawClient, topic: str) -> int:
    resp = c.request(
        ApiKey.LIST_OFFSETS,
        7,
        replica_id=-1,
        isolation_level=0,
        topics=[dict(name=topic, partitions=[dict(partition_index=0, current_leader_epoch=-1, timestamp=-1)])],
    )
    return int(resp.topics[0].partitions[0].offset)


def test_batch_with_bad_crc_is_rejected_and_nothing_appended(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "crc", 1)
    good = build_batch([(b"k", b"value", (), 1_700_000_000_000)])
    bad = bytearray(good)
    bad[-2] ^= 0x01
    truncated = good[:-3]
    with RawClient(broker.port) as c:
        assert _produce(c, "crc", bytes(bad)) == ErrorCode.corrupt_message
        assert _produce(c, "crc", truncated) == ErrorCode.corrupt_message
        # A good batch followed by a bad one in the same partition: all or nothing.
        assert _produce(c, "crc", good + bytes(bad)) == ErrorCode.corrupt_message
        assert _latest(c, "crc") == 0
        assert _produce(c, "crc", good) == ErrorCode.none
        assert _latest(c, "crc") == 1
