"""Size-prefixed framing of the Kafka wire protocol, sans-IO.

Every request and response is an int32 big-endian size followed by that many bytes. The decoder
is given whatever the transport delivered (:meth:`FrameDecoder.append`), which it splits into
whole frames at once, and hands them out one at a time (:meth:`FrameDecoder.next_frame`), so
its owner decides how many to handle before it yields to others. A size prefix that is negative
or above the configured maximum (``socket.request.max.bytes``) raises FrameError as soon as it
is seen, so the connection can be closed before any memory is reserved for it.
"""

from __future__ import annotations

import struct

_SIZE = struct.Struct(">i")
_STEAL_FROM = 64 * 1024  # frames larger than this are handed out without a copy when they can be

Frame = bytes | bytearray
"""A request frame without its size prefix: ``bytes``, or for a large frame the decoder's own
buffer handed over (see :meth:`FrameDecoder.append`)."""


class FrameError(ValueError):
    """The peer sent a size prefix we refuse to honour."""


class FrameDecoder:
    """Accumulates bytes and splits them into frames (without their size prefix)."""

    __slots__ = ("_buf", "_ready", "_next", "_max")

    def __init__(self, max_frame_bytes: int) -> None:
        self._buf = bytearray()  # the bytes of the frame still arriving
        self._ready: list[Frame] = []  # whole frames, handed out from _next on
        self._next = 0
        self._max = max_frame_bytes

    def append(self, data: bytes) -> None:
        """Take what the transport delivered; FrameError on a size prefix that is refused
        (the frames before it are kept, but the connection is to be closed)."""
        buf = self._buf
        buf += data
        ready = self._ready
        if self._next:
            del ready[: self._next]
            self._next = 0
        n = len(buf)
        pos = 0
        unpack = _SIZE.unpack_from
        limit = self._max
        while n - pos >= 4:
            (size,) = unpack(buf, pos)
            if size < 0 or size > limit:
                if pos:
                    del buf[:pos]
                raise FrameError(f"frame size {size} outside [0, {limit}]")
            end = pos + 4 + size
            if end > n:
                break
            if size < 4096:  # small: a slice and its copy beat a memoryview's set-up
                ready.append(bytes(buf[pos + 4 : end]))
            elif pos == 0 and end == n and size > _STEAL_FROM:
                # A large frame alone in the buffer (how big requests arrive): hand the buffer
                # itself out instead of copying it (a 94 MiB copy costs ~100 ms of page faults).
                self._buf = bytearray()
                del buf[:4]  # cheap at the front of a bytearray
                ready.append(buf)
                return
            else:  # larger: one copy, not two
                ready.append(bytes(memoryview(buf)[pos + 4 : end]))
            pos = end
        if pos:
            del buf[:pos]

    def next_frame(self) -> Frame | None:
        """The next whole frame, or None if none is waiting. A large frame may come as a
        ``bytearray`` (the decoder's own buffer, handed over)."""
        i = self._next
        ready = self._ready
        if i < len(ready):
            self._next = i + 1
            return ready[i]
        if i:
            ready.clear()
            self._next = 0
        return None

    def head_size(self) -> int | None:
        """The declared size of the frame being received (its prefix read, its bytes not all
        here), or None if there is none."""
        buf = self._buf
        if len(buf) < 4:
            return None
        return int(_SIZE.unpack_from(buf)[0])

    def has_frame(self) -> bool:
        """Whether a whole frame is waiting to be handed out."""
        return self._next < len(self._ready)

    @property
    def idle(self) -> bool:
        """No whole frame waiting and none partly here."""
        return not self._buf and self._next >= len(self._ready)

    @property
    def partial(self) -> int:
        """Bytes received of the frame still arriving."""
        return len(self._buf)


def frame(payload: bytes | bytearray) -> bytes:
    """Prefix ``payload`` with its int32 size."""
    return _SIZE.pack(len(payload)) + payload
