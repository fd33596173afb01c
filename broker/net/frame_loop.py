"""Reading a client connection's frames and writing its answers: the I/O half of a connection.

:class:`FrameLoop` is the part of :class:`broker.net.connection.Connection` that moves bytes: it
cuts what arrives into frames, hands them on a few at a time (what a frame means, and its
answer, is the subclass's: ``_direct`` and ``_on_frame``), decides when to read on and when to
stop, and writes the answers out in the order their requests arrived, the ready ones together
once per pass of the event loop. Each request that has arrived owns a :class:`ResponseSlot` in
that order until its answer goes out.

What one client can hold is bounded (the hardening limits, docs/limits.md):

* frames are handled a few at a time (:data:`_FRAMES_PER_PASS`, :data:`_PASS_SECONDS`, the clock
  read after every frame: one request that takes a while, a JoinGroup that recomputes a big
  group's assignment, ends the pass); when a pass ends with frames left, or has used its time,
  the connection stops reading and continues in a later turn of the event loop (else the
  transport would hand it the next frames within the same turn), so a client pipelining
  thousands of requests takes turns with everyone else;
* at most ``queued.max.requests`` requests received and not yet answered; past it, and while
  answers ready to go out exceed :data:`_MAX_HELD_BYTES` or the socket's send buffer is full
  (``pause_writing``), the connection reads and handles nothing more until answers drain;
* a request larger than 64 KiB reserves its size in the broker-wide ``queued.max.request.bytes``
  budget (broker/net/admission.py) before the rest of it is read, and is decoded in the worker
  thread, the connection handing on no further frame until it is (:meth:`FrameLoop.hold_frames`);
* a request must arrive within ``socket.request.receive.timeout.ms`` of its first byte (the
  broker's sweep closes connections that take longer), not counting time the broker itself
  spent not reading.

A connection can also be ended without dropping the answers already due
(:meth:`FrameLoop.close_when_answered`): it takes no further request, drops whatever else the
client sent, and closes a given delay after those answers are written.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque

from kcoord.protocol.framing import Frame, FrameDecoder, FrameError

from .admission import SMALL_REQUEST, RequestMemory

log = logging.getLogger("kcoord.connection")

_FRAMES_PER_PASS = 64
"""Frames handled in one turn of the event loop before the connection lets others go."""
_PASS_SECONDS = 0.005
"""...or this much time after the pass began, whichever is first."""
_MAX_HELD_BYTES = 8 * 1024 * 1024
"""Answers ready but not yet handed to the socket, above which nothing more is handled."""
SEND_BUFFER_HIGH = 1024 * 1024
"""The transport's write buffer size at which it asks us to stop (``pause_writing``)."""


class ResponseSlot:
    """A request's place in the order answers go out in: ``done`` once its answer (``data``,
    or None for none) is there."""

    __slots__ = ("data", "done")

    def __init__(self) -> None:
        self.done = False
        self.data: bytes | None = None


class FrameLoop(asyncio.Protocol):
    """The I/O of one connection (module docstring); a frame's meaning and its answer are the
    subclass's (:meth:`_direct`, :meth:`_on_frame`)."""

    def __init__(
        self, max_frame_bytes: int, max_in_flight: int, request_memory: RequestMemory
    ) -> None:
        self.decoder = FrameDecoder(max_frame_bytes)
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self.last_active = time.monotonic()
        """When the client last sent something (connections.max.idle.ms)."""
        self._slots: deque[ResponseSlot] = deque()
        self.closed = False
        # Responses ready to go out, written together once per event-loop pass: a client
        # pipelining many requests gets one write (one syscall) instead of one per response.
        self._out: list[bytes] = []
        self._write_scheduled = False
        self._loop = asyncio.get_running_loop()
        self._request_memory = request_memory
        self._max_in_flight = max_in_flight
        # Flow control (module docstring).
        self._held = 0  # bytes of answers ready but not yet handed to the transport
        self._writing_paused = False  # the transport's send buffer is full
        self._reading = True
        self._pass_scheduled = False
        self._reserved = 0  # bytes of the request memory budget held for the frame arriving
        self._closing = False  # close_when_answered() was called
        self._frames_held = False  # hold_frames(): a request is decoded in the worker
        self._close_delay_s = 0.0  # how long after its last answer the connection closes
        self.partial_since: float | None = None
        """When the frame being received started arriving (monotonic), while we read."""

    # asyncio.Protocol -------------------------------------------------------------------------
    def data_received(self, data: bytes) -> None:
        if self.closed or self._closing:
            return  # closing: what still arrives is dropped (close_when_answered)
        self.last_active = time.monotonic()
        try:
            self.decoder.append(data)
        except FrameError as e:
            self.abort(f"bad frame: {e}")
            return
        self._pass()

    def eof_received(self) -> bool | None:
        if self.decoder.partial:
            log.info("connection %s closed mid-frame (%d bytes)", self.peer, self.decoder.partial)
        return None

    def pause_writing(self) -> None:
        self._writing_paused = True

    def resume_writing(self) -> None:
        self._writing_paused = False
        self._wake()

    # flow control -------------------------------------------------------------------------------
    def _pass(self) -> None:
        """Handle the frames that have arrived, a bounded number of them, then decide whether
        to read on (:meth:`_flow`). This runs for every request: locals, and _busy() inlined.
        The clock is read after every frame (tens of nanoseconds against the microseconds a
        request takes): a pass that once read it every 8th frame let 8 heavy ones in a row."""
        self._pass_scheduled = False
        next_frame = self.decoder.next_frame
        direct = self._direct
        slots = self._slots
        max_in_flight = self._max_in_flight
        budget = _FRAMES_PER_PASS
        clock = time.perf_counter
        deadline = clock() + _PASS_SECONDS
        handled = False
        while (
            len(slots) < max_in_flight
            and self._held < _MAX_HELD_BYTES
            and not self._writing_paused
            and not self._frames_held
            and not self.closed
        ):
            frame = next_frame()
            if frame is None:
                break
            handled = True
            if self._reserved:  # this is the large frame the reservation was for
                reserved, self._reserved = self._reserved, 0
                self._request_memory.release(reserved)
            if not direct(frame) and self._on_frame(frame):
                break  # a task was started: let it run before handling more (below)
            budget -= 1
            if not budget or clock() >= deadline:
                break
        if handled:
            self.partial_since = None  # a frame arrived whole; the next one starts its clock
            if (not budget or clock() >= deadline) and not self.closed:
                # The pass used its turn. Reading stops until a later turn: the transport
                # would otherwise hand over the next frames (a client that pipelined many
                # slow requests) within this same turn, before anyone else is served.
                self._set_reading(False)
                if not self._pass_scheduled:
                    self._pass_scheduled = True
                    self._loop.call_soon(self._pass)
                return
        if self._reading and self.decoder.idle and not self.closed:
            return  # the usual end of a pass: all handled, nothing half-arrived, reading on
        self._flow()

    def _busy(self) -> bool:
        """Too much is in flight or waiting to be sent: handle nothing more for now."""
        return (
            len(self._slots) >= self._max_in_flight
            or self._writing_paused
            or self._held >= _MAX_HELD_BYTES
            or self._frames_held
        )

    def _flow(self) -> None:
        """Read on, or stop reading until answers drain, a later pass, or request memory."""
        if self.closed:
            return
        decoder = self.decoder
        if self._busy():
            self._set_reading(False)  # _wake resumes once answers drain
            return
        if decoder.has_frame():
            self._set_reading(False)
            if not self._pass_scheduled:
                self._pass_scheduled = True
                self._loop.call_soon(self._pass)
            return
        size = decoder.head_size()
        if size is not None and size > SMALL_REQUEST and not self._reserved:
            memory = self._request_memory
            if not memory.reserve(size):
                memory.wait(self)  # admitted() is called back once memory is given back
                self._set_reading(False)
                return
            self._reserved = size
        self._set_reading(True)
        if decoder.partial and self.partial_since is None:
            self.partial_since = time.monotonic()

    def wanted(self) -> int:
        """Request memory budget: the bytes this connection waits for (0 once closed)."""
        if self.closed:
            return 0
        return self.decoder.head_size() or 0

    def admitted(self, size: int) -> None:
        """Request memory budget: ``size`` bytes are now reserved for the frame arriving."""
        self._reserved = size
        self._loop.call_soon(self._flow)

    def _set_reading(self, on: bool) -> None:
        if on == self._reading or self.transport is None or self.transport.is_closing():
            return
        self._reading = on
        if on:
            self.transport.resume_reading()
        else:
            self.partial_since = None  # the time we do not read is not the client's
            self.transport.pause_reading()

    def hold_frames(self) -> None:
        """Hand on no further frame until :meth:`release_frames` (the request just handed on
        is being decoded in the worker: the next ones must not overtake it)."""
        self._frames_held = True

    def release_frames(self) -> None:
        self._frames_held = False
        self._wake()

    def _wake(self) -> None:
        """Answers drained: carry on with frames held back by :meth:`_busy`."""
        if not self._reading and not self._pass_scheduled and not self.closed and not self._busy():
            self._pass_scheduled = True
            self._loop.call_soon(self._pass)

    # closing ------------------------------------------------------------------------------------
    def close_when_answered(self, delay_s: float = 0.0) -> None:
        """Take no more requests, and close ``delay_s`` after the answers of those already
        taken are out.

        Frames that have arrived and not been handled yet, and any that arrive later, are
        dropped unread (a failed login ends a connection this way: nothing the client
        pipelined behind the failed attempt is looked at). The delay also keeps the close
        apart from the last answer: a client reading both at once may take the close first
        and lose the answer (kafka-python 3.0 does)."""
        self._max_in_flight = 0  # _pass takes no frame, _busy() keeps reading off
        self._closing = True
        self._close_delay_s = delay_s
        self._set_reading(False)
        self._close_if_answered()

    def _close_if_answered(self) -> None:
        if not self._slots and not self._out and not self._write_scheduled:
            if self._close_delay_s > 0:
                delay, self._close_delay_s = self._close_delay_s, 0.0
                self._loop.call_later(delay, self._close_gently)
            else:
                self._close_gently()

    def _close_gently(self) -> None:
        if not self.closed and self.transport is not None:
            self.closed = True
            self.transport.close()

    def abort(self, reason: str) -> None:
        if self.closed:
            return
        log.warning("closing connection %s: %s", self.peer, reason)
        self.closed = True
        self.partial_since = None
        if self.transport is not None:
            self.transport.abort()

    # answers out, in request order --------------------------------------------------------------
    def _enqueue_ready(self, data: bytes) -> None:
        self._held += len(data)
        if not self._slots:
            self._out.append(data)
            self._schedule_write()
            return
        slot = ResponseSlot()
        slot.data = data
        slot.done = True
        self._slots.append(slot)
        self._flush()

    def _flush(self) -> None:
        slots = self._slots
        if not slots or not slots[0].done:
            return
        out = self._out
        while slots and slots[0].done:
            data = slots.popleft().data
            if data is not None:
                out.append(data)
        self._schedule_write()
        self._wake()

    def _schedule_write(self) -> None:
        if not self._write_scheduled:
            self._write_scheduled = True
            self._loop.call_soon(self._write_out)

    def _write_out(self) -> None:
        self._write_scheduled = False
        out, self._out = self._out, []
        if out:
            data = out[0] if len(out) == 1 else b"".join(out)
            self._held -= len(data)
            if self.transport is not None and not self.closed:
                self.transport.write(data)
        if self._closing:
            self._close_if_answered()  # transport.close() still sends what was written
            return
        if out:
            self._wake()

    # what a frame means: the subclass's ---------------------------------------------------------
    def _direct(self, frame: Frame) -> bool:
        """Answer ``frame`` on its API's hot path; False if it has none or it declined."""
        raise NotImplementedError

    def _on_frame(self, frame: Frame) -> bool:
        """Handle one request; True if its answer comes from a task just started (the pass
        then ends so that the task's first step runs)."""
        raise NotImplementedError
