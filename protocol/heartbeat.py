"""Heartbeat requests decoded straight from the frame.

Heartbeats are the most frequent request a coordinator gets (every member, every few seconds),
and the answer depends on four fields only. The usual v4 frame (flexible: compact strings,
tagged fields) is read here byte by byte, without a header object or a kio entity; every other
frame (v0-v3, tagged fields, long strings, a group instance id, anything malformed) goes through
the generic decoder, so malformed input raises :class:`protocol.codec.DecodeError` as on the
generic path.
"""

from __future__ import annotations

import struct

from .apis import ApiKey
from .codec import DecodeError, decode_request_frame
from .framing import Frame
from .guard import DEFAULT_MAX_ELEMENTS

_I32 = struct.Struct(">i")

HeartbeatFields = tuple[str, int, str, str | None]
"""(group id, generation id, member id, group instance id)."""


def decode_heartbeat(
    frame: Frame, version: int, max_elements: int = DEFAULT_MAX_ELEMENTS
) -> HeartbeatFields:
    """The fields of a whole Heartbeat request frame (header included, size prefix excluded)."""
    if version >= 4 and isinstance(frame, bytes):  # (a bytearray frame is a big one)
        # The usual v4 frame: no tagged fields, strings under 127 bytes (one-byte lengths), no
        # group instance id. Anything else, or anything out of bounds, takes the generic path.
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
    req = decode_request_frame(ApiKey.HEARTBEAT, version, frame, max_elements)
    if req.group_id is None or req.member_id is None:
        raise DecodeError("null group id or member id")
    return req.group_id, req.generation_id, req.member_id, getattr(req, "group_instance_id", None)
