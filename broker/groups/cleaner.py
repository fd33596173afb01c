"""Compaction of ``__consumer_offsets``: every ``log.cleaner.backoff.ms``, each shard's
partition that grew since it was last compacted, the first phase off the event loop
(``broker.data.retention.compact_if_grown``). Nothing runs while partitions are loading."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from kcoord.storage.engine import Log

from ..data.retention import compact_if_grown
from ..data.topic_names import OFFSETS_TOPIC
from .write_path import ShardRuntime

if TYPE_CHECKING:
    from ..config import Config

log = logging.getLogger("kcoord.coordinator")


async def clean_offsets(
    shards: Sequence[ShardRuntime], config: Config, loaded: Callable[[], bool]
) -> None:
    """Compact the shards' partitions now and then, forever (cancel to stop)."""
    backoff = config["log.cleaner.backoff.ms"] / 1000.0
    retention = config["log.cleaner.delete.retention.ms"]
    cleaned: dict[int, tuple[int, int]] = {}
    while True:
        await asyncio.sleep(backoff)
        if not loaded():
            continue
        for sr in shards:
            plog = sr.log
            if plog is None:
                continue
            try:
                await compact_if_grown(
                    plog,
                    cleaned,
                    sr.partition,
                    delete_retention_ms=retention,
                    current=functools.partial(_still, sr, plog),
                )
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("compaction of %s-%d failed", OFFSETS_TOPIC, sr.partition)


def _still(sr: ShardRuntime, plog: Log) -> bool:
    return sr.log is plog
