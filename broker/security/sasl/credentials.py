"""The SCRAM credentials of the broker's users, durable in the storage engine.

The document ``scram-credentials.json`` holds, per user and mechanism, the salt, iteration
count, StoredKey and ServerKey (base64), never a password. It is replaced atomically and
durably, so a crash leaves the old or the new one. SASL/PLAIN logins are checked against the
same credentials.

Online changes (AlterUserScramCredentials, :meth:`CredentialStore.alter`) come a request at a
time: the request's deletions and upsertions are applied together to the document as stored
(:func:`altered`, a function of its bytes) and written once, in a worker thread, so that a
request of thousands of changes costs one write and no time on the event loop, and two nodes of
a cluster changing the document at once both keep their changes (``Documents.update_document``).
The users the broker checks logins against become those of the document once it is written
(never before, so what a login sees is durable). ``put`` and ``delete`` change the document at
once, for ``kcoord users`` (no broker running).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kcoord.storage.engine import Documents

from ...cluster.documents import DocumentUpdates
from .scram import MECHANISMS, ScramCredential, credential_from_salted, password_matches

FILE_NAME = "scram-credentials.json"

Users = dict[str, dict[str, ScramCredential]]
"""Credentials by user, then by mechanism."""


@dataclass(frozen=True, slots=True)
class Upsertion:
    """A user's new credential for a mechanism, as AlterUserScramCredentials brings it: the
    password salted by the client (the credential's keys are derived from it)."""

    user: str
    mechanism: str
    salted_password: bytes
    salt: bytes
    iterations: int


class CredentialStore:
    def __init__(self, documents: Documents) -> None:
        self.documents = documents
        self.users: Users = {}
        """Never changed in place once the broker serves: replaced by a new mapping (so that a
        worker thread may read it while the loop goes on)."""
        self.updates = DocumentUpdates(documents, FILE_NAME, self.stored_elsewhere)
        self.stored_elsewhere(documents.read_document(FILE_NAME))

    def stored_elsewhere(self, stored: bytes | None) -> None:
        """The users become those of a stored document (start-up; another node changed it, in
        cluster mode; this node, after a change)."""
        self.users = decode_users(stored)

    def get(self, user: str, mechanism: str) -> ScramCredential | None:
        return self.users.get(user, {}).get(mechanism)

    def password_ok(self, user: str, password: str) -> bool:
        """Whether ``password`` is the user's (checked against the strongest stored credential;
        a PBKDF2 derivation: call it off the event loop)."""
        for mechanism in ("SCRAM-SHA-512", "SCRAM-SHA-256"):
            credential = self.get(user, mechanism)
            if credential is not None:
                return password_matches(mechanism, credential, password)
        return False

    async def alter(
        self, deletions: Sequence[tuple[str, str]], upsertions: Sequence[Upsertion]
    ) -> None:
        """Delete the ``(user, mechanism)`` credentials of ``deletions`` (those missing are
        skipped) and store ``upsertions``, in one document write off the event loop; return
        once it is durable and the users are replaced. OSError if the document could not be
        written, and then nothing changed. The caller being cancelled (its client gone) does
        not stop the change half-way: it completes regardless."""
        gone, new = tuple(deletions), tuple(upsertions)
        await self.updates.update(lambda raw: altered(raw, gone, new))

    def put(self, user: str, mechanism: str, credential: ScramCredential) -> None:
        def change(raw: bytes | None) -> bytes:
            users = decode_users(raw)
            users[user] = {**users.get(user, {}), mechanism: credential}
            return encode_users(users)

        self.stored_elsewhere(self.documents.update_document(FILE_NAME, change))

    def delete(self, user: str, mechanism: str | None = None) -> bool:
        """Delete a user's credential (all of them: ``mechanism`` None); whether there was one."""
        found = False

        def change(raw: bytes | None) -> bytes | None:
            nonlocal found
            users = decode_users(raw)
            mechanisms = users.get(user, {})
            found = mechanism in mechanisms if mechanism is not None else bool(mechanisms)
            if not found:
                return None
            gone = [mechanism] if mechanism is not None else list(mechanisms)
            return altered(raw, tuple((user, m) for m in gone), ())

        self.stored_elsewhere(self.documents.update_document(FILE_NAME, change))
        return found


def decode_users(stored: bytes | None) -> Users:
    """The users of a stored document (none if there is none)."""
    users: Users = {}
    for user, mechanisms in json.loads(stored or b"{}").items():
        users[user] = {
            mechanism: ScramCredential(
                base64.b64decode(c["salt"]),
                int(c["iterations"]),
                base64.b64decode(c["stored_key"]),
                base64.b64decode(c["server_key"]),
            )
            for mechanism, c in mechanisms.items()
            if mechanism in MECHANISMS
        }
    return users


def altered(
    raw: bytes | None, deletions: Sequence[tuple[str, str]], upsertions: Sequence[Upsertion]
) -> bytes:
    """The stored document ``raw`` with the ``(user, mechanism)`` credentials of ``deletions``
    deleted (those missing skipped), then ``upsertions`` stored (each derived here: call it off
    the event loop)."""
    users = decode_users(raw)
    for user, mechanism in deletions:
        mechanisms = users.get(user)
        if mechanisms is not None and mechanism in mechanisms:
            remaining = {m: c for m, c in mechanisms.items() if m != mechanism}
            if remaining:
                users[user] = remaining
            else:
                del users[user]
    for u in upsertions:
        credential = credential_from_salted(u.mechanism, u.salted_password, u.salt, u.iterations)
        users[u.user] = {**users.get(u.user, {}), u.mechanism: credential}
    return encode_users(users)


def encode_users(users: Mapping[str, Mapping[str, ScramCredential]]) -> bytes:
    data = {
        user: {
            mechanism: {
                "salt": base64.b64encode(c.salt).decode(),
                "iterations": c.iterations,
                "stored_key": base64.b64encode(c.stored_key).decode(),
                "server_key": base64.b64encode(c.server_key).decode(),
            }
            for mechanism, c in sorted(mechanisms.items())
        }
        for user, mechanisms in sorted(users.items())
    }
    return json.dumps(data, indent=1).encode()
