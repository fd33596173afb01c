"""Request decoding and response encoding of kio entities, cached per (API, version).

kio generates a dataclass per message version; loading the schema and building its reader or
writer is costly, so both are cached. The broker hands a whole frame here and gets back a kio
request object; responses are kio objects of the negotiated version, framed with their header.
Bodies are encoded by the per-class encoders of protocol/fastcodec.py (byte-identical to kio's
writer, several times faster) and decoded by kio's native reader (see fastcodec's docstring).
"""

from __future__ import annotations

import io
import struct
from collections.abc import Callable
from functools import cache
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_writer

from . import fastcodec
from .apis import is_flexible
from .framing import Frame
from .guard import DEFAULT_MAX_ELEMENTS, Guard, GuardError, guard
from .headers import HeaderError, parse_request_header
from .legacy import LegacyDecodeError, decode_legacy_produce, decode_offset_commit_v0_v1
from .tags import strip_unknown_tags

_SIZE_AND_CORRELATION = struct.Struct(">ii")


class DecodeError(ValueError):
    """A request body that does not parse as the schema of its API version."""


# Old versions whose bytes are exactly those of a version kio models.
_REQUEST_ALIAS = {(9, 0): (9, 1)}  # OffsetFetch v0 == v1 on the wire
_RESPONSE_ALIAS = {(9, 0): (9, 1), (8, 0): (8, 2), (8, 1): (8, 2)}


def _legacy_produce(frame: Frame, pos: int, max_elements: int) -> Any:
    decoded = decode_legacy_produce(frame, pos, max_elements)
    if decoded is None:
        raise LegacyDecodeError("cannot decode a Produce v0-v2 request")
    return decoded


# Old versions decoded by hand (protocol/legacy.py).
_LEGACY_DECODERS: dict[tuple[int, int], Callable[[Frame, int, int], Any]] = {
    (0, 0): _legacy_produce,
    (0, 1): _legacy_produce,
    (0, 2): _legacy_produce,
    (8, 0): lambda frame, pos, limit: decode_offset_commit_v0_v1(frame, pos, 0, limit),
    (8, 1): lambda frame, pos, limit: decode_offset_commit_v0_v1(frame, pos, 1, limit),
}


@cache
def _reader(api_key: int, version: int) -> fastcodec.Decoder:
    return fastcodec.decoder(request_type(api_key, version))


@cache
def request_type(api_key: int, version: int) -> type:
    api_key, version = _REQUEST_ALIAS.get((api_key, version), (api_key, version))
    return load_request_schema(api_key, version)


@cache
def response_type(api_key: int, version: int) -> type:
    api_key, version = _RESPONSE_ALIAS.get((api_key, version), (api_key, version))
    return load_response_schema(api_key, version)


@cache
def _writer(cls: type) -> Callable[[io.BytesIO, Any], None]:
    """kio's writer for ``cls`` (kept for callers that write into a stream)."""
    return entity_writer(cls)  # type: ignore[return-value]


# (api key, version) -> (pre-pass, reader), for the versions kio models (one dict probe per request).
_readers: dict[tuple[int, int], tuple[Guard | None, fastcodec.Decoder]] = {}


def decode_request(
    api_key: int,
    version: int,
    frame: Frame,
    offset: int,
    max_elements: int = DEFAULT_MAX_ELEMENTS,
) -> Any:
    """Decode the body of ``frame`` starting at ``offset``; DecodeError if it does not parse,
    if its lengths do not add up, or if it holds more than ``max_elements`` array entries (the
    bounded pre-pass of protocol/guard.py runs first, so nothing is allocated on a lie)."""
    key = (api_key, version)
    found = _readers.get(key)
    if found is None:
        legacy = _LEGACY_DECODERS.get(key)
        if legacy is not None:
            try:
                return legacy(frame, offset, max_elements)
            except LegacyDecodeError as e:
                raise DecodeError(str(e)) from e
        try:
            found = (guard(request_type(api_key, version)), _reader(api_key, version))
        except Exception as e:  # no schema for this version
            raise DecodeError(f"cannot decode api {api_key} v{version}: {e!r}") from e
        _readers[key] = found
    check, read = found
    # kio reads read-only buffers: a large frame handed over by the framing is a bytearray.
    data = memoryview(frame).toreadonly() if isinstance(frame, bytearray) else frame
    if check is not None:
        try:
            check(data, offset, max_elements)
        except GuardError as e:
            raise DecodeError(f"refused api {api_key} v{version}: {e}") from e
    try:
        value, _size = read(data, offset)
    except Exception as e:  # kio raises several kinds of error on garbage
        # Perhaps tagged fields kio does not know (a newer client's): skip them, as Kafka does.
        value = _without_unknown_tags(api_key, version, read, data, offset)
        if value is None:
            raise DecodeError(f"cannot decode api {api_key} v{version}: {e!r}") from e
    return value


def _without_unknown_tags(
    api_key: int, version: int, read: fastcodec.Decoder, data: bytes | memoryview, offset: int
) -> Any:
    """The request read again without its unknown tagged fields (protocol/tags.py); None if it
    has none, or if it still does not parse."""
    cls = request_type(api_key, version)
    if not getattr(cls, "__flexible__", False):
        return None
    try:
        stripped = strip_unknown_tags(cls, data, offset)
        if stripped is None:
            return None
        return read(stripped, 0)[0]
    except Exception:
        return None


class RawBody(bytes):
    """A response body already encoded by hand (versions kio does not model)."""


_encoders = fastcodec.ENCODERS  # class -> encoder, filled by fastcodec.encoder


def encode_body(entity: Any) -> bytes:
    """The body bytes of a kio entity (or a RawBody as it is)."""
    cls = entity.__class__
    enc = _encoders.get(cls)
    if enc is None:
        if isinstance(entity, RawBody):
            return entity
        enc = fastcodec.encoder(cls)
    return enc(entity)


def encode_response(correlation_id: int, entity: Any, flexible_header: bool) -> bytes:
    """A whole response frame: size, header (v1, with its empty tagged fields, when
    ``flexible_header``; else v0), body."""
    body = encode_body(entity)
    if flexible_header:
        return _SIZE_AND_CORRELATION.pack(len(body) + 5, correlation_id) + b"\x00" + body
    return _SIZE_AND_CORRELATION.pack(len(body) + 4, correlation_id) + body


def decode_request_frame(
    api_key: int, version: int, frame: Frame, max_elements: int = DEFAULT_MAX_ELEMENTS
) -> Any:
    """The request in a whole frame (size prefix excluded), its header skipped: for the direct
    handlers, which have the API, version and correlation id already. DecodeError if either
    the header or the body does not parse (see :func:`decode_request`)."""
    try:
        _header, body_at = parse_request_header(frame, is_flexible(api_key, version))
    except HeaderError as e:
        raise DecodeError(f"bad request header: {e}") from e
    return decode_request(api_key, version, frame, body_at, max_elements)
