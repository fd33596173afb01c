"""Raw Kafka requests for bench/compare.py: frames built once, sent over asyncio connections.

The client side must stay light so that the brokers, not the bench, are measured: requests are
encoded before the clock starts, responses are only split into frames (a sample of them is decoded
to check error codes), and the event loop is uvloop's when it is installed.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import struct
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from kio.serial import entity_reader

from kcoord.protocol.apis import is_flexible
from kcoord.protocol.codec import encode_body, request_type, response_type
from kcoord.protocol.responses import build

T = TypeVar("T")
_SIZE = struct.Struct(">i")
CLIENT_ID = b"kcoord-bench"

# The versions the bench speaks, per API: the newest all three brokers answer. The mock advertises
# ApiVersions v2, OffsetFetch v6, JoinGroup v6 and SyncGroup v4 at most, and closes the connection
# on JoinGroup v6 and SyncGroup v4 (its flexible versions) all the same. Checked against each broker.
# ConsumerGroupHeartbeat (KIP-848) v1: the member names itself, as Kafka 4 clients do.
VERSIONS = {18: 2, 12: 4, 9: 6, 11: 5, 14: 3, 8: 8, 68: 1}
API_NAMES = {18: "ApiVersions", 12: "Heartbeat", 9: "OffsetFetch", 11: "JoinGroup", 14: "SyncGroup", 8: "OffsetCommit",
             68: "ConsumerGroupHeartbeat"}

# A ConsumerProtocolSubscription / ConsumerProtocolAssignment v0 with no topics and no user data.
EMPTY_CONSUMER_PROTOCOL = b"\x00\x00" + b"\x00\x00\x00\x00" + b"\xff\xff\xff\xff"
MEMBER_ID_REQUIRED = 79


def run(coro: Awaitable[T]) -> T:
    try:
        import uvloop

        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            return runner.run(coro)  # type: ignore[arg-type]
    except ImportError:
        return asyncio.run(coro)  # type: ignore[arg-type]


def frame(api_key: int, version: int, correlation: int, **fields: Any) -> bytes:
    body = encode_body(build(request_type(api_key, version), **fields))
    header = struct.pack(">hhih", api_key, version, correlation, len(CLIENT_ID)) + CLIENT_ID
    if is_flexible(api_key, version):
        header += b"\x00"
    return _SIZE.pack(len(header) + len(body)) + header + body


def decode(api_key: int, version: int, payload: bytes) -> Any:
    """A response frame's body (``payload`` without the size prefix)."""
    pos = 4
    if is_flexible(api_key, version) and api_key != 18:
        pos += 1  # response header v1: empty tagged fields
    value, _ = entity_reader(response_type(api_key, version))(payload, pos)
    return value


def error_codes(response: Any) -> list[int]:
    """Every error code in a response: top level and per partition."""
    out: list[int] = []
    code = getattr(response, "error_code", None)
    if code is not None:
        out.append(int(code))
    for topic in getattr(response, "topics", ()) or ():
        for part in getattr(topic, "partitions", ()) or ():
            out.append(int(part.error_code))
    return out


async def supported_versions(port: int) -> dict[int, tuple[int, int]]:
    conn = await Conn.open(port, prime=False)
    try:
        resp = await conn.request(18, 0)
    finally:
        conn.close()
    return {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in resp.api_keys}


class Conn:
    """One request at a time, decoded: for setting things up, not for measuring."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.correlation = 0

    @classmethod
    async def open(cls, port: int, prime: bool = True) -> Conn:
        """Connect; with ``prime``, also wait for one ApiVersions round trip, because
        librdkafka's mock can leave the first request on a new connection unanswered for a
        while (a second, or until its next timer)."""
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        conn = cls(reader, writer)
        if prime:
            await conn.request(18, 0)
        return conn

    async def request(self, api_key: int, version: int, **fields: Any) -> Any:
        self.correlation += 1
        self.writer.write(frame(api_key, version, self.correlation, **fields))
        size = _SIZE.unpack(await self.reader.readexactly(4))[0]
        payload = await self.reader.readexactly(size)
        got = _SIZE.unpack_from(payload)[0]
        if got != self.correlation:
            raise RuntimeError(f"correlation {got} != {self.correlation}")
        return decode(api_key, version, payload)

    def close(self) -> None:
        self.writer.close()


class Member:
    """A group member joined with raw JoinGroup + SyncGroup (the only member, so the leader)."""

    def __init__(self, group: str, member_id: str, generation: int) -> None:
        self.group = group
        self.member_id = member_id
        self.generation = generation

    def heartbeat_frame(self, correlation: int, version: int = VERSIONS[12]) -> bytes:
        return frame(12, version, correlation, group_id=self.group, generation_id=self.generation,
                     member_id=self.member_id, group_instance_id=None)


async def join(conn: Conn, group: str, session_timeout_ms: int, rebalance_timeout_ms: int,
               versions: dict[int, int] = VERSIONS) -> Member:
    """Join ``group`` alone (as its leader) and sync it; Tansu takes half the session timeout."""
    member_id = ""
    for _ in range(3):  # the second round answers MEMBER_ID_REQUIRED (KIP-394)
        resp = await conn.request(
            11, versions[11], group_id=group, session_timeout=session_timeout_ms,
            rebalance_timeout=rebalance_timeout_ms, member_id=member_id, group_instance_id=None,
            protocol_type="consumer", protocols=[dict(name="range", metadata=EMPTY_CONSUMER_PROTOCOL)],
        )
        code = int(resp.error_code)
        if code == MEMBER_ID_REQUIRED:
            member_id = resp.member_id
            continue
        if code != 0:
            raise RuntimeError(f"JoinGroup {group}: error {code}")
        member_id, generation = resp.member_id, int(resp.generation_id)
        break
    else:
        raise RuntimeError(f"JoinGroup {group}: no member id after 3 rounds")
    resp = await conn.request(
        14, versions[14], group_id=group, generation_id=generation, member_id=member_id,
        group_instance_id=None, assignments=[dict(member_id=member_id, assignment=EMPTY_CONSUMER_PROTOCOL)],
    )
    if int(resp.error_code) != 0:
        raise RuntimeError(f"SyncGroup {group}: error {int(resp.error_code)}")
    return Member(group, member_id, generation)


class ConsumerMember:
    """A KIP-848 group member joined with a raw ConsumerGroupHeartbeat (the group's only member)."""

    def __init__(self, group: str, member_id: str, epoch: int) -> None:
        self.group = group
        self.member_id = member_id
        self.epoch = epoch

    def heartbeat_frame(self, correlation: int, version: int = VERSIONS[68]) -> bytes:
        """A steady heartbeat: nothing changed, so every optional field is null."""
        return frame(68, version, correlation, group_id=self.group, member_id=self.member_id,
                     member_epoch=self.epoch, rebalance_timeout=-1, topic_partitions=None)


async def join_consumer(conn: Conn, group: str, topic: str, rebalance_timeout_ms: int,
                        versions: dict[int, int] = VERSIONS) -> ConsumerMember:
    """Join ``group`` (KIP-848) subscribed to ``topic``, then acknowledge the assignment the
    first answer gave, so that later heartbeats are steady ones."""
    member_id = str(uuid.uuid4())
    resp = await conn.request(
        68, versions[68], group_id=group, member_id=member_id, member_epoch=0,
        rebalance_timeout=rebalance_timeout_ms, subscribed_topic_names=[topic], topic_partitions=[],
    )
    if int(resp.error_code) != 0:
        raise RuntimeError(f"ConsumerGroupHeartbeat {group}: error {int(resp.error_code)}")
    member_id, epoch = resp.member_id or member_id, int(resp.member_epoch)
    owned = [dict(topic_id=t.topic_id, partitions=list(t.partitions)) for t in resp.assignment.topic_partitions] \
        if resp.assignment is not None else []
    resp = await conn.request(
        68, versions[68], group_id=group, member_id=member_id, member_epoch=epoch,
        rebalance_timeout=-1, topic_partitions=owned,
    )
    if int(resp.error_code) != 0:
        raise RuntimeError(f"ConsumerGroupHeartbeat {group}: error {int(resp.error_code)}")
    return ConsumerMember(group, member_id, int(resp.member_epoch))


class _Pipeline(asyncio.Protocol):
    """Keeps ``depth`` requests in flight on one connection until the deadline or the budget.

    On connecting it sends one ApiVersions and waits for the answer (``ready``), so that the
    measurement starts on connections the broker has fully taken on: librdkafka's mock can leave a
    request sent right after connecting unanswered for about a second.
    """

    def __init__(self, frames: Sequence[bytes], depth: int, budget: int,
                 check: Callable[[bytes], list[int]] | None, sample_every: int,
                 latencies: list[float] | None = None) -> None:
        self.frames = frames
        # With ``latencies``: each request's round trip, from the time it was written (depth 1
        # measures the broker's answer time; deeper pipelines add the wait behind the others).
        self.latencies = latencies
        self.sent_at: collections.deque[float] = collections.deque()
        self.depth = depth
        self.deadline = 0.0
        self.budget = budget  # requests this connection may send
        self.check = check
        self.sample_every = sample_every
        self.priming = True
        self.sent = 0
        self.done = 0
        self.errors = 0
        self.checked = 0
        self.buf = bytearray()
        self.transport: asyncio.Transport | None = None
        loop = asyncio.get_running_loop()
        self.ready: asyncio.Future[None] = loop.create_future()
        self.finished: asyncio.Future[None] = loop.create_future()

    def _send(self, n: int) -> None:
        n = min(n, self.budget - self.sent)
        if n <= 0:
            return
        frames, count = self.frames, len(self.frames)
        start = self.sent
        assert self.transport is not None
        self.transport.write(b"".join(frames[(start + i) % count] for i in range(n)))
        self.sent += n
        if self.latencies is not None:
            self.sent_at.extend([time.perf_counter()] * n)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        transport.write(_PRIME)  # type: ignore[attr-defined]

    def start(self, deadline: float) -> None:
        self.deadline = deadline
        self._send(self.depth)
        if self.sent == 0:
            self.finished.set_result(None)

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        pos, completed, size_of = 0, 0, len(buf)
        if self.priming:
            if size_of < 4 or size_of < 4 + _SIZE.unpack_from(buf)[0]:
                return
            pos = 4 + _SIZE.unpack_from(buf)[0]
            self.priming = False
            self.ready.set_result(None)
        while size_of - pos >= 4:
            size = _SIZE.unpack_from(buf, pos)[0]
            end = pos + 4 + size
            if end > size_of:
                break
            if self.check is not None and (self.done + completed) % self.sample_every == 0:
                self.checked += 1
                if any(self.check(bytes(buf[pos + 4:end]))):
                    self.errors += 1
            completed += 1
            pos = end
        if pos:
            del buf[:pos]
        if not completed:
            return
        self.done += completed
        now = time.perf_counter()
        if self.latencies is not None:
            sent_at, record = self.sent_at.popleft, self.latencies.append
            for _ in range(completed):
                record(now - sent_at())
        if now < self.deadline:
            self._send(completed)
        if self.done >= self.sent and not self.finished.done():
            self.finished.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        for fut in (self.ready, self.finished):
            if not fut.done():
                fut.set_exception(exc or ConnectionError("closed by the broker"))


_PRIME = frame(18, 0, 0)


async def pipelined(port: int, frames_per_conn: Sequence[Sequence[bytes]], depth: int, seconds: float,
                    budget: int | Sequence[int], check: Callable[[bytes], list[int]] | None = None,
                    sample_every: int = 1000, cpu: Callable[[], float] | None = None,
                    latencies: bool = False) -> dict[str, Any]:
    """Pipeline pre-encoded frames over one connection per entry of ``frames_per_conn``.

    Each connection keeps ``depth`` requests in flight, cycling over its frames, until
    ``seconds`` have passed or it has sent its ``budget`` of requests (one number for all, or one
    per connection); then it waits for what is in flight. The clock starts once every connection
    is open and has answered one ApiVersions; ``cpu`` (the broker's CPU seconds) is read when it
    starts and when it stops, as is this process's. With ``latencies``, the answer also has the
    round-trip percentiles of every request (``latency_ms``).
    """
    loop = asyncio.get_running_loop()
    budgets = [budget] * len(frames_per_conn) if isinstance(budget, int) else list(budget)
    protocols: list[_Pipeline] = []
    try:
        for frames, b in zip(frames_per_conn, budgets, strict=True):
            factory = functools.partial(_Pipeline, frames, depth, b, check, sample_every,
                                        [] if latencies else None)
            _, proto = await loop.create_connection(factory, "127.0.0.1", port)
            protocols.append(proto)
        await asyncio.wait_for(asyncio.gather(*(p.ready for p in protocols)), 60)
        cpu0 = cpu() if cpu else 0.0
        own0 = time.process_time()
        started = time.perf_counter()
        for p in protocols:
            p.start(started + seconds)
        await asyncio.wait_for(asyncio.gather(*(p.finished for p in protocols)), seconds + 60)
        elapsed = time.perf_counter() - started
        own = time.process_time() - own0
        broker_cpu = cpu() - cpu0 if cpu else None
    finally:
        for p in protocols:
            if p.transport is not None:
                p.transport.close()
    out: dict[str, Any] = {
        "requests": sum(p.done for p in protocols),
        "seconds": elapsed,
        "broker_cpu_s": broker_cpu,
        "bench_cpu_s": own,
        "checked": sum(p.checked for p in protocols),
        "errors": sum(p.errors for p in protocols),
    }
    if latencies:
        out["latency_ms"] = percentiles_ms([t for p in protocols for t in p.latencies or ()])
    return out


def percentiles_ms(seconds: list[float]) -> dict[str, float] | None:
    """p50, p99, p99.9 and max of ``seconds``, in milliseconds."""
    if not seconds:
        return None
    seconds.sort()
    last = len(seconds) - 1
    pick = {"p50": 0.50, "p99": 0.99, "p999": 0.999}
    out = {name: round(seconds[min(last, int(q * len(seconds)))] * 1000, 3) for name, q in pick.items()}
    out["max"] = round(seconds[-1] * 1000, 3)
    return out


def checker(api_key: int, version: int) -> Callable[[bytes], list[int]]:
    def check(payload: bytes) -> list[int]:
        return [c for c in error_codes(decode(api_key, version, payload)) if c != 0]

    return check


async def gather_bounded(jobs: Sequence[Callable[[], Awaitable[T]]], seconds: float) -> list[T | BaseException]:
    """Run the jobs concurrently; the ones not done within ``seconds`` are cancelled (TimeoutError)."""
    tasks = [asyncio.ensure_future(j()) for j in jobs]
    done, pending = await asyncio.wait(tasks, timeout=seconds) if tasks else (set(), set())
    for t in pending:
        t.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    out: list[T | BaseException] = []
    for t in tasks:
        if t in pending:
            out.append(TimeoutError(f"not done within {seconds}s"))
        elif t.exception() is not None:
            out.append(t.exception())  # type: ignore[arg-type]
        else:
            out.append(t.result())
    return out
