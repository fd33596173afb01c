"""Malformed requests: lengths that lie, nulls where the schema has none, too many elements.

Finding 1 of the hardening issue: the native request decoder reserved memory for the element
count an array claimed before reading anything, so a 27-byte request killed the process.
Every length is now checked against the bytes left before anything is decoded.
"""

from __future__ import annotations

import struct

from protocol.apis import ApiKey
from tests.integration.harness import BrokerProcess
from tests.integration.rawclient import RawClient

from .conftest import assert_survived
from .healthy import HealthyGroup


def test_array_claiming_four_billion_entries_closes_the_connection(
    abuse_broker: BrokerProcess, healthy: HealthyGroup
) -> None:
    with RawClient(abuse_broker.port) as c:
        # ListGroups v4: a states filter (compact array) claiming 0xFFFFFFFE entries.
        c.send(ApiKey.LIST_GROUPS, 4, bytes([0xFF, 0xFF, 0xFF, 0xFF, 0x0F]) + b"\x00")
        assert c.closed_by_peer(timeout=10)
    with RawClient(abuse_broker.port) as c:
        # ListOffsets v1: a legacy topics array claiming 2**31-1 entries.
        c.send(ApiKey.LIST_OFFSETS, 1, struct.pack(">ii", -1, 2**31 - 1) + b"x" * 10)
        assert c.closed_by_peer(timeout=10)
    assert_survived(abuse_broker, healthy, "arrays with huge counts")
