"""Work bounded per turn of the event loop (issue 34, finding 11): a connection's pass over
pipelined frames ends after a request that took a while, and a shard fires a bounded number of
timers per call."""

from __future__ import annotations

import asyncio
import importlib.util
import struct
from pathlib import Path
from types import ModuleType

import pytest

import kcoord.broker.net
from kcoord.broker.net.admission import RequestMemory
from kcoord.coordinator.timers import TimerKind, Timers
from kcoord.protocol.framing import Frame


class _Transport:
    def __init__(self) -> None:
        self.reading = True

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def is_closing(self) -> bool:
        return False


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _source_module() -> ModuleType:
    """broker/net/frame_loop.py loaded from its source: in the compiled build FrameLoop is a
    compiled class, which a class written here cannot subclass."""
    path = Path(kcoord.broker.net.__path__[0]) / "frame_loop.py"
    spec = importlib.util.spec_from_file_location("kcoord.broker.net._frame_loop_source", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


frame_loop = _source_module()


class _Heavy(frame_loop.FrameLoop):  # type: ignore[name-defined,misc]
    """Every frame takes 20 ms of (fake) time; the passes are counted by the frames they took."""

    def __init__(self, clock: _Clock) -> None:
        super().__init__(1 << 20, 10_000, RequestMemory(1 << 30))
        self.transport = _Transport()  # type: ignore[assignment]
        self.clock = clock
        self.handled: list[int] = []
        self.passes: list[int] = []

    def _pass(self) -> None:
        before = len(self.handled)
        super()._pass()
        self.passes.append(len(self.handled) - before)

    def _direct(self, frame: Frame) -> bool:
        return False

    def _on_frame(self, frame: Frame) -> bool:
        self.handled.append(struct.unpack(">i", bytes(frame[:4]))[0])
        self.clock.now += 0.020
        return False


def test_a_pass_ends_after_a_frame_that_took_longer_than_a_pass_may(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = _Clock()
    monkeypatch.setattr(frame_loop.time, "perf_counter", clock)

    async def run() -> _Heavy:
        conn = _Heavy(clock)
        conn.data_received(b"".join(struct.pack(">ii", 4, i) for i in range(20)))
        for _ in range(100):
            if len(conn.handled) == 20:
                break
            await asyncio.sleep(0)
        return conn

    conn = asyncio.run(run())
    assert conn.handled == list(range(20))  # all of them, in order
    assert conn.passes[:20] == [1] * 20  # one heavy frame per turn of the loop, not eight


def _timers(fired: list[str]) -> Timers:
    timers = Timers()
    timers.register(
        1, TimerKind(live=lambda e: True, fire=lambda e, now: fired.append(e[3]))
    )
    return timers


def test_fire_due_fires_at_most_the_limit_in_deadline_order_and_the_rest_later() -> None:
    fired: list[str] = []
    timers = _timers(fired)
    for i in range(50):
        timers.push(100 + i, 1, f"m{i:02d}")
    timers.push(10_000, 1, "later")
    timers.fire_due(1000, limit=16)
    assert fired == [f"m{i:02d}" for i in range(16)]
    assert timers.next_wakeup() == 116  # still due: the runtime comes back a turn later
    timers.fire_due(1000, limit=16)
    timers.fire_due(1000, limit=16)
    timers.fire_due(1000, limit=16)
    assert fired == [f"m{i:02d}" for i in range(50)]
    assert timers.next_wakeup() == 10_000


def test_fire_due_without_a_limit_fires_everything_due() -> None:
    fired: list[str] = []
    timers = _timers(fired)
    for i in range(50):
        timers.push(100 + i, 1, f"m{i:02d}")
    timers.fire_due(1000)
    assert len(fired) == 50
