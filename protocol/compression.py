"""Record batch compression codecs (the low three bits of a v2 batch's attributes).

This module owns the mapping from Kafka's codec ids to byte-level compress/decompress
functions, all backed by cramjam:

* GZIP   -- an ordinary gzip stream (several concatenated members are accepted).
* SNAPPY -- written as one raw snappy block, the way librdkafka writes it. On read we also
  accept the "xerial" framing that the Java client (via snappy-java's SnappyOutputStream),
  kafka-python and aiokafka write: the 8-byte magic ``\\x82SNAPPY\\x00``, two big-endian int32
  version fields, then any number of ``[int32 length][raw snappy block]`` chunks. Every Kafka
  reader (Java, librdkafka, kafka-python, aiokafka) sniffs for that magic and falls back to a
  raw block, so raw output is read correctly everywhere.
* LZ4    -- the LZ4 *frame* format with independent blocks and no content checksum (KIP-57:
  Kafka readers do not support linked blocks).
* ZSTD   -- a standard zstd frame (frames without a declared content size are fine).

Malformed compressed input raises :class:`DecompressionError`, and a codec id outside 0..4
raises :class:`UnsupportedCompression`; both derive from ``protocol.batch.CorruptBatch`` so
a caller decoding a batch only has one exception type to handle.
"""

from __future__ import annotations

import struct
from enum import IntEnum

import cramjam

from protocol.batch import CorruptBatch

Buffer = bytes | bytearray | memoryview


class Compression(IntEnum):
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


class DecompressionError(CorruptBatch):
    """Compressed record data that the codec could not decode."""


class UnsupportedCompression(CorruptBatch):
    """A codec id that is not one of NONE, GZIP, SNAPPY, LZ4 or ZSTD."""

    def __init__(self, codec: int) -> None:
        super().__init__(f"unsupported compression codec {codec}")
        self.codec = codec


# Default levels follow the Java client's defaults (KIP-390): gzip uses zlib's default 6,
# lz4 uses 9, zstd uses 3. Snappy has no level.
DEFAULT_LEVELS: dict[Compression, int] = {
    Compression.GZIP: 6,
    Compression.LZ4: 9,
    Compression.ZSTD: 3,
}

XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER_SIZE = 16  # magic (8) + version int32 + compatible-version int32
_XERIAL_HEADER = struct.Struct(">8sii")
_INT32 = struct.Struct(">i")


def _codec(codec: int) -> Compression:
    try:
        return Compression(codec)
    except ValueError:
        raise UnsupportedCompression(codec) from None


def compress(codec: int, data: Buffer, level: int | None = None) -> bytes:
    """Compress ``data`` with ``codec``; NONE returns the bytes unchanged.

    ``level`` overrides the codec's default level (ignored for NONE and SNAPPY).
    """
    kind = _codec(codec)
    if kind is Compression.NONE:
        return bytes(data)
    if kind is Compression.SNAPPY:
        return bytes(cramjam.snappy.compress_raw(data))
    lvl = DEFAULT_LEVELS[kind] if level is None else level
    if kind is Compression.GZIP:
        return bytes(cramjam.gzip.compress(data, level=lvl))
    if kind is Compression.LZ4:
        frame = cramjam.lz4.Compressor(level=lvl, content_checksum=False, block_linked=False)
        frame.compress(data if isinstance(data, bytes) else bytes(data))  # wants exactly bytes
        return bytes(frame.finish())
    return bytes(cramjam.zstd.compress(data, level=lvl))


def decompress(codec: int, data: Buffer) -> bytes:
    """Undo :func:`compress` (or another Kafka client's compression) for ``codec``."""
    kind = _codec(codec)
    try:
        if kind is Compression.NONE:
            return bytes(data)
        if kind is Compression.GZIP:
            return bytes(cramjam.gzip.decompress(data))
        if kind is Compression.SNAPPY:
            return snappy_decompress(data)
        if kind is Compression.LZ4:
            return bytes(cramjam.lz4.decompress(data))
        return bytes(cramjam.zstd.decompress(data))
    except CorruptBatch:
        raise
    except Exception as exc:  # cramjam.DecompressionError and friends
        raise DecompressionError(f"{kind.name.lower()} decompression failed: {exc}") from exc


def is_xerial(data: Buffer) -> bool:
    """Whether ``data`` starts with snappy-java's stream framing header."""
    return len(data) >= _XERIAL_HEADER_SIZE and bytes(data[:8]) == XERIAL_MAGIC


def snappy_decompress(data: Buffer) -> bytes:
    """Decode either one raw snappy block or a xerial-framed sequence of blocks."""
    if not is_xerial(data):
        try:
            return bytes(cramjam.snappy.decompress_raw(data))
        except Exception as exc:
            raise DecompressionError(f"snappy decompression failed: {exc}") from exc
    view = memoryview(data)
    end = len(view)
    pos = _XERIAL_HEADER_SIZE  # the two version ints are not checked: some writers get them wrong
    parts: list[bytes] = []
    while pos < end:
        if end - pos < 4:
            raise DecompressionError("xerial snappy: truncated chunk length")
        (size,) = _INT32.unpack_from(view, pos)
        pos += 4
        if size < 0 or pos + size > end:
            raise DecompressionError(f"xerial snappy: bad chunk length {size}")
        try:
            parts.append(bytes(cramjam.snappy.decompress_raw(view[pos : pos + size])))
        except Exception as exc:
            raise DecompressionError(f"xerial snappy: bad chunk: {exc}") from exc
        pos += size
    return b"".join(parts)


def xerial_snappy_compress(data: Buffer, chunk_size: int = 32 * 1024) -> bytes:
    """Snappy in xerial framing (what the Java client writes). Not used by the encoder by
    default; available for tests and for anyone who must mimic the Java producer byte-for-byte."""
    if chunk_size <= 0:
        raise ValueError("chunk_size must be positive")
    view = memoryview(data)
    out = bytearray(_XERIAL_HEADER.pack(XERIAL_MAGIC, 1, 1))
    for start in range(0, len(view), chunk_size):
        block = bytes(cramjam.snappy.compress_raw(view[start : start + chunk_size]))
        out += _INT32.pack(len(block))
        out += block
    return bytes(out)
