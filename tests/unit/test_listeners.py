"""Parsing listeners, their security protocols and advertised addresses (broker/net/listeners.py)."""

from __future__ import annotations

import pytest

from kcoord.broker.config import Config, ConfigError
from kcoord.broker.net.listeners import Listener, parse_listeners, server_ssl_context


def listeners(*overrides: str) -> list[Listener]:
    return parse_listeners(Config.load(overrides=list(overrides)))


def test_without_listeners_one_plaintext_listener_on_the_serve_address() -> None:
    assert listeners() == [Listener("PLAINTEXT", "127.0.0.1", 9092, "PLAINTEXT", "127.0.0.1", 9092)]
    advertised = listeners("advertised.listeners=kafka:19092")[0]
    assert (advertised.advertised_host, advertised.advertised_port) == ("kafka", 19092)


def test_each_listener_is_advertised_by_name_or_at_its_own_address() -> None:
    got = listeners(
        "listeners=PLAINTEXT://127.0.0.1:9092,SSL://0.0.0.0:9093,INTERNAL://[::1]:9094",
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SSL:SSL,INTERNAL:PLAINTEXT",
        "advertised.listeners=SSL://broker.example:443",
    )
    assert [(x.name, x.host, x.port, x.security_protocol) for x in got] == [
        ("PLAINTEXT", "127.0.0.1", 9092, "PLAINTEXT"),
        ("SSL", "0.0.0.0", 9093, "SSL"),
        ("INTERNAL", "::1", 9094, "PLAINTEXT"),
    ]
    assert [(x.advertised_host, x.advertised_port) for x in got] == [
        ("127.0.0.1", 9092),
        ("broker.example", 443),
        ("::1", 9094),
    ]
    assert [x.tls for x in got] == [False, True, False]
    sasl = listeners("listeners=SASL_SSL://h:1,SASL_PLAINTEXT://h:2")
    assert [(x.tls, x.sasl) for x in sasl] == [(True, True), (False, True)]


@pytest.mark.parametrize(
    ("settings", "words"),
    [
        (["listeners=PLAINTEXT://h:1,PLAINTEXT://h:2"], "appears twice"),
        (["listeners=PLAINTEXT://h"], "no valid port"),
        (["listeners=h:9092"], "NAME://host:port"),
        (["listeners=OTHER://h:1"], "no security protocol"),
        (["listeners=X://h:1", "listener.security.protocol.map=X:KERBEROS"], "NAME:PROTOCOL"),
    ],
)
def test_bad_listener_settings_name_the_setting(settings: list[str], words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        listeners(*settings)


def test_an_ssl_listener_needs_a_keystore_and_client_auth_a_truststore() -> None:
    with pytest.raises(ConfigError, match="ssl.keystore.location"):
        server_ssl_context(Config.load())
    with pytest.raises(ConfigError, match="cannot load"):
        server_ssl_context(Config.load(overrides=["ssl.keystore.location=/nonexistent.pem"]))
    with pytest.raises(ConfigError, match="only PEM"):
        server_ssl_context(Config.load(overrides=["ssl.keystore.type=JKS"]))
