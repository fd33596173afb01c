"""Steady ConsumerGroupHeartbeats (KIP-848), read and answered straight from the frame.

Between rebalances a member's heartbeat carries its group id, member id and epoch and nothing else:
every optional field is null and the rebalance timeout is -1, meaning "unchanged". That frame
(v0 or v1, short ids, no tagged fields) is recognised here byte by byte, and its usual answer
(no error, same epoch, no assignment) written as a whole response frame. Anything else, including
anything malformed, is not recognised: the generic decoder then reads it, and refuses what is bad.
"""

from __future__ import annotations

import struct

from .framing import Frame

_I32 = struct.Struct(">i")
# The answer around the member id: frame size, correlation id, empty header tags, throttle time
# 0, error code 0, null error message, the member id's length + 1; then epoch and interval.
_ANSWER_HEAD = struct.Struct(">iibihbB")
_ANSWER_TAIL = struct.Struct(">ii")
_NO_ASSIGNMENT = b"\xff\x00"  # a null assignment, no tagged fields

# After the member epoch: instance id, rack id: null; rebalance timeout -1; subscribed names:
# null; [v1: regex: null]; server assignor, owned partitions: null; no tagged fields.
_STEADY_TAIL_V0 = b"\x00\x00\xff\xff\xff\xff\x00\x00\x00\x00"
_STEADY_TAIL_V1 = b"\x00\x00\xff\xff\xff\xff\x00\x00\x00\x00\x00"

SteadyHeartbeat = tuple[str, str, str, int]
"""(client id, group id, member id, member epoch)."""


def decode_steady_heartbeat(frame: Frame, version: int) -> SteadyHeartbeat | None:
    """The fields of a steady heartbeat's whole request frame (size prefix excluded), or None if
    the frame is any other (the generic path then decodes it)."""
    if not isinstance(frame, bytes):  # a frame handed over in the decoder's buffer: a big one
        return None
    if version == 1:
        tail = _STEADY_TAIL_V1
    elif version == 0:
        tail = _STEADY_TAIL_V0
    else:
        return None
    try:
        size = (frame[8] << 8) | frame[9]
        if size == 0xFFFF:  # a null client id
            client_id, pos = "", 10
        elif size < 0x8000:
            client_id, pos = frame[10 : 10 + size].decode(), 10 + size
        else:
            return None
        if frame[pos]:  # the request header's tagged fields
            return None
        size = frame[pos + 1] - 1  # compact strings: length + 1, one byte under 128
        if not 0 < size < 0x7F:
            return None
        pos += 2
        group_id = frame[pos : pos + size].decode()
        pos += size
        size = frame[pos] - 1
        if not 0 < size < 0x7F:
            return None
        member_id = frame[pos + 1 : pos + 1 + size].decode()
        pos += 1 + size
        if len(frame) != pos + 4 + len(tail) or not frame.endswith(tail):
            return None
        epoch: int = _I32.unpack_from(frame, pos)[0]
    except (IndexError, UnicodeDecodeError):
        return None
    return client_id, group_id, member_id, epoch


def steady_answer(correlation_id: int, member_id: str, member_epoch: int, heartbeat_interval_ms: int) -> bytes:
    """The whole response frame of an answered steady heartbeat (v0 and v1 read alike): no
    throttle, no error, no message, the member's id and epoch, no assignment (unchanged)."""
    member = member_id.encode()
    size = len(member)
    if size >= 0x7F:
        raise ValueError("member id too long for a one-byte length")
    return b"".join(
        (
            _ANSWER_HEAD.pack(size + 23, correlation_id, 0, 0, 0, 0, size + 1),
            member,
            _ANSWER_TAIL.pack(member_epoch, heartbeat_interval_ms),
            _NO_ASSIGNMENT,
        )
    )
