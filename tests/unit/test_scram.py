"""SCRAM (RFC 5802/7677) server against a client written from the RFC: a good exchange, the
RFC 7677 test vector, and every way an exchange can fail."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest

from kcoord.broker.security.sasl.credentials import CredentialStore
from kcoord.broker.security.sasl.scram import (
    ScramError,
    ScramServer,
    make_credential,
    password_matches,
)
from kcoord.storage.file_engine import FileEngine


def client_final(mechanism: str, password: str, client_first_bare: str, server_first: str, gs2: str = "n,,") -> str:
    algorithm = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}[mechanism]
    attrs = dict(part.split("=", 1) for part in server_first.split(","))
    salted = hashlib.pbkdf2_hmac(algorithm, password.encode(), base64.b64decode(attrs["s"]), int(attrs["i"]))
    client_key = hmac.digest(salted, b"Client Key", algorithm)
    stored_key = hashlib.new(algorithm, client_key).digest()
    without_proof = f"c={base64.b64encode(gs2.encode()).decode()},r={attrs['r']}"
    auth = f"{client_first_bare},{server_first},{without_proof}".encode()
    signature = hmac.digest(stored_key, auth, algorithm)
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    return f"{without_proof},p={base64.b64encode(proof).decode()}"


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_a_good_exchange_authenticates_the_user(mechanism: str) -> None:
    credential = make_credential(mechanism, "s3cret")
    server = ScramServer(mechanism, {"alice": credential}.get)
    bare = "n=alice,r=clientnonce"
    server_first = server.respond(("n,," + bare).encode()).decode()
    assert server_first.startswith("r=clientnonce")
    final = server.respond(client_final(mechanism, "s3cret", bare, server_first).encode())
    assert final.startswith(b"v=") and server.done and server.user == "alice"


def test_rfc_7677_test_vector() -> None:
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    credential = make_credential("SCRAM-SHA-256", "pencil", 4096, salt)
    server = ScramServer("SCRAM-SHA-256", {"user": credential}.get, nonce=lambda: "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
    first = server.respond(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO").decode()
    assert first == "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    final = server.respond(
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
        b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    )
    assert final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


@pytest.mark.parametrize(
    "tamper",
    ["wrong password", "other nonce", "bad binding", "garbage final"],
)
def test_a_failed_exchange_raises(tamper: str) -> None:
    credential = make_credential("SCRAM-SHA-512", "s3cret")
    server = ScramServer("SCRAM-SHA-512", {"alice": credential}.get)
    bare = "n=alice,r=abc"
    first = server.respond(("n,," + bare).encode()).decode()
    final = client_final("SCRAM-SHA-512", "wrong" if tamper == "wrong password" else "s3cret", bare, first)
    if tamper == "other nonce":
        final = final.replace("r=abc", "r=xyz")
    elif tamper == "bad binding":
        final = final.replace("c=biws", "c=eSws")
    elif tamper == "garbage final":
        final = "\xff garbage"
    with pytest.raises(ScramError):
        server.respond(final.encode())
    assert not server.done


@pytest.mark.parametrize("first", [b"", b"garbage", b"n,,r=only", b"p=tls,,n=a,r=b", b"n,,n=nobody,r=x", b"\xff\xfe"])
def test_bad_or_unknown_client_first_messages(first: bytes) -> None:
    server = ScramServer("SCRAM-SHA-256", {"alice": make_credential("SCRAM-SHA-256", "x")}.get)
    with pytest.raises(ScramError):
        server.respond(first)


def test_the_store_keeps_salted_credentials_only_and_plain_checks_them(tmp_path) -> None:  # type: ignore[no-untyped-def]
    store = CredentialStore(FileEngine(tmp_path))
    store.put("alice", "SCRAM-SHA-512", make_credential("SCRAM-SHA-512", "s3cret"))
    assert b"s3cret" not in (tmp_path / "scram-credentials.json").read_bytes()
    again = CredentialStore(FileEngine(tmp_path)).get("alice", "SCRAM-SHA-512")
    assert again is not None and password_matches("SCRAM-SHA-512", again, "s3cret")
    assert not password_matches("SCRAM-SHA-512", again, "guess")
    assert CredentialStore(FileEngine(tmp_path)).delete("alice") and CredentialStore(FileEngine(tmp_path)).users == {}
