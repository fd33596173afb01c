"""The console's guard against cross-site requests: a token per login and the origin check.

Every state-changing request is a POST (a GET never changes anything) and must carry both:

- the header ``X-CSRF-Token`` with the token of its login, which the page reads from
  ``/api/session`` (a page of another site cannot read it: no CORS header is ever sent). The
  token is an HMAC, under a key drawn at each start of the broker, of the request's
  Authorization header (empty without a login): another login, or a restart, means another
  token;
- an ``Origin`` header (or, without one, a ``Referer``) naming this very server (its host and
  port, as the request's ``Host`` header says).

A request missing either is refused (403) before anything is read or done.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from urllib.parse import urlsplit

TOKEN_HEADER = "x-csrf-token"


class Csrf:
    def __init__(self) -> None:
        self._key = secrets.token_bytes(32)

    def token(self, authorization: str | None) -> str:
        """The token of the login that sent ``authorization``."""
        message = (authorization or "").encode("utf-8", "replace")
        return hmac.new(self._key, message, hashlib.sha256).hexdigest()

    def refusal(self, authorization: str | None, headers: dict[str, str]) -> str | None:
        """Why a POST with these headers is refused; None if it passes."""
        given = headers.get(TOKEN_HEADER, "")
        if not given or not hmac.compare_digest(given, self.token(authorization)):
            return "missing or wrong X-CSRF-Token (read it from /api/session)"
        host = headers.get("host", "")
        source = headers.get("origin") or headers.get("referer") or ""
        if not host or not source:
            return "an Origin or Referer header is required"
        try:
            netloc = urlsplit(source).netloc
        except ValueError:
            netloc = ""
        if netloc.lower() != host.lower():
            return f"cross-origin request refused ({source!r} is not this server)"
        return None
