"""The group runtime's regex resolver (broker/groups/regex_resolver.py) on a real shard and event
loop: what a heartbeat asked for is resolved after the heartbeat's own operation, matched in a
worker thread when the topic set is large (the event loop stays free), filtered by the asking
principal, and handed back to the shard as an operation of its own; a result for a shard that
was replaced meanwhile is dropped."""

from __future__ import annotations

import asyncio
import threading
import uuid
from typing import Any

import pytest

from kcoord.broker.groups import regex_resolver as resolver_module
from kcoord.broker.groups.regex_resolver import RegexResolver
from kcoord.broker.groups.write_path import ShardRuntime
from kcoord.coordinator.config import GroupConfig
from kcoord.coordinator.consumer.messages import ConsumerGroupHeartbeatRequest
from kcoord.coordinator.consumer.topics import StaticTopics
from kcoord.coordinator.output import Output
from kcoord.coordinator.shard import GroupShard


class Store:
    """The two things the resolver reads of the topic store: the names and the version."""

    def __init__(self, view: StaticTopics) -> None:
        self._view = view

    @property
    def version(self) -> int:
        return self._view.version

    @property
    def topics(self) -> dict[str, Any]:
        return {name: None for name in self._view.names()}


def _setup(n_topics: int) -> tuple[ShardRuntime, StaticTopics, list[Output]]:
    view = StaticTopics({"lit": 1, **{f"rx-{i:05d}": 1 for i in range(n_topics)}, "hidden-rx-x": 1})
    shard = GroupShard(0, GroupConfig(), topics=view)
    shard.finish_loading(0)
    return ShardRuntime(0, shard), view, []


def _join(sr: ShardRuntime, describable: Any = None) -> None:
    req = ConsumerGroupHeartbeatRequest(
        group_id="g",
        member_id=str(uuid.uuid4()),
        member_epoch=0,
        rebalance_timeout_ms=5000,
        subscribed_topic_names=("lit",),
        subscribed_topic_regex=".*rx-.*",
        topic_partitions=(),
        describable=describable,
    )
    sr.shard.consumer_group_heartbeat("h", req, 0)


@pytest.mark.parametrize("big", [False, True])
def test_the_resolution_lands_later_as_its_own_operation(big: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    sr, view, outputs = _setup(50)
    threads: list[int] = []
    real_match = resolver_module.match_topics

    def match(compiled: Any, names: Any) -> Any:
        threads.append(threading.get_ident())
        return real_match(compiled, names)

    monkeypatch.setattr(resolver_module, "match_topics", match)
    monkeypatch.setattr(resolver_module, "ON_LOOP_CHECKS", 10 if big else 10**9)

    async def run() -> None:
        resolver = RegexResolver(Store(view), lambda sr_, shard, result: outputs.append(
            shard.regexes_resolved(result, 0)))  # type: ignore[arg-type]
        _join(sr, describable=lambda name: not name.startswith("hidden"))
        group = sr.shard.consumer_group("g")
        assert group is not None and group.regexes == {}
        resolver.take(sr)
        assert outputs == []  # not within the operation that asked
        while not outputs:
            await asyncio.sleep(0.01)
        loop_thread = threading.get_ident()
        assert (threads[0] != loop_thread) is big
        assert len(group.regexes[".*rx-.*"].topics) == 50  # hidden-rx-x is not describable
        assert [len(out.records) for out in outputs] == [2]  # record 16, then record 3

    asyncio.run(run())


def test_a_result_for_a_replaced_shard_is_dropped() -> None:
    sr, view, outputs = _setup(3)

    async def run() -> None:
        resolver = RegexResolver(Store(view), lambda sr_, shard, result: outputs.append(
            shard.regexes_resolved(result, 0)))  # type: ignore[arg-type]
        _join(sr)
        resolver.take(sr)
        sr.shard = GroupShard(0, GroupConfig(), topics=view)  # a reload took its place
        await asyncio.sleep(0.05)
        assert outputs == []

    asyncio.run(run())
