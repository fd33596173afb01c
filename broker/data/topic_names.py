"""Topic names: Kafka's rules for a legal name, how a name from a request is shown in messages,
and the internal topics (``__consumer_offsets``, ``__transaction_state``, ``__share_group_state``),
which the registry holds but only the coordinators write to, with the cleanup policy each keeps,
and which topics' logs are journaled."""

from __future__ import annotations

import re

OFFSETS_TOPIC = "__consumer_offsets"
TRANSACTION_STATE_TOPIC = "__transaction_state"
SHARE_GROUP_STATE_TOPIC = "__share_group_state"
INTERNAL_CLEANUP_POLICY = {
    OFFSETS_TOPIC: "compact",
    TRANSACTION_STATE_TOPIC: "compact",
    # Its updates are deltas: compaction would keep one per key and lose state. Its coordinator
    # prunes it below the oldest snapshot still needed instead (broker/share/state_runtime.py).
    SHARE_GROUP_STATE_TOPIC: "delete",
}
"""The cleanup.policy of each internal topic, which an alteration may not change."""
INTERNAL_TOPICS = frozenset(INTERNAL_CLEANUP_POLICY)
JOURNALED_TOPICS = frozenset({OFFSETS_TOPIC})
"""Topics whose logs share their fsyncs through a journal (``LogSpec.journaled``): the group
coordinator's fifty shards each write small durable batches all the time."""
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
