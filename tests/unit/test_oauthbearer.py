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
