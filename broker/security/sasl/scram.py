"""SCRAM (RFC 5802, RFC 7677), sans-IO: salted credentials and the server side of an exchange.

A stored credential keeps the salt, the iteration count, StoredKey and ServerKey, never the
password. :class:`ScramServer` answers the client-first message with the server-first one,
checks the client's proof in the client-final message against StoredKey and answers with the
server signature; any deviation (a bad message, another nonce, a wrong proof) is a
:class:`ScramError`.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from collections.abc import Callable
from dataclasses import dataclass

MECHANISMS = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
DEFAULT_ITERATIONS = 4096
MIN_ITERATIONS = 4096  # Kafka's bounds
MAX_ITERATIONS = 16384
MECHANISM_IDS = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
"""The mechanisms' numbers in DescribeUserScramCredentials and AlterUserScramCredentials."""


class ScramError(ValueError):
    """The exchange failed; the message is safe to log (it never holds secrets)."""


@dataclass(frozen=True, slots=True)
class ScramCredential:
    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    return hashlib.pbkdf2_hmac(MECHANISMS[mechanism], password.encode("utf-8"), salt, iterations)


def make_credential(
    mechanism: str, password: str, iterations: int = DEFAULT_ITERATIONS, salt: bytes | None = None
) -> ScramCredential:
    salt = salt if salt is not None else os.urandom(32)
    salted = salted_password(mechanism, password, salt, iterations)
    return credential_from_salted(mechanism, salted, salt, iterations)


def credential_from_salted(
    mechanism: str, salted: bytes, salt: bytes, iterations: int
) -> ScramCredential:
    """The credential of a salted password a client computed (AlterUserScramCredentials)."""
    algorithm = MECHANISMS[mechanism]
    client_key = hmac.digest(salted, b"Client Key", algorithm)
    return ScramCredential(
        salt,
        iterations,
        hashlib.new(algorithm, client_key).digest(),
        hmac.digest(salted, b"Server Key", algorithm),
    )


def password_matches(mechanism: str, credential: ScramCredential, password: str) -> bool:
    """Whether ``password`` is the one ``credential`` was made from (for SASL/PLAIN)."""
    made = make_credential(mechanism, password, credential.iterations, credential.salt)
    return hmac.compare_digest(made.stored_key, credential.stored_key)


def _attributes(message: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in message.split(","):
        if len(part) < 2 or part[1] != "=":
            raise ScramError(f"malformed SCRAM attribute {part[:20]!r}")
        out.setdefault(part[0], part[2:])
    return out


def _username(raw: str) -> str:
    if "=" in raw.replace("=2C", "").replace("=3D", ""):
        raise ScramError("malformed SCRAM user name")
    return raw.replace("=2C", ",").replace("=3D", "=")


class ScramServer:
    """One SCRAM exchange. ``lookup(user)`` gives the user's credential for this mechanism,
    None if there is none."""

    def __init__(
        self,
        mechanism: str,
        lookup: Callable[[str], ScramCredential | None],
        nonce: Callable[[], str] | None = None,
    ) -> None:
        self.mechanism = mechanism
        self._algorithm = MECHANISMS[mechanism]
        self._lookup = lookup
        self._nonce = nonce or (lambda: base64.b64encode(os.urandom(24)).decode())
        self._step = 0
        self.user: str | None = None
        self._credential: ScramCredential | None = None
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce_value = ""

    @property
    def done(self) -> bool:
        return self._step == 2

    def respond(self, token: bytes) -> bytes:
        """The answer to the client's next message; raises ScramError when it fails."""
        try:
            message = token.decode("utf-8")
        except UnicodeDecodeError:
            raise ScramError("SCRAM message is not UTF-8") from None
        if self._step == 0:
            return self._first(message)
        if self._step == 1:
            return self._final(message)
        raise ScramError("SCRAM exchange already complete")

    def _first(self, message: str) -> bytes:
        gs2, sep, rest = message.partition(",")
        authzid, sep2, bare = rest.partition(",")
        if not sep or not sep2 or gs2 not in ("n", "y") or (authzid and not authzid.startswith("a=")):
            raise ScramError("malformed SCRAM client-first message")
        attrs = _attributes(bare)
        if "m" in attrs or "n" not in attrs or "r" not in attrs or not attrs["r"]:
            raise ScramError("malformed SCRAM client-first message")
        user = _username(attrs["n"])
        credential = self._lookup(user)
        if credential is None:
            raise ScramError(f"unknown user {user!r} for {self.mechanism}")
        self.user = user
        self._credential = credential
        self._client_first_bare = bare
        self._gs2_header = f"{gs2},{authzid},"
        self._nonce_value = attrs["r"] + self._nonce()
        salt = base64.b64encode(credential.salt).decode()
        self._server_first = f"r={self._nonce_value},s={salt},i={credential.iterations}"
        self._step = 1
        return self._server_first.encode()

    def _final(self, message: str) -> bytes:
        without_proof, sep, proof_part = message.rpartition(",p=")
        if not sep:
            raise ScramError("malformed SCRAM client-final message")
        attrs = _attributes(without_proof)
        if attrs.get("r") != self._nonce_value:
            raise ScramError("SCRAM nonce mismatch")
        try:
            binding = base64.b64decode(attrs.get("c", ""), validate=True).decode()
            proof = base64.b64decode(proof_part, validate=True)
        except (ValueError, UnicodeDecodeError):
            raise ScramError("malformed SCRAM client-final message") from None
        if binding != self._gs2_header:
            raise ScramError("SCRAM channel binding mismatch")
        credential = self._credential
        assert credential is not None
        auth = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        signature = hmac.digest(credential.stored_key, auth, self._algorithm)
        if len(proof) != len(signature):
            raise ScramError("invalid credentials")
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(hashlib.new(self._algorithm, client_key).digest(), credential.stored_key):
            raise ScramError("invalid credentials")
        self._step = 2
        server_signature = hmac.digest(credential.server_key, auth, self._algorithm)
        return b"v=" + base64.b64encode(server_signature)
