"""Topic names: Kafka's rules for a legal name, how a name from a request is shown in messages,
and the internal topics (``__consumer_offsets``, ``__transaction_state``), which the registry holds
but only the coordinators write to."""

from __future__ import annotations

import re

OFFSETS_TOPIC = "__consumer_offsets"
TRANSACTION_STATE_TOPIC = "__transaction_state"
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC})
_LEGAL = re.compile(r"^[a-zA-Z0-9._-]+$")
MAX_NAME_LENGTH = 249
_QUOTED_NAME_LENGTH = 64


def quoted(name: str) -> str:
    """A topic name for an error message or a log line: quoted, and cut if it is long (names
    come from requests: never echo unbounded input)."""
    if len(name) <= _QUOTED_NAME_LENGTH:
        return repr(name)
    return repr(name[:_QUOTED_NAME_LENGTH]) + f"... ({len(name)} characters)"


def topic_name_problem(name: str) -> str | None:
    """Why ``name`` is not a legal topic name, or None if it is (Kafka's rules)."""
    if not name:
        return "topic name is empty"
    if name in (".", ".."):
        return f"topic name {name!r} is not allowed"
    if len(name) > MAX_NAME_LENGTH:
        return f"topic name is longer than {MAX_NAME_LENGTH} characters"
    if not _LEGAL.match(name):
        return (
            f"topic name {quoted(name)} has characters other than ASCII letters, digits, '.',"
            " '_', '-'"
        )
    return None
