"""One client connection: frames in, requests dispatched, responses out in request order.

Requests on a connection are handled concurrently (a parked JoinGroup or a long-polling Fetch
does not hold up the next request), but their responses are written in the order the requests
arrived, as Kafka clients require. The hottest requests (Heartbeat, OffsetFetch v0-v7,
ApiVersions) have a direct handler that decodes the frame itself and returns the whole response
frame, skipping the header object, the kio entity and the response builder; it may decline
(None), and then the generic path answers. Bad input (oversized or negative size prefix, an
unparseable header or body, an unknown API) closes this connection with one log line; nothing
else is affected.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import struct
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from protocol.apis import SUPPORTED, ApiKey, is_flexible, is_supported
from protocol.codec import DecodeError, decode_request, encode_response, response_type
from protocol.errors import ErrorCode
from protocol.framing import FrameDecoder, FrameError
from protocol.headers import HeaderError, RequestHeader, parse_request_header
from protocol.responses import build

if TYPE_CHECKING:
    from .app import Broker

log = logging.getLogger("kcoord.connection")

# Pause reading from a client that has this many requests in flight.
_MAX_IN_FLIGHT = 512

NO_RESPONSE = object()  # a handler's answer when the request gets none (Produce with acks=0)


@dataclass(slots=True)
class RequestContext:
    header: RequestHeader
    client_host: str
    connection: Connection

    @property
    def version(self) -> int:
        return self.header.api_version

    @property
    def response_class(self) -> type:
        return response_type(self.header.api_key, self.header.api_version)

    def respond(self, **fields: Any) -> Any:
        """Build this request's response, of its version, from the fields of the newest one."""
        return build(self.response_class, **fields)


Handler = Callable[[RequestContext, Any], Any]
DirectHandler = Callable[[bytes, int, int], "bytes | None"]
"""``(frame, version, correlation_id)`` -> the whole response frame, or None to fall back to
the generic path. For the hottest requests: decodes the frame itself, answers at once."""

_HEAD = struct.Struct(">hhi")


class _Slot:
    __slots__ = ("data", "done")

    def __init__(self) -> None:
        self.done = False
        self.data: bytes | None = None


class Connection(asyncio.Protocol):
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.decoder = FrameDecoder(broker.config["socket.request.max.bytes"])
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self.client_host = ""
        self._slots: deque[_Slot] = deque()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._paused = False
        self.closed = False
        # Responses ready to go out, written together once per event-loop pass: a client
        # pipelining many requests gets one write (one syscall) instead of one per response.
        self._out: list[bytes] = []
        self._write_scheduled = False
        self._loop = asyncio.get_running_loop()
        self._direct_handlers = broker.direct_handlers
        self._max_elements: int = broker.config["socket.request.max.elements"]

    # asyncio.Protocol -------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        peer = transport.get_extra_info("peername")
        if peer:
            self.client_host = str(peer[0])
            self.peer = f"{peer[0]}:{peer[1]}"
        self.broker.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.broker.connections.discard(self)
        for task in list(self._tasks):
            task.cancel()

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        try:
            frames = self.decoder.feed(data)
        except FrameError as e:
            self.abort(f"bad frame: {e}")
            return
        for frame in frames:
            if self.closed:
                return
            if not self._direct(frame):
                self._on_frame(frame)

    def eof_received(self) -> bool | None:
        if self.decoder.buffered:
            log.info("connection %s closed mid-frame (%d bytes)", self.peer, self.decoder.buffered)
        return None

    # request handling ---------------------------------------------------------------------------
    def abort(self, reason: str) -> None:
        if self.closed:
            return
        log.warning("closing connection %s: %s", self.peer, reason)
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    def _on_frame(self, frame: bytes) -> None:
        if len(frame) < 8:
            self.abort("frame shorter than a request header")
            return
        api_key, version, correlation_id = _HEAD.unpack_from(frame)
        if not is_supported(api_key, version):
            if api_key == ApiKey.API_VERSIONS:
                self._enqueue_ready(self._api_versions_fallback(correlation_id))
                return
            self.abort(f"unsupported api {api_key} version {version}")
            return
        flexible = is_flexible(api_key, version)
        try:
            header, body_at = parse_request_header(frame, flexible)
        except HeaderError as e:
            self.abort(f"bad request header: {e}")
            return
        handler = self.broker.handlers.get(api_key)
        if handler is None:
            self.abort(f"no handler for api {api_key}")
            return
        try:
            request = decode_request(api_key, version, frame, body_at, self._max_elements)
        except DecodeError as e:
            self.abort(str(e))
            return
        ctx = RequestContext(header, self.client_host, self)
        # ApiVersions responses always use header v0 (KIP-511).
        flexible_response = flexible and api_key != ApiKey.API_VERSIONS
        self.broker.metrics_request(api_key)
        started = time.perf_counter()
        try:
            result = handler(ctx, request)
        except Exception:
            log.exception("handler for api %d v%d failed; closing %s", api_key, version, self.peer)
            self.abort("internal error")
            return
        if isinstance(result, asyncio.Future):
            # An answer still to come from the coordinator (GroupRuntime.submit, then()): a
            # callback, not a task, carries it to the slot.
            slot = _Slot()
            self._slots.append(slot)
            result.add_done_callback(
                functools.partial(
                    self._settle, slot, header.correlation_id, flexible_response, api_key, started
                )
            )
            if len(self._slots) >= _MAX_IN_FLIGHT and not self._paused and self.transport:
                self._paused = True
                self.transport.pause_reading()
        elif inspect.isawaitable(result):
            slot = _Slot()
            self._slots.append(slot)
            task = asyncio.ensure_future(
                self._await(result, slot, header.correlation_id, flexible_response, api_key, started)
            )
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            if len(self._slots) >= _MAX_IN_FLIGHT and not self._paused and self.transport:
                self._paused = True
                self.transport.pause_reading()
        elif result is NO_RESPONSE:
            self.broker.metrics_response(api_key, started)
        else:
            self._enqueue_ready(encode_response(header.correlation_id, result, flexible_response))
            self.broker.metrics_response(api_key, started)

    def _direct(self, frame: bytes) -> bool:
        """Answer ``frame`` through its API's direct handler (see DirectHandler), tried before
        the generic path; False if there is none for it or it declined."""
        if len(frame) < 8:
            return False
        api_key, version, correlation_id = _HEAD.unpack_from(frame)
        direct = self._direct_handlers.get(api_key)
        if direct is None or not is_supported(api_key, version):
            return False
        metered = self.broker.metrics is not None
        started = time.perf_counter() if metered else 0.0
        try:
            data = direct(frame, version, correlation_id)
        except DecodeError as e:
            self.abort(str(e))
            return True
        except Exception:
            log.exception("handler for api %d v%d failed; closing %s", api_key, version, self.peer)
            self.abort("internal error")
            return True
        if data is None:
            return False
        if metered:
            self.broker.metrics_request(api_key)
            self.broker.metrics_response(api_key, started)
        self._enqueue_ready(data)
        return True

    def _settle(
        self,
        slot: _Slot,
        correlation_id: int,
        flexible: bool,
        api_key: int,
        started: float,
        fut: asyncio.Future[Any],
    ) -> None:
        if self.closed:
            return
        if fut.cancelled():
            self.abort("request cancelled")
            return
        error = fut.exception()
        if error is not None:
            log.error("request failed; closing %s", self.peer, exc_info=error)
            self.abort("internal error")
            return
        response = fut.result()
        if response is not NO_RESPONSE:
            slot.data = encode_response(correlation_id, response, flexible)
        self.broker.metrics_response(api_key, started)
        slot.done = True
        self._flush()

    async def _await(
        self,
        result: Awaitable[Any],
        slot: _Slot,
        correlation_id: int,
        flexible: bool,
        api_key: int = -1,
        started: float = 0.0,
    ) -> None:
        try:
            response = await result
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("request failed; closing %s", self.peer)
            self.abort("internal error")
            return
        if response is not NO_RESPONSE:
            slot.data = encode_response(correlation_id, response, flexible)
        self.broker.metrics_response(api_key, started)
        slot.done = True
        self._flush()

    def _enqueue_ready(self, data: bytes) -> None:
        if not self._slots:
            self._out.append(data)
            self._schedule_write()
            return
        slot = _Slot()
        slot.data = data
        slot.done = True
        self._slots.append(slot)
        self._flush()

    def _flush(self) -> None:
        slots = self._slots
        out: list[bytes] = []
        while slots and slots[0].done:
            data = slots.popleft().data
            if data is not None:
                out.append(data)
        if out:
            self._send(out)
        if self._paused and len(slots) < _MAX_IN_FLIGHT // 2 and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()

    def _send(self, frames: list[bytes]) -> None:
        self._out.extend(frames)
        self._schedule_write()

    def _schedule_write(self) -> None:
        if not self._write_scheduled:
            self._write_scheduled = True
            self._loop.call_soon(self._write_out)

    def _write_out(self) -> None:
        self._write_scheduled = False
        out, self._out = self._out, []
        if out and self.transport is not None and not self.closed:
            self.transport.write(out[0] if len(out) == 1 else b"".join(out))

    def _api_versions_fallback(self, correlation_id: int) -> bytes:
        """UNSUPPORTED_VERSION in an ApiVersions v0 body listing what we support (KIP-511)."""
        cls = response_type(ApiKey.API_VERSIONS, 0)
        body = build(
            cls,
            error_code=ErrorCode.unsupported_version,
            api_keys=[
                dict(api_key=k, min_version=lo, max_version=hi)
                for k, (lo, hi) in sorted(SUPPORTED.items())
            ],
        )
        return encode_response(correlation_id, body, False)
