"""Who is looking at the console, and what they may see, when the broker has an authorizer.

With ``authorizer.class.name`` set, the console (its page and its JSON, not ``/metrics``,
``/healthz`` or ``/readyz``) asks for a login: HTTP Basic authentication with a user and password
of the broker's SCRAM users (``kcoord users add``), the same credentials SASL/PLAIN checks. The
user becomes the principal ``User:<name>``, and the console shows only the groups and topics that
principal may DESCRIBE, as the Kafka APIs do (ListGroups, Metadata, OffsetFetch); its actions
and message browser ask what the API each stands for asks (:attr:`Viewer.may`: READ on the topic
to browse it, as Fetch; broker/console/actions.py for the others). Without an authorizer there
is no login and everything is shown and allowed.

A password check is a PBKDF2 derivation, so a login that succeeded is remembered for
:data:`REMEMBER_S` (keyed by a hash of the Authorization header): the page polls every few seconds.
The checks run in the same bounded threads as SASL/PLAIN's (``password_checks.py``), queued by
the viewer's address; a login refused there for too many waiting checks fails like a wrong
password.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..security.acl.model import AclAuthorizer, Operation, ResourceType
from ..security.sasl.credentials import CredentialStore
from ..security.sasl.password_checks import ChecksBusy, PasswordChecks

REMEMBER_S = 60.0
_MAX_REMEMBERED = 1024
CHALLENGE = 'Basic realm="kcoord console", charset="UTF-8"'


@dataclass(frozen=True, slots=True)
class Viewer:
    """What one logged-in principal may see, and do (the console's actions ask ``may`` what
    the Kafka API each stands for asks the authorizer)."""

    group: Callable[[str], bool]
    topic: Callable[[str], bool]
    principal: str = "User:ANONYMOUS"
    may: Callable[[Operation, ResourceType, str], bool] = lambda op, rtype, name: True


class ConsoleLogin:
    def __init__(
        self, authorizer: AclAuthorizer, credentials: CredentialStore, checks: PasswordChecks
    ) -> None:
        self.authorizer = authorizer
        self.credentials = credentials
        self.checks = checks
        self._remembered: dict[bytes, tuple[str, float]] = {}

    async def viewer(self, authorization: str | None, host: str) -> Viewer | None:
        """The viewer for a request's Authorization header; None if the login fails."""
        principal = await self._principal(authorization, host)
        if principal is None:
            return None
        authorizer = self.authorizer

        def may(rtype: ResourceType) -> Callable[[str], bool]:
            return lambda name: authorizer.authorize(
                principal, host, Operation.DESCRIBE, rtype, name, quiet=True
            )

        def may_do(op: Operation, rtype: ResourceType, name: str) -> bool:
            return authorizer.authorize(principal, host, op, rtype, name)

        return Viewer(
            group=may(ResourceType.GROUP),
            topic=may(ResourceType.TOPIC),
            principal=principal,
            may=may_do,
        )

    async def _principal(self, authorization: str | None, host: str) -> str | None:
        if not authorization:
            return None
        scheme, _, encoded = authorization.strip().partition(" ")
        if scheme.lower() != "basic":
            return None
        key = hashlib.sha256(authorization.encode("utf-8", "replace")).digest()
        now = time.monotonic()
        known = self._remembered.get(key)
        if known is not None and known[1] > now:
            return known[0]
        try:
            user, sep, password = base64.b64decode(encoded.strip(), validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return None
        if not sep or not user:
            return None
        try:
            ok = await self.checks.check(
                host, functools.partial(self.credentials.password_ok, user, password)
            )
        except ChecksBusy:
            return None
        if not ok:
            return None
        if len(self._remembered) >= _MAX_REMEMBERED:
            self._remembered.clear()
        principal = f"User:{user}"
        self._remembered[key] = (principal, now + REMEMBER_S)
        return principal
