"""OffsetFetch v0-v7 read and answered by hand: requests straight from the frame, answers straight
from the coordinator's values.

Monitoring tools poll the committed offsets of every group over and over; building a kio entity
per partition just to serialise it costs more than the lookup itself. This writes the whole
response frame from ``(name, ((partition, offset, leader_epoch, metadata, error), ...))``
tuples. Wire layout by version: v0/v1 topics only; v2 adds the top-level error; v3 the throttle
time; v5 each partition's leader epoch; v6 is flexible (compact lengths, tagged fields,
response header v1). v8+ (several groups per request) stays with the generic encoder.

:func:`decode_offset_fetch_request` reads the usual request the same way (short names, no tagged
fields); any other frame, malformed ones included, is left to the generic decoder.
:func:`request_body` is the part of such a frame after its header, what the broker keeps a
remembered answer under.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from .framing import Frame
from .headers import write_uvarint

FetchedPartition = tuple[int, int, int, "str | None", int]
"""(partition, committed offset, committed leader epoch, metadata, error code)."""

MAX_VERSION = 7

Wanted = tuple[tuple[str, tuple[int, ...]], ...] | None
"""The partitions a request names by topic; None for all of the group's."""

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_HEAD = struct.Struct(">ii")  # frame size, correlation id
# A partition with empty metadata in one call: v0-v4, v5, v6+ (compact "" is the byte 1, then
# the error code and an empty tagged-field section).
_EMPTY_V0 = struct.Struct(">iqhh")
_EMPTY_V5 = struct.Struct(">iqihh")
_EMPTY_V6 = struct.Struct(">iqiBhB")
# The same, split around non-empty metadata.
_PART_V0 = struct.Struct(">iq")
_PART_V5 = struct.Struct(">iqi")


def _partition(version: int, p: FetchedPartition) -> bytes:
    partition, offset, epoch, metadata, error = p
    if not metadata:  # "" (None too: the broker answers "" for no metadata, in every version)
        if version >= 6:
            return _EMPTY_V6.pack(partition, offset, epoch, 1, error, 0)
        if version >= 5:
            return _EMPTY_V5.pack(partition, offset, epoch, 0, error)
        return _EMPTY_V0.pack(partition, offset, 0, error)
    raw = metadata.encode("utf-8")
    if version >= 6:
        return b"".join(
            (_PART_V5.pack(partition, offset, epoch), write_uvarint(len(raw) + 1), raw, _I16.pack(error), b"\x00")
        )
    head = _PART_V5.pack(partition, offset, epoch) if version >= 5 else _PART_V0.pack(partition, offset)
    return b"".join((head, _I16.pack(len(raw)), raw, _I16.pack(error)))


def encode_offset_fetch_response(
    version: int,
    correlation_id: int,
    error: int,
    topics: Sequence[tuple[str, Sequence[FetchedPartition]]],
) -> bytes:
    """The whole response frame (size prefix included) of OffsetFetch ``version`` (0-7).

    ``error`` is the group-level error: written as such from v2 on; for v0/v1, which have no
    such field, the caller repeats it on the partitions (as Kafka does)."""
    if not 0 <= version <= MAX_VERSION:
        raise ValueError(f"OffsetFetch v{version} is not encoded here")
    flexible = version >= 6
    parts: list[bytes] = [b""]  # [0]: the frame head, once the size is known
    if flexible:
        parts.append(b"\x00")  # response header v1: no tagged fields
    if version >= 3:
        parts.append(b"\x00\x00\x00\x00")  # throttle time 0
    parts.append(write_uvarint(len(topics) + 1) if flexible else _I32.pack(len(topics)))
    for name, partitions in topics:
        raw = name.encode("utf-8")
        if flexible:
            parts.append(write_uvarint(len(raw) + 1))
            parts.append(raw)
            parts.append(write_uvarint(len(partitions) + 1))
        else:
            parts.append(_I16.pack(len(raw)))
            parts.append(raw)
            parts.append(_I32.pack(len(partitions)))
        for p in partitions:
            if not p[3] and flexible:  # the usual partition, in one call
                parts.append(_EMPTY_V6.pack(p[0], p[1], p[2], 1, p[4], 0))
            else:
                parts.append(_partition(version, p))
        if flexible:
            parts.append(b"\x00")
    if version >= 2:
        parts.append(_I16.pack(error))
    if flexible:
        parts.append(b"\x00")
    size = 4 + sum(map(len, parts))
    parts[0] = _HEAD.pack(size, correlation_id)
    return b"".join(parts)


class _Unusual(Exception):
    """Not the usual request frame: the generic decoder reads it."""


def _string(frame: bytes, pos: int, flexible: bool) -> tuple[str, int]:
    """A non-null string at ``pos`` (flexible: compact, one length byte) and where it ends."""
    if flexible:
        size = frame[pos] - 1
        pos += 1
        if not 0 <= size < 0x7F:
            raise _Unusual
    else:
        size = (frame[pos] << 8) | frame[pos + 1]
        pos += 2
        if size >= 0x8000:
            raise _Unusual
    return frame[pos : pos + size].decode(), pos + size


def _count(frame: bytes, pos: int, flexible: bool) -> tuple[int, int]:
    """An array's length at ``pos`` (-1: null), under 127 (more: kio and its element limit),
    and where its elements start."""
    if flexible:
        n = frame[pos] - 1
        pos += 1
    else:
        n = _I32.unpack_from(frame, pos)[0]
        pos += 4
    if n >= 0x7F:
        raise _Unusual
    return n, pos


def _no_tags(frame: bytes, pos: int) -> int:
    """Past an empty tagged-field section at ``pos``."""
    if frame[pos]:
        raise _Unusual
    return pos + 1


def _body_start(frame: bytes, flexible: bool) -> int:
    """Where the request's body starts: past the header's client id (and, flexible, its empty
    tagged-field section). IndexError or _Unusual for any other header."""
    size = (frame[8] << 8) | frame[9]  # the client id, skipped
    if size == 0xFFFF:
        size = 0
    elif size >= 0x8000:
        raise _Unusual
    pos = 10 + size
    if flexible:
        pos = _no_tags(frame, pos)  # the request header's
    elif pos > len(frame):
        raise IndexError
    return pos


def request_body(frame: Frame, version: int) -> bytes | None:
    """The bytes after the header of an OffsetFetch v0-v7 request frame with the usual header
    (what :func:`decode_offset_fetch_request` reads past it); None for any other frame. Two
    requests of one version with the same body ask the same question, whoever sends them."""
    if not isinstance(frame, bytes) or not 0 <= version <= MAX_VERSION:
        return None
    try:
        return frame[_body_start(frame, version >= 6) :]
    except (IndexError, _Unusual):
        return None


def decode_offset_fetch_request(frame: Frame, version: int) -> tuple[str, Wanted, bool] | None:
    """(group id, wanted partitions, require stable) of a whole OffsetFetch v0-v7 request frame
    (size prefix excluded) with short strings and no tagged fields; None for any other frame (the
    generic decoder reads it, and refuses what is malformed)."""
    if not isinstance(frame, bytes) or not 0 <= version <= MAX_VERSION:
        return None
    flexible = version >= 6
    try:
        pos = _body_start(frame, flexible)
        group_id, pos = _string(frame, pos, flexible)
        count, pos = _count(frame, pos, flexible)
        wanted: Wanted = None
        if count >= 0:
            topics: list[tuple[str, tuple[int, ...]]] = []
            for _ in range(count):
                name, pos = _string(frame, pos, flexible)
                n, pos = _count(frame, pos, flexible)
                if n < 0 or pos + 4 * n > len(frame):
                    return None
                topics.append((name, struct.unpack_from(f">{n}i", frame, pos)))
                pos += 4 * n
                if flexible:
                    pos = _no_tags(frame, pos)  # the topic's
            wanted = tuple(topics)
        elif version < 2:
            return None  # null topics only from v2 on
        require_stable = False
        if version >= 7:
            stable = frame[pos]
            if stable > 1:
                return None
            require_stable = stable == 1
            pos += 1
        if flexible:
            pos = _no_tags(frame, pos)  # the request's
        if pos != len(frame):
            return None
    except (IndexError, UnicodeDecodeError, struct.error, _Unusual):
        return None
    return group_id, wanted, require_stable
