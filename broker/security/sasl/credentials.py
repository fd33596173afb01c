"""The SCRAM credentials of the broker's users, durable in the storage engine.

The document ``scram-credentials.json`` holds, per user and mechanism, the salt, iteration
count, StoredKey and ServerKey (base64), never a password. It is replaced atomically and
durably, so a crash leaves the old or the new one. SASL/PLAIN logins are checked against the
same credentials.

Online changes (AlterUserScramCredentials, :meth:`CredentialStore.alter`) come a request at a
time: the request's deletions and upsertions make one new set of users and one document, both
built and written in a worker thread, so that a request of thousands of changes costs one
fsync and no time on the event loop. The users the broker checks logins against are replaced
by the new set once the document is on disk (never before, so what a login sees is durable).
``put`` and ``delete`` write at once, for ``kcoord users`` (no broker running).
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kcoord.storage.engine import Documents

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
        self._altering = asyncio.Lock()
        self._writes: set[asyncio.Task[None]] = set()
        self.stored_elsewhere(documents.read_document(FILE_NAME))

    def stored_elsewhere(self, stored: bytes | None) -> None:
        """The users become those of a stored document (start-up; another node changed it, in
        cluster mode)."""
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
        self.users = users

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
        write = asyncio.ensure_future(self._alter(tuple(deletions), tuple(upsertions)))
        self._writes.add(write)  # the loop keeps only a weak reference to a task
        write.add_done_callback(self._writes.discard)
        await asyncio.shield(write)

    async def _alter(
        self, deletions: tuple[tuple[str, str], ...], upsertions: tuple[Upsertion, ...]
    ) -> None:
        async with self._altering:  # one change at a time: each starts from the last one's users
            self.users = await asyncio.to_thread(self._write_altered, deletions, upsertions)

    def _write_altered(
        self, deletions: tuple[tuple[str, str], ...], upsertions: tuple[Upsertion, ...]
    ) -> Users:
        """(In a worker thread.) The users with the changes made, once their document is on
        disk. The current mapping and its entries are copied where they change, never touched."""
        users = dict(self.users)
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
        self.documents.write_document(FILE_NAME, _encode(users))
        return users

    def put(self, user: str, mechanism: str, credential: ScramCredential) -> None:
        self.users.setdefault(user, {})[mechanism] = credential
        self.save()

    def delete(self, user: str, mechanism: str | None = None) -> bool:
        mechanisms = self.users.get(user)
        if mechanisms is None or (mechanism is not None and mechanism not in mechanisms):
            return False
        if mechanism is None:
            del self.users[user]
        else:
            del mechanisms[mechanism]
            if not mechanisms:
                del self.users[user]
        self.save()
        return True

    def save(self) -> None:
        self.documents.write_document(FILE_NAME, _encode(self.users))


def _encode(users: Mapping[str, Mapping[str, ScramCredential]]) -> bytes:
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
