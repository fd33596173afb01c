"""Authentication work must not hold up the rest of the broker.

Findings 9 and 12 of the hardening issue:

* A password check (SASL/PLAIN against the stored SCRAM credential, a console login) is a
  PBKDF2 derivation. The checks ran in the default executor, where the group commit's fsyncs
  run too: under a flood of wrong-password PLAIN logins the median durable OffsetCommit went
  from 1.5-1.8 ms to 393-700 ms. Now password checks have a small pool of their own, at a
  lower CPU priority, with a bounded queue shared fairly between client addresses; past the
  bound a login fails at once.
* AlterUserScramCredentials with 2,000 upsertions held the event loop for 16.7-17.3 s: each
  upsertion rewrote and fsynced the whole credentials document on the loop. Now one request's
  changes make one document, built and written (fsynced) in a worker thread, and the users
  change in memory once it is on disk.

The broker has a SASL listener beside its PLAINTEXT one, where the healthy group and the
committer run.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import statistics
import struct
import threading
import time
from typing import Any

import pytest

from kcoord.protocol.apis import ApiKey, is_flexible
from kcoord.protocol.codec import encode_body, request_type
from kcoord.protocol.errors import ErrorCode
from kcoord.protocol.responses import build
from tests.integration.harness import BrokerProcess, free_port, wait_for
from tests.integration.rawclient import RawClient

from .conftest import assert_survived
from .healthy import TOPIC, HealthyGroup

SASL_PORT = free_port()
BROKER_SETTINGS = {
    "listeners": f"PLAINTEXT://127.0.0.1:{{port}},SASL_PLAINTEXT://127.0.0.1:{SASL_PORT}",
    "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
}
USER = "alice"
PASSWORD = "alice-secret"
ITERATIONS = 16384
"""The most Kafka allows: the dearest password check a client can ask for."""
SCRAM_SHA_512 = 2


def _upsertion(name: str, password: str, iterations: int = 4096) -> dict[str, Any]:
    """An AlterUserScramCredentials upsertion of SCRAM-SHA-512, salted as a client does."""
    salt = hashlib.sha256(name.encode()).digest()
    salted = hashlib.pbkdf2_hmac("sha512", password.encode(), salt, iterations)
    return dict(
        name=name, mechanism=SCRAM_SHA_512, iterations=iterations, salt=salt, salted_password=salted
    )


@pytest.fixture(scope="module")
def alice(abuse_broker: BrokerProcess) -> str:
    with RawClient(abuse_broker.port) as c:
        r = c.request(
            ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0,
            deletions=[], upsertions=[_upsertion(USER, PASSWORD, ITERATIONS)],
        )  # fmt: skip
    assert [(x.user, x.error_code) for x in r.results] == [(USER, 0)]
    return USER


def _frame(api_key: int, version: int, correlation: int, **fields: Any) -> bytes:
    body = encode_body(build(request_type(api_key, version), **fields))
    header = struct.pack(">hhih", api_key, version, correlation, 5) + b"flood"
    if is_flexible(api_key, version):
        header += b"\x00"
    return struct.pack(">i", len(header) + len(body)) + header + body


def _login(password: str, source: str = "127.0.0.1") -> int:
    """A PLAIN login from the address ``source``: SaslAuthenticate's error code."""
    with RawClient(SASL_PORT, timeout=30, source=source) as c:
        assert c.request(ApiKey.SASL_HANDSHAKE, 1, mechanism="PLAIN").error_code == 0
        token = b"\0" + USER.encode() + b"\0" + password.encode()
        return int(c.request(ApiKey.SASL_AUTHENTICATE, 2, auth_bytes=token).error_code)


class _Flood:
    """Threads each logging in over and over with a wrong password, on raw connections: the
    handshake and the guess sent at once, then the answer and the close awaited."""

    def __init__(self, threads: int) -> None:
        self.attempts = 0
        self.refused = 0
        """Attempts answered SASL_AUTHENTICATION_FAILED (each must be)."""
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(threads)]
        self._guess = _frame(
            ApiKey.SASL_HANDSHAKE, 1, 1, mechanism="PLAIN"
        ) + _frame(
            ApiKey.SASL_AUTHENTICATE, 2, 2, auth_bytes=b"\0" + USER.encode() + b"\0wrong-guess"
        )  # fmt: skip

    def __enter__(self) -> _Flood:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=60)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                with socket.create_connection(("127.0.0.1", SASL_PORT), timeout=30) as s:
                    s.sendall(self._guess)
                    answered = b""
                    while chunk := s.recv(65536):
                        answered += chunk
                self.attempts += 1
                if _last_error_code(answered) == ErrorCode.sasl_authentication_failed:
                    self.refused += 1
            except OSError as e:
                self.errors.append(repr(e))


def _last_error_code(frames: bytes) -> int | None:
    """The error code of the last of these response frames, a SaslAuthenticate v2 (flexible:
    correlation id, empty tagged fields, then the error code)."""
    at, last = 0, None
    while at + 4 <= len(frames):
        size = struct.unpack_from(">i", frames, at)[0]
        last = frames[at + 4 : at + 4 + size]
        at += 4 + size
    if last is None or len(last) < 7:
        return None
    return int(struct.unpack_from(">h", last, 5)[0])


def _commit_latencies(c: RawClient, count: int, first_offset: int) -> list[float]:
    """Round trips of ``count`` OffsetCommits (each awaits its fsync) of a standalone group."""
    out = []
    for offset in range(first_offset, first_offset + count):
        started = time.perf_counter()
        r = c.request(
            ApiKey.OFFSET_COMMIT, 8,
            group_id="durable-committer", generation_id_or_member_epoch=-1, member_id="",
            group_instance_id=None,
            topics=[dict(name=TOPIC, partitions=[dict(
                partition_index=0, committed_offset=offset, committed_leader_epoch=-1,
                committed_metadata=None,
            )])],
        )  # fmt: skip
        out.append(time.perf_counter() - started)
        assert r.topics[0].partitions[0].error_code == 0, r
    return out


def test_a_login_flood_does_not_delay_durable_commits(
    abuse_broker: BrokerProcess, healthy: HealthyGroup, alice: str
) -> None:
    """48 connections guessing alice's password (a 16384-iteration SCRAM-SHA-512 credential)
    as fast as the broker answers: a committer's median OffsetCommit stays within 10x of its
    median before the flood (and under 100 ms), the right password still logs in from another
    address, and the healthy group goes on."""
    assert _login(PASSWORD) == 0
    with RawClient(abuse_broker.port, timeout=60) as committer:
        _commit_latencies(committer, 20, 0)  # warm up
        baseline = statistics.median(_commit_latencies(committer, 60, 100))
        with _Flood(48) as flood:
            wait_for(lambda: flood.attempts >= 48, 60, what="the flood under way")
            during = statistics.median(_commit_latencies(committer, 60, 200))
            other_address = _login(PASSWORD, source="127.0.0.2")
            wrong = _login("not-it", source="127.0.0.3")
        attempts, refused = flood.attempts, flood.refused
    assert not flood.errors, flood.errors[:5]
    assert attempts > 48 and refused == attempts, (attempts, refused)
    bound = min(10 * baseline, 0.100)
    assert during < bound, (
        f"median OffsetCommit {during * 1000:.1f} ms under the flood, {baseline * 1000:.1f} ms"
        f" before it ({attempts} login attempts)"
    )
    assert other_address == 0, "the right password was refused during the flood"
    assert wrong == ErrorCode.sasl_authentication_failed
    assert _login(PASSWORD) == 0
    assert_survived(abuse_broker, healthy, "a flood of wrong-password PLAIN logins")


class _Prober:
    """A thread timing cheap round trips (ApiVersions) on a connection of its own, one every few
    milliseconds: the longest shows how long the broker stopped answering."""

    def __init__(self, port: int) -> None:
        self.client = RawClient(port, timeout=120)
        self.round_trips = 0
        self.longest = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> _Prober:
        self._thread.start()
        wait_for(lambda: self.round_trips >= 20, 30, what="the prober under way")
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=150)
        self.client.close()

    def _run(self) -> None:
        while not self._stop.wait(0.005):
            started = time.perf_counter()
            r = self.client.request(
                ApiKey.API_VERSIONS, 3, client_software_name="prober", client_software_version="1"
            )
            assert r.error_code == 0
            self.longest = max(self.longest, time.perf_counter() - started)
            self.round_trips += 1


def _described(port: int) -> dict[str, list[int]]:
    """Every user's SCRAM mechanisms, as DescribeUserScramCredentials of all users says."""
    with RawClient(port, timeout=60) as c:
        r = c.request(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, users=None)
    assert r.error_code == 0, r
    return {u.user: sorted(i.mechanism for i in u.credential_infos) for u in r.results}


def test_thousands_of_upsertions_in_one_request_do_not_stall_the_broker(
    abuse_broker: BrokerProcess, healthy: HealthyGroup, alice: str
) -> None:
    """One AlterUserScramCredentials of 2,000 upsertions and 10 deletions: ApiVersions round
    trips on another connection never wait a second meanwhile, every change is made, and after
    a restart the users are all there and one of them logs in."""
    old = [f"old-{i}" for i in range(10)]
    with RawClient(abuse_broker.port, timeout=60) as c:
        r = c.request(
            ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0,
            deletions=[], upsertions=[_upsertion(name, "old") for name in old],
        )  # fmt: skip
    assert all(x.error_code == 0 for x in r.results), r
    count, known = 2000, "bulk-1234"
    upsertions = [
        _upsertion(known, "bulk-secret")
        if name == known
        else dict(
            name=name, mechanism=SCRAM_SHA_512, iterations=4096,
            salt=os.urandom(32), salted_password=os.urandom(64),
        )  # fmt: skip
        for name in (f"bulk-{i:04d}" for i in range(count))
    ]
    deletions = [dict(name=name, mechanism=SCRAM_SHA_512) for name in old]
    with _Prober(abuse_broker.port) as prober, RawClient(abuse_broker.port, timeout=120) as c:
        started = time.perf_counter()
        r = c.request(
            ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, deletions=deletions, upsertions=upsertions
        )
        took = time.perf_counter() - started
        round_trips_before = prober.round_trips
        wait_for(lambda: prober.round_trips > round_trips_before, 30, what="one more round trip")
    assert sorted((x.user, x.error_code, x.error_message) for x in r.results) == sorted(
        [(f"bulk-{i:04d}", 0, None) for i in range(count)] + [(name, 0, None) for name in old]
    )
    assert prober.longest < 1.0, (
        f"an ApiVersions round trip took {prober.longest:.2f} s while the alteration took"
        f" {took:.2f} s"
    )
    wanted = {f"bulk-{i:04d}": [SCRAM_SHA_512] for i in range(count)} | {USER: [SCRAM_SHA_512]}
    assert _described(abuse_broker.port) == wanted
    stored = json.loads((abuse_broker.data_dir / "scram-credentials.json").read_text())
    assert sorted(stored) == sorted(wanted)
    assert_survived(abuse_broker, healthy, "2,000 SCRAM upsertions in one request")

    abuse_broker.stop()
    abuse_broker.restart()
    assert _described(abuse_broker.port) == wanted
    with RawClient(SASL_PORT, timeout=30) as c:
        assert c.request(ApiKey.SASL_HANDSHAKE, 1, mechanism="PLAIN").error_code == 0
        token = b"\0" + known.encode() + b"\0bulk-secret"
        assert c.request(ApiKey.SASL_AUTHENTICATE, 2, auth_bytes=token).error_code == 0
    assert_survived(abuse_broker, healthy, "a restart after 2,000 SCRAM upsertions")
