"""The client security settings of the admin commands (``--command-config FILE``, as Kafka's
tools take it): a Java-properties file of librdkafka/Kafka client settings, handed to the
AdminClient as they are, and applied by hand to the few requests the commands send on their own
connection (OffsetDelete, ConsumerGroupDescribe): TLS (``security.protocol`` SSL or SASL_SSL,
``ssl.ca.location``, ``ssl.certificate.location``, ``ssl.key.location``,
``ssl.endpoint.identification.algorithm``) and SASL PLAIN or SCRAM-SHA-256/512 (``sasl.mechanism``,
``sasl.username``, ``sasl.password``), SCRAM as RFC 5802 describes the client side.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import socket
import ssl
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

SCRAM_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}


def read_command_config(path: str | Path) -> dict[str, str]:
    """``key=value`` lines; ``#`` and ``!`` start comments; ``key: value`` is accepted too."""
    out: dict[str, str] = {}
    for raw in Path(path).read_text().splitlines():
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        key, sep, value = line.partition("=")
        if not sep:
            key, sep, value = line.partition(":")
        if not sep:
            raise ValueError(f"--command-config: {raw.strip()!r} is not key=value")
        out[key.strip()] = value.strip()
    return out


def connect(
    host: str,
    port: int,
    timeout: float,
    conf: Mapping[str, str],
    exchange: Callable[[socket.socket, int, int, dict[str, Any]], Any],
) -> socket.socket:
    """A connection to ``host:port`` secured as ``conf`` says; ``exchange(sock, api_key,
    version, fields)`` sends one request and returns its decoded answer (for the SASL login)."""
    protocol = conf.get("security.protocol", "PLAINTEXT").upper()
    sock: socket.socket = socket.create_connection((host, port), timeout=timeout)
    if protocol in ("SSL", "SASL_SSL"):
        context = ssl.create_default_context(cafile=conf.get("ssl.ca.location") or None)
        if conf.get("ssl.endpoint.identification.algorithm", "https").lower() in ("", "none"):
            context.check_hostname = False
        if conf.get("ssl.certificate.location"):
            context.load_cert_chain(
                conf["ssl.certificate.location"],
                conf.get("ssl.key.location") or None,
                conf.get("ssl.key.password") or None,
            )
        sock = context.wrap_socket(sock, server_hostname=host)
    if protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
        _login(sock, conf, exchange)
    return sock


def _login(
    sock: socket.socket,
    conf: Mapping[str, str],
    exchange: Callable[[socket.socket, int, int, dict[str, Any]], Any],
) -> None:
    mechanism = conf.get("sasl.mechanism", "GSSAPI").upper()
    user, password = conf.get("sasl.username", ""), conf.get("sasl.password", "")
    answer = exchange(sock, 17, 1, {"mechanism": mechanism})
    if answer.error_code:
        raise ConnectionError(f"SASL mechanism {mechanism} refused (error {answer.error_code})")

    def authenticate(token: bytes) -> bytes:
        r = exchange(sock, 36, 2, {"auth_bytes": token})
        if r.error_code:
            raise ConnectionError(f"SASL authentication failed: {r.error_message}")
        return bytes(r.auth_bytes)

    if mechanism == "PLAIN":
        authenticate(b"\0" + user.encode() + b"\0" + password.encode())
        return
    algorithm = SCRAM_HASHES.get(mechanism)
    if algorithm is None:
        raise ConnectionError(
            f"SASL mechanism {mechanism} is not supported by kcoord's admin commands"
        )
    name = user.replace("=", "=3D").replace(",", "=2C")
    bare = f"n={name},r={base64.b64encode(os.urandom(18)).decode()}"
    server_first = authenticate(("n,," + bare).encode()).decode()
    attrs = dict(part.split("=", 1) for part in server_first.split(","))
    salted = hashlib.pbkdf2_hmac(
        algorithm, password.encode(), base64.b64decode(attrs["s"]), int(attrs["i"])
    )
    client_key = hmac.digest(salted, b"Client Key", algorithm)
    without_proof = f"c=biws,r={attrs['r']}"
    auth = f"{bare},{server_first},{without_proof}".encode()
    signature = hmac.digest(hashlib.new(algorithm, client_key).digest(), auth, algorithm)
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    final = authenticate(f"{without_proof},p={base64.b64encode(proof).decode()}".encode()).decode()
    server_key = hmac.digest(salted, b"Server Key", algorithm)
    expected = base64.b64encode(hmac.digest(server_key, auth, algorithm)).decode()
    if final != f"v={expected}":
        raise ConnectionError("SCRAM: the broker's signature does not match")
