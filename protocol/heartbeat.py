"""Heartbeat requests decoded by hand, straight from the frame, and their answers framed.

Heartbeats are the most frequent request a coordinator gets (every member, every few seconds),
and the answer depends on four fields only. Decoding them here, without building a header object
or a kio entity, keeps the broker's per-heartbeat work to a few microseconds. Versions 0-4: v3 adds
the group instance id, v4 is flexible (compact strings, tagged fields, header v2 / response
header v1). Anything malformed raises :class:`protocol.codec.DecodeError`, like the generic path.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from .codec import DecodeError
from .headers import HeaderError, read_uvarint, skip_tagged_fields

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_SIZE_AND_CORRELATION = struct.Struct(">ii")

HeartbeatFields = tuple[str, int, str, str | None]
"""(group id, generation id, member id, group instance id)."""


def _uvarint(frame: bytes, pos: int) -> tuple[int, int]:
    try:
        return read_uvarint(frame, pos)
    except HeaderError as e:
        raise DecodeError(str(e)) from e


def _skip_tagged_fields(frame: bytes, pos: int) -> int:
    try:
        return skip_tagged_fields(frame, pos)
    except HeaderError as e:
        raise DecodeError(str(e)) from e


def _text(frame: bytes, start: int, end: int) -> str:
    if end > len(frame):
        raise DecodeError("string runs past the frame")
    try:
        return frame[start:end].decode("utf-8")
    except UnicodeDecodeError as e:
        raise DecodeError("string is not UTF-8") from e


def _string(frame: bytes, pos: int) -> tuple[str | None, int]:
    """A (nullable) STRING: int16 length, -1 for null."""
    try:
        (n,) = _I16.unpack_from(frame, pos)
    except struct.error as e:
        raise DecodeError("truncated string length") from e
    pos += 2
    if n < 0:
        if n != -1:
            raise DecodeError(f"bad string length {n}")
        return None, pos
    return _text(frame, pos, pos + n), pos + n


def _compact_string(frame: bytes, pos: int) -> tuple[str | None, int]:
    """A (nullable) COMPACT_STRING: uvarint length + 1, 0 for null."""
    n, pos = _uvarint(frame, pos)
    if n == 0:
        return None, pos
    n -= 1
    return _text(frame, pos, pos + n), pos + n


def decode_heartbeat(frame: bytes, version: int) -> HeartbeatFields:
    """The fields of a whole Heartbeat request frame (header included, size prefix excluded)."""
    if version >= 4:
        # The usual v4 frame: no tagged fields, strings under 127 bytes (one-byte lengths), no
        # group instance id. Anything else, or anything out of bounds, takes the careful path.
        try:
            pos = 10 + ((frame[8] << 8) | frame[9])
            if frame[8] < 0x80 and not frame[pos]:
                n = frame[pos + 1] - 1
                if 0 <= n < 0x7F:
                    end = pos + 2 + n
                    group_id = frame[pos + 2 : end].decode()
                    n = frame[end + 4] - 1
                    if 0 <= n < 0x7F:
                        pos = end + 5 + n
                        if not frame[pos] and not frame[pos + 1]:
                            generation_id = _I32.unpack_from(frame, end)[0]
                            return group_id, generation_id, frame[end + 5 : pos].decode(), None
        except (IndexError, UnicodeDecodeError):
            pass
    return _decode_carefully(frame, version)


def _decode_carefully(frame: bytes, version: int) -> HeartbeatFields:
    flexible = version >= 4
    try:
        (client_len,) = _I16.unpack_from(frame, 8)
    except struct.error as e:
        raise DecodeError("frame shorter than a request header") from e
    pos = 10 + max(client_len, 0)
    if client_len < -1 or pos > len(frame):
        raise DecodeError("bad client id in the request header")
    read = _compact_string if flexible else _string
    if flexible:
        pos = _skip_tagged_fields(frame, pos)
    group_id, pos = read(frame, pos)
    try:
        (generation_id,) = _I32.unpack_from(frame, pos)
    except struct.error as e:
        raise DecodeError("truncated generation id") from e
    member_id, pos = read(frame, pos + 4)
    instance_id = None
    if version >= 3:
        instance_id, pos = read(frame, pos)
    if flexible:
        pos = _skip_tagged_fields(frame, pos)
    if group_id is None or member_id is None:
        raise DecodeError("null group id or member id")
    return group_id, generation_id, member_id, instance_id


class HeartbeatAnswers:
    """Whole Heartbeat response frames, from bodies encoded once per (version, error)."""

    __slots__ = ("_encode_body", "_tails")

    def __init__(self, encode_body: Callable[[int, int], bytes]) -> None:
        self._encode_body = encode_body
        self._tails: dict[tuple[int, int], tuple[int, bytes]] = {}

    def frame(self, version: int, error: int, correlation_id: int) -> bytes:
        key = (version, error)
        tail = self._tails.get(key)
        if tail is None:
            # Response header v1 (one empty tagged-field byte) for the flexible version.
            rest = (b"\x00" if version >= 4 else b"") + self._encode_body(version, error)
            tail = self._tails[key] = (4 + len(rest), rest)
        size, rest = tail
        return _SIZE_AND_CORRELATION.pack(size, correlation_id) + rest

