"""One client connection: frames in, requests dispatched, responses out in request order.

Requests on a connection are handled concurrently (a parked JoinGroup or a long-polling Fetch
does not hold up the next request), but their responses are written in the order the requests
arrived, as Kafka clients require. The hottest requests (Heartbeat, OffsetFetch v0-v7,
ApiVersions) have a direct handler that decodes the frame itself and returns the whole response
frame, skipping the header object, the kio entity and the response builder; it may decline
(None), and then the generic path answers. Bad input (oversized or negative size prefix, an
unparseable header or body, an unknown API, a response that cannot be encoded) closes this
connection with one log line; nothing else is affected.

What one client can hold is bounded (the hardening limits, README "Limits"):

* frames are handled a few at a time (:data:`_FRAMES_PER_PASS`, :data:`_PASS_SECONDS`); when a
  pass ends with frames left the connection stops reading and continues in a later turn of the
  event loop, so a client pipelining thousands of requests takes turns with everyone else;
* at most ``queued.max.requests`` requests received and not yet answered; past it, and while
  answers ready to go out exceed :data:`_MAX_HELD_BYTES` or the socket's send buffer is full
  (``pause_writing``), the connection reads and handles nothing more until answers drain;
* a request larger than 64 KiB reserves its size in the broker-wide ``queued.max.request.bytes``
  budget (broker/net/admission.py) before the rest of it is read;
* a request must arrive within ``socket.request.receive.timeout.ms`` of its first byte (the
  broker's sweep closes connections that take longer), not counting time the broker itself
  spent not reading.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import struct
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, cast

from kcoord.protocol.apis import SUPPORTED, ApiKey, is_flexible, is_supported
from kcoord.protocol.codec import DecodeError, decode_request, encode_response, response_type
from kcoord.protocol.errors import ErrorCode
from kcoord.protocol.framing import Frame, FrameDecoder, FrameError
from kcoord.protocol.headers import HeaderError, RequestHeader, parse_request_header
from kcoord.protocol.responses import build

from ..config import Config
from ..security.acl.model import AclAuthorizer, Operation, ResourceType, operations_bits
from ..services import MetricsHooks
from .admission import SMALL_REQUEST, RequestMemory
from .limits import ConnectionLimits
from .listeners import ANONYMOUS, Listener, principal_of
from .offload import gc_paused

log = logging.getLogger("kcoord.connection")

_FRAMES_PER_PASS = 64
"""Frames handled in one turn of the event loop before the connection lets others go."""
_PASS_SECONDS = 0.005
"""...or this much time after its 8th frame (the clock is read every 8), whichever is first."""
_MAX_HELD_BYTES = 8 * 1024 * 1024
"""Answers ready but not yet handed to the socket, above which nothing more is handled."""
_SEND_BUFFER_HIGH = 1024 * 1024
"""The transport's write buffer size at which it asks us to stop (``pause_writing``)."""

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

    def allowed(self, op: Operation, rtype: ResourceType, name: str, quiet: bool = False) -> bool:
        """Whether the client may do ``op`` on the resource (always, without an authorizer).
        ``quiet``: a refusal only filters what is shown, it is not counted as a denial."""
        authorizer = self.connection.authorizer
        return authorizer is None or authorizer.authorize(
            self.connection.principal, self.client_host, op, rtype, name, quiet
        )

    def authorized_operations(self, rtype: ResourceType, name: str) -> int:
        """The authorized-operations bit field of a describe answer for this resource."""
        authorizer = self.connection.authorizer
        if authorizer is None:
            return operations_bits(rtype)
        return authorizer.authorized_operations(
            self.connection.principal, self.client_host, rtype, name
        )


Handler = Callable[[RequestContext, Any], Any]
DirectHandler = Callable[[Frame, int, int, str], "bytes | None"]
"""``(frame, version, correlation_id, client_host)`` -> the whole response frame, or None to
fall back to the generic path. For the hottest requests: decodes the frame itself, answers at
once."""

_HEAD = struct.Struct(">hhi")
_BEFORE_AUTHENTICATION = frozenset(
    (ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE)
)


@dataclass(frozen=True, slots=True)
class ConnectionServices:
    """What every connection of a listener is handed; built by broker/app.py."""

    config: Config
    handlers: Mapping[int, Handler]
    """The generic path: a handler per API key, given the decoded request."""
    direct_handlers: Mapping[int, DirectHandler]
    """The hot path, tried first for the APIs that have one (see DirectHandler)."""
    open_connections: set[Connection]
    """The broker's set of open connections: a connection is in it from connection_made to
    connection_lost (the broker sweeps it for slow requests and closes it at shutdown)."""
    request_memory: RequestMemory
    """The broker-wide ``queued.max.request.bytes`` budget (broker/net/admission.py)."""
    metrics: MetricsHooks
    """Requests by API and their latency (broker/services.py)."""
    listener: Listener
    """The listener the connections came in on (its advertised address, its security)."""
    limits: ConnectionLimits
    """The broker-wide connection counts and limits (broker/net/limits.py)."""
    authorizer: AclAuthorizer | None = None
    """Decides on each request from the ACLs; None: no authorizer, everything is allowed."""


class _Slot:
    __slots__ = ("data", "done")

    def __init__(self) -> None:
        self.done = False
        self.data: bytes | None = None


class Connection(asyncio.Protocol):
    def __init__(self, services: ConnectionServices) -> None:
        config = services.config
        self.decoder = FrameDecoder(config["socket.request.max.bytes"])
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self.client_host = ""
        self.listener = services.listener
        self.principal = ANONYMOUS
        """Who the client is: its SASL user, its TLS certificate's subject, or anonymous."""
        self.authenticated = not services.listener.sasl
        """False on a SASL listener until SaslAuthenticate succeeds (broker/security/sasl/api.py)."""
        self.sasl_mechanism: str | None = None
        self.sasl_raw: Callable[[Connection, bytes], Awaitable[bytes | None]] | None = None
        """After a SaslHandshake v0: what answers the bare SASL tokens that follow (the next
        frames are tokens, not requests, until the login succeeds)."""
        self.authorizer = services.authorizer
        self.sasl_exchange: Any = None
        self._limits = services.limits
        self._refused = services.metrics.refused
        self._admitted = False
        self.last_active = time.monotonic()
        """When the client last sent something (connections.max.idle.ms)."""
        self._slots: deque[_Slot] = deque()
        self._tasks: set[asyncio.Task[Any]] = set()
        self.closed = False
        # Responses ready to go out, written together once per event-loop pass: a client
        # pipelining many requests gets one write (one syscall) instead of one per response.
        self._out: list[bytes] = []
        self._write_scheduled = False
        self._loop = asyncio.get_running_loop()
        # What the per-request path uses, bound here once (no attribute hops per request).
        self._handlers = services.handlers
        self._direct_handlers = services.direct_handlers
        self._open_connections = services.open_connections
        self._request_memory = services.request_memory
        self._metered = services.metrics.enabled
        self._on_request = services.metrics.request
        self._on_response = services.metrics.response
        self._max_elements: int = config["socket.request.max.elements"]
        self._max_in_flight: int = config["queued.max.requests"]
        # Flow control (module docstring).
        self._held = 0  # bytes of answers ready but not yet handed to the transport
        self._writing_paused = False  # the transport's send buffer is full
        self._reading = True
        self._pass_scheduled = False
        self._reserved = 0  # bytes of the request memory budget held for the frame arriving
        self.partial_since: float | None = None
        """When the frame being received started arriving (monotonic), while we read."""

    # asyncio.Protocol -------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self.transport.set_write_buffer_limits(high=_SEND_BUFFER_HIGH)
        peer = transport.get_extra_info("peername")
        if peer:
            self.client_host = str(peer[0])
            self.peer = f"{peer[0]}:{peer[1]}"
        refused = self._limits.admit(self.client_host)
        if refused is not None:
            log.warning("refusing connection %s: %s", self.peer, refused[1])
            self._refused(refused[0])
            self.closed = True
            self.transport.abort()
            return
        self._admitted = True
        if self.listener.tls:  # the handshake is done by now
            self.principal = principal_of(transport.get_extra_info("peercert"))
        self._open_connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._admitted:
            self._admitted = False
            self._limits.release(self.client_host)
        self.closed = True
        self.partial_since = None
        self._open_connections.discard(self)
        memory = self._request_memory
        memory.forget(self)
        if self._reserved:
            reserved, self._reserved = self._reserved, 0
            memory.release(reserved)
        for task in list(self._tasks):
            task.cancel()

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
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
        to read on (:meth:`_flow`). This runs for every request: locals, and _busy() inlined."""
        self._pass_scheduled = False
        next_frame = self.decoder.next_frame
        direct = self._direct
        slots = self._slots
        max_in_flight = self._max_in_flight
        budget = _FRAMES_PER_PASS
        deadline = 0.0  # set at the 8th frame: most passes handle fewer
        handled = False
        while (
            len(slots) < max_in_flight
            and self._held < _MAX_HELD_BYTES
            and not self._writing_paused
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
            if not budget & 7:
                now = time.perf_counter()
                if not deadline:
                    deadline = now + _PASS_SECONDS
                elif not budget or now >= deadline:
                    break
        if handled:
            self.partial_since = None  # a frame arrived whole; the next one starts its clock
        if self._reading and self.decoder.idle and not self.closed:
            return  # the usual end of a pass: all handled, nothing half-arrived, reading on
        self._flow()

    def _busy(self) -> bool:
        """Too much is in flight or waiting to be sent: handle nothing more for now."""
        return (
            len(self._slots) >= self._max_in_flight
            or self._writing_paused
            or self._held >= _MAX_HELD_BYTES
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

    def _wake(self) -> None:
        """Answers drained: carry on with frames held back by :meth:`_busy`."""
        if not self._reading and not self._pass_scheduled and not self.closed and not self._busy():
            self._pass_scheduled = True
            self._loop.call_soon(self._pass)

    # request handling ---------------------------------------------------------------------------
    def close_later(self, delay_s: float) -> None:
        """Close once ``delay_s`` has passed (the answers written by then go out first)."""
        self._set_reading(False)
        self._loop.call_later(delay_s, self._close_gently)

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

    def _on_frame(self, frame: Frame) -> bool:
        """Handle one request; True if its answer comes from a task just started (a Fetch, a
        Produce awaiting its fsync, an admin fan-out): the pass then ends, so that the task's
        first step runs, and its answer counts in the bytes held, before the next request is
        handled. Pipelined Fetches thus build one answer at a time, not a pass worth."""
        if self.sasl_raw is not None:
            return self._on_raw_token(self.sasl_raw, bytes(frame))
        if len(frame) < 8:
            self.abort("frame shorter than a request header")
            return False
        api_key, version, correlation_id = _HEAD.unpack_from(frame)
        if not is_supported(api_key, version):
            if api_key == ApiKey.API_VERSIONS:
                self._enqueue_ready(self._api_versions_fallback(correlation_id))
                return False
            self.abort(f"unsupported api {api_key} version {version}")
            return False
        if not self.authenticated and api_key not in _BEFORE_AUTHENTICATION:
            self.abort(f"api {api_key} before SASL authentication")
            return False
        flexible = is_flexible(api_key, version)
        try:
            header, body_at = parse_request_header(frame, flexible)
        except HeaderError as e:
            self.abort(f"bad request header: {e}")
            return False
        handler = self._handlers.get(api_key)
        if handler is None:
            self.abort(f"no handler for api {api_key}")
            return False
        try:
            if len(frame) > SMALL_REQUEST:
                # Many objects at once: see broker/net/offload.py on the collector.
                with gc_paused():
                    request = decode_request(api_key, version, frame, body_at, self._max_elements)
            else:
                request = decode_request(api_key, version, frame, body_at, self._max_elements)
        except DecodeError as e:
            self.abort(str(e))
            return False
        ctx = RequestContext(header, self.client_host, self)
        # ApiVersions responses always use header v0 (KIP-511).
        flexible_response = flexible and api_key != ApiKey.API_VERSIONS
        self._on_request(api_key)
        started = time.perf_counter()
        try:
            result = handler(ctx, request)
        except Exception:
            log.exception("handler for api %d v%d failed; closing %s", api_key, version, self.peer)
            self.abort("internal error")
            return False
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
        elif inspect.isawaitable(result):
            slot = _Slot()
            self._slots.append(slot)
            task = asyncio.ensure_future(
                self._await(result, slot, header.correlation_id, flexible_response, api_key, started)
            )
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            return True
        elif result is NO_RESPONSE:
            self._on_response(api_key, started)
        else:
            data = self._encode(header.correlation_id, result, flexible_response, api_key)
            if data is not None:
                self._enqueue_ready(data)
                self._on_response(api_key, started)
        return False

    def _on_raw_token(
        self, answer: Callable[[Connection, bytes], Awaitable[bytes | None]], token: bytes
    ) -> bool:
        """A bare SASL token (SaslHandshake v0): answered with a bare size-prefixed token."""
        slot = _Slot()
        self._slots.append(slot)

        async def run() -> None:
            try:
                reply = await answer(self, token)
            except Exception:
                log.exception("SASL token failed; closing %s", self.peer)
                self.abort("internal error")
                return
            if reply is None or self.closed:
                return  # the login failed: the connection is closing
            slot.data = struct.pack(">i", len(reply)) + reply
            self._held += len(slot.data)
            slot.done = True
            self._flush()

        task = asyncio.ensure_future(run())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return True

    def _encode(self, correlation_id: int, response: Any, flexible: bool, api_key: int) -> bytes | None:
        """The response frame; None (and the connection closed) if it cannot be encoded."""
        try:
            return encode_response(correlation_id, response, flexible)
        except Exception:
            log.exception("response to api %d cannot be encoded; closing %s", api_key, self.peer)
            self.abort("internal error")
            return None

    def _direct(self, frame: Frame) -> bool:
        """Answer ``frame`` through its API's direct handler (see DirectHandler), tried before
        the generic path; False if there is none for it or it declined."""
        if len(frame) < 8:
            return False
        api_key, version, correlation_id = _HEAD.unpack_from(frame)
        direct = self._direct_handlers.get(api_key)
        if direct is None or not is_supported(api_key, version) or not self.authenticated:
            return False
        metered = self._metered
        started = time.perf_counter() if metered else 0.0
        try:
            data = direct(frame, version, correlation_id, self.client_host)
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
            self._on_request(api_key)
            self._on_response(api_key, started)
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
        self._complete(slot, correlation_id, fut.result(), flexible, api_key, started)

    async def _await(
        self,
        result: Awaitable[Any],
        slot: _Slot,
        correlation_id: int,
        flexible: bool,
        api_key: int,
        started: float,
    ) -> None:
        try:
            response = await result
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("request failed; closing %s", self.peer)
            self.abort("internal error")
            return
        self._complete(slot, correlation_id, response, flexible, api_key, started)

    def _complete(
        self,
        slot: _Slot,
        correlation_id: int,
        response: Any,
        flexible: bool,
        api_key: int,
        started: float,
    ) -> None:
        """A request of the generic path has its answer: into its slot, out in order."""
        if self.closed:
            return
        if response is not NO_RESPONSE:
            data = self._encode(correlation_id, response, flexible, api_key)
            if data is None:
                return
            slot.data = data
            self._held += len(data)
        self._on_response(api_key, started)
        slot.done = True
        self._flush()

    def _enqueue_ready(self, data: bytes) -> None:
        self._held += len(data)
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
        if not out:
            return
        data = out[0] if len(out) == 1 else b"".join(out)
        self._held -= len(data)
        if self.transport is not None and not self.closed:
            self.transport.write(data)
        self._wake()

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
