"""Slow clients against the metrics port (``/metrics``, ``/healthz``, the console).

Finding 8 of the hardening issue: the metrics port counted no connections and gave a client
10 s per header line, up to 101 lines (about 17 minutes); 4,296 slow connections under a
4,096-descriptor limit left no descriptor for new Kafka clients or new topics and silenced
``/healthz``. ``max.connections`` does not count them (it is the Kafka listeners' limit).

Here the broker runs under a 1,024-descriptor limit while an attacker keeps 1,600 slow
connections open to its metrics port (half send a header line now and then, a quarter one more byte
of their request line, a quarter nothing at all; each one the broker closes is opened again). The broker must hold at most ``metrics.max.connections`` of them, so that new Kafka
clients, a new topic and the healthy group keep working; every slow connection must be closed
once ``metrics.request.timeout.ms`` has passed without a complete request head, however often
it trickles; and ``/healthz`` answers a fresh connection once the attack stops.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from tests.integration.clients import consume_confluent, create_topic, produce_confluent
from tests.integration.harness import BrokerProcess, wait_for

from .conftest import assert_survived
from .healthy import HealthyGroup

MAX_CONNECTIONS = 50
REQUEST_TIMEOUT_MS = 3000
BROKER_SETTINGS = {
    "metrics.max.connections": MAX_CONNECTIONS,
    "metrics.request.timeout.ms": REQUEST_TIMEOUT_MS,
}
BROKER_NOFILE = 1024
SLOW = 1600  # more than the broker's descriptors
TRICKLE_S = 0.3  # a header line this often on each trickling connection


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def ended(sock: socket.socket) -> bool:
    """Whether the broker closed ``sock`` (a non-blocking socket: whatever it answered, then
    the end of the stream, or a reset)."""
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                return True
    except BlockingIOError:
        return False
    except OSError:
        return True


class Attacker:
    """Keeps ``SLOW`` slow connections open to ``port`` from a thread: each one the broker
    closes is opened again (a bounded number per round) until :meth:`stop_reopening`."""

    def __init__(self, port: int, pid: int) -> None:
        self.port = port
        self.pid = pid
        self.socks: list[socket.socket | None] = [None] * SLOW
        self.opened = 0
        self.reopen = True
        self.rounds = 0
        self.open_now = 0
        """Connections still open at the end of the last round."""
        self.peak_fds = 0
        """The most descriptors the broker had open at the end of a round."""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="metrics-attacker", daemon=True)

    def _open(self, i: int) -> socket.socket | None:
        try:
            sock = socket.create_connection(("127.0.0.1", self.port), timeout=5)
        except OSError:
            return None
        self.opened += 1
        with contextlib.suppress(OSError):
            if i % 4 < 2:  # a request head begun, never finished
                sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
            elif i % 4 == 2:  # a request line begun, never finished
                sock.sendall(b"GET /")
        sock.setblocking(False)  # read and written without waiting from now on
        return sock

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            reopen, opened = self.reopen, 0
            for i, sock in enumerate(self.socks):
                if sock is not None and ended(sock):
                    sock.close()
                    sock = self.socks[i] = None
                if sock is None:
                    if reopen and opened < 300:
                        self.socks[i] = self._open(i)
                        opened += 1
                elif i % 4 < 3:  # a header line, or one more byte of the request line
                    with contextlib.suppress(OSError):
                        sock.send(b"X-Slow: 1\r\n" if i % 4 < 2 else b"a")
            self.open_now = sum(1 for s in self.socks if s is not None)
            self.peak_fds = max(self.peak_fds, open_fds(self.pid))
            self.rounds += 1
            self._stop.wait(TRICKLE_S)

    def stop_reopening(self) -> int:
        """Stop opening connections again; the round after which none is."""
        self.reopen = False
        return self.rounds + 1

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=60)
        for sock in self.socks:
            if sock is not None:
                sock.close()


def refused(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    return {
        s.labels["reason"]: s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "kcoord_connections_refused_total"
    }


def healthz(port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


def test_slow_metrics_clients_are_bounded_and_timed_out(
    abuse_broker: BrokerProcess, healthy: HealthyGroup
) -> None:
    assert abuse_broker.metrics_port is not None
    port = abuse_broker.metrics_port
    pid = abuse_broker.pid
    baseline = open_fds(pid)
    assert healthz(port) == 200

    attacker = Attacker(port, pid)
    try:
        attacker.start()
        wait_for(lambda: attacker.opened >= SLOW, 60, what=f"{SLOW} connections opened")

        # New Kafka clients, a new topic and the healthy group keep working meanwhile.
        create_topic(abuse_broker.bootstrap, "after-slow-http", 2)
        produce_confluent(abuse_broker.bootstrap, "after-slow-http", [(0, b"k", b"v")], "none")
        got = consume_confluent(abuse_broker.bootstrap, "after-slow-http", 2, 1)
        assert [(p, o, v) for p, o, _, v in got] == [(0, 0, b"v")]
        healthy.wait_progress(what="1,600 slow metrics-port connections")
        assert attacker.opened > SLOW + 100  # the broker kept closing them, and they came back
        # It held at most MAX_CONNECTIONS of them all along (plus the few it had just accepted
        # and was closing): its other descriptors stayed free.
        assert attacker.peak_fds < baseline + MAX_CONNECTIONS + 150, (attacker.peak_fds, baseline)

        # Once they stop coming back, every slow one is closed within the request timeout
        # (trickling header lines does not extend it), and /healthz answers a new client.
        last = attacker.stop_reopening()
        wait_for(
            lambda: attacker.rounds > last and attacker.open_now == 0,
            REQUEST_TIMEOUT_MS / 1000 + 10,
            what="the slow connections to be closed",
        )
    finally:
        attacker.stop()
    assert healthz(port) == 200
    reasons = refused(port)
    assert reasons.get("metrics_max_connections", 0) > 0, reasons
    assert reasons.get("metrics_request_timeout", 0) > 0, reasons
    wait_for(lambda: open_fds(pid) < baseline + 20, 10, what="the broker's descriptors back")
    assert_survived(abuse_broker, healthy, "1,600 slow metrics-port connections")
