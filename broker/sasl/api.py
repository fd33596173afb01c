"""SaslHandshake (v1) and SaslAuthenticate (v0-v2) on a SASL listener.

A connection of a SASL listener starts unauthenticated: until SaslAuthenticate succeeds it may
only send ApiVersions, SaslHandshake and SaslAuthenticate (the connection refuses anything
else). SaslHandshake picks one of ``sasl.enabled.mechanisms``; SaslAuthenticate carries the
mechanism's tokens (KIP-152 framing). PLAIN is checked against the user's stored SCRAM
credential (the PBKDF2 work in a worker thread); SCRAM runs :class:`ScramServer`. A failure
answers SASL_AUTHENTICATION_FAILED with a message, then closes the connection after
``connection.failed.authentication.delay.ms``. Success makes ``User:<name>`` the principal.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from protocol.errors import ErrorCode

from .credentials import CredentialStore
from .scram import MECHANISMS, ScramError, ScramServer

if TYPE_CHECKING:
    from ..config import Config
    from ..connection import RequestContext

log = logging.getLogger("kcoord.sasl")

PLAIN = "PLAIN"


class SaslApi:
    def __init__(
        self, config: Config, store: CredentialStore, on_failure: Callable[[str], None]
    ) -> None:
        self.store = store
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
        return ctx.respond(error_code=ErrorCode.none, mechanisms=list(self.mechanisms))

    def authenticate(self, ctx: RequestContext, req: Any) -> Any:
        conn = ctx.connection
        mechanism = conn.sasl_mechanism
        if conn.authenticated or mechanism is None:
            return self._failed(ctx, ErrorCode.illegal_sasl_state, "SaslAuthenticate out of turn")
        token = bytes(req.auth_bytes)
        if mechanism == PLAIN:
            return self._plain(ctx, token)
        exchange = conn.sasl_exchange
        assert isinstance(exchange, ScramServer)
        try:
            answer = exchange.respond(token)
        except ScramError as e:
            return self._failed(ctx, ErrorCode.sasl_authentication_failed, self._why(mechanism, e))
        if exchange.done:
            self._succeeded(ctx, exchange.user or "")
        return ctx.respond(error_code=ErrorCode.none, error_message=None, auth_bytes=answer, session_lifetime=0)

    async def _plain(self, ctx: RequestContext, token: bytes) -> Any:
        parts = token.split(b"\0")
        if len(parts) != 3:
            return self._failed(ctx, ErrorCode.sasl_authentication_failed, "malformed SASL/PLAIN token")
        authzid, user_bytes, password_bytes = parts
        try:
            user, password = user_bytes.decode("utf-8"), password_bytes.decode("utf-8")
        except UnicodeDecodeError:
            return self._failed(ctx, ErrorCode.sasl_authentication_failed, "malformed SASL/PLAIN token")
        if authzid and authzid != user_bytes:
            return self._failed(ctx, ErrorCode.sasl_authentication_failed, "authorization id must be the user")
        if not await asyncio.to_thread(self.store.password_ok, user, password):
            return self._failed(
                ctx,
                ErrorCode.sasl_authentication_failed,
                "Authentication failed: Invalid username or password",
            )
        self._succeeded(ctx, user)
        return ctx.respond(error_code=ErrorCode.none, error_message=None, auth_bytes=b"", session_lifetime=0)

    @staticmethod
    def _why(mechanism: str, error: ScramError) -> str:
        log.info("SASL %s authentication failed: %s", mechanism, error)
        return (
            "Authentication failed during authentication due to invalid credentials with SASL"
            f" mechanism {mechanism}"
        )

    def _succeeded(self, ctx: RequestContext, user: str) -> None:
        conn = ctx.connection
        conn.authenticated = True
        conn.principal = f"User:{user}"
        conn.sasl_exchange = None

    def _failed(self, ctx: RequestContext, code: int, message: str) -> Any:
        conn = ctx.connection
        log.info("closing %s: SASL authentication failed (%s)", conn.peer, message)
        self._on_failure("authentication")
        conn.close_later(self.failure_delay_s)
        return ctx.respond(error_code=code, error_message=message, auth_bytes=b"", session_lifetime=0)
