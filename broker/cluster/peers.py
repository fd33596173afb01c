"""Requests from this node to the other nodes of its cluster (the inter-node client).

The transaction coordinator sends WriteTxnMarkers to the leaders of partitions it does not lead,
a partition leader asks the coordinator of a transactional id whether a transactional batch
belongs to its transaction (AddPartitionsToTxn v4, verify only), and the leader of a data
partition sends its share partitions' state calls to their share coordinator
(broker/share/remote_persister.py). :class:`Peers` carries these:
one connection per peer node, opened on first use, reused by every later request (pipelined:
each waits for the response with its correlation id, in any number at once) and opened again
after it broke. A peer's address is the one the cluster view (``broker.cluster.view``) holds for
it on the listener named like this node's first listener; a peer found at a new address (it
restarted elsewhere) gets a new connection. Requests are encoded and responses decoded with the
codecs of ``protocol/``, with the request header Kafka's clients send.

Every failure to get an answer (no such live node, no address on that listener, connection
refused or broken, no response within the timeout) is a :class:`PeerUnavailable`: callers
treat it as a retriable error. A request that times out closes its connection, so that a
peer that stopped answering is connected to afresh.

Limits: only PLAINTEXT listeners carry inter-node requests. Over an SSL or SASL listener the
peer expects a TLS handshake or an authentication this client does not make; such a listener
makes every request fail with :class:`PeerUnavailable` saying so. Under an authorizer, the
peer's WriteTxnMarkers, AddPartitionsToTxn v4 and share-state handlers need CLUSTER_ACTION, which this
client's principal (``User:ANONYMOUS`` on a PLAINTEXT listener) only has if an ACL or
``super.users`` grants it.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from typing import Any

from kcoord.protocol import fastcodec
from kcoord.protocol.apis import is_flexible
from kcoord.protocol.codec import encode_body, request_type, response_type
from kcoord.protocol.responses import build

from .view import ClusterView

log = logging.getLogger("kcoord.cluster")

_SIZE = struct.Struct(">i")
_HEADER = struct.Struct(">hhih")  # api key, api version, correlation id, client id length
_API_VERSIONS = 18  # its response header never has tagged fields
_WARN_EVERY_S = 10.0


class PeerUnavailable(OSError):
    """The peer could not be asked, or did not answer in time (module docstring)."""


def encode_request(api_key: int, version: int, correlation: int, client_id: str, body: bytes) -> bytes:
    """A whole request frame: size, request header (v1, or v2 for flexible versions), body."""
    cid = client_id.encode()
    header = _HEADER.pack(api_key, version, correlation, len(cid)) + cid
    if is_flexible(api_key, version):
        header += b"\x00"  # no tagged fields
    return _SIZE.pack(len(header) + len(body)) + header + body


def decode_response(api_key: int, version: int, frame: bytes) -> tuple[int, Any]:
    """(correlation id, decoded body) of a response frame (without its size prefix)."""
    correlation = _SIZE.unpack_from(frame, 0)[0]
    pos = 4
    if is_flexible(api_key, version) and api_key != _API_VERSIONS:
        pos += 1  # the response header's empty tagged fields
    body, _ = fastcodec.decode(response_type(api_key, version), frame, pos)
    return int(correlation), body


class _Connection:
    """One peer connection: requests written as they come, responses matched by correlation."""

    def __init__(self, node_id: int, address: tuple[str, int], client_id: str) -> None:
        self.node_id = node_id
        self.address = address
        self.client_id = client_id
        self.closed = False
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task[None] | None = None
        self._opening: asyncio.Lock = asyncio.Lock()
        self._correlation = 0
        self._pending: dict[int, tuple[int, int, asyncio.Future[Any]]] = {}

    async def request(self, api_key: int, version: int, body: bytes, timeout_s: float) -> Any:
        deadline = time.monotonic() + timeout_s
        writer = await self._open(timeout_s)
        self._correlation = correlation = (self._correlation + 1) & 0x7FFFFFFF
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[correlation] = (api_key, version, future)
        try:
            writer.write(encode_request(api_key, version, correlation, self.client_id, body))
            return await asyncio.wait_for(future, max(0.0, deadline - time.monotonic()))
        except TimeoutError:
            self.close(f"no answer within {timeout_s:.1f} s")
            raise PeerUnavailable(
                f"node {self.node_id} ({self._where()}) did not answer within {timeout_s:.1f} s"
            ) from None
        finally:
            self._pending.pop(correlation, None)

    async def _open(self, timeout_s: float) -> asyncio.StreamWriter:
        async with self._opening:
            if self.closed:
                raise PeerUnavailable(f"the connection to node {self.node_id} is closed")
            if self._writer is None:
                try:
                    reader, writer = await asyncio.wait_for(
                        asyncio.open_connection(*self.address), timeout_s
                    )
                except (OSError, TimeoutError) as e:
                    self.closed = True
                    raise PeerUnavailable(
                        f"cannot connect to node {self.node_id} at {self._where()}: {e!r}"
                    ) from None
                self._writer = writer
                self._reader_task = asyncio.ensure_future(self._read(reader))
            return self._writer

    async def _read(self, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                size = _SIZE.unpack(await reader.readexactly(4))[0]
                frame = await reader.readexactly(size)
                correlation = _SIZE.unpack_from(frame, 0)[0]
                entry = self._pending.pop(correlation, None)
                if entry is None:
                    continue  # its request timed out already
                api_key, version, future = entry
                if not future.done():
                    try:
                        future.set_result(decode_response(api_key, version, frame)[1])
                    except Exception as e:  # noqa: BLE001 - an undecodable response: that request fails
                        future.set_exception(PeerUnavailable(f"bad response from node {self.node_id}: {e!r}"))
        except (OSError, EOFError, asyncio.IncompleteReadError) as e:
            self.close(f"connection lost: {e!r}")
        except asyncio.CancelledError:
            self.close("closing")
            raise

    def close(self, reason: str) -> None:
        """Close the connection; every request waiting on it fails with PeerUnavailable."""
        self.closed = True
        for _, _, future in self._pending.values():
            if not future.done():
                future.set_exception(PeerUnavailable(f"node {self.node_id}: {reason}"))
        self._pending.clear()
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        task = self._reader_task
        if task is not None and task is not asyncio.current_task():
            task.cancel()

    def _where(self) -> str:
        return f"{self.address[0]}:{self.address[1]}"


class Peers:
    """The connections of this node to the other live nodes (module docstring)."""

    def __init__(
        self,
        view: ClusterView,
        listener: str,
        security_protocol: str,
        timeout_s: float,
        client_id: str | None = None,
    ) -> None:
        self.view = view
        self.listener = listener
        self.security_protocol = security_protocol
        self.timeout_s = timeout_s
        self.client_id = client_id or f"kcoord-node-{view.node_id}"
        self._connections: dict[int, _Connection] = {}
        self._warned: dict[int, float] = {}

    async def request(self, node_id: int, api_key: int, version: int, **fields: Any) -> Any:
        """Send a request built from ``fields`` (as ``protocol.responses.build`` takes them) to
        node ``node_id`` and return its decoded response; PeerUnavailable if there is none."""
        body = encode_body(build(request_type(api_key, version), **fields))
        try:
            return await self._connection(node_id).request(api_key, version, body, self.timeout_s)
        except PeerUnavailable as e:
            now = time.monotonic()
            if now - self._warned.get(node_id, -_WARN_EVERY_S) >= _WARN_EVERY_S:
                self._warned[node_id] = now
                log.warning("request %d v%d to node %d failed (retried): %s", api_key, version,
                            node_id, e)
            raise

    def _connection(self, node_id: int) -> _Connection:
        if self.security_protocol != "PLAINTEXT":
            raise PeerUnavailable(
                f"inter-node requests need a PLAINTEXT first listener; {self.listener} is"
                f" {self.security_protocol}"
            )
        node = self.view.nodes.get(node_id)
        if node is None:
            raise PeerUnavailable(f"node {node_id} is not a live node")
        address = node.address(self.listener)
        if address is None:
            raise PeerUnavailable(f"node {node_id} has no listener named {self.listener}")
        conn = self._connections.get(node_id)
        if conn is None or conn.closed or conn.address != address:
            if conn is not None:
                conn.close("replaced")
            conn = self._connections[node_id] = _Connection(node_id, address, self.client_id)
        return conn

    async def close(self) -> None:
        for conn in self._connections.values():
            conn.close("shutting down")
        self._connections.clear()
        await asyncio.sleep(0)  # let the reader tasks see their cancellation
