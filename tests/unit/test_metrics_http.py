"""The metrics port's connection bounds (broker/metrics/http.py), in process: the limit on
connections held, the request-head deadline, the answer deadline. tests/abuse/test_metrics_port.py
runs the same against a broker process under a descriptor limit."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from kcoord.broker.metrics.http import (
    OVER_LIMIT,
    REQUEST_TIMEOUT,
    RESPONSE_TIMEOUT,
    Answer,
    HttpConnections,
    HttpLimits,
    Request,
)

OK: Answer = (200, "text/plain; charset=utf-8", b"ok\n")


async def _ok(_request: Request) -> tuple[Answer, str]:
    return OK, ""


@asynccontextmanager
async def serving(
    limits: HttpLimits,
    handle: Callable[[Request], Awaitable[tuple[Answer, str]]] = _ok,
) -> AsyncIterator[tuple[HttpConnections, int, list[str]]]:
    refused: list[str] = []
    conns = HttpConnections(handle, limits, refused.append)
    server = await asyncio.start_server(conns.serve, "127.0.0.1", 0)
    try:
        yield conns, int(server.sockets[0].getsockname()[1]), refused
    finally:
        server.close()


async def until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.01)


async def get(port: int, head: bytes = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n") -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(head)
    async with asyncio.timeout(5):
        answer = await reader.read()  # to the end: the server closes after one answer
    writer.close()
    return answer


async def test_a_request_is_answered_and_the_connection_closed() -> None:
    async with serving(HttpLimits()) as (conns, port, refused):
        answer = await get(port)
        assert answer.startswith(b"HTTP/1.1 200 OK\r\n") and b"Connection: close\r\n" in answer
        assert answer.endswith(b"\r\n\r\nok\n")
        head_only = await get(port, b"HEAD /healthz HTTP/1.1\r\n\r\n")
        assert head_only.endswith(b"Content-Length: 3\r\nConnection: close\r\n\r\n")
        too_many = b"GET / HTTP/1.1\r\n" + b"X: y\r\n" * 101 + b"\r\n"
        assert (await get(port, too_many)).startswith(b"HTTP/1.1 400 Bad Request\r\n")
        await until(lambda: conns.open == 0)
        assert refused == []


async def test_past_the_limit_a_connection_is_answered_503_at_once() -> None:
    async with serving(HttpLimits(max_connections=2, request_timeout=60)) as (conns, port, refused):
        held = [await asyncio.open_connection("127.0.0.1", port) for _ in range(2)]
        await until(lambda: conns.open == 2)
        # Answered before it sends anything (what it sent would be unread at the close, which
        # then resets the connection: the 503 is a courtesy, the close is the point).
        answer = await get(port, b"")
        assert answer.startswith(b"HTTP/1.1 503 Service Unavailable\r\n")
        assert answer.endswith(b"too many connections (metrics.max.connections)\n")
        assert refused == [OVER_LIMIT]
        for _, writer in held:
            writer.close()
        await until(lambda: conns.open == 0)
        assert (await get(port)).startswith(b"HTTP/1.1 200 OK\r\n")


async def test_a_head_trickled_past_the_request_timeout_is_cut_off() -> None:
    async with serving(HttpLimits(request_timeout=0.3)) as (conns, port, refused):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        idle_reader, idle_writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /healthz HTTP/1.1\r\n")
        loop = asyncio.get_running_loop()
        started = loop.time()
        with_header = 0
        while not reader.at_eof() and loop.time() - started < 5:
            try:
                writer.write(b"X-Slow: 1\r\n")  # a header line every 50 ms
                with_header += 1
            except ConnectionError:
                break
            try:
                async with asyncio.timeout(0.05):
                    await reader.read(100)
            except TimeoutError:
                pass
            except ConnectionError:
                break
        assert loop.time() - started < 2, "the trickling client was kept"
        assert with_header > 2
        async with asyncio.timeout(2):
            assert await idle_reader.read() == b""  # the one that sent nothing, too
        await until(lambda: conns.open == 0)
        assert refused == [REQUEST_TIMEOUT, REQUEST_TIMEOUT]
        writer.close()
        idle_writer.close()


async def test_a_client_not_taking_its_answer_is_cut_off() -> None:
    big: Answer = (200, "text/plain; charset=utf-8", b"x" * (64 << 20))

    async def handle(_request: Request) -> tuple[Answer, str]:
        return big, ""

    limits = HttpLimits(response_timeout=0.3)
    async with serving(limits, handle) as (conns, port, refused):
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.setblocking(False)
        loop = asyncio.get_running_loop()
        await loop.sock_connect(sock, ("127.0.0.1", port))
        await loop.sock_sendall(sock, b"GET /metrics HTTP/1.1\r\n\r\n")
        await until(lambda: conns.open == 1)
        await until(lambda: conns.open == 0, timeout=5)  # never read: disconnected
        assert refused == [RESPONSE_TIMEOUT]
        sock.close()
