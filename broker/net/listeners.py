"""The broker's listeners: where it accepts connections, how each is secured, what it advertises.

``listeners`` (Kafka's setting, e.g. ``PLAINTEXT://127.0.0.1:9092,SSL://0.0.0.0:9093``) names
each listener and its bind address; ``listener.security.protocol.map`` maps a listener name to
its security protocol (by default a name is its own protocol); ``advertised.listeners`` gives,
per listener name, the address clients are told to use (Metadata and FindCoordinator answer
with the address of the listener the client came in on). Empty ``listeners`` means one
PLAINTEXT listener on ``--host``/``--port``, advertised as ``advertised.listeners`` says (a bare
``host:port`` or the first entry), as before listeners existed.

TLS (security protocol SSL) uses Kafka's PEM settings (KIP-651): ``ssl.keystore.location`` is
a PEM file with the private key and the certificate chain (``ssl.key.password`` if the key is
encrypted), ``ssl.truststore.location`` the CAs that sign client certificates, and
``ssl.client.auth`` (none, requested, required) whether clients must show one. A client
certificate's subject becomes the connection's principal (``User:CN=…,O=…``), as Kafka's
default principal builder makes it; without one the principal is ``User:ANONYMOUS``. On SASL
listeners (SASL_PLAINTEXT, SASL_SSL) the client must authenticate first (``broker/sasl``).
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from typing import Any

from ..config import Config, ConfigError

ANONYMOUS = "User:ANONYMOUS"
KNOWN_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


@dataclass(frozen=True, slots=True)
class Listener:
    name: str
    host: str
    port: int
    security_protocol: str
    advertised_host: str
    advertised_port: int

    @property
    def tls(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.security_protocol in ("SASL_PLAINTEXT", "SASL_SSL")


def _split(entry: str, setting: str) -> tuple[str, str, int]:
    """``NAME://host:port`` -> (NAME, host, port); an IPv6 host may be in brackets."""
    name, sep, address = entry.partition("://")
    if not sep:
        raise ConfigError(f"setting {setting!r}: {entry!r} is not NAME://host:port")
    host, colon, port = address.rpartition(":")
    try:
        number = int(port)
    except ValueError:
        number = -1
    if not colon or not 0 <= number <= 65535:
        raise ConfigError(f"setting {setting!r}: {entry!r} has no valid port")
    return name.strip().upper(), host.strip("[]"), number


def _protocol_map(config: Config) -> dict[str, str]:
    out = {}
    for item in config["listener.security.protocol.map"].split(","):
        if not item.strip():
            continue
        name, sep, protocol = item.partition(":")
        protocol = protocol.strip().upper()
        if not sep or protocol not in KNOWN_PROTOCOLS:
            raise ConfigError(
                f"setting 'listener.security.protocol.map': {item.strip()!r} is not NAME:PROTOCOL"
                f" with a protocol among {', '.join(KNOWN_PROTOCOLS)}"
            )
        out[name.strip().upper()] = protocol
    return out


def parse_listeners(config: Config) -> list[Listener]:
    """The listeners to open, in the order given (the first is the one logged and used by
    tools that want one address). Raises ConfigError naming the setting at fault."""
    raw = config["listeners"].strip()
    if not raw:
        host, port = config.advertised
        return [Listener("PLAINTEXT", config.host, config.port, "PLAINTEXT", host, port)]
    protocols = _protocol_map(config)
    advertised: dict[str, tuple[str, int]] = {}
    for entry in config["advertised.listeners"].split(","):
        if entry.strip() and "://" in entry:
            name, host, port = _split(entry.strip(), "advertised.listeners")
            advertised[name] = (host, port)
    out: list[Listener] = []
    for entry in raw.split(","):
        if not entry.strip():
            continue
        name, host, port = _split(entry.strip(), "listeners")
        if any(listener.name == name for listener in out):
            raise ConfigError(f"setting 'listeners': listener name {name} appears twice")
        protocol = protocols.get(name, name if name in KNOWN_PROTOCOLS else "")
        if not protocol:
            raise ConfigError(
                f"setting 'listeners': listener {name} has no security protocol; map it in"
                " listener.security.protocol.map"
            )
        ad_host, ad_port = advertised.get(name, (host if host not in ("", "0.0.0.0", "::") else config.host, port))
        out.append(Listener(name, host, port, protocol, ad_host, ad_port))
    if not out:
        raise ConfigError("setting 'listeners': no listener given")
    return out


def server_ssl_context(config: Config) -> ssl.SSLContext:
    """The TLS context of SSL listeners, from Kafka's PEM settings."""
    if config["ssl.keystore.type"].upper() != "PEM" or config["ssl.truststore.type"].upper() != "PEM":
        raise ConfigError("settings 'ssl.keystore.type' and 'ssl.truststore.type': only PEM is supported")
    keystore = config["ssl.keystore.location"]
    if not keystore:
        raise ConfigError(
            "setting 'ssl.keystore.location': an SSL listener needs a PEM file with its key and"
            " certificate chain"
        )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(keystore, password=config["ssl.key.password"] or None)
        truststore = config["ssl.truststore.location"]
        if truststore:
            context.load_verify_locations(cafile=truststore)
    except (OSError, ssl.SSLError) as e:
        raise ConfigError(f"TLS settings: cannot load the keystore or truststore: {e}") from None
    auth = config["ssl.client.auth"].lower()
    if auth not in ("none", "requested", "required"):
        raise ConfigError("setting 'ssl.client.auth': one of none, requested, required")
    if auth != "none" and not config["ssl.truststore.location"]:
        raise ConfigError("setting 'ssl.client.auth': checking client certificates needs ssl.truststore.location")
    context.verify_mode = {
        "none": ssl.CERT_NONE,
        "requested": ssl.CERT_OPTIONAL,
        "required": ssl.CERT_REQUIRED,
    }[auth]
    return context


def principal_of(peer_certificate: dict[str, Any] | None) -> str:
    """``User:`` and the certificate subject as Kafka writes it (RFC 2253: the most specific
    name first, ``CN=client,O=Example,C=DE``); anonymous without a certificate."""
    if not peer_certificate or not peer_certificate.get("subject"):
        return ANONYMOUS
    names = []
    for rdn in reversed(peer_certificate["subject"]):
        names.append("+".join(f"{_SHORT.get(key, key)}={_escape(value)}" for key, value in rdn))
    return "User:" + ",".join(names)


_SHORT = {
    "commonName": "CN",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "countryName": "C",
    "stateOrProvinceName": "ST",
    "localityName": "L",
    "domainComponent": "DC",
    "userId": "UID",
    "streetAddress": "STREET",
}


def _escape(value: str) -> str:
    out = "".join("\\" + c if c in ',+"\\<>;=' else c for c in value)
    if out.startswith((" ", "#")):
        out = "\\" + out
    if out.endswith(" ") and not out.endswith("\\ "):
        out = out[:-1] + "\\ "
    return out
