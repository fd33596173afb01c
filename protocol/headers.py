"""Request and response headers.

Request header v1 (non-flexible APIs): api_key i16, api_version i16, correlation_id i32, client_id
nullable int16-length string. v2 (flexible versions) adds tagged fields. Response header v0 is the
correlation id alone; v1 adds an empty tagged-field section. ApiVersions responses always use v0 so
that a client speaking a version we do not know can still read our answer.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from .framing import Frame

_FIXED = struct.Struct(">hhih")
_CORRELATION = struct.Struct(">i")

API_VERSIONS_KEY = 18


class HeaderError(ValueError):
    """The request header could not be parsed."""


@dataclass(frozen=True, slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


def read_uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    """An unsigned varint at ``pos``: (value, position after it); HeaderError if malformed."""
    return _read_uvarint(buf, pos)


_ONE_BYTE = tuple(bytes((i,)) for i in range(128))


def write_uvarint(n: int) -> bytes:
    """``n`` (at least 0) as an unsigned varint: a compact length or count, a tag."""
    if n < 0x80:
        return _ONE_BYTE[n]
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def skip_tagged_fields(buf: Frame, pos: int) -> int:
    """The position after the tagged-field section at ``pos``; HeaderError if malformed."""
    count, pos = _read_uvarint(buf, pos)
    for _ in range(count):
        _tag, pos = _read_uvarint(buf, pos)
        size, pos = _read_uvarint(buf, pos)
        pos += size
        if pos > len(buf):
            raise HeaderError("tagged field runs past the frame")
    return pos


def _read_uvarint(buf: Frame, pos: int) -> tuple[int, int]:
    result = 0
    shift = 0
    while True:
        if pos >= len(buf):
            raise HeaderError("truncated varint in header")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 28:
            raise HeaderError("varint too long in header")


def parse_request_header(frame: Frame, flexible: bool) -> tuple[RequestHeader, int]:
    """Parse the header at the start of ``frame``; returns it and the offset of the body."""
    if len(frame) < 10:
        raise HeaderError("frame shorter than a request header")
    api_key, version, correlation_id, client_len = _FIXED.unpack_from(frame, 0)
    pos = 10
    client_id: str | None = None
    if client_len >= 0:
        end = pos + client_len
        if end > len(frame):
            raise HeaderError("client id runs past the frame")
        try:
            client_id = frame[pos:end].decode("utf-8")
        except UnicodeDecodeError as e:
            raise HeaderError("client id is not UTF-8") from e
        pos = end
    elif client_len != -1:
        raise HeaderError(f"bad client id length {client_len}")
    if flexible:
        pos = skip_tagged_fields(frame, pos)
    return RequestHeader(api_key, version, correlation_id, client_id), pos


def response_header(correlation_id: int, flexible: bool) -> bytes:
    """Encoded response header: v1 (with an empty tag section) when ``flexible``, else v0."""
    head = _CORRELATION.pack(correlation_id)
    return head + b"\x00" if flexible else head
