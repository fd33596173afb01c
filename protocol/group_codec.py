"""JoinGroup and SyncGroup read and written by hand, every version (JoinGroup v0-v9, SyncGroup
v0-v5).

Creating a group takes two or three JoinGroups and a SyncGroup, and a rebalance one of each per
member: building a kio entity for each request (with a ``timedelta`` per timeout) and another for
its answer costs more than the coordinator's own work. :func:`decode_join_group` and
:func:`decode_sync_group` read the usual request straight from the frame, header included;
anything they do not expect (a tagged field, a null where a value belongs, a length out of
bounds, more array entries than allowed, text that is not UTF-8) makes them answer None, and the
generic decoder then reads the frame, refusing what is malformed as it always did. The answers
are written by :func:`join_group_body` and :func:`sync_group_body` for the generic path and the
direct one alike, byte for byte what kio writes (tests/unit/test_group_codec.py compares them).

Wire layout by version. JoinGroup request: v1 adds the rebalance timeout, v5 the group instance
id, v6 is flexible (compact lengths, tagged fields, request header v2), v8 adds the reason.
Answer: v2 adds the throttle time, v5 each member's instance id, v7 the protocol type and a
nullable protocol name, v9 ``skip_assignment``. SyncGroup request: v3 adds the instance id, v4
is flexible, v5 adds the protocol type and name (also in the answer, whose v1 adds the throttle
time).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from .framing import Frame
from .headers import write_uvarint

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_ERROR_GENERATION = struct.Struct(">hi")
_THROTTLE_ERROR_GENERATION = struct.Struct(">ihi")

JoinGroupFields = tuple[
    str, str, int, int, str, "str | None", str, tuple[tuple[str, bytes], ...], "str | None"
]
"""(client id, group id, session timeout ms, rebalance timeout ms, member id, group instance id,
protocol type, protocols as (name, metadata), reason) of a JoinGroup request."""

SyncGroupFields = tuple[
    str, int, str, "str | None", "str | None", "str | None", tuple[tuple[str, bytes], ...]
]
"""(group id, generation id, member id, group instance id, protocol type, protocol name,
assignments as (member id, assignment)) of a SyncGroup request."""

JoinMemberFields = tuple[str, "str | None", bytes]
"""(member id, group instance id, metadata): a member as a JoinGroup answer lists it."""


class _Unusual(Exception):
    """Not a request read here: the generic decoder reads it."""


class _Reader:
    """A position in a request frame, and the frame's encoding (flexible or not)."""

    __slots__ = ("end", "flexible", "frame", "pos")

    def __init__(self, frame: bytes, flexible: bool) -> None:
        self.frame = frame
        self.flexible = flexible
        self.end = len(frame)
        # The header: api key, version, correlation id, then the client id (an int16 length in
        # every header version) and, in header v2, its tagged fields.
        self.pos = 8

    def uvarint(self) -> int:
        frame = self.frame
        pos = self.pos
        b = frame[pos]
        pos += 1
        value = b & 0x7F
        shift = 7
        while b & 0x80:
            if shift > 28:
                raise _Unusual
            b = frame[pos]
            pos += 1
            value |= (b & 0x7F) << shift
            shift += 7
        self.pos = pos
        return value

    def size(self, wide: bool) -> int:
        """A length or count, -1 for null: compact (flexible), else int16 (``wide``: int32)."""
        if self.flexible:
            return self.uvarint() - 1
        pos = self.pos
        if wide:
            self.pos = pos + 4
            return int(_I32.unpack_from(self.frame, pos)[0])
        self.pos = pos + 2
        return int(_I16.unpack_from(self.frame, pos)[0])

    def raw(self, n: int) -> bytes:
        pos = self.pos
        end = pos + n
        if n < 0 or end > self.end:
            raise _Unusual
        self.pos = end
        return self.frame[pos:end]

    def nullable(self) -> str | None:
        n = self.size(False)
        if n == -1:
            return None
        return self.raw(n).decode()

    def text(self) -> str:
        n = self.size(False)
        return self.raw(n).decode()  # a null (-1) is refused by raw()

    def data(self) -> bytes:
        return self.raw(self.size(True))

    def int32(self) -> int:
        pos = self.pos
        self.pos = pos + 4
        return int(_I32.unpack_from(self.frame, pos)[0])

    def count(self, max_elements: int) -> int:
        n = self.size(True)
        if not 0 <= n <= max_elements:
            raise _Unusual  # null, negative or too many: the generic decoder says which
        return n

    def no_tags(self) -> None:
        if self.flexible:
            if self.frame[self.pos]:
                raise _Unusual
            self.pos += 1

    def header(self, flexible_header: bool) -> str:
        """Past the request header: its client id ("" for null)."""
        frame = self.frame
        n = (frame[8] << 8) | frame[9]
        self.pos = 10
        if n == 0xFFFF:
            client_id = ""
        elif n >= 0x8000:
            raise _Unusual
        else:
            client_id = self.raw(n).decode()
        if flexible_header:
            if frame[self.pos]:
                raise _Unusual
            self.pos += 1
        return client_id

    def done(self) -> bool:
        return self.pos == self.end


def decode_join_group(frame: Frame, version: int, max_elements: int) -> JoinGroupFields | None:
    """The fields of a whole JoinGroup request frame (size prefix excluded); None for a frame
    the generic decoder must read."""
    if not isinstance(frame, bytes) or not 0 <= version <= 9:
        return None
    flexible = version >= 6
    r = _Reader(frame, flexible)
    try:
        client_id = r.header(flexible)
        group_id = r.text()
        session_timeout = r.int32()
        rebalance_timeout = r.int32() if version >= 1 else session_timeout
        member_id = r.text()
        instance_id = r.nullable() if version >= 5 else None
        protocol_type = r.text()
        protocols = []
        for _ in range(r.count(max_elements)):
            name = r.text()
            protocols.append((name, r.data()))
            r.no_tags()
        reason = r.nullable() if version >= 8 else None
        r.no_tags()
        if not r.done():
            return None
    except (IndexError, UnicodeDecodeError, struct.error, _Unusual):
        return None
    return (
        client_id, group_id, session_timeout, rebalance_timeout, member_id, instance_id,
        protocol_type, tuple(protocols), reason,
    )


def decode_sync_group(frame: Frame, version: int, max_elements: int) -> SyncGroupFields | None:
    """The fields of a whole SyncGroup request frame (size prefix excluded); None for a frame
    the generic decoder must read."""
    if not isinstance(frame, bytes) or not 0 <= version <= 5:
        return None
    flexible = version >= 4
    r = _Reader(frame, flexible)
    try:
        r.header(flexible)
        group_id = r.text()
        generation_id = r.int32()
        member_id = r.text()
        instance_id = r.nullable() if version >= 3 else None
        protocol_type = protocol_name = None
        if version >= 5:
            protocol_type = r.nullable()
            protocol_name = r.nullable()
        assignments = []
        for _ in range(r.count(max_elements)):
            assigned = r.text()
            assignments.append((assigned, r.data()))
            r.no_tags()
        r.no_tags()
        if not r.done():
            return None
    except (IndexError, UnicodeDecodeError, struct.error, _Unusual):
        return None
    return (
        group_id, generation_id, member_id, instance_id, protocol_type, protocol_name,
        tuple(assignments),
    )


# ---- answers --------------------------------------------------------------------------------


def _text(parts: list[bytes], value: str | None, flexible: bool) -> None:
    if value is None:
        parts.append(b"\x00" if flexible else b"\xff\xff")
        return
    raw = value.encode()
    parts.append(write_uvarint(len(raw) + 1) if flexible else _I16.pack(len(raw)))
    parts.append(raw)


def _data(parts: list[bytes], value: bytes, flexible: bool) -> None:
    parts.append(write_uvarint(len(value) + 1) if flexible else _I32.pack(len(value)))
    parts.append(value)


def join_group_body(
    version: int,
    error: int,
    generation_id: int,
    protocol_type: str | None,
    protocol_name: str | None,
    leader: str,
    skip_assignment: bool,
    member_id: str,
    members: Sequence[JoinMemberFields],
) -> bytes:
    """The body of a JoinGroup answer of ``version`` (the throttle time 0). Before v7 the
    protocol name is not nullable: None is written as ""."""
    flexible = version >= 6
    parts: list[bytes] = [
        _THROTTLE_ERROR_GENERATION.pack(0, error, generation_id)
        if version >= 2
        else _ERROR_GENERATION.pack(error, generation_id)
    ]
    if version >= 7:
        _text(parts, protocol_type, flexible)
        _text(parts, protocol_name, flexible)
    else:
        _text(parts, protocol_name or "", flexible)
    _text(parts, leader, flexible)
    if version >= 9:
        parts.append(b"\x01" if skip_assignment else b"\x00")
    _text(parts, member_id, flexible)
    parts.append(write_uvarint(len(members) + 1) if flexible else _I32.pack(len(members)))
    for mid, instance_id, metadata in members:
        _text(parts, mid, flexible)
        if version >= 5:
            _text(parts, instance_id, flexible)
        _data(parts, metadata, flexible)
        if flexible:
            parts.append(b"\x00")
    if flexible:
        parts.append(b"\x00")
    return b"".join(parts)


def sync_group_body(
    version: int,
    error: int,
    protocol_type: str | None,
    protocol_name: str | None,
    assignment: bytes,
) -> bytes:
    """The body of a SyncGroup answer of ``version`` (the throttle time 0)."""
    flexible = version >= 4
    parts: list[bytes] = [_I32.pack(0) + _I16.pack(error) if version >= 1 else _I16.pack(error)]
    if version >= 5:
        _text(parts, protocol_type, flexible)
        _text(parts, protocol_name, flexible)
    _data(parts, assignment, flexible)
    if flexible:
        parts.append(b"\x00")
    return b"".join(parts)
