"""broker/data/internal_topic.py: an internal topic created on first use in a worker thread (the
loop serves meanwhile, the owner answers COORDINATOR_NOT_AVAILABLE), over a real files engine;
and broker/net/offload.py's TurnBudget, which spreads the shards' timers over turns."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from kcoord.broker.data.internal_topic import InternalTopic
from kcoord.broker.data.topics import Topic, TopicError, TopicStore
from kcoord.broker.net.offload import TurnBudget
from kcoord.protocol.errors import ErrorCode
from kcoord.storage.file_engine import FileEngine

NAME = "__transaction_state"


def _store(data_dir: Path) -> TopicStore:
    engine = FileEngine(data_dir)
    engine.start()
    return TopicStore(engine, 1 << 20)


def _gated(store: TopicStore, gate: threading.Event, started: threading.Event) -> None:
    """The store's storage work waits (in its worker thread) until ``gate`` is set."""
    build = store.build

    def gated_build(res):  # type: ignore[no-untyped-def]
        started.set()
        assert gate.wait(10)
        return build(res)

    store.build = gated_build  # type: ignore[method-assign]


async def test_created_in_a_worker_while_the_loop_serves(tmp_path: Path) -> None:
    store = _store(tmp_path / "data")
    gate, started = threading.Event(), threading.Event()
    _gated(store, gate, started)
    opened: list[Topic] = []
    internal = InternalTopic(store, NAME, 5, 1 << 20, opened.append)

    assert not internal.ensure()  # the creation starts: not there yet
    creating = internal.creating
    assert creating is not None
    assert await asyncio.to_thread(started.wait, 10)
    # The storage work is held in its thread, and the loop goes on: every use meanwhile is
    # answered at once (False: COORDINATOR_NOT_AVAILABLE), and starts no second creation.
    for _ in range(3):
        await asyncio.sleep(0)
        assert not internal.ensure()
        assert internal.creating is creating
    assert store.get(NAME) is None and not opened

    gate.set()
    assert await internal.wait()
    assert internal.ensure() and internal.creating is None
    assert [t.name for t in opened] == [NAME] and len(opened[0].partitions) == 5
    assert store.get(NAME) is opened[0]
    assert sorted(p.name for p in (tmp_path / "data").iterdir() if p.name.startswith(NAME)) == [
        f"{NAME}-{p}" for p in range(5)
    ]


async def test_a_failed_creation_is_tried_again_on_use(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store = _store(tmp_path / "data")
    build = store.build
    failures = [TopicError(ErrorCode.kafka_storage_error, "disk full")]

    def failing_once(res):  # type: ignore[no-untyped-def]
        if failures:
            raise failures.pop()
        return build(res)

    store.build = failing_once  # type: ignore[method-assign]
    internal = InternalTopic(store, NAME, 3, 1 << 20, lambda topic: None)
    assert not await internal.wait()  # failed: logged, nothing registered
    assert internal.topic is None and internal.creating is None and store.get(NAME) is None
    assert "could not create __transaction_state" in caplog.text
    assert await internal.wait()  # the next use tries again
    assert internal.topic is not None and len(internal.topic.partitions) == 3


async def test_a_stored_topic_is_opened_at_start_up(tmp_path: Path) -> None:
    store = _store(tmp_path / "data")
    assert await InternalTopic(store, NAME, 4, 1 << 20, lambda topic: None).wait()
    store.close()
    again = _store(tmp_path / "data")
    opened: list[Topic] = []
    internal = InternalTopic(again, NAME, 4, 1 << 20, opened.append)
    internal.open_now()  # start-up: on the calling thread
    assert internal.ensure() and len(opened) == 1 and len(opened[0].partitions) == 4


async def test_turn_budget_defers_to_the_next_turn() -> None:
    budget = TurnBudget(limit_s=0.010)
    loop = asyncio.get_running_loop()
    ran: list[tuple[int, bool]] = []  # (turn, budget used up when it came)
    turn = 0

    def callback(i: int) -> None:
        if budget.used_up():
            loop.call_soon(callback, i)  # deferred: a later turn
            return
        ran.append((turn, False))
        budget.charge(0.004)  # each costs 4 ms: three fit in a turn's 10 ms

    for i in range(7):
        loop.call_soon(callback, i)
    while len(ran) < 7:
        await asyncio.sleep(0)  # one turn of the loop
        turn += 1
    per_turn: dict[int, int] = {}
    for t, _ in ran:
        per_turn[t] = per_turn.get(t, 0) + 1
    assert sorted(per_turn.values(), reverse=True)[0] <= 3
    assert sum(per_turn.values()) == 7 and len(per_turn) >= 3
