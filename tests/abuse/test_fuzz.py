"""A request fuzzer over every advertised API and version, against a real broker.

Seeds: a small valid request of every version (tests/integration/samples.py). Hypothesis picks
a seed and mutates it the ways broken clients and attackers do: bytes overwritten with values
that make lengths lie (0xFF.., varint continuations, 0x7FFF..), bits flipped, bytes inserted,
deleted or cut off, the API version or a header field bent. Each mutant goes out on a
connection; whatever happens to it (an answer, an error, a closed connection, no answer yet),
the broker must be alive afterwards, and at the end the healthy group must still consume.

CI runs a fixed, derandomized set of cases (``KCOORD_FUZZ_CASES``, default 1500). For a longer
run with fresh randomness: ``KCOORD_FUZZ_CASES=200000 KCOORD_FUZZ_RANDOM=1 scripts/test
tests/abuse/test_fuzz.py``.
"""

from __future__ import annotations

import os
import socket
import struct

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kcoord.protocol.apis import is_flexible
from tests.integration.harness import BrokerProcess
from tests.integration.samples import legacy_bodies, sample_bodies

from .conftest import assert_survived
from .healthy import HealthyGroup

CASES = int(os.environ.get("KCOORD_FUZZ_CASES", "1500"))
RANDOM = os.environ.get("KCOORD_FUZZ_RANDOM") == "1"
SEEDS = [*sample_bodies(), *legacy_bodies()]
# Values that make a length, count or varint lie.
LIARS = [
    b"\xff",
    b"\x00",
    b"\x7f",
    b"\x80",
    b"\xff\xff",
    b"\x7f\xff",
    b"\x80\x00",
    b"\xff\xff\xff\xff",
    b"\x7f\xff\xff\xff",
    b"\xff\xff\xff\xff\x0f",
    b"\xfe\xff\xff\xff\x0f",
    b"\x80\x80\x80\x80\x80\x01",
]


def _header(api_key: int, version: int, correlation_id: int, flexible: bool) -> bytes:
    head = struct.pack(">hhih", api_key, version, correlation_id, 4) + b"fuzz"
    return head + (b"\x00" if flexible else b"")


@st.composite
def mutants(draw: st.DrawFn) -> tuple[int, int, bytes]:
    api_key, version, body = draw(st.sampled_from(SEEDS))
    data = bytearray(body)
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(data)))
        kind = draw(st.integers(0, 6))
        if kind == 0:
            liar = draw(st.sampled_from(LIARS))
            data[at : at + len(liar)] = liar
        elif kind == 1 and at < len(data):
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif kind == 2:
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif kind == 3:
            del data[at : at + draw(st.integers(1, 8))]
        elif kind == 4:
            del data[at:]
        elif kind == 5:
            data += draw(st.binary(min_size=1, max_size=16))
        else:
            data[at : at + 1] = bytes([draw(st.integers(0, 255))])
    if draw(st.integers(0, 19)) == 0:  # now and then, a version nobody speaks
        version = draw(st.integers(-1, 40))
    return api_key, version, bytes(data)


class _Sender:
    """One connection at a time to the broker, replaced when the broker closes it."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.sock: socket.socket | None = None
        self.correlation = 0
        self.outcomes = {"answered": 0, "closed": 0, "silent": 0}

    def send(self, api_key: int, version: int, body: bytes) -> None:
        if self.sock is None:
            self.sock = socket.create_connection(("127.0.0.1", self.port), timeout=5)
        self.correlation += 1
        flexible = is_flexible(api_key, version) if version >= 0 else False
        payload = _header(api_key, version, self.correlation, flexible) + body
        sock = self.sock
        try:
            sock.sendall(struct.pack(">i", len(payload)) + payload)
            sock.settimeout(1.0)
            got = sock.recv(65536)
        except TimeoutError:
            # No answer yet (acks=0, a parked join, a long poll): start afresh.
            self.outcomes["silent"] += 1
            self.reset()
            return
        except OSError:
            got = b""
        if got:
            self.outcomes["answered"] += 1
            self.reset()  # the rest of a long answer must not be read as the next one's
        else:
            self.outcomes["closed"] += 1
            self.reset()

    def reset(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None


def test_mutated_requests_of_every_api_and_version(
    abuse_broker: BrokerProcess, healthy: HealthyGroup
) -> None:
    sender = _Sender(abuse_broker.port)

    @settings(
        max_examples=CASES,
        deadline=None,
        derandomize=not RANDOM,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(mutants())
    def one(case: tuple[int, int, bytes]) -> None:
        api_key, version, body = case
        sender.send(api_key, version, body)
        assert abuse_broker.alive(), (
            f"broker died on api {api_key} v{version} body {body.hex()}:\n{abuse_broker.log()}"
        )

    try:
        one()
    finally:
        sender.reset()
    assert sum(sender.outcomes.values()) >= CASES
    assert sender.outcomes["answered"] and sender.outcomes["closed"], sender.outcomes
    assert_survived(abuse_broker, healthy, f"{CASES} mutated requests {sender.outcomes}")


def test_every_sample_under_every_version_of_its_api(
    abuse_broker: BrokerProcess, healthy: HealthyGroup
) -> None:
    """Each seed body sent as each version its API supports: a body that decodes as another
    version lacks that version's fields, and no handler may assume them (ListOffsets v1 has no
    isolation level)."""
    from kcoord.protocol.apis import SUPPORTED

    sender = _Sender(abuse_broker.port)
    for api_key, _version, body in SEEDS:
        low, high = SUPPORTED[api_key]
        for version in range(low, high + 1):
            sender.send(api_key, version, body)
    sender.reset()
    assert_survived(abuse_broker, healthy, f"{len(SEEDS)} seeds under every version")
