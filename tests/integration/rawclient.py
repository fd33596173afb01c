"""A minimal blocking Kafka client for tests that need exact control over the bytes sent."""

from __future__ import annotations

import socket
import struct
from collections.abc import Callable
from typing import Any

from kio.serial import entity_reader

from kcoord.protocol.apis import is_flexible
from kcoord.protocol.codec import encode_body, request_type, response_type
from kcoord.protocol.errors import ErrorCode
from kcoord.protocol.responses import build

from .harness import wait_for


def _error_codes(response: Any) -> list[int]:
    """The error codes of a response: its coordinators' (FindCoordinator v4+), or its own."""
    coordinators = getattr(response, "coordinators", None)
    if coordinators:
        return [int(c.error_code) for c in coordinators]
    return [int(response.error_code)]


def once_coordinator_exists(send: Callable[[], Any], timeout: float = 30.0) -> Any:
    """The response of ``send()`` (one request), sent again while it is
    COORDINATOR_NOT_AVAILABLE, as a real client does: on a fresh broker the coordinator's
    internal topic (``__consumer_offsets``, ``__transaction_state``) is created at its first use
    and FindCoordinator and InitProducerId answer that until it exists (Kafka's answer too)."""

    def answered() -> list[Any] | None:
        response = send()
        if ErrorCode.coordinator_not_available in _error_codes(response):
            return None
        return [response]

    got = wait_for(answered, timeout, what="the coordinator's internal topic")
    return got[0]  # type: ignore[index]


class RawClient:
    def __init__(self, port: int, timeout: float = 10.0, source: str | None = None) -> None:
        """Connect to the broker's ``port`` on loopback (from the address ``source``, another
        loopback address, when given)."""
        self.sock = socket.create_connection(
            ("127.0.0.1", port), timeout=timeout, source_address=(source, 0) if source else None
        )
        self.correlation = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send(self, api_key: int, version: int, body: bytes, client_id: str = "raw") -> int:
        self.correlation += 1
        cid = client_id.encode()
        header = struct.pack(">hhih", api_key, version, self.correlation, len(cid)) + cid
        if is_flexible(api_key, version):
            header += b"\x00"
        payload = header + body
        self.sock.sendall(struct.pack(">i", len(payload)) + payload)
        return self.correlation

    def recv_frame(self) -> bytes:
        size = struct.unpack(">i", self._exact(4))[0]
        return self._exact(size)

    def _exact(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("connection closed")
            out += chunk
        return bytes(out)

    def request(self, api_key: int, version: int, **fields: Any) -> Any:
        """Send a request built from ``fields`` and decode its response."""
        return self.response(api_key, version, self.send_request(api_key, version, **fields))

    def request_coordinated(self, api_key: int, version: int, **fields: Any) -> Any:
        """:meth:`request`, sent again while the coordinator's internal topic is being created
        (:func:`once_coordinator_exists`)."""
        return once_coordinator_exists(lambda: self.request(api_key, version, **fields))

    def send_request(self, api_key: int, version: int, **fields: Any) -> int:
        """Send a request built from ``fields``; its correlation id."""
        return self.send(api_key, version, encode_body(build(request_type(api_key, version), **fields)))

    def response(self, api_key: int, version: int, correlation: int) -> Any:
        """Read and decode the response to the request ``correlation``."""
        frame = self.recv_frame()
        got = struct.unpack_from(">i", frame, 0)[0]
        assert got == correlation, (got, correlation)
        pos = 4
        if is_flexible(api_key, version) and api_key != 18:
            pos += 1  # empty tagged fields of response header v1
        value, _ = entity_reader(response_type(api_key, version))(frame, pos)
        return value

    def closed_by_peer(self, timeout: float = 10.0) -> bool:
        """True once the broker has closed this connection (reads EOF or a reset)."""
        self.sock.settimeout(timeout)
        try:
            while True:
                data = self.sock.recv(65536)
                if not data:
                    return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except TimeoutError:
            return False
