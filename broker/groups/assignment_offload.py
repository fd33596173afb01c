"""The group runtime's side of offloaded target assignments (KIP-1263;
:mod:`coordinator.consumer.batching` is the coordinator's), and :class:`OffLoop`, everything the
shards ask to run off the event loop (these and the regex resolutions of regex_resolver.py).

After every shard operation the runtime hands the shard to :meth:`OffLoop.take`;
:meth:`AssignmentOffload.take` takes the target computations its consumer groups asked for and
runs each group's assignor over
the snapshot the coordinator took (``coordinator.consumer.target.run_job``, pure) in a worker
thread of its own, one run at a time, so that the event loop keeps serving every other client
while a large group is assigned. The result goes back to the shard as an operation of its own
(``GroupShard.assignment_computed``), whose records go through the usual write path. A result
for a shard that has been replaced since (a reload, an unload) is dropped: the new shard's
groups compute again at their next heartbeat.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from kcoord.coordinator.consumer.target import AssignmentResult, run_job
from kcoord.coordinator.output import Output
from kcoord.coordinator.shard import GroupShard

from ..data.topics import TopicStore
from .regex_resolver import RegexResolver
from .write_path import ShardRuntime

log = logging.getLogger("kcoord.coordinator")

Process = Callable[[ShardRuntime, Output], None]


class AssignmentOffload:
    def __init__(self, process: Process, now_ms: Callable[[], int]) -> None:
        self._process = process
        self._now_ms = now_ms
        self._tasks: set[asyncio.Task[None]] = set()
        # One thread: runs queue behind each other instead of taking turns at the GIL with the
        # event loop two at a time.
        self._executor: ThreadPoolExecutor | None = None

    def take(self, sr: ShardRuntime) -> None:
        """Start the computations the shard's groups asked for since the last call."""
        shard = sr.shard
        for request in shard.take_assignment_requests():
            if self._executor is None:
                self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kcoord-assign")
            loop = asyncio.get_running_loop()
            future = loop.run_in_executor(self._executor, run_job, request.job)
            task = asyncio.ensure_future(self._land(sr, shard, future))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _land(
        self, sr: ShardRuntime, shard: GroupShard, future: asyncio.Future[AssignmentResult]
    ) -> None:
        result = await future
        if sr.shard is shard:
            self._process(sr, sr.shard.assignment_computed(result, self._now_ms()))
        else:
            log.debug("group %s: the target of epoch %d lands on a replaced shard, dropped",
                      result.group_id, result.epoch)

    def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)


class OffLoop:
    """What the shards ask to run off the event loop: regex resolutions and large target
    assignments, each handed back to its shard as an operation whose output ``process`` takes."""

    def __init__(self, topics: TopicStore, process: Process, now_ms: Callable[[], int]) -> None:
        self._regexes = RegexResolver(
            topics, lambda sr, shard, result: process(sr, shard.regexes_resolved(result, now_ms()))
        )
        self._assignments = AssignmentOffload(process, now_ms)

    def take(self, sr: ShardRuntime) -> None:
        self._regexes.take(sr)
        self._assignments.take(sr)

    def stop(self) -> None:
        self._regexes.stop()
        self._assignments.stop()
