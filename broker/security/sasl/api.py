"""SaslHandshake (v0-v1) and SaslAuthenticate (v0-v2) on a SASL listener.

A connection of a SASL listener starts unauthenticated: until SaslAuthenticate succeeds it may
only send ApiVersions, SaslHandshake and SaslAuthenticate (the connection refuses anything
else). SaslHandshake picks one of ``sasl.enabled.mechanisms``; SaslAuthenticate carries the
mechanism's tokens (KIP-152 framing); after a SaslHandshake v0 the tokens come instead as bare
size-prefixed frames with no Kafka header, answered the same way (:meth:`SaslApi.raw_token`).
PLAIN is checked against the user's stored SCRAM credential (the PBKDF2 work in the password
checks' own threads, ``password_checks.py``; when too many checks wait, the login fails at once);
SCRAM runs :class:`ScramServer`; OAUTHBEARER (only when enabled) takes unsecured
development tokens (``oauthbearer.py``). Success makes ``User:<name>`` the principal.

A failed login ends the connection, as in Kafka: the connection takes no further request (it
handles one at a time until the login succeeds, so whatever the client pipelined behind the
failed attempt is dropped unread); the SASL_AUTHENTICATION_FAILED answer with its message goes
out at once (none after a SaslHandshake v0, which has no way to say why) and the connection is
closed ``connection.failed.authentication.delay.ms`` later, as Kafka delays that close. One
guess per connection is what keeps passwords from being tried at wire speed.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kcoord.protocol.errors import ErrorCode

from . import oauthbearer
from .credentials import CredentialStore
from .password_checks import ChecksBusy, PasswordChecks
from .scram import MECHANISMS, ScramError, ScramServer

if TYPE_CHECKING:
    from ...config import Config
    from ...net.connection import Connection, RequestContext

log = logging.getLogger("kcoord.sasl")

PLAIN = "PLAIN"


class SaslApi:
    def __init__(
        self,
        config: Config,
        store: CredentialStore,
        checks: PasswordChecks,
        on_failure: Callable[[str], None],
    ) -> None:
        self.store = store
        self.checks = checks
        self._on_failure = on_failure
        """Counts a failed login (the metrics' refused-connections hook)."""
        self.mechanisms = tuple(
            m.strip().upper() for m in config["sasl.enabled.mechanisms"].split(",") if m.strip()
        )
        self.failure_delay_s = config["connection.failed.authentication.delay.ms"] / 1000.0

    def handshake(self, ctx: RequestContext, req: Any) -> Any:
        conn = ctx.connection
        mechanism = req.mechanism.upper()
        if conn.authenticated or conn.sasl_mechanism is not None:
            return ctx.respond(error_code=ErrorCode.illegal_sasl_state, mechanisms=list(self.mechanisms))
        if mechanism not in self.mechanisms:
            return ctx.respond(
                error_code=ErrorCode.unsupported_sasl_mechanism, mechanisms=list(self.mechanisms)
            )
        conn.sasl_mechanism = mechanism
        if mechanism in MECHANISMS:
            conn.sasl_exchange = ScramServer(mechanism, lambda user: self.store.get(user, mechanism))
        if ctx.version == 0:  # the tokens follow as bare size-prefixed frames (before KIP-152)
            conn.sasl_raw = self.raw_token
        return ctx.respond(error_code=ErrorCode.none, mechanisms=list(self.mechanisms))

    async def authenticate(self, ctx: RequestContext, req: Any) -> Any:
        conn = ctx.connection
        if conn.authenticated or conn.sasl_mechanism is None or conn.sasl_raw is not None:
            return await self._failed(ctx, ErrorCode.illegal_sasl_state, "SaslAuthenticate out of turn")
        try:
            answer = await self._step(conn, bytes(req.auth_bytes))
        except _LoginFailed as e:
            return await self._failed(ctx, e.code, e.message)
        return ctx.respond(error_code=ErrorCode.none, error_message=None, auth_bytes=answer, session_lifetime=0)

    async def raw_token(self, conn: Connection, token: bytes) -> bytes | None:
        """A token of a SaslHandshake v0 exchange (no Kafka header): the answer token, or None
        when the login failed (after the delay; the connection is then closed unanswered)."""
        try:
            answer = await self._step(conn, token)
        except _LoginFailed as e:
            self._refuse(conn, e.message)
            return None
        if conn.authenticated:
            conn.sasl_raw = None
        return answer

    async def _step(self, conn: Connection, token: bytes) -> bytes:
        """One client token of the mechanism's exchange; the token to answer with."""
        mechanism = conn.sasl_mechanism
        if mechanism == PLAIN:
            user = await self._plain(conn.client_host, token)
            self._succeeded(conn, user)
            return b""
        if mechanism == oauthbearer.MECHANISM:
            return self._oauthbearer(conn, token)
        exchange = conn.sasl_exchange
        assert isinstance(exchange, ScramServer)
        try:
            answer = exchange.respond(token)
        except ScramError as e:
            raise _LoginFailed(ErrorCode.sasl_authentication_failed, self._why(str(mechanism), e)) from None
        if exchange.done:
            self._succeeded(conn, exchange.user or "")
        return answer

    async def _plain(self, address: str, token: bytes) -> str:
        """The user a SASL/PLAIN token from client ``address`` logs in (RFC 4616)."""
        malformed = _LoginFailed(ErrorCode.sasl_authentication_failed, "malformed SASL/PLAIN token")
        parts = token.split(b"\0")
        if len(parts) != 3:
            raise malformed
        authzid, user_bytes, password_bytes = parts
        try:
            user, password = user_bytes.decode("utf-8"), password_bytes.decode("utf-8")
        except UnicodeDecodeError:
            raise malformed from None
        if authzid and authzid != user_bytes:
            raise _LoginFailed(ErrorCode.sasl_authentication_failed, "authorization id must be the user")
        try:
            ok = await self.checks.check(
                address, functools.partial(self.store.password_ok, user, password)
            )
        except ChecksBusy:
            raise _LoginFailed(
                ErrorCode.sasl_authentication_failed,
                "Authentication failed: too many logins in progress, try again later",
            ) from None
        if not ok:
            raise _LoginFailed(
                ErrorCode.sasl_authentication_failed,
                "Authentication failed: Invalid username or password",
            )
        return user

    def _oauthbearer(self, conn: Connection, token: bytes) -> bytes:
        """An unsecured token's subject logs in; a bad token gets the error challenge, and the
        client's next message ends the login (RFC 7628) with the reason in its message."""
        refused = conn.sasl_exchange
        if isinstance(refused, _OAuthRefused):
            raise _LoginFailed(
                ErrorCode.sasl_authentication_failed, f"invalid OAUTHBEARER token: {refused.reason}"
            )
        try:
            subject = oauthbearer.unsecured_subject(
                oauthbearer.bearer_token(token), int(time.time() * 1000)
            )
        except oauthbearer.InvalidToken as e:
            log.info("SASL OAUTHBEARER token refused: %s", e)
            conn.sasl_exchange = _OAuthRefused(str(e))
            return oauthbearer.ERROR_CHALLENGE
        self._succeeded(conn, subject)
        return b""

    @staticmethod
    def _why(mechanism: str, error: ScramError) -> str:
        log.info("SASL %s authentication failed: %s", mechanism, error)
        return (
            "Authentication failed during authentication due to invalid credentials with SASL"
            f" mechanism {mechanism}"
        )

    def _succeeded(self, conn: Connection, user: str) -> None:
        conn.logged_in(f"User:{user}")
        conn.sasl_exchange = None

    def _refuse(self, conn: Connection, message: str) -> None:
        """End the connection of a failed login: no further request is taken, and it closes
        the delay after its answer (if any) is out."""
        log.info("closing %s: SASL authentication failed (%s)", conn.peer, message)
        self._on_failure("authentication")
        conn.close_when_answered(self.failure_delay_s)

    async def _failed(self, ctx: RequestContext, code: int, message: str) -> Any:
        self._refuse(ctx.connection, message)
        return ctx.respond(error_code=code, error_message=message, auth_bytes=b"", session_lifetime=0)


@dataclass(frozen=True, slots=True)
class _OAuthRefused:
    """The OAUTHBEARER exchange's state after the error challenge was sent: why the token was
    refused (our own words from InvalidToken, never the client's input)."""

    reason: str


class _LoginFailed(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
