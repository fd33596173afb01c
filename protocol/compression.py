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

Decompression is bounded. A few kilobytes of zstd can stand for gigabytes of output, so
:func:`decompress` never produces more than ``limit`` bytes (by default
:data:`DEFAULT_DECOMPRESSION_LIMIT`) and raises :class:`DecompressionLimitExceeded` past it,
without ever holding the whole output: gzip is inflated by zlib with a maximum output per step;
snappy blocks declare their length up front (each xerial chunk too), which is checked before
anything is allocated; lz4 and zstd are decoded into a reusable per-thread scratch mapping of
``limit + 1`` bytes, whose pages are only touched as output is written and are handed back to
the OS after a large batch, and the decoder stops when that mapping is full. The limit is
:data:`DECOMPRESSION_FACTOR` times ``message.max.bytes`` (never less than for Kafka's default
of 1048588 bytes): see :func:`decompression_limit`.
"""

from __future__ import annotations

import mmap
import struct
import threading
import zlib
from enum import IntEnum

import cramjam

from kcoord.protocol.batch import CorruptBatch

Buffer = bytes | bytearray | memoryview


class Compression(IntEnum):
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


class DecompressionError(CorruptBatch):
    """Compressed record data that the codec could not decode."""


class DecompressionLimitExceeded(DecompressionError):
    """Compressed record data that expands past the decompression limit (a compression bomb,
    or simply more than the broker accepts in one batch)."""

    def __init__(self, codec: str, limit: int) -> None:
        super().__init__(f"{codec} records expand past the limit of {limit} bytes")
        self.limit = limit


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

KAFKA_DEFAULT_MESSAGE_MAX_BYTES = 1048588
"""Kafka's default ``message.max.bytes`` (also kcoord's)."""

DECOMPRESSION_FACTOR = 16
"""How many times ``message.max.bytes`` the records of one batch may expand to. Honest data
stays far below it: JSON-like payloads compress 5-10:1, and a producer's batch is at most
``message.max.bytes`` compressed. Bombs start around 1,000:1 (gzip) and reach 30,000:1 (zstd)."""


def decompression_limit(message_max_bytes: int) -> int:
    """The most bytes one batch's records may decompress to, for a broker whose
    ``message.max.bytes`` is given: ``DECOMPRESSION_FACTOR`` times it, and never less than for
    Kafka's default (readers of logs written elsewhere must accept what Kafka accepts)."""
    return DECOMPRESSION_FACTOR * max(message_max_bytes, KAFKA_DEFAULT_MESSAGE_MAX_BYTES)


DEFAULT_DECOMPRESSION_LIMIT = decompression_limit(KAFKA_DEFAULT_MESSAGE_MAX_BYTES)
"""16 x 1048588 bytes (16 MiB): the bound for readers that have no configuration at hand."""

# The scratch mapping's pages are given back to the OS after a batch that decompressed to more
# than this (or failed), so that one big batch does not leave its size resident in every thread.
_SCRATCH_KEEP = 2 << 20

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


def decompress(codec: int, data: Buffer, limit: int = DEFAULT_DECOMPRESSION_LIMIT) -> bytes:
    """Undo :func:`compress` (or another Kafka client's compression) for ``codec``.

    Raises :class:`DecompressionLimitExceeded` if the output would be longer than ``limit``
    bytes (never allocating more than about ``limit``), :class:`DecompressionError` if the
    data is not valid for the codec. NONE returns the bytes as they are, whatever their size:
    they are already in memory.
    """
    kind = _codec(codec)
    if kind is Compression.NONE:
        return bytes(data)
    if limit < 0:
        raise ValueError("limit must be >= 0")
    try:
        if kind is Compression.GZIP:
            return _gunzip(data, limit)
        if kind is Compression.SNAPPY:
            return snappy_decompress(data, limit)
        return _into_scratch(kind, data, limit)
    except CorruptBatch:
        raise
    except Exception as exc:  # cramjam.DecompressionError, zlib.error and friends
        raise DecompressionError(f"{kind.name.lower()} decompression failed: {exc}") from exc


def _gunzip(data: Buffer, limit: int) -> bytes:
    """One or more concatenated gzip members, inflated by zlib with at most ``limit + 1``
    bytes of output asked for at any step."""
    parts: list[bytes] = []
    total = 0
    rest: Buffer = data
    while True:
        inflater = zlib.decompressobj(wbits=31)  # gzip framing only, as Kafka reads it
        chunk = inflater.decompress(rest, limit - total + 1)
        total += len(chunk)
        if total > limit:
            raise DecompressionLimitExceeded("gzip", limit)
        parts.append(chunk)
        if not inflater.eof:
            raise DecompressionError("gzip decompression failed: truncated stream")
        rest = inflater.unused_data
        if not rest:
            return parts[0] if len(parts) == 1 else b"".join(parts)


class _Scratch(threading.local):
    """Each thread's output mapping for lz4 and zstd (anonymous, so pages cost nothing until
    written)."""

    buf: mmap.mmap | None = None


_scratch = _Scratch()


def _into_scratch(kind: Compression, data: Buffer, limit: int) -> bytes:
    """lz4 or zstd decoded into the thread's scratch mapping; the decoder fails as soon as
    that is full, so a bomb costs at most ``limit + 1`` bytes and the time to write them."""
    size = limit + 1
    buf = _scratch.buf
    if buf is None or len(buf) < size:
        if buf is not None:
            buf.close()
        buf = _scratch.buf = mmap.mmap(-1, size)
    module = cramjam.lz4 if kind is Compression.LZ4 else cramjam.zstd
    written = -1
    try:
        with memoryview(buf) as view, view[:size] as out:
            try:
                written = module.decompress_into(data, out)
            except Exception as exc:
                # Rust's "failed to write whole buffer": the output did not fit in limit + 1.
                if "whole buffer" in str(exc):
                    raise DecompressionLimitExceeded(kind.name.lower(), limit) from None
                raise
            if written > limit:
                raise DecompressionLimitExceeded(kind.name.lower(), limit)
            return bytes(out[:written])
    finally:
        if not 0 <= written <= _SCRATCH_KEEP:
            _release(buf)


def _release(buf: mmap.mmap) -> None:
    """Hand the scratch mapping's pages back to the OS (they read as zeros afterwards)."""
    advice = getattr(mmap, "MADV_DONTNEED", None)
    if advice is not None:
        buf.madvise(advice)


def is_xerial(data: Buffer) -> bool:
    """Whether ``data`` starts with snappy-java's stream framing header."""
    return len(data) >= _XERIAL_HEADER_SIZE and bytes(data[:8]) == XERIAL_MAGIC


def snappy_decompress(data: Buffer, limit: int = DEFAULT_DECOMPRESSION_LIMIT) -> bytes:
    """Decode either one raw snappy block or a xerial-framed sequence of blocks.

    Every raw block starts with its uncompressed length: it is checked against what is left of
    ``limit`` before the block is decoded (DecompressionLimitExceeded past it).
    """
    if not is_xerial(data):
        _claim(data, limit)
        try:
            return bytes(cramjam.snappy.decompress_raw(data))
        except Exception as exc:
            raise DecompressionError(f"snappy decompression failed: {exc}") from exc
    view = memoryview(data)
    end = len(view)
    pos = _XERIAL_HEADER_SIZE  # the two version ints are not checked: some writers get them wrong
    parts: list[bytes] = []
    left = limit
    while pos < end:
        if end - pos < 4:
            raise DecompressionError("xerial snappy: truncated chunk length")
        (size,) = _INT32.unpack_from(view, pos)
        pos += 4
        if size < 0 or pos + size > end:
            raise DecompressionError(f"xerial snappy: bad chunk length {size}")
        chunk = view[pos : pos + size]
        left -= _claim(chunk, left, limit)
        try:
            parts.append(bytes(cramjam.snappy.decompress_raw(chunk)))
        except Exception as exc:
            raise DecompressionError(f"xerial snappy: bad chunk: {exc}") from exc
        pos += size
    return b"".join(parts)


def _claim(block: Buffer, left: int, limit: int | None = None) -> int:
    """The uncompressed length a raw snappy block declares, if it fits in ``left`` bytes."""
    try:
        n = int(cramjam.snappy.decompress_raw_len(block))
    except Exception as exc:
        raise DecompressionError(f"snappy decompression failed: {exc}") from exc
    if n > left:
        raise DecompressionLimitExceeded("snappy", left if limit is None else limit)
    return n


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
