"""Listeners and TLS with real clients: a PLAINTEXT and an SSL listener side by side, each
advertising its own address; a confluent-kafka group over TLS; mutual TLS; bad TLS input."""

from __future__ import annotations

import socket
import ssl
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kcoord.broker.net.listeners import principal_of

from .clients import create_topic
from .harness import BrokerProcess, free_port


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_certs(tmp_path_factory.mktemp("certs"))


def make_certs(d: Path) -> Path:
    """A CA, a broker certificate for 127.0.0.1/localhost and a client certificate in ``d``,
    with the openssl commands docs/security.md documents."""
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=kcoord-test-ca",
             "-keyout", "ca.key", "-out", "ca.pem", cwd=d)
    for name, subject, san in (
        ("broker", "/CN=localhost", "subjectAltName=DNS:localhost,IP:127.0.0.1"),
        ("client", "/C=DE/O=Example/CN=alice", "subjectAltName=DNS:alice"),
    ):
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", subject, "-keyout", f"{name}.key",
                 "-out", f"{name}.csr", cwd=d)
        (d / f"{name}.ext").write_text(san + "\n")
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                 "-CAcreateserial", "-days", "2", "-extfile", f"{name}.ext", "-out", f"{name}.pem", cwd=d)
        # Kafka's PEM keystore: the private key and the certificate chain in one file.
        (d / f"{name}-keystore.pem").write_text((d / f"{name}.key").read_text() + (d / f"{name}.pem").read_text())
    return d


def _broker(tmp_path: Path, certs: Path, **extra: object) -> tuple[BrokerProcess, int]:
    plain = free_port()
    tls = free_port()
    settings: dict[str, object] = {
        "group.initial.rebalance.delay.ms": 0,
        "group.min.session.timeout.ms": 1000,
        "listeners": f"PLAINTEXT://127.0.0.1:{plain},SSL://127.0.0.1:{tls}",
        "ssl.keystore.location": str(certs / "broker-keystore.pem"),
        "ssl.truststore.location": str(certs / "ca.pem"),
        "socket.request.receive.timeout.ms": 3000,
        **extra,
    }
    b = BrokerProcess(tmp_path / "data", settings)
    b.port = plain  # the harness waits on (and clients bootstrap from) the PLAINTEXT listener
    return b.start(), tls


@pytest.fixture
def broker(tmp_path: Path, certs: Path) -> Iterator[tuple[BrokerProcess, int]]:
    b, tls = _broker(tmp_path, certs)
    try:
        yield b, tls
    finally:
        b.stop()


def _tls_conf(certs: Path, port: int, **extra: Any) -> dict[str, Any]:
    return {
        "bootstrap.servers": f"127.0.0.1:{port}",
        "security.protocol": "SSL",
        "ssl.ca.location": str(certs / "ca.pem"),
        **extra,
    }


def test_each_listener_advertises_its_own_address(broker: tuple[BrokerProcess, int], certs: Path) -> None:
    from confluent_kafka.admin import AdminClient

    b, tls = broker
    over_tls = AdminClient(_tls_conf(certs, tls)).list_topics(timeout=20)
    assert [(x.host, x.port) for x in over_tls.brokers.values()] == [("127.0.0.1", tls)]
    plain = AdminClient({"bootstrap.servers": b.bootstrap}).list_topics(timeout=20)
    assert [(x.host, x.port) for x in plain.brokers.values()] == [("127.0.0.1", b.port)]


def test_a_consumer_group_over_tls_produces_consumes_and_commits(
    broker: tuple[BrokerProcess, int], certs: Path
) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    b, tls = broker
    create_topic(b.bootstrap, "secure", 1)
    producer = Producer(_tls_conf(certs, tls))
    for i in range(5):
        producer.produce("secure", value=b"v%d" % i)
    assert producer.flush(30) == 0
    consumer = Consumer(_tls_conf(certs, tls, **{"group.id": "g", "auto.offset.reset": "earliest",
                                                 "enable.auto.commit": False}))
    try:
        consumer.subscribe(["secure"])
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(got) < 5 and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and not msg.error():
                got.append(msg.value())
                consumer.commit(message=msg, asynchronous=False)
        assert got == [b"v%d" % i for i in range(5)]
        assert consumer.committed([TopicPartition("secure", 0)], timeout=10)[0].offset == 5
    finally:
        consumer.close()


def test_mutual_tls_requires_a_client_certificate(tmp_path: Path, certs: Path) -> None:
    from confluent_kafka.admin import AdminClient

    b, tls = _broker(tmp_path, certs, **{"ssl.client.auth": "required"})
    try:
        with_cert = _tls_conf(
            certs, tls, **{"ssl.certificate.location": str(certs / "client.pem"),
                           "ssl.key.location": str(certs / "client.key")}
        )
        assert AdminClient(with_cert).list_topics(timeout=20).brokers
        without = AdminClient(_tls_conf(certs, tls, **{"socket.timeout.ms": 3000}))
        with pytest.raises(Exception):  # noqa: B017 - librdkafka's transport error
            without.list_topics(timeout=5)
    finally:
        b.stop()


def test_the_certificate_subject_is_the_principal(certs: Path) -> None:
    decoded = ssl._ssl._test_decode_cert(str(certs / "client.pem"))  # type: ignore[attr-defined]
    assert principal_of(decoded) == "User:CN=alice,O=Example,C=DE"
    assert principal_of(None) == "User:ANONYMOUS"


def test_bad_tls_input_closes_only_that_connection(broker: tuple[BrokerProcess, int], certs: Path) -> None:
    from confluent_kafka.admin import AdminClient

    b, tls = broker
    # Random bytes instead of a ClientHello.
    with socket.create_connection(("127.0.0.1", tls), timeout=10) as s:
        s.sendall(b"\x16\x03\x01\xff\xff" + bytes(range(256)) * 8)
        assert s.recv(4096) is not None  # an alert or the close; never a hang past the timeout
    # A client that stops in the middle of its handshake is closed after the receive timeout.
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", tls), timeout=15) as s:
        s.sendall(b"\x16\x03\x01\x00")  # four bytes of a record header, then nothing
        assert s.recv(4096) == b""
    assert time.monotonic() - started < 12
    # Plaintext Kafka to the TLS port.
    with socket.create_connection(("127.0.0.1", tls), timeout=10) as s:
        s.sendall(bytes.fromhex("0000000a00120000000000010000"))
        s.recv(4096)
    # The broker serves on both listeners.
    assert AdminClient(_tls_conf(certs, tls)).list_topics(timeout=20).brokers
    assert AdminClient({"bootstrap.servers": b.bootstrap}).list_topics(timeout=20).brokers
    assert b.proc is not None and b.proc.poll() is None
