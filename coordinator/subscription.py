"""The topic list of a Kafka ``consumer``-protocol subscription, parsed tolerantly.

Members of groups whose protocol type is ``consumer`` send, per protocol, metadata in
Kafka's ConsumerProtocol Subscription layout: an int16 version, then an int32 count of topic
names (each an int16 length plus UTF-8 bytes), then nullable user data (int32 length, -1 =
null); version 1 adds owned partitions, version 2 a generation id, version 3 a rack id.

The coordinator only needs the topic names: they decide which committed offsets may expire
while a group has members (J2-J4) and which ones OffsetDelete may remove. Like Kafka, this
module reads every version with the version-0 prefix (topics and user data) and ignores
whatever follows, so future versions parse too. Anything malformed yields ``None``: the
group's subscriptions are then *unknown*, which callers treat conservatively (Kafka's
``GroupMetadata.isSubscribedToTopic`` answers true for every topic in that case).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

__all__ = ["parse_subscription_topics", "subscribed_topics"]

CONSUMER_PROTOCOL_TYPE = "consumer"

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


def parse_subscription_topics(metadata: bytes) -> frozenset[str] | None:
    """The topics of one Subscription, or None if ``metadata`` cannot be parsed."""
    buf = bytes(metadata)
    pos = 0
    try:
        if len(buf) < 2:
            return None
        pos = 2  # the version: any value is read with the v0 prefix, as Kafka does
        (count,) = _I32.unpack_from(buf, pos)
        pos += 4
        if count < 0 or count > len(buf) - pos:
            return None  # the topic array is not nullable; absurd counts are garbage
        topics: set[str] = set()
        for _ in range(count):
            (n,) = _I16.unpack_from(buf, pos)
            pos += 2
            if n < 0 or pos + n > len(buf):
                return None
            topics.add(buf[pos : pos + n].decode("utf-8", errors="replace"))
            pos += n
        (user_data_len,) = _I32.unpack_from(buf, pos)
        pos += 4
        if user_data_len < -1 or (user_data_len > 0 and pos + user_data_len > len(buf)):
            return None
    except struct.error:
        return None
    return frozenset(topics)


_NO_TOPICS: frozenset[str] = frozenset()


def subscribed_topics(
    protocol_type: str | None, protocol_name: str | None, metadatas: Iterable[bytes]
) -> frozenset[str] | None:
    """Kafka's ``computeSubscribedTopics``: the union of the members' topics for the
    selected protocol of a ``consumer`` group; the empty set for a ``consumer`` group
    without members; None (unknown) for other protocol types, for a group with members but
    no selected protocol, and when any member's metadata does not parse."""
    if protocol_type != CONSUMER_PROTOCOL_TYPE:
        return None
    metadatas = list(metadatas)
    if not metadatas:
        return _NO_TOPICS
    if protocol_name is None:
        return None
    union: set[str] = set()
    for metadata in metadatas:
        topics = parse_subscription_topics(metadata)
        if topics is None:
            return None
        union.update(topics)
    return shared_topic_set(frozenset(union))


_SHARED_SETS: dict[frozenset[str], frozenset[str]] = {}
_SHARED_SETS_MAX = 65536


def shared_topic_set(topics: frozenset[str]) -> frozenset[str]:
    """One object per distinct topic set: thousands of groups usually subscribe to a handful
    of the same sets, and each group keeps its set for as long as it lives."""
    shared = _SHARED_SETS.get(topics)
    if shared is None:
        if len(_SHARED_SETS) >= _SHARED_SETS_MAX:
            return topics
        shared = _SHARED_SETS[topics] = topics
    return shared
