"""OffsetFetch answers (v0-v7) encoded by hand, straight from the coordinator's values.

Monitoring tools poll the committed offsets of every group over and over; building a kio entity
per partition just to serialise it costs more than the lookup itself. This writes the whole
response frame from ``(name, ((partition, offset, leader_epoch, metadata, error), ...))``
tuples. Wire layout by version: v0/v1 topics only; v2 adds the top-level error; v3 the throttle
time; v5 each partition's leader epoch; v6 is flexible (compact lengths, tagged fields,
response header v1). v8+ (several groups per request) stays with the generic encoder.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

FetchedPartition = tuple[int, int, int, "str | None", int]
"""(partition, committed offset, committed leader epoch, metadata, error code)."""

MAX_VERSION = 7

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


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


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
            (_PART_V5.pack(partition, offset, epoch), _uvarint(len(raw) + 1), raw, _I16.pack(error), b"\x00")
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
    parts.append(_uvarint(len(topics) + 1) if flexible else _I32.pack(len(topics)))
    for name, partitions in topics:
        raw = name.encode("utf-8")
        if flexible:
            parts.append(_uvarint(len(raw) + 1))
            parts.append(raw)
            parts.append(_uvarint(len(partitions) + 1))
        else:
            parts.append(_I16.pack(len(raw)))
            parts.append(raw)
            parts.append(_I32.pack(len(partitions)))
        for p in partitions:
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
