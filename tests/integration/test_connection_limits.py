"""Connection limits with a real broker: a client over max.connections.per.ip is refused while
others keep working; an idle connection is closed after connections.max.idle.ms."""

from __future__ import annotations

import socket
import time
from pathlib import Path

from .harness import BrokerProcess


def _api_versions_ok(sock: socket.socket) -> bool:
    sock.sendall(bytes.fromhex("0000000a00120000000000010000"))
    try:
        return len(sock.recv(4096)) > 4
    except OSError:
        return False


def test_over_the_per_ip_limit_is_refused_and_idle_connections_close(tmp_path: Path) -> None:
    from confluent_kafka.admin import AdminClient

    b = BrokerProcess(
        tmp_path / "data", {"max.connections.per.ip": 3, "connections.max.idle.ms": 1500}
    ).start()
    held: list[socket.socket] = []
    try:
        for _ in range(3):  # from 127.0.0.2: another client address on the loopback
            s = socket.create_connection(("127.0.0.1", b.port), timeout=5, source_address=("127.0.0.2", 0))
            held.append(s)
            assert _api_versions_ok(s)
        extra = socket.create_connection(("127.0.0.1", b.port), timeout=5, source_address=("127.0.0.2", 0))
        held.append(extra)
        assert not _api_versions_ok(extra) and extra.recv(4096) == b""
        # Another address keeps working meanwhile.
        assert AdminClient({"bootstrap.servers": b.bootstrap}).list_topics(timeout=20).brokers
        # The idle ones are closed after connections.max.idle.ms.
        started = time.monotonic()
        held[0].settimeout(10)
        assert held[0].recv(4096) == b""
        assert 1.0 < time.monotonic() - started < 9
        assert "connections.max.idle.ms" in b.log_path.read_text()
    finally:
        for s in held:
            s.close()
        b.stop()
