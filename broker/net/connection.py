"""One client connection: frames in, requests dispatched, responses out in request order.

Requests on a connection are handled concurrently (a parked JoinGroup or a long-polling Fetch
does not hold up the next request), but their responses are written in the order the requests
arrived, as Kafka clients require. The hottest requests (Heartbeat, OffsetFetch v0-v7,
ApiVersions, and JoinGroup and SyncGroup, which create a group) have a direct handler that decodes
the frame itself and returns the whole response frame, or the shard's future of the answer with
what writes it, skipping the header object, the kio entity and the response builder; it may
decline (None), and then the generic path answers. Bad input (oversized or negative size prefix, an
unparseable header or body, an unknown API, a response that cannot be encoded) closes this
connection with one log line; nothing else is affected.

:class:`Connection` is what a request means and who sent it (admission, TLS and SASL identity,
the handlers, answers that come later); reading the frames, flow control and writing the
answers out in order are its base class, broker/net/frame_loop.py's :class:`FrameLoop`, which
also describes what one client can hold.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import struct
import time
from collections.abc import Awaitable, Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Any, cast

from kcoord.protocol.apis import SUPPORTED, ApiKey, is_flexible, is_supported
from kcoord.protocol.codec import DecodeError, decode_request, encode_response, response_type
from kcoord.protocol.errors import ErrorCode
from kcoord.protocol.framing import Frame
from kcoord.protocol.headers import HeaderError, RequestHeader, parse_request_header
from kcoord.protocol.responses import build

from ..config import Config
from ..security.acl.model import AclAuthorizer, Operation, ResourceType, operations_bits
from ..services import MetricsHooks
from .admission import SMALL_REQUEST, RequestMemory
from .frame_loop import SEND_BUFFER_HIGH, FrameLoop, ResponseSlot
from .limits import ConnectionLimits
from .listeners import ANONYMOUS, Listener, principal_of
from .offload import off_loop

log = logging.getLogger("kcoord.connection")

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
Deferred = tuple["asyncio.Future[Any]", Callable[[Any], bytes]]
"""An answer still to come: the future of the coordinator's reply, and what turns that reply
into the whole response frame."""
DirectHandler = Callable[[Frame, int, int, str], "bytes | Deferred | None"]
"""``(frame, version, correlation_id, client_host)`` -> the whole response frame, or the
:data:`Deferred` one (a parked JoinGroup, a SyncGroup awaiting its fsync), or None to fall back
to the generic path (only before acting on the request). For the hottest requests: decodes the
frame itself, skips the header object, the kio entity and the response builder."""

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


class Connection(FrameLoop):
    def __init__(self, services: ConnectionServices) -> None:
        config = services.config
        super().__init__(
            config["socket.request.max.bytes"], config["queued.max.requests"], services.request_memory
        )
        self.client_host = ""
        self.listener = services.listener
        self.principal = ANONYMOUS
        """Who the client is: its SASL user, its TLS certificate's subject, or anonymous."""
        self.authenticated = not services.listener.sasl
        """False on a SASL listener until SaslAuthenticate succeeds (broker/security/sasl/api.py)."""
        self._queued_max: int = config["queued.max.requests"]
        if not self.authenticated:
            # Until the login succeeds, one request at a time, as Kafka reads the next SASL
            # message only once the last is answered: a pipelined guess waits for the verdict
            # on the one before it, and a failed login closes the connection before it is read.
            self._max_in_flight = 1
        self.sasl_mechanism: str | None = None
        self.sasl_raw: Callable[[Connection, bytes], Awaitable[bytes | None]] | None = None
        """After a SaslHandshake v0: what answers the bare SASL tokens that follow (the next
        frames are tokens, not requests, until the login succeeds)."""
        self.authorizer = services.authorizer
        self.sasl_exchange: Any = None
        self._limits = services.limits
        self._refused = services.metrics.refused
        self._admitted = False
        self._tasks: set[asyncio.Task[Any]] = set()
        # What the per-request path uses, bound here once (no attribute hops per request).
        self._handlers = services.handlers
        self._direct_handlers = services.direct_handlers
        self._open_connections = services.open_connections
        self._metered = services.metrics.enabled
        self._on_request = services.metrics.request
        self._on_response = services.metrics.response
        self._max_elements: int = config["socket.request.max.elements"]
        self._close_hooks: dict[Hashable, Callable[[], None]] = {}

    def on_close(self, key: Hashable, hook: Callable[[], None]) -> None:
        """Have ``hook`` called once when this connection closes (one hook per ``key``; at
        once if it is closed already): state a client holds through it, such as its share
        sessions, goes with it."""
        if self.closed:
            hook()
            return
        self._close_hooks.setdefault(key, hook)

    def logged_in(self, principal: str) -> None:
        """The SASL login succeeded: ``principal`` is the client, and its requests are served
        (and may be pipelined) from now on."""
        self.authenticated = True
        self.principal = principal
        if not self._closing:
            self._max_in_flight = self._queued_max

    # asyncio.Protocol -------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self.transport.set_write_buffer_limits(high=SEND_BUFFER_HIGH)
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
        hooks, self._close_hooks = self._close_hooks, {}
        for hook in hooks.values():
            try:
                hook()
            except Exception:
                log.exception("a close hook of %s failed", self.peer)

    # request handling ---------------------------------------------------------------------------
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
        except HeaderError as bad_header:  # a name of its own: see below
            self.abort(f"bad request header: {bad_header}")
            return False
        handler = self._handlers.get(api_key)
        if handler is None:
            self.abort(f"no handler for api {api_key}")
            return False
        if len(frame) > SMALL_REQUEST:
            # Tens of thousands of entries take tens of milliseconds to decode: done in the
            # worker, this connection handling nothing more meanwhile (its requests reach
            # their handlers in the order they came), its answer keeping its place.
            slot = ResponseSlot()
            self._slots.append(slot)
            self.hold_frames()
            decoding = off_loop(decode_request, api_key, version, frame, body_at, self._max_elements)
            decoding.add_done_callback(
                functools.partial(self._decoded, header, api_key, handler, flexible, slot)
            )
            return True
        try:
            request = decode_request(api_key, version, frame, body_at, self._max_elements)
        except DecodeError as bad_body:
            # Not `e` again: compiled, one name bound by two except clauses has the first one's
            # type, and the second binding raised TypeError (a traceback per bad request).
            self.abort(str(bad_body))
            return False
        return self._handle(header, api_key, handler, flexible, request, None)

    def _decoded(
        self,
        header: RequestHeader,
        api_key: int,
        handler: Handler,
        flexible: bool,
        slot: ResponseSlot,
        decoding: asyncio.Future[Any],
    ) -> None:
        """A request decoded in the worker (:meth:`_on_frame`): handled, then the frames
        after it."""
        if self.closed:
            return
        if decoding.cancelled():
            self.abort("request cancelled")
            return
        error = decoding.exception()
        if error is not None:
            if isinstance(error, DecodeError):
                self.abort(str(error))
            else:
                log.error("decoding failed; closing %s", self.peer, exc_info=error)
                self.abort("internal error")
            return
        self._handle(header, api_key, handler, flexible, decoding.result(), slot)
        self.release_frames()

    def _handle(
        self,
        header: RequestHeader,
        api_key: int,
        handler: Handler,
        flexible: bool,
        request: Any,
        slot: ResponseSlot | None,
    ) -> bool:
        """Run ``request``'s handler and see its answer into ``slot`` (None: a slot is taken
        if the answer comes later, else it goes out at once); True if a task was started."""
        ctx = RequestContext(header, self.client_host, self)
        # ApiVersions responses always use header v0 (KIP-511).
        flexible_response = flexible and api_key != ApiKey.API_VERSIONS
        self._on_request(api_key)
        started = time.perf_counter()
        try:
            result = handler(ctx, request)
        except Exception:
            log.exception("handler for api %d v%d failed; closing %s", api_key, ctx.version, self.peer)
            self.abort("internal error")
            return False
        if isinstance(result, asyncio.Future):
            # An answer still to come from the coordinator (GroupRuntime.submit, then()): a
            # callback, not a task, carries it to the slot.
            if slot is None:
                slot = ResponseSlot()
                self._slots.append(slot)
            result.add_done_callback(
                functools.partial(
                    self._settle, slot, header.correlation_id, flexible_response, api_key, started
                )
            )
        elif inspect.isawaitable(result):
            if slot is None:
                slot = ResponseSlot()
                self._slots.append(slot)
            task = asyncio.ensure_future(
                self._await(result, slot, header.correlation_id, flexible_response, api_key, started)
            )
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            return True
        elif slot is not None:
            self._complete(slot, header.correlation_id, result, flexible_response, api_key, started)
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
        slot = ResponseSlot()
        self._slots.append(slot)

        async def run() -> None:
            try:
                reply = await answer(self, token)
            except Exception:
                log.exception("SASL token failed; closing %s", self.peer)
                self.abort("internal error")
                return
            if self.closed:
                return
            if reply is None:  # the login failed: no answer, the connection is closing
                slot.done = True
                self._flush()
                return
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
        if isinstance(data, tuple):
            slot = ResponseSlot()
            self._slots.append(slot)
            fut, encode = data
            fut.add_done_callback(functools.partial(self._settle_direct, slot, encode, api_key, started))
            return True
        if metered:
            self._on_response(api_key, started)
        self._enqueue_ready(data)
        return True

    def _settle_direct(
        self,
        slot: ResponseSlot,
        encode: Callable[[Any], bytes],
        api_key: int,
        started: float,
        fut: asyncio.Future[Any],
    ) -> None:
        """A deferred direct answer came: its frame into its slot, out in order."""
        if self.closed or self._failed(fut):
            return
        try:
            data = encode(fut.result())
        except Exception:
            log.exception("response to api %d cannot be encoded; closing %s", api_key, self.peer)
            self.abort("internal error")
            return
        slot.data = data
        self._held += len(data)
        if self._metered:
            self._on_response(api_key, started)
        slot.done = True
        self._flush()

    def _settle(
        self,
        slot: ResponseSlot,
        correlation_id: int,
        flexible: bool,
        api_key: int,
        started: float,
        fut: asyncio.Future[Any],
    ) -> None:
        if self.closed or self._failed(fut):
            return
        self._complete(slot, correlation_id, fut.result(), flexible, api_key, started)

    def _failed(self, fut: asyncio.Future[Any]) -> bool:
        """Whether a request's work was cancelled or failed; the connection is closed then."""
        if fut.cancelled():
            self.abort("request cancelled")
            return True
        error = fut.exception()
        if error is not None:
            log.error("request failed; closing %s", self.peer, exc_info=error)
            self.abort("internal error")
            return True
        return False

    async def _await(
        self,
        result: Awaitable[Any],
        slot: ResponseSlot,
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
        slot: ResponseSlot,
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
