"""Hostile SASL clients: guessing passwords on one connection, logging in under endless names,
OAUTHBEARER tokens built to hurt.

Findings 6, 14 and 15 of the hardening issue:

* 40 pipelined PLAIN guesses on one connection were all checked in ~0.1 s, and a right password
  after a wrong one logged in. Now, as in Kafka, a connection takes its SASL requests one at a
  time, and a failed login ends it: the failure answer goes out after
  ``connection.failed.authentication.delay.ms``, then the connection closes; whatever the client
  pipelined behind the failed attempt is dropped unread.
* OAUTHBEARER subjects (any string, unsigned) became label values of
  ``kcoord_authorization_denied_total`` without bound (1,500 logins with 20 KB names: a 30.9 MB
  ``/metrics``). Now only a bounded set of principals gets series of its own.
* A deeply nested OAUTHBEARER token raised RecursionError (a traceback, the connection aborted),
  and ``exp`` NaN or Infinity was accepted (a token that never expires). Now such tokens are
  refused like any invalid token, with the reason in the failure's message.

The broker has a SASL listener beside its PLAINTEXT one (where the healthy group runs), an
authorizer whose super users are the anonymous PLAINTEXT clients and ``alice``, and a failed-login
delay long enough to measure.
"""

from __future__ import annotations

import base64
import json
import socket
import struct
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from kio.serial import entity_reader
from prometheus_client.parser import text_string_to_metric_families

from kcoord.broker.metrics.prometheus import MAX_PRINCIPAL_CHARS, MAX_PRINCIPALS, OTHER_PRINCIPAL
from kcoord.protocol.apis import ApiKey, is_flexible
from kcoord.protocol.codec import encode_body, request_type, response_type
from kcoord.protocol.errors import ErrorCode
from kcoord.protocol.responses import build
from tests.integration.harness import BrokerProcess, free_port
from tests.integration.rawclient import RawClient

from .conftest import assert_survived
from .healthy import TOPIC, HealthyGroup

SASL_PORT = free_port()
DELAY_MS = 400
BROKER_SETTINGS = {
    "listeners": f"PLAINTEXT://127.0.0.1:{{port}},SASL_PLAINTEXT://127.0.0.1:{SASL_PORT}",
    "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512,OAUTHBEARER",
    "connection.failed.authentication.delay.ms": DELAY_MS,
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users": "User:ANONYMOUS;User:alice",
}
PASSWORD = "alice-secret"


@pytest.fixture(scope="module")
def alice(abuse_broker: BrokerProcess) -> str:
    """A SCRAM user (a super user), added online over the PLAINTEXT listener."""
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    admin = AdminClient({"bootstrap.servers": abuse_broker.bootstrap})
    upsert = UserScramCredentialUpsertion(
        "alice", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), PASSWORD.encode()
    )
    for f in admin.alter_user_scram_credentials([upsert]).values():
        f.result(30)
    return "alice"


def _frame(api_key: int, version: int, correlation: int, **fields: Any) -> bytes:
    body = encode_body(build(request_type(api_key, version), **fields))
    header = struct.pack(">hhih", api_key, version, correlation, 5) + b"probe"
    if is_flexible(api_key, version):
        header += b"\x00"
    return struct.pack(">i", len(header) + len(body)) + header + body


def _plain(password: str) -> bytes:
    return b"\0alice\0" + password.encode()


def _create_topic(correlation: int, name: str) -> bytes:
    """CreateTopics v7 of one topic: only a logged-in super user may."""
    return _frame(
        ApiKey.CREATE_TOPICS, 7, correlation,
        topics=[dict(name=name, num_partitions=1, replication_factor=1, assignments=[], configs=[])],
        timeout_ms=10000, validate_only=False,
    )  # fmt: skip


def _decode(api_key: int, version: int, frame: bytes) -> Any:
    pos = 5 if is_flexible(api_key, version) and api_key != ApiKey.API_VERSIONS else 4
    return entity_reader(response_type(api_key, version))(frame, pos)[0]


def _until_closed(sock: socket.socket, timeout: float = 10.0) -> bytes:
    """Everything the broker still sends, up to its close; fails if it does not close."""
    sock.settimeout(timeout)
    out = bytearray()
    try:
        while chunk := sock.recv(65536):
            out += chunk
    except (ConnectionResetError, BrokenPipeError):
        pass
    except TimeoutError:
        raise AssertionError(f"not closed within {timeout} s (got {len(out)} bytes)") from None
    return bytes(out)


def _metrics(broker: BrokerProcess) -> str:
    url = f"http://127.0.0.1:{broker.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=30) as r:
        return str(r.read().decode())


def _failed_logins(broker: BrokerProcess) -> float:
    for family in text_string_to_metric_families(_metrics(broker)):
        for sample in family.samples:
            if sample.name == "kcoord_connections_refused_total" and sample.labels == {
                "reason": "authentication"
            }:
                return float(sample.value)
    return 0.0


def _topics(broker: BrokerProcess) -> set[str]:
    from confluent_kafka.admin import AdminClient

    return set(AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=20).topics)


def test_the_right_password_logs_in_and_may_create_topics(
    abuse_broker: BrokerProcess, alice: str
) -> None:
    """The control for the probes below: on a connection of its own, the password they end
    with logs in, and the request that follows it is served."""
    with RawClient(SASL_PORT) as c:
        assert c.request(ApiKey.SASL_HANDSHAKE, 1, mechanism="PLAIN").error_code == 0
        assert c.request(ApiKey.SASL_AUTHENTICATE, 2, auth_bytes=_plain(PASSWORD)).error_code == 0
        c.send_raw(_create_topic(9, "sasl-control"))
        assert _decode(ApiKey.CREATE_TOPICS, 7, c.recv_frame()).topics[0].error_code == 0
    assert "sasl-control" in _topics(abuse_broker)


def test_a_failed_login_ends_the_connection(
    abuse_broker: BrokerProcess, healthy: HealthyGroup, alice: str
) -> None:
    """39 wrong passwords, the right one and a CreateTopics, pipelined after SaslHandshake v1:
    the first guess is answered SASL_AUTHENTICATION_FAILED, the connection closes no sooner than
    the delay after it, and nothing behind the first guess is looked at."""
    failed_before = _failed_logins(abuse_broker)
    with RawClient(SASL_PORT) as c:
        assert c.request(ApiKey.SASL_HANDSHAKE, 1, mechanism="PLAIN").error_code == 0
        guesses = [
            _frame(ApiKey.SASL_AUTHENTICATE, 2, 100 + i, auth_bytes=_plain(f"guess-{i}"))
            for i in range(39)
        ]
        right = _frame(ApiKey.SASL_AUTHENTICATE, 2, 200, auth_bytes=_plain(PASSWORD))
        c.send_raw(b"".join([*guesses, right, _create_topic(201, "sasl-pwned-v1")]))
        frame = c.recv_frame()
        answered = time.monotonic()
        rest = _until_closed(c.sock)
        waited = time.monotonic() - answered
    assert struct.unpack_from(">i", frame)[0] == 100
    answer = _decode(ApiKey.SASL_AUTHENTICATE, 2, frame)
    assert answer.error_code == ErrorCode.sasl_authentication_failed
    assert answer.error_message and "Invalid username or password" in answer.error_message
    assert waited >= DELAY_MS / 1000 * 0.9, f"closed {waited:.3f} s after the answer"
    assert rest == b"", "the connection answered something after the failed login"
    assert _failed_logins(abuse_broker) == failed_before + 1, "more than one guess was checked"
    assert "sasl-pwned-v1" not in _topics(abuse_broker)
    assert_survived(abuse_broker, healthy, "pipelined PLAIN guesses (SaslHandshake v1)")


def test_a_failed_login_of_bare_tokens_ends_the_connection(
    abuse_broker: BrokerProcess, healthy: HealthyGroup, alice: str
) -> None:
    """The same after SaslHandshake v0, where the tokens come as bare frames: no answer to the
    first wrong token (v0 cannot say why), the connection closes after the delay, and the right
    token and the request behind it are never looked at."""
    failed_before = _failed_logins(abuse_broker)
    with RawClient(SASL_PORT) as c:
        assert c.request(ApiKey.SASL_HANDSHAKE, 0, mechanism="PLAIN").error_code == 0
        tokens = [_plain(f"guess-{i}") for i in range(39)] + [_plain(PASSWORD)]
        started = time.monotonic()
        c.send_raw(
            b"".join(struct.pack(">i", len(t)) + t for t in tokens)
            + _create_topic(7, "sasl-pwned-v0")
        )
        rest = _until_closed(c.sock)
        waited = time.monotonic() - started
    assert rest == b"", "a bare token was answered"
    assert waited >= DELAY_MS / 1000 * 0.9, f"closed after {waited:.3f} s"
    assert _failed_logins(abuse_broker) == failed_before + 1, "more than one guess was checked"
    assert "sasl-pwned-v0" not in _topics(abuse_broker)
    assert_survived(abuse_broker, healthy, "pipelined PLAIN guesses (SaslHandshake v0)")


# OAUTHBEARER -----------------------------------------------------------------------------------


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


_UNSECURED = _b64(b'{"alg":"none"}')


def _token(claims: dict[str, Any] | str) -> str:
    """An unsecured JWS of these claims (a dict, or the claims' JSON text as is)."""
    text = claims if isinstance(claims, str) else json.dumps(claims)
    return f"{_UNSECURED}.{_b64(text.encode())}."


def _bearer(token: str) -> bytes:
    return f"n,,\x01auth=Bearer {token}\x01\x01".encode()


@pytest.fixture
def oauth() -> Iterator[RawClient]:
    """A connection that has chosen OAUTHBEARER (SaslHandshake v1)."""
    with RawClient(SASL_PORT) as c:
        assert c.request(ApiKey.SASL_HANDSHAKE, 1, mechanism="OAUTHBEARER").error_code == 0
        yield c


def test_oauthbearer_principals_do_not_grow_the_metrics(
    abuse_broker: BrokerProcess, healthy: HealthyGroup
) -> None:
    """300 OAUTHBEARER logins under distinct names (half of them 10 KB long, tokens are
    refused past 16 KiB), each refused a Metadata of the healthy topic: the denials are all
    counted, in a bounded number of series."""
    logins = 300
    exp = time.time() + 600
    for i in range(logins):
        name = f"p{i:04d}-" + ("x" * 10_000 if i % 2 else "short")
        with RawClient(SASL_PORT) as c:
            assert c.request(ApiKey.SASL_HANDSHAKE, 1, mechanism="OAUTHBEARER").error_code == 0
            login = c.request(
                ApiKey.SASL_AUTHENTICATE, 2, auth_bytes=_bearer(_token({"sub": name, "exp": exp}))
            )
            assert login.error_code == 0 and bytes(login.auth_bytes) == b""
            metadata = c.request(
                ApiKey.METADATA,
                12,
                topics=[dict(name=TOPIC, topic_id=None)],
                allow_auto_topic_creation=False,
                include_topic_authorized_operations=False,
            )
            assert metadata.topics[0].error_code == ErrorCode.topic_authorization_failed
    text = _metrics(abuse_broker)
    assert len(text) < 1_000_000, f"/metrics is {len(text)} bytes"
    series = [
        s for family in text_string_to_metric_families(text) for s in family.samples
        if s.name == "kcoord_authorization_denied_total"
    ]  # fmt: skip
    principals = {s.labels["principal"] for s in series}
    assert len(principals) <= MAX_PRINCIPALS + 1, len(principals)
    assert OTHER_PRINCIPAL in principals
    assert all(len(p) <= MAX_PRINCIPAL_CHARS for p in principals)
    assert sum(s.value for s in series) >= logins  # every denial still counted
    assert_survived(abuse_broker, healthy, "OAUTHBEARER logins under 300 names")


def _refused(c: RawClient, token: str) -> str:
    """The token gets the RFC 7628 error challenge; the client's 0x01 then ends the login as
    failed and the connection closes. The failure's message."""
    challenge = c.request(ApiKey.SASL_AUTHENTICATE, 2, auth_bytes=_bearer(token))
    assert challenge.error_code == 0, challenge
    assert json.loads(bytes(challenge.auth_bytes)) == {"status": "invalid_token"}
    final = c.request(ApiKey.SASL_AUTHENTICATE, 2, auth_bytes=b"\x01")
    assert final.error_code == ErrorCode.sasl_authentication_failed
    assert _until_closed(c.sock) == b""
    return str(final.error_message)


@pytest.mark.parametrize(
    ("claims", "why"),
    [
        ('{"sub":"mallory","exp":4e9,"x":' + "[" * 5000 + "]" * 5000 + "}", "nest"),
        ('{"sub":"mallory","exp":4e9,"x":' + "[" * 3000, "nest"),
        ('{"sub":"mallory","exp":4e9,"x":' + "[" * 100_000 + "]" * 100_000 + "}", "longer"),
        ('{"sub":"mallory","exp":NaN}', "NaN"),
        ('{"sub":"mallory","exp":Infinity}', "Infinity"),
        ('{"sub":"mallory","exp":1e999}', "exp"),
        ('{"sub":"mallory","exp":"4000000000"}', "exp"),
        ('{"sub":"mallory","exp":4e9,"iat":-Infinity}', "Infinity"),
        ('{"sub":"mallory","exp":4e9,"iat":-1e999}', "iat"),
    ],
    ids=[
        "nested-5000",
        "nested-unclosed",
        "nested-100000",
        "exp-nan",
        "exp-infinity",
        "exp-1e999",
        "exp-string",
        "iat-infinity",
        "iat-minus-1e999",
    ],
)
def test_hostile_oauthbearer_tokens_are_refused(
    abuse_broker: BrokerProcess, healthy: HealthyGroup, oauth: RawClient, claims: str, why: str
) -> None:
    message = _refused(oauth, _token(claims))
    assert why in message, message
    assert_survived(abuse_broker, healthy, f"an OAUTHBEARER token with {claims[:40]!r}...")
