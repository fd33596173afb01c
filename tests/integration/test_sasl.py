"""SASL with real clients: users added with ``kcoord users add`` before start-up; a
confluent-kafka group over SASL_PLAINTEXT with PLAIN and over SASL_SSL with SCRAM-SHA-512; a
wrong password fails fast; nothing but the SASL exchange is served before authentication."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .clients import create_topic
from .harness import ROOT, BrokerProcess, free_port, storage_url, stored_document
from .test_tls import make_certs


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_certs(tmp_path_factory.mktemp("certs"))


def kcoord_users(*args: str) -> subprocess.CompletedProcess[str]:
    url = storage_url(Path(args[args.index("--data-dir") + 1])) if "--data-dir" in args else None
    return subprocess.run(
        [sys.executable, "-m", "kcoord", "users", *args, *(["--storage-url", url] if url else [])],
        capture_output=True, text=True, cwd=ROOT, timeout=60,
    )


@pytest.fixture
def broker(tmp_path: Path, certs: Path) -> Iterator[tuple[BrokerProcess, int, int]]:
    data = tmp_path / "data"
    assert kcoord_users("add", "alice", "--password", "alice-secret", "--data-dir", str(data)).returncode == 0
    listed = kcoord_users("list", "--data-dir", str(data))
    assert listed.stdout.split() == ["alice", "SCRAM-SHA-256,SCRAM-SHA-512"]
    stored = stored_document(data, "scram-credentials.json")
    assert stored is not None and b"alice-secret" not in stored
    plain, sasl, sasl_ssl = free_port(), free_port(), free_port()
    b = BrokerProcess(
        data,
        {
            "group.initial.rebalance.delay.ms": 0,
            "listeners": f"PLAINTEXT://127.0.0.1:{plain},SASL_PLAINTEXT://127.0.0.1:{sasl},"
            f"SASL_SSL://127.0.0.1:{sasl_ssl}",
            "ssl.keystore.location": str(certs / "broker-keystore.pem"),
        },
    )
    b.port = plain
    b.start()
    try:
        yield b, sasl, sasl_ssl
    finally:
        b.stop()


def _conf(port: int, protocol: str, mechanism: str, password: str, certs: Path, **extra: Any) -> dict[str, Any]:
    conf = {
        "bootstrap.servers": f"127.0.0.1:{port}",
        "security.protocol": protocol,
        "sasl.mechanism": mechanism,
        "sasl.username": "alice",
        "sasl.password": password,
        **extra,
    }
    if protocol == "SASL_SSL":
        conf["ssl.ca.location"] = str(certs / "ca.pem")
    return conf


@pytest.mark.parametrize(
    ("protocol", "mechanism"), [("SASL_PLAINTEXT", "PLAIN"), ("SASL_SSL", "SCRAM-SHA-512"), ("SASL_PLAINTEXT", "SCRAM-SHA-256")]
)
def test_a_group_produces_consumes_and_commits_over_sasl(
    broker: tuple[BrokerProcess, int, int], certs: Path, protocol: str, mechanism: str
) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    b, sasl, sasl_ssl = broker
    port = sasl_ssl if protocol == "SASL_SSL" else sasl
    create_topic(b.bootstrap, "t", 1)
    producer = Producer(_conf(port, protocol, mechanism, "alice-secret", certs))
    for i in range(3):
        producer.produce("t", value=b"%d" % i)
    assert producer.flush(30) == 0
    consumer = Consumer(
        _conf(port, protocol, mechanism, "alice-secret", certs,
              **{"group.id": "g-" + mechanism, "auto.offset.reset": "earliest", "enable.auto.commit": False})
    )
    try:
        consumer.subscribe(["t"])
        got = 0
        deadline = time.monotonic() + 30
        while got < 3 and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and not msg.error():
                got += 1
                consumer.commit(message=msg, asynchronous=False)
        assert got == 3
        assert consumer.committed([TopicPartition("t", 0)], timeout=10)[0].offset == 3
    finally:
        consumer.close()


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_a_wrong_password_gets_an_authentication_error_not_a_hang(
    broker: tuple[BrokerProcess, int, int], certs: Path, mechanism: str
) -> None:
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient

    _b, sasl, _ = broker
    errors: list[Any] = []
    admin = AdminClient(
        _conf(sasl, "SASL_PLAINTEXT", mechanism, "wrong", certs, error_cb=errors.append)
    )
    started = time.monotonic()
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=10)
    assert time.monotonic() - started < 11
    admin.poll(1)  # serves error_cb
    assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors


def test_nothing_but_the_sasl_exchange_before_authentication(broker: tuple[BrokerProcess, int, int]) -> None:
    from confluent_kafka.admin import AdminClient

    b, sasl, _ = broker
    # A Metadata v0 request straight away: the connection is closed.
    with socket.create_connection(("127.0.0.1", sasl), timeout=10) as s:
        s.sendall(bytes.fromhex("0000000e0003000000000001000000000000"[:28]) + b"\x00\x00\x00\x00")
        assert s.recv(4096) == b""
    # Garbage SASL tokens: SaslHandshake v1 PLAIN, then SaslAuthenticate v0 with junk.
    with socket.create_connection(("127.0.0.1", sasl), timeout=10) as s:
        mech = b"PLAIN"
        body = len(mech).to_bytes(2, "big") + mech
        header = (17).to_bytes(2, "big") + (1).to_bytes(2, "big") + (1).to_bytes(4, "big") + b"\xff\xff"
        s.sendall((len(header) + len(body)).to_bytes(4, "big") + header + body)
        assert len(s.recv(4096)) > 8
        token = b"\x00\xffjunk"
        body = len(token).to_bytes(4, "big") + token
        header = (36).to_bytes(2, "big") + (0).to_bytes(2, "big") + (2).to_bytes(4, "big") + b"\xff\xff"
        s.sendall((len(header) + len(body)).to_bytes(4, "big") + header + body)
        answer = s.recv(4096)
        assert int.from_bytes(answer[8:10], "big") == 58  # SASL_AUTHENTICATION_FAILED
        s.settimeout(5)
        assert s.recv(4096) == b""  # then closed
    assert AdminClient({"bootstrap.servers": b.bootstrap}).list_topics(timeout=20).brokers


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256"])
def test_saslhandshake_v0_then_bare_tokens(broker: tuple[BrokerProcess, int, int], mechanism: str) -> None:
    """Clients from before KIP-152 (kafka-python 2.0.2, old Sarama, aiokafka <= 0.12) send
    SaslHandshake v0, then the mechanism's tokens as bare size-prefixed frames."""
    from types import SimpleNamespace

    from kcoord.admin.client import exchange
    from kcoord.admin.security import _login

    _b, sasl, _ = broker

    def v0(sock: socket.socket, api_key: int, version: int, fields: dict[str, Any]) -> Any:
        if api_key == 17:  # SaslHandshake, as v0
            return exchange(sock, 17, 0, fields)
        token = bytes(fields["auth_bytes"])  # SaslAuthenticate's token, sent bare
        sock.sendall(len(token).to_bytes(4, "big") + token)
        size = int.from_bytes(_read(sock, 4), "big")
        return SimpleNamespace(error_code=0, error_message=None, auth_bytes=_read(sock, size))

    conf = {"sasl.mechanism": mechanism, "sasl.username": "alice", "sasl.password": "alice-secret"}
    with socket.create_connection(("127.0.0.1", sasl), timeout=10) as sock:
        _login(sock, conf, v0)
        metadata = exchange(sock, 3, 12, dict(topics=None, allow_auto_topic_creation=False,
                                             include_topic_authorized_operations=False))
        assert metadata.brokers  # authenticated: requests are served
    with socket.create_connection(("127.0.0.1", sasl), timeout=10) as sock, pytest.raises(ConnectionError):
        _login(sock, {**conf, "sasl.password": "wrong"}, v0)  # closed, no answer token


def _read(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError("closed by the broker")
        out += chunk
    return out


def _kafka_python(port: int, mechanism: str, password: str) -> int:
    from kafka import KafkaConsumer, KafkaProducer

    kw: dict[str, Any] = dict(
        bootstrap_servers=f"127.0.0.1:{port}", security_protocol="SASL_PLAINTEXT", sasl_mechanism=mechanism,
        sasl_plain_username="alice", sasl_plain_password=password,
    )
    producer = KafkaProducer(**kw)
    producer.send("kp", b"x").get(10)
    producer.close()
    consumer = KafkaConsumer("kp", group_id="kp-" + mechanism, auto_offset_reset="earliest", **kw)
    try:
        got = sum(len(v) for v in consumer.poll(timeout_ms=10_000).values())
        consumer.commit()
        return got
    finally:
        consumer.close()


def _aiokafka(port: int, mechanism: str, password: str) -> int:
    import asyncio

    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    async def run() -> int:
        kw: dict[str, Any] = dict(
            bootstrap_servers=f"127.0.0.1:{port}", security_protocol="SASL_PLAINTEXT", sasl_mechanism=mechanism,
            sasl_plain_username="alice", sasl_plain_password=password,
        )
        producer = AIOKafkaProducer(**kw)
        await producer.start()
        try:
            await producer.send_and_wait("ak", b"x")
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer("ak", group_id="ak-" + mechanism, auto_offset_reset="earliest", **kw)
        await consumer.start()
        try:
            got = sum(len(v) for v in (await consumer.getmany(timeout_ms=10_000)).values())
            await consumer.commit()
            return got
        finally:
            await consumer.stop()

    return asyncio.run(run())


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
@pytest.mark.parametrize("client", ["kafka-python", "aiokafka", "kafkajs"])
def test_every_client_logs_in_and_a_wrong_password_fails(
    broker: tuple[BrokerProcess, int, int], client: str, mechanism: str, caplog: pytest.LogCaptureFixture
) -> None:
    _b, sasl, _ = broker
    if client == "kafkajs":
        def run(password: str) -> dict[str, Any]:
            import json

            r = subprocess.run(
                ["node", "sasl_probe.js", str(sasl), mechanism.lower(), password],
                capture_output=True, text=True, cwd=ROOT / "tests" / "js", timeout=60,
            )
            return json.loads(r.stdout.strip().splitlines()[-1])

        assert run("alice-secret") == {"ok": True, "got": 1}
        failed = run("wrong")
        assert failed["ok"] is False and failed["error"] == "KafkaJSSASLAuthenticationError", failed
        return
    login = _kafka_python if client == "kafka-python" else _aiokafka
    assert login(sasl, mechanism, "alice-secret") >= 1
    started = time.monotonic()
    with pytest.raises(Exception) as failed:  # noqa: PT011 - each client has its own error
        login(sasl, mechanism, "wrong")
    assert time.monotonic() - started < 60
    # aiokafka raises the authentication error; kafka-python logs it on every attempt and
    # gives up bootstrapping after its own timeout.
    assert "auth" in str(failed.value).lower() or "SaslAuthenticationFailed" in caplog.text


def test_admin_client_manages_scram_users_online(broker: tuple[BrokerProcess, int, int], certs: Path) -> None:
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialDeletion,
        UserScramCredentialUpsertion,
    )

    b, sasl, _ = broker
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    described = admin.describe_user_scram_credentials(["alice"])["alice"].result(20)
    assert sorted((i.mechanism, i.iterations) for i in described.scram_credential_infos) == [
        (ScramMechanism.SCRAM_SHA_256, 4096),
        (ScramMechanism.SCRAM_SHA_512, 4096),
    ]
    upsert = UserScramCredentialUpsertion("bob", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), b"bob-pw")
    for f in admin.alter_user_scram_credentials([upsert]).values():
        f.result(20)
    # bob logs in over SASL at once, and the credential survives a kill -9.
    b.kill()
    b.start()
    conf = _conf(sasl, "SASL_PLAINTEXT", "SCRAM-SHA-512", "bob-pw", certs)
    conf["sasl.username"] = "bob"
    assert AdminClient(conf).list_topics(timeout=20).brokers
    delete = UserScramCredentialDeletion("bob", ScramMechanism.SCRAM_SHA_512)
    for f in admin.alter_user_scram_credentials([delete]).values():
        f.result(20)
    missing = admin.describe_user_scram_credentials(["bob"])["bob"]
    with pytest.raises(Exception, match="(?i)not exist|resource"):
        missing.result(20)


def test_the_admin_commands_take_a_command_config(
    broker: tuple[BrokerProcess, int, int], certs: Path, tmp_path: Path
) -> None:
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import AdminClient

    b, _sasl, sasl_ssl = broker
    create_topic(b.bootstrap, "t", 2)
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.alter_consumer_group_offsets(
        [ConsumerGroupTopicPartitions("offline", [TopicPartition("t", 0, 5), TopicPartition("t", 1, 7)])]
    )["offline"].result(20)
    config = tmp_path / "client.properties"
    config.write_text(
        "# SASL over TLS, as Kafka's tools take it\n"
        "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\nsasl.username=alice\n"
        f"sasl.password=alice-secret\nssl.ca.location={certs / 'ca.pem'}\n"
    )

    def kcoord(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "kcoord", *args, "--bootstrap-server", f"127.0.0.1:{sasl_ssl}",
             "--command-config", str(config)],
            capture_output=True, text=True, cwd=ROOT, timeout=60,
        )

    listed = kcoord("groups", "list")
    assert listed.returncode == 0 and listed.stdout.split() == ["offline"], listed.stderr
    # OffsetDelete goes on the command's own connection: TLS and SCRAM by hand.
    deleted = kcoord("offsets", "delete", "offline", "--topic", "t:0")
    assert deleted.returncode == 0, deleted.stderr
    left = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions("offline")])["offline"].result(20)
    assert {(tp.partition, tp.offset) for tp in left.topic_partitions if tp.offset >= 0} == {(1, 7)}
    config.write_text(config.read_text().replace("alice-secret", "wrong"))
    refused = kcoord("offsets", "delete", "offline", "--topic", "t:1", "--timeout", "5")
    assert refused.returncode != 0


def test_oauthbearer_unsecured_tokens_when_enabled(tmp_path: Path) -> None:
    """confluent-kafka with librdkafka's unsecured JWT (development only, opt-in); a bad token
    gets the RFC 7628 error challenge, then SASL_AUTHENTICATION_FAILED."""
    from confluent_kafka import Consumer, Producer

    from kcoord.admin.client import exchange

    plain, sasl = free_port(), free_port()
    b = BrokerProcess(tmp_path / "data", {
        "group.initial.rebalance.delay.ms": 0,
        "listeners": f"PLAINTEXT://127.0.0.1:{plain},SASL_PLAINTEXT://127.0.0.1:{sasl}",
        "sasl.enabled.mechanisms": "SCRAM-SHA-512,OAUTHBEARER",
    })
    b.port = plain
    b.start()
    try:
        create_topic(b.bootstrap, "t", 1)
        conf = {"bootstrap.servers": f"127.0.0.1:{sasl}", "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "OAUTHBEARER", "enable.sasl.oauthbearer.unsecure.jwt": True,
                "sasl.oauthbearer.config": "principal=carol"}
        producer = Producer(conf)
        producer.produce("t", value=b"over oauthbearer")
        assert producer.flush(30) == 0
        consumer = Consumer({**conf, "group.id": "oauth", "auto.offset.reset": "earliest"})
        try:
            consumer.subscribe(["t"])
            got = None
            deadline = time.monotonic() + 30
            while got is None and time.monotonic() < deadline:
                msg = consumer.poll(0.2)
                if msg is not None and not msg.error():
                    got = msg.value()
            assert got == b"over oauthbearer"
        finally:
            consumer.close()
        with socket.create_connection(("127.0.0.1", sasl), timeout=10) as sock:
            assert exchange(sock, 17, 1, {"mechanism": "OAUTHBEARER"}).error_code == 0
            signed = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJjYXJvbCJ9.c2lnbmVk"  # not alg none
            challenge = exchange(sock, 36, 2, {"auth_bytes": f"n,,\x01auth=Bearer {signed}\x01\x01".encode()})
            assert challenge.error_code == 0 and b"invalid_token" in bytes(challenge.auth_bytes)
            final = exchange(sock, 36, 2, {"auth_bytes": b"\x01"})
            assert final.error_code == 58  # SASL_AUTHENTICATION_FAILED
    finally:
        b.stop()
