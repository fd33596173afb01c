"""SCRAM (RFC 5802/7677) server against a client written from the RFC: a good exchange, the
RFC 7677 test vector, and every way an exchange can fail."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import hashlib
import hmac
import json
import threading

import pytest

from kcoord.broker.security.sasl.credentials import (
    CredentialStore,
    Upsertion,
    altered,
    decode_users,
    encode_users,
)
from kcoord.broker.security.sasl.scram import (
    ScramError,
    ScramServer,
    make_credential,
    password_matches,
)
from kcoord.storage.engine import DocumentChange
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


class _CountingDocuments:
    """Documents in memory that count their writes (and fail them on demand)."""

    def __init__(self) -> None:
        self.stored: dict[str, bytes] = {}
        self.writes = 0
        self.fail = False
        self.lock = threading.Lock()

    def read_document(self, name: str) -> bytes | None:
        return self.stored.get(name)

    def write_document(self, name: str, data: bytes) -> None:
        if self.fail:
            raise OSError(28, "No space left on device")
        self.writes += 1
        self.stored[name] = data

    def update_document(self, name: str, change: DocumentChange) -> bytes | None:
        with self.lock:
            new = change(self.read_document(name))
            if new is None:
                return self.read_document(name)
            self.write_document(name, new)
            return new


def _upsertion(user: str, password: str, mechanism: str = "SCRAM-SHA-256") -> Upsertion:
    algorithm = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}[mechanism]
    salt = user.encode()
    return Upsertion(user, mechanism, hashlib.pbkdf2_hmac(algorithm, password.encode(), salt, 4096), salt, 4096)


def test_one_alteration_is_one_document_write_and_visible_once_written() -> None:
    documents = _CountingDocuments()
    store = CredentialStore(documents)
    before = store.users

    async def main() -> None:
        await store.alter([], [_upsertion(f"u{i}", f"p{i}") for i in range(50)])
        await store.alter([("u1", "SCRAM-SHA-256"), ("u2", "SCRAM-SHA-512"), ("nobody", "SCRAM-SHA-256")],
                          [_upsertion("u3", "new", "SCRAM-SHA-512")])

    asyncio.run(main())
    assert documents.writes == 2
    assert before == {}  # replaced, never changed in place
    assert "u1" not in store.users and "u2" in store.users  # u2 has no SCRAM-SHA-512 to delete
    assert sorted(store.users["u3"]) == ["SCRAM-SHA-256", "SCRAM-SHA-512"]
    assert store.password_ok("u7", "p7") and store.password_ok("u3", "new") and not store.password_ok("u7", "p8")
    assert CredentialStore(documents).users == store.users


def test_an_alteration_that_cannot_be_written_changes_nothing() -> None:
    documents = _CountingDocuments()
    store = CredentialStore(documents)

    async def main() -> None:
        await store.alter([], [_upsertion("alice", "s3cret")])
        documents.fail = True
        with pytest.raises(OSError):
            await store.alter([("alice", "SCRAM-SHA-256")], [_upsertion("bob", "b")])

    asyncio.run(main())
    assert sorted(store.users) == ["alice"] and sorted(CredentialStore(documents).users) == ["alice"]


def test_concurrent_alterations_all_land_even_if_their_callers_go_away() -> None:
    documents = _CountingDocuments()
    store = CredentialStore(documents)

    async def main() -> None:
        callers = [asyncio.ensure_future(store.alter([], [_upsertion(f"u{i}", "p")])) for i in range(5)]
        await asyncio.sleep(0)
        callers[2].cancel()
        await asyncio.gather(*callers, return_exceptions=True)
        for _ in range(1000):  # the cancelled caller's change still completes (bounded wait)
            if len(store.users) == 5:
                break
            await asyncio.sleep(0.01)

    asyncio.run(main())
    assert sorted(store.users) == [f"u{i}" for i in range(5)]
    assert sorted(json.loads(documents.stored["scram-credentials.json"])) == [f"u{i}" for i in range(5)]


def test_an_alteration_is_made_on_the_stored_document() -> None:
    """Another node's users, stored since this node last read the document, stay: the
    deletions and upsertions apply to the document as stored."""
    theirs = encode_users({"carol": {"SCRAM-SHA-256": make_credential("SCRAM-SHA-256", "c")}})
    raw = altered(theirs, [("carol", "SCRAM-SHA-512"), ("nobody", "SCRAM-SHA-256")],
                  [_upsertion("dave", "d"), _upsertion("dave", "d2", "SCRAM-SHA-512")])
    users = decode_users(raw)
    assert sorted(users) == ["carol", "dave"] and sorted(users["dave"]) == ["SCRAM-SHA-256", "SCRAM-SHA-512"]
    assert decode_users(altered(raw, [("carol", "SCRAM-SHA-256")], [])).keys() == {"dave"}
    assert decode_users(altered(None, [], [])) == {}


def test_two_thousand_upsertions_are_one_document_write() -> None:
    documents = _CountingDocuments()
    store = CredentialStore(documents)
    one = _upsertion("u", "p")
    asyncio.run(store.alter([], [dataclasses.replace(one, user=f"u{i}") for i in range(2000)]))
    assert documents.writes == 1 and len(store.users) == 2000
