"""The metrics port's HTTP/1.1 connections: how many are held, how long each may take, and how
a request head is read and an answer written (what is answered is broker/metrics/prometheus.py's
and the console's business).

One request per connection (every answer says ``Connection: close``), so there is no keep-alive
to time out. Only a POST's body is read (the console's actions), at most :data:`MAX_BODY` bytes
and within the request timeout; a longer one is answered 413 from its head alone. Three bounds keep slow or idle clients from holding the
broker's descriptors (the Kafka listeners' ``max.connections`` does not count these):

- ``metrics.max.connections``: connections held at once; a new one past it is answered 503 and
  closed right away, without reading anything from it;
- ``metrics.request.timeout.ms``: from the accept, the whole request head (request line and
  headers) must have arrived; a client that trickles bytes or sends nothing is disconnected
  once it has passed, however busy it looks;
- ``metrics.response.timeout.ms``: from the moment the answer is ready, the client must have
  taken all of it; one that stops reading is disconnected (its unsent bytes dropped).

Each disconnection counts in ``kcoord_connections_refused_total`` under ``reason=`` one of
:data:`OVER_LIMIT`, :data:`REQUEST_TIMEOUT`, :data:`RESPONSE_TIMEOUT`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

log = logging.getLogger("kcoord.metrics")

OVER_LIMIT = "metrics_max_connections"
REQUEST_TIMEOUT = "metrics_request_timeout"
RESPONSE_TIMEOUT = "metrics_response_timeout"

MAX_HEADERS = 100
"""Header lines read past the request line; one more is a 400."""
MAX_BODY = 16384
"""The largest request body read (a POST's); a longer one is answered 413."""
KEPT_HEADERS = frozenset({b"host", b"origin", b"referer", b"x-csrf-token", b"content-type"})
"""The headers kept besides Authorization (the console's checks of a POST)."""
_WARN_EVERY_S = 60.0
"""Refusals over the limit are logged at most this often (a flood would flood the log)."""

REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    404: "Not Found",
    403: "Forbidden",
    405: "Method Not Allowed",
    409: "Conflict",
    413: "Content Too Large",
    503: "Service Unavailable",
}

Answer = tuple[int, str, bytes]
"""Status, content type and body."""


@dataclass(frozen=True, slots=True)
class HttpLimits:
    """The three bounds (see the module's docstring), times in seconds."""

    max_connections: int = 100
    request_timeout: float = 10.0
    response_timeout: float = 30.0


@dataclass(frozen=True, slots=True)
class Request:
    """What is read of a request head."""

    method: str
    path: str
    authorization: str | None
    host: str
    """The client's address."""
    headers: dict[str, str] = field(default_factory=dict)
    """Those of :data:`KEPT_HEADERS` (lower-case names)."""
    body: bytes = b""
    """A POST's body."""


class _BadHead(Exception):
    """A head over the reader's line limit (64 KiB) or with too many headers: answered 400
    (413 for a body over :data:`MAX_BODY`)."""

    status = 400


def render(method: str, answer: Answer, extra_headers: str = "") -> bytes:
    """The bytes of an answer (without its body for HEAD)."""
    status, ctype, body = answer
    head = (
        f"HTTP/1.1 {status} {REASONS[status]}\r\nContent-Type: {ctype}\r\n"
        f"{extra_headers}Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode("latin-1")
    return head if method == "HEAD" else head + body


_FULL = render(
    "GET",
    (503, "text/plain; charset=utf-8", b"too many connections (metrics.max.connections)\n"),
)


class HttpConnections:
    """The ``asyncio.start_server`` callback of the metrics port, with its bounds.

    ``handle`` answers a request: its answer and any extra header lines (each ending in CRLF).
    ``refused`` is told the reason of each disconnection (the metrics' hook)."""

    def __init__(
        self,
        handle: Callable[[Request], Awaitable[tuple[Answer, str]]],
        limits: HttpLimits,
        refused: Callable[[str], None],
    ) -> None:
        self._handle = handle
        self.limits = limits
        self._refused = refused
        self.open = 0
        """Connections held now."""
        self._unlogged = 0
        self._warned_at = -_WARN_EVERY_S

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.open >= self.limits.max_connections:
            self._refuse(writer)
            return
        self.open += 1
        try:
            await self._exchange(reader, writer)
        except (ConnectionError, UnicodeDecodeError, asyncio.IncompleteReadError):
            writer.transport.abort()
        except Exception:
            log.exception("metrics request failed")
            writer.transport.abort()
        finally:
            self.open -= 1
            writer.close()  # nothing left to send by now (or aborted): the descriptor goes

    def _refuse(self, writer: asyncio.StreamWriter) -> None:
        # The short answer fits the socket's buffer: written at once, then closed.
        writer.write(_FULL)
        writer.close()
        self._refused(OVER_LIMIT)
        self._unlogged += 1
        now = time.monotonic()
        if now - self._warned_at >= _WARN_EVERY_S:
            log.warning(
                "metrics port: %d connection(s) refused, metrics.max.connections (%d) reached",
                self._unlogged,
                self.limits.max_connections,
            )
            self._unlogged = 0
            self._warned_at = now

    async def _exchange(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        host = str(peer[0]) if peer else ""
        try:
            async with asyncio.timeout(self.limits.request_timeout):
                request = await _read_head(reader, host)
        except TimeoutError:
            self._refused(REQUEST_TIMEOUT)
            writer.transport.abort()
            return
        except _BadHead as e:
            request = Request("GET", "", None, host)
            answer: Answer = (e.status, "text/plain; charset=utf-8", b"request too large\n")
            extra = ""
        else:
            if request is None:  # no request line: nothing to answer
                return
            answer, extra = await self._handle(request)
        writer.write(render(request.method, answer, extra))
        try:
            async with asyncio.timeout(self.limits.response_timeout):
                await writer.drain()
        except TimeoutError:
            self._refused(RESPONSE_TIMEOUT)
            writer.transport.abort()  # a plain close would wait for the client to read


async def _read_head(reader: asyncio.StreamReader, host: str) -> Request | None:
    """The request line and headers (Authorization and :data:`KEPT_HEADERS` are kept), and a
    POST's body; None without a request line."""
    headers: dict[str, str] = {}
    length = 0
    try:
        line = await reader.readline()
        authorization = None
        for _ in range(MAX_HEADERS + 1):
            header = await reader.readline()
            if header in (b"\r\n", b"\n", b""):
                break
            name, sep, value = header.partition(b":")
            if not sep:
                continue
            name = name.strip().lower()
            if name == b"authorization":
                authorization = value.strip().decode("latin-1")
            elif name in KEPT_HEADERS:
                headers[name.decode()] = value.strip().decode("latin-1")
            elif name == b"content-length":
                text = value.strip()
                length = int(text) if text.isdigit() and len(text) < 12 else MAX_BODY + 1
        else:
            raise _BadHead("too many headers")
    except ValueError as e:  # a line over the reader's limit
        raise _BadHead(str(e)) from e
    parts = line.decode("latin-1").split()
    if len(parts) < 2:
        return None
    method = parts[0].upper()
    body = b""
    if method == "POST" and length:
        if length > MAX_BODY:
            too_long = _BadHead(f"body over {MAX_BODY} bytes")
            too_long.status = 413
            raise too_long
        body = await reader.readexactly(length)
    return Request(method, parts[1], authorization, host, headers, body)
