"""SASL/OAUTHBEARER with unsecured tokens, for development (what Kafka's default handler does).

The client's first message (RFC 7628) is a GS2 header and key/value pairs separated by ``0x01``:
``n,,\\x01auth=Bearer <token>\\x01\\x01``. The token is an *unsecured* JWS (RFC 7515 with
``"alg": "none"``: ``base64url(header).base64url(claims).``): nobody signed it, so anyone can
claim any name. That is Kafka's behaviour when OAUTHBEARER is enabled without a validator of
signed tokens, and it is only meant for development; kcoord offers the mechanism only when it is
listed in ``sasl.enabled.mechanisms`` (it is not by default).

Checks, as Kafka's unsecured validator makes them: the header's ``alg`` is ``none``; the ``sub``
claim (the principal's name) is a non-empty string; ``exp`` (seconds, may be fractional) is a
number in the future and ``iat``, if present, a number not after ``exp``. A token that fails gets
the RFC 7628 error challenge ``{"status": "invalid_token"}``; the client's ``0x01`` that follows
ends the login as failed.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

MECHANISM = "OAUTHBEARER"
ERROR_CHALLENGE = b'{"status":"invalid_token"}'


class InvalidToken(ValueError):
    pass


def _b64url_json(part: str) -> Any:
    try:
        raw = base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))
        return json.loads(raw)
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise InvalidToken("a token part is not base64url-encoded JSON") from None


def bearer_token(message: bytes) -> str:
    """The token of a client's first OAUTHBEARER message."""
    try:
        text = message.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidToken("the message is not UTF-8") from None
    gs2, sep, rest = text.partition("\x01")
    if not sep or not gs2.startswith(("n,", "y,")):
        raise InvalidToken("no GS2 header")
    for pair in rest.split("\x01"):
        key, eq, value = pair.partition("=")
        if eq and key == "auth":
            scheme, _, token = value.partition(" ")
            if scheme.lower() != "bearer" or not token.strip():
                raise InvalidToken("auth is not a bearer token")
            return token.strip()
    raise InvalidToken("no auth=Bearer pair")


def unsecured_subject(token: str, now_ms: int) -> str:
    """The ``sub`` of a valid unsecured JWS; InvalidToken says why not."""
    parts = token.split(".")
    if len(parts) != 3 or parts[2]:
        raise InvalidToken("not an unsecured JWS (header.claims. with an empty signature)")
    header, claims = _b64url_json(parts[0]), _b64url_json(parts[1])
    if not isinstance(header, dict) or header.get("alg") != "none":
        raise InvalidToken('the header\'s alg is not "none"')
    if not isinstance(claims, dict):
        raise InvalidToken("the claims are not a JSON object")
    subject = claims.get("sub")
    if not isinstance(subject, str) or not subject.strip():
        raise InvalidToken("no sub claim")
    exp = claims.get("exp")
    if isinstance(exp, bool) or not isinstance(exp, int | float):
        raise InvalidToken("no numeric exp claim")
    if exp * 1000 <= now_ms:
        raise InvalidToken("the token has expired")
    iat = claims.get("iat")
    if iat is not None and (isinstance(iat, bool) or not isinstance(iat, int | float) or iat > exp):
        raise InvalidToken("iat is not a number before exp")
    return subject
