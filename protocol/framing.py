"""Size-prefixed framing of the Kafka wire protocol, sans-IO.

Every request and response is an int32 big-endian size followed by that many bytes. The decoder
is fed whatever the transport delivered and hands back complete frames; a size prefix that is
negative or above the configured maximum (``socket.request.max.bytes``) raises FrameError so the
connection can be closed before any memory is reserved for it.
"""

from __future__ import annotations

import struct

_SIZE = struct.Struct(">i")


class FrameError(ValueError):
    """The peer sent a size prefix we refuse to honour."""


class FrameDecoder:
    """Accumulates bytes and splits them into frames (without their size prefix)."""

    __slots__ = ("_buf", "_max")

    def __init__(self, max_frame_bytes: int) -> None:
        self._buf = bytearray()
        self._max = max_frame_bytes

    def feed(self, data: bytes) -> list[bytes]:
        buf = self._buf
        buf += data
        frames: list[bytes] = []
        pos = 0
        n = len(buf)
        while n - pos >= 4:
            (size,) = _SIZE.unpack_from(buf, pos)
            if size < 0 or size > self._max:
                raise FrameError(f"frame size {size} outside [0, {self._max}]")
            end = pos + 4 + size
            if end > n:
                break
            frames.append(bytes(buf[pos + 4 : end]))
            pos = end
        if pos:
            del buf[:pos]
        return frames

    @property
    def buffered(self) -> int:
        """Bytes received that do not yet form a whole frame."""
        return len(self._buf)


def frame(payload: bytes | bytearray) -> bytes:
    """Prefix ``payload`` with its int32 size."""
    return _SIZE.pack(len(payload)) + payload
