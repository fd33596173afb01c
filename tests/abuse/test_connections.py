"""One client must not starve the others or grow the broker's memory without bound.

Findings 5 and 6 of the hardening issue: pipelined Fetches whose answers are never read took the
broker from 178 MB to 2.17 GB; connections holding partial 100 MiB frames pinned memory for
ever; 20,000 pipelined Metadata requests made other clients wait ~10 s. Now a connection handles
a few frames per turn of the event loop, stops reading while its answers do not drain, reserves
large requests in a broker-wide budget, and must deliver a request within a timeout.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from collections.abc import Callable

import pytest

from kcoord.protocol.apis import ApiKey
from kcoord.protocol.codec import encode_body, request_type
from kcoord.protocol.responses import build
from tests.integration.clients import create_topic, produce_confluent
from tests.integration.harness import BrokerProcess, wait_for
from tests.integration.rawclient import RawClient

from .conftest import RSS_BOUND, assert_survived, peak_rss
from .healthy import TOPIC, HealthyGroup

RECEIVE_TIMEOUT_MS = 2000
BROKER_SETTINGS = {"socket.request.receive.timeout.ms": RECEIVE_TIMEOUT_MS}


def _request(api_key: int, version: int, correlation_id: int, body: bytes) -> bytes:
    header = struct.pack(">hhih", api_key, version, correlation_id, 1) + b"x" + b"\x00"
    payload = header + body
    return struct.pack(">i", len(payload)) + payload


def _pipeline(port: int, count: int, make: Callable[[int], bytes]) -> tuple[socket.socket, threading.Thread]:
    """A connection and a thread writing ``count`` requests to it without reading anything."""
    sock = socket.create_connection(("127.0.0.1", port))
    data = b"".join(make(i) for i in range(count))

    def send() -> None:
        with contextlib.suppress(OSError):  # the test closes the socket
            sock.sendall(data)

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    return sock, sender


def _read_frames(sock: socket.socket, count: int, timeout: float = 60.0) -> list[int]:
    """Read ``count`` response frames; their correlation ids."""
    sock.settimeout(timeout)
    buf = bytearray()
    ids: list[int] = []
    while len(ids) < count:
        chunk = sock.recv(1 << 20)
        if not chunk:
            raise AssertionError(f"connection closed after {len(ids)} responses")
        buf += chunk
        pos = 0
        while len(buf) - pos >= 8:
            size, correlation = struct.unpack_from(">ii", buf, pos)
            if len(buf) - pos - 4 < size:
                break
            ids.append(correlation)
            pos += 4 + size
        del buf[:pos]
    return ids


def test_a_client_pipelining_100000_requests_takes_turns_with_the_others(
    abuse_broker: BrokerProcess, healthy: HealthyGroup
) -> None:
    body = encode_body(
        build(
            request_type(ApiKey.METADATA, 12),
            topics=[dict(name=TOPIC, topic_id=None)],
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
    )
    count = 100_000
    sock, sender = _pipeline(
        abuse_broker.port, count, lambda i: _request(ApiKey.METADATA, 12, i, body)
    )
    try:
        # Nothing is read yet: the broker answers until its send buffers fill, then waits;
        # meanwhile everyone else is served.
        assert_survived(abuse_broker, healthy, "100,000 pipelined Metadata requests, unread")
        ids = _read_frames(sock, count)
        assert ids == list(range(count)), "answers lost or out of order"
        sender.join(timeout=30)
    finally:
        sock.close()
    assert_survived(abuse_broker, healthy, "100,000 pipelined Metadata requests")


def test_unread_fetch_answers_do_not_grow_the_broker(
    abuse_broker: BrokerProcess, healthy: HealthyGroup
) -> None:
    create_topic(abuse_broker.bootstrap, "bulk", 1)
    value = b"x" * 100_000
    produce_confluent(abuse_broker.bootstrap, "bulk", [(0, None, value)] * 40, "none")  # type: ignore[list-item]
    fetch = encode_body(
        build(
            request_type(ApiKey.FETCH, 12),
            cluster_id=None,
            replica_id=-1,
            max_wait=0,
            min_bytes=0,
            max_bytes=4 << 20,
            isolation_level=0,
            session_id=0,
            session_epoch=-1,
            topics=[
                dict(
                    topic="bulk",
                    partitions=[
                        dict(
                            partition=0,
                            current_leader_epoch=-1,
                            fetch_offset=0,
                            last_fetched_epoch=-1,
                            log_start_offset=-1,
                            partition_max_bytes=4 << 20,
                        )
                    ],
                )
            ],
            forgotten_topics_data=[],
            rack_id="",
        )
    )
    # 2,000 fetches of 4 MB each: 8 GB of answers if the broker built them all.
    sock, _sender = _pipeline(abuse_broker.port, 2000, lambda i: _request(ApiKey.FETCH, 12, i, fetch))
    try:
        assert_survived(abuse_broker, healthy, "2,000 pipelined 4 MB Fetches, unread")
        assert peak_rss(abuse_broker.pid) < RSS_BOUND
        # The answers that were built are intact and in order.
        assert _read_frames(sock, 3) == [0, 1, 2]
    finally:
        sock.close()
    assert peak_rss(abuse_broker.pid) < RSS_BOUND


def test_partial_large_requests_wait_for_memory_then_time_out(
    abuse_broker: BrokerProcess, healthy: HealthyGroup
) -> None:
    declared = 100 * 1024 * 1024
    sent = 40 * 1024 * 1024
    socks: list[socket.socket] = []
    threads: list[threading.Thread] = []
    chunk = b"\x00" * (1 << 20)

    def send_part(sock: socket.socket) -> None:
        with contextlib.suppress(OSError):  # closed by the broker while still sending
            sock.sendall(struct.pack(">i", declared) + struct.pack(">hhih", 3, 12, 1, -1))
            for _ in range(sent // len(chunk)):
                sock.sendall(chunk)

    for _ in range(8):
        s = socket.create_connection(("127.0.0.1", abuse_broker.port))
        socks.append(s)
        t = threading.Thread(target=send_part, args=(s,), daemon=True)
        t.start()
        threads.append(t)
    try:
        assert_survived(abuse_broker, healthy, "8 connections each sending part of a 100 MiB request")

        def closed(s: socket.socket) -> bool:
            s.settimeout(0.05)
            try:
                return s.recv(1) == b""
            except TimeoutError:
                return False
            except OSError:
                return True

        # Each one is let in when memory allows, then closed for being too slow.
        wait_for(lambda: all(closed(s) for s in socks), 90, what="every partial request closed")
        assert peak_rss(abuse_broker.pid) < RSS_BOUND
    finally:
        for s in socks:
            s.close()
    assert "socket.request.receive.timeout.ms" in abuse_broker.log()
    assert_survived(abuse_broker, healthy, "partial 100 MiB requests")


@pytest.mark.parametrize("first_bytes", [b"", b"\x00\x03\x00\x0c"], ids=["prefix-only", "a-few-bytes"])
def test_a_request_that_stops_arriving_is_closed(
    abuse_broker: BrokerProcess, healthy: HealthyGroup, first_bytes: bytes
) -> None:
    with RawClient(abuse_broker.port) as c:
        c.send_raw(struct.pack(">i", 500) + first_bytes)
        assert c.closed_by_peer(timeout=RECEIVE_TIMEOUT_MS / 1000 + 20)
    assert_survived(abuse_broker, healthy, "a request that stopped arriving")
