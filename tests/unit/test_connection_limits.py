"""Counting connections against max.connections, max.connections.per.ip and its overrides."""

from __future__ import annotations

import pytest

from kcoord.broker.config import Config, ConfigError
from kcoord.broker.net.limits import ConnectionLimits


def test_per_ip_limit_with_overrides_and_the_total() -> None:
    limits = ConnectionLimits(
        Config.load(
            overrides=[
                "max.connections=5",
                "max.connections.per.ip=2",
                "max.connections.per.ip.overrides=10.0.0.9:3,[::1]:0",
            ]
        )
    )
    assert limits.admit("10.0.0.1") is None and limits.admit("10.0.0.1") is None
    refused = limits.admit("10.0.0.1")
    assert refused is not None and refused[0] == "max_connections_per_ip"
    assert [limits.admit("10.0.0.9") for _ in range(3)] == [None, None, None]
    assert limits.admit("::1") is not None  # an override of 0 refuses that address
    refused = limits.admit("10.0.0.2")
    assert refused is not None and refused[0] == "max_connections"
    limits.release("10.0.0.1")
    assert limits.admit("10.0.0.2") is None
    assert limits.total == 5


def test_bad_overrides_name_the_setting() -> None:
    with pytest.raises(ConfigError, match="max.connections.per.ip.overrides"):
        ConnectionLimits(Config.load(overrides=["max.connections.per.ip.overrides=nonsense"]))
