"""The group runtime's side of resolving consumer groups' regular expressions
(:mod:`coordinator.consumer.regex_refresh` is the coordinator's).

After every shard operation the runtime hands the shard to :meth:`RegexResolver.take`, which
takes the resolutions its groups asked for and resolves each in a task of its own: the
patterns are compiled on the event loop (the coordinator's cache), matched against a snapshot
of the topic names, in a worker thread when there are many names to match (so a large topic
set never stalls the loop) or else on the loop in a later turn, filtered by what the asking
heartbeat's principal may describe (the authorizer is only asked on the loop), and given back
to the shard as an operation of its own (``GroupShard.regexes_resolved``), whose records go
through the usual write path. A result for a shard that has been replaced since (a reload, an
unload) is dropped: the new shard's groups ask again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from kcoord.coordinator.consumer.regex import compile_regexes, match_topics
from kcoord.coordinator.consumer.regex_refresh import RegexRequest, RegexResult
from kcoord.coordinator.shard import GroupShard

from ..data.topics import TopicStore
from .write_path import ShardRuntime

log = logging.getLogger("kcoord.coordinator")

ON_LOOP_CHECKS = 20_000
"""Pattern-by-name checks a resolution may do on the event loop; more go to a worker thread."""

Apply = Callable[[ShardRuntime, GroupShard, RegexResult], None]


class RegexResolver:
    def __init__(self, topics: TopicStore, apply: Apply) -> None:
        self._topics = topics
        self._apply = apply
        self._tasks: set[asyncio.Task[None]] = set()

    def take(self, sr: ShardRuntime) -> None:
        """Start resolving what the shard's groups asked for since the last call."""
        shard = sr.shard
        for request in shard.take_regex_requests():
            task = asyncio.ensure_future(self._resolve(sr, shard, request))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _resolve(self, sr: ShardRuntime, shard: GroupShard, request: RegexRequest) -> None:
        store = self._topics
        version = store.version
        names = list(store.topics)
        started = int(time.time() * 1000)
        try:
            compiled = compile_regexes(request.regexes)
            if len(names) * len(compiled) > ON_LOOP_CHECKS:
                matched = await asyncio.to_thread(match_topics, compiled, names)
            else:
                await asyncio.sleep(0)  # after the operation that asked, as Kafka's executor
                matched = match_topics(compiled, names)
            allowed = request.describable
            topics = {
                pattern: tuple(name for name in matched.get(pattern, ()) if allowed(name))
                for pattern in request.regexes
            }
            result = RegexResult(request.group_id, topics, version, started)
        except Exception:  # a name of its own: the group must not wait for it forever
            log.exception("group %s: resolving its regular expressions failed", request.group_id)
            result = RegexResult(request.group_id, {}, version, started, failed=True)
        log.debug(
            "group %s: %d regular expressions matched against %d topics in %.1f ms",
            request.group_id,
            len(request.regexes),
            len(names),
            time.time() * 1000 - started,
        )
        if sr.shard is shard:
            self._apply(sr, shard, result)

    def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
