"""Size-prefixed framing of the Kafka wire protocol, sans-IO.

Every request and response is an int32 big-endian size followed by that many bytes. The decoder
is given whatever the transport delivered (:meth:`FrameDecoder.append`) and hands complete frames
out one at a time (:meth:`FrameDecoder.next_frame`), so its owner decides how many to handle
before it yields to others. A size prefix that is negative or above the configured maximum
(``socket.request.max.bytes``) raises FrameError as soon as it is seen, so the connection can be
closed before any memory is reserved for it.
"""

from __future__ import annotations

import struct

_SIZE = struct.Struct(">i")
_STEAL_FROM = 64 * 1024  # frames larger than this are handed out without a copy when they can be


Frame = bytes | bytearray
"""A request frame without its size prefix: ``bytes``, or for a large frame the decoder's own
buffer handed over (see :meth:`FrameDecoder.next_frame`)."""


class FrameError(ValueError):
    """The peer sent a size prefix we refuse to honour."""


class FrameDecoder:
    """Accumulates bytes and splits them into frames (without their size prefix)."""

    __slots__ = ("_buf", "_pos", "_max")

    def __init__(self, max_frame_bytes: int) -> None:
        self._buf = bytearray()
        self._pos = 0  # start of the first frame not handed out yet
        self._max = max_frame_bytes

    def append(self, data: bytes) -> None:
        if self._pos:
            del self._buf[: self._pos]
            self._pos = 0
        self._buf += data

    def next_frame(self) -> Frame | None:
        """The next whole frame, or None if the bytes of one have not all arrived yet. A large
        frame may come as a ``bytearray`` (the decoder's own buffer, handed over)."""
        buf = self._buf
        pos = self._pos
        n = len(buf)
        if n - pos < 4:
            return None
        (size,) = _SIZE.unpack_from(buf, pos)
        if size < 0 or size > self._max:
            raise FrameError(f"frame size {size} outside [0, {self._max}]")
        end = pos + 4 + size
        if end > n:
            return None
        if pos == 0 and end == n and size > _STEAL_FROM:
            # A large frame alone in the buffer (how big requests arrive): hand the buffer
            # itself out instead of copying it (a 94 MiB copy costs ~100 ms of page faults).
            self._buf = bytearray()
            del buf[:4]  # cheap at the front of a bytearray
            return buf
        frame = bytes(memoryview(buf)[pos + 4 : end])
        if end == n:
            buf.clear()
            self._pos = 0
        else:
            self._pos = end
        return frame

    def head_size(self) -> int | None:
        """The declared size of the frame being received (its prefix read, its bytes not all
        here), or None if there is none; FrameError if that size is refused."""
        buf = self._buf
        pos = self._pos
        if len(buf) - pos < 4:
            return None
        (size,) = _SIZE.unpack_from(buf, pos)
        if size < 0 or size > self._max:
            raise FrameError(f"frame size {size} outside [0, {self._max}]")
        return size if pos + 4 + size > len(buf) else None

    def has_frame(self) -> bool:
        """Whether a whole frame is waiting to be handed out."""
        buf = self._buf
        pos = self._pos
        if len(buf) - pos < 4:
            return False
        (size,) = _SIZE.unpack_from(buf, pos)
        return pos + 4 + size <= len(buf) or size < 0 or size > self._max

    @property
    def buffered(self) -> int:
        """Bytes received and not yet handed out in a frame."""
        return len(self._buf) - self._pos


def frame(payload: bytes | bytearray) -> bytes:
    """Prefix ``payload`` with its int32 size."""
    return _SIZE.pack(len(payload)) + payload
