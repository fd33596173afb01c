"""SASL/OAUTHBEARER unsecured tokens: the client message and the token checks."""

from __future__ import annotations

import base64
import json

import pytest

from kcoord.broker.security.sasl.oauthbearer import InvalidToken, bearer_token, unsecured_subject

NOW_MS = 1_800_000_000_000


def jws(claims: dict[str, object], header: dict[str, object] | None = None, signature: str = "") -> str:
    def part(value: dict[str, object]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")

    return f"{part(header or {'alg': 'none'})}.{part(claims)}.{signature}"


def test_a_valid_token_names_its_subject() -> None:
    token = jws({"sub": "alice", "iat": NOW_MS / 1000 - 5, "exp": NOW_MS / 1000 + 60})
    message = f"n,,\x01auth=Bearer {token}\x01\x01".encode()
    assert unsecured_subject(bearer_token(message), NOW_MS) == "alice"


@pytest.mark.parametrize(
    "token",
    [
        jws({"sub": "alice", "exp": NOW_MS / 1000 + 60}, header={"alg": "HS256"}),
        jws({"sub": "alice", "exp": NOW_MS / 1000 + 60}, signature="c2ln"),
        jws({"exp": NOW_MS / 1000 + 60}),
        jws({"sub": "", "exp": NOW_MS / 1000 + 60}),
        jws({"sub": "alice"}),
        jws({"sub": "alice", "exp": NOW_MS / 1000 - 1}),
        jws({"sub": "alice", "exp": "tomorrow"}),
        jws({"sub": "alice", "exp": NOW_MS / 1000 + 60, "iat": NOW_MS / 1000 + 120}),
        "not-a-jws",
        "!!!.???.",
    ],
)
def test_bad_tokens_are_refused(token: str) -> None:
    with pytest.raises(InvalidToken):
        unsecured_subject(token, NOW_MS)


@pytest.mark.parametrize(
    "message",
    [b"", b"\xff\xfe", b"n,,\x01\x01", b"x,,\x01auth=Bearer t\x01\x01", b"n,,\x01auth=Basic t\x01\x01"],
)
def test_bad_messages_are_refused(message: bytes) -> None:
    with pytest.raises(InvalidToken):
        bearer_token(message)


_UNSECURED = base64.urlsafe_b64encode(b'{"alg":"none"}').decode().rstrip("=")


def claims_token(text: str) -> str:
    """An unsecured JWS whose claims are this JSON text, as is."""
    return f"{_UNSECURED}.{base64.urlsafe_b64encode(text.encode()).decode().rstrip('=')}."


EXP = '"exp":1900000000'


def test_claims_nested_a_few_levels_are_fine() -> None:
    text = '{"sub":"alice",' + EXP + ',"roles":{"a":[{"b":[1,"[{"]}]}}'
    assert unsecured_subject(claims_token(text), NOW_MS) == "alice"


@pytest.mark.parametrize(
    ("text", "why"),
    [
        # Deep enough to exhaust json's recursion: refused before it is parsed.
        ('{"sub":"alice",' + EXP + ',"x":' + "[" * 5000 + "]" * 5000 + "}", "nest"),
        # Unclosed, so never balanced: json's recursion gives out first, and is caught.
        ('{"sub":"alice",' + EXP + ',"x":' + "[" * 3000, "nest"),
        ('{"sub":"alice",' + EXP + ',"x":' + "{" * 100, "not JSON"),
        # Too long to parse at all (the size is checked first).
        ('{"sub":"alice",' + EXP + ',"x":"' + "a" * 100_000 + '"}', "longer"),
        # JSON has no NaN or Infinity; 1e999 overflows to an infinite float.
        ('{"sub":"alice","exp":NaN}', "NaN"),
        ('{"sub":"alice","exp":Infinity}', "Infinity"),
        ('{"sub":"alice","exp":-Infinity}', "Infinity"),
        ('{"sub":"alice","exp":1e999}', "exp"),
        ('{"sub":"alice","exp":' + "9" * 400 + "}", "exp"),
        ('{"sub":"alice","exp":true}', "exp"),
        ('{"sub":"alice","exp":null}', "exp"),
        ('{"sub":"alice",' + EXP + ',"iat":1e999}', "iat"),
        ('{"sub":"alice",' + EXP + ',"iat":"now"}', "iat"),
        ('{"sub":"alice",' + EXP + ',"iat":NaN}', "NaN"),
    ],
)
def test_hostile_claims_are_refused_with_a_reason(text: str, why: str) -> None:
    with pytest.raises(InvalidToken, match=why):
        unsecured_subject(claims_token(text), NOW_MS)


def test_a_huge_token_is_refused_before_it_is_decoded() -> None:
    with pytest.raises(InvalidToken, match="longer"):
        unsecured_subject("A" * 10_000_000 + "..", NOW_MS)
