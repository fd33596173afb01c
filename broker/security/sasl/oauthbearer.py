"""SASL/OAUTHBEARER with unsecured tokens, for development (what Kafka's default handler does).

The client's first message (RFC 7628) is a GS2 header and key/value pairs separated by ``0x01``:
``n,,\\x01auth=Bearer <token>\\x01\\x01``. The token is an *unsecured* JWS (RFC 7515 with
``"alg": "none"``: ``base64url(header).base64url(claims).``): nobody signed it, so anyone can
claim any name. That is Kafka's behaviour when OAUTHBEARER is enabled without a validator of
signed tokens, and it is only meant for development; kcoord offers the mechanism only when it is
listed in ``sasl.enabled.mechanisms`` (it is not by default).

Checks, as Kafka's unsecured validator makes them: the header's ``alg`` is ``none``; the ``sub``
claim (the principal's name) is a non-empty string; ``exp`` (seconds, may be fractional) is a
finite number in the future and ``iat``, if present, a finite number not after ``exp``. A token
that fails gets the RFC 7628 error challenge ``{"status": "invalid_token"}``; the client's
``0x01`` that follows ends the login as failed.

The token comes from a client nobody has authenticated yet, so its parsing is bounded: at most
:data:`MAX_TOKEN_CHARS` characters, JSON nested at most :data:`MAX_DEPTH` levels (counted before
the parser sees it: deeper input would exhaust its recursion), and strict JSON, without the
``NaN`` and ``Infinity`` that Python's parser takes and Kafka's refuses. Whatever fails is an
:class:`InvalidToken` saying why.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from typing import Any

MECHANISM = "OAUTHBEARER"
ERROR_CHALLENGE = b'{"status":"invalid_token"}'
MAX_TOKEN_CHARS = 16 * 1024
"""Longer tokens are refused unread: an unsecured development token is a few hundred
characters, and this bounds the work a token not yet trusted can cost (a few ms at worst)."""
MAX_DEPTH = 32
"""How deep a token part's JSON may nest (claims are a flat object in practice)."""

_JSON_STRING = re.compile(r'"[^"]*"')
"""A JSON string once its escaped backslashes and quotes are gone (see _nests_too_deep)."""
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_ONE_KIND = str.maketrans("{}", "[]")


class InvalidToken(ValueError):
    pass


def _nests_too_deep(text: str) -> bool:
    """Whether the JSON ``text`` opens more than MAX_DEPTH arrays or objects inside each other
    (brackets inside strings do not count). Linear in the length of ``text``, and quick (string
    methods, no Python loop per character)."""
    # Without its escaped backslashes, then its escaped quotes, every quote left opens or
    # closes a string; the strings go, and the brackets left are the structure's, which one
    # kind of bracket can stand for. Each pass removes the innermost pairs, one level.
    bare = _JSON_STRING.sub("", text.replace("\\\\", "").replace('\\"', ""))
    brackets = _NOT_BRACKET.sub("", bare).translate(_ONE_KIND)
    for _ in range(MAX_DEPTH):
        inner_gone = brackets.replace("[]", "")
        if len(inner_gone) == len(brackets):
            return False  # all gone, or unbalanced (which the parser then refuses)
        brackets = inner_gone
    return "[]" in brackets


def _not_a_number(name: str) -> Any:
    """json's hook for NaN, Infinity and -Infinity, which JSON does not have."""
    raise InvalidToken(f"{name} is not a JSON number")


def _b64url_json(part: str) -> Any:
    try:
        text = base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)).decode("utf-8")
    except (binascii.Error, ValueError):  # UnicodeDecodeError is a ValueError
        raise InvalidToken("a token part is not base64url-encoded UTF-8") from None
    if _nests_too_deep(text):
        raise InvalidToken(f"a token part nests deeper than {MAX_DEPTH} levels")
    try:
        return json.loads(text, parse_constant=_not_a_number)
    except InvalidToken:
        raise
    except RecursionError:  # not expected after the depth check; refused all the same
        raise InvalidToken(f"a token part nests deeper than {MAX_DEPTH} levels") from None
    except ValueError:
        raise InvalidToken("a token part is not JSON") from None


def _seconds(claims: dict[str, Any], name: str) -> float | None:
    """The claim ``name`` as finite seconds; None if absent. JSON numbers only: a bool, a
    string, or a number too large for a float (``1e999`` parses as infinity) is refused."""
    value = claims.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidToken(f"{name} is not a number")
    try:
        seconds = float(value)
    except OverflowError:
        raise InvalidToken(f"{name} is not a finite number") from None
    if not math.isfinite(seconds):
        raise InvalidToken(f"{name} is not a finite number")
    return seconds


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
    if len(token) > MAX_TOKEN_CHARS:
        raise InvalidToken(f"the token is longer than {MAX_TOKEN_CHARS} characters")
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
    exp = _seconds(claims, "exp")
    if exp is None:
        raise InvalidToken("no exp claim")
    if exp * 1000 <= now_ms:
        raise InvalidToken("the token has expired")
    iat = _seconds(claims, "iat")
    if iat is not None and iat > exp:
        raise InvalidToken("iat is after exp")
    return subject
