"""The SCRAM credentials of the broker's users, durable in the storage engine.

The document ``scram-credentials.json`` holds, per user and mechanism, the salt, iteration
count, StoredKey and ServerKey (base64), never a password. It is replaced atomically and
durably, so a crash leaves the old or the new one. SASL/PLAIN logins are checked against the
same credentials.
"""

from __future__ import annotations

import base64
import json

from kcoord.storage.engine import Documents

from .scram import MECHANISMS, ScramCredential, password_matches

FILE_NAME = "scram-credentials.json"


class CredentialStore:
    def __init__(self, documents: Documents) -> None:
        self.documents = documents
        self.users: dict[str, dict[str, ScramCredential]] = {}
        stored = documents.read_document(FILE_NAME)
        if stored is not None:
            for user, mechanisms in json.loads(stored).items():
                self.users[user] = {
                    mechanism: ScramCredential(
                        base64.b64decode(c["salt"]),
                        int(c["iterations"]),
                        base64.b64decode(c["stored_key"]),
                        base64.b64decode(c["server_key"]),
                    )
                    for mechanism, c in mechanisms.items()
                    if mechanism in MECHANISMS
                }

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
            for user, mechanisms in sorted(self.users.items())
        }
        self.documents.write_document(FILE_NAME, json.dumps(data, indent=1).encode())
