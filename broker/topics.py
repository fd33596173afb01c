"""The topic registry: which topics exist, their ids and their partition logs.

Topics live on disk as Kafka lays them out, one directory per partition
(``<data-dir>/<topic>-<partition>/``) with a ``partition.metadata`` file holding the topic id, so
the registry is rebuilt at start-up by listing the data directory. Internal topics (the
``__consumer_offsets`` log) are registered here too, so Metadata describes them, but only the
coordinator writes to them.
"""

from __future__ import annotations

import asyncio
import logging
import re
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from storage.log import PartitionLog
from storage.partition_metadata import read_partition_metadata, write_partition_metadata

log = logging.getLogger("kcoord.topics")

OFFSETS_TOPIC = "__consumer_offsets"
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC})
_LEGAL = re.compile(r"^[a-zA-Z0-9._-]+$")
MAX_NAME_LENGTH = 249


class TopicError(ValueError):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def topic_name_problem(name: str) -> str | None:
    """Why ``name`` is not a legal topic name, or None if it is."""
    if not name:
        return "topic name is empty"
    if name in (".", ".."):
        return f"topic name {name!r} is not allowed"
    if len(name) > MAX_NAME_LENGTH:
        return f"topic name is longer than {MAX_NAME_LENGTH} characters"
    if not _LEGAL.match(name):
        return f"topic name {name!r} has characters other than ASCII letters, digits, '.', '_', '-'"
    return None


@dataclass
class Topic:
    name: str
    topic_id: uuid.UUID
    partitions: list[PartitionLog] = field(default_factory=list)

    @property
    def internal(self) -> bool:
        return self.name in INTERNAL_TOPICS


@dataclass(frozen=True, slots=True)
class LogSettings:
    segment_bytes: int
    index_interval_bytes: int
    fsync: bool


class TopicStore:
    def __init__(self, data_dir: Path, settings: LogSettings) -> None:
        self.data_dir = data_dir
        self.settings = settings
        self.topics: dict[str, Topic] = {}
        self.by_id: dict[uuid.UUID, Topic] = {}
        self._appended: asyncio.Future[None] | None = None

    # start-up -----------------------------------------------------------------------------------
    def load(self, skip: frozenset[str] = frozenset()) -> None:
        """Open every partition directory found in the data dir (topics in ``skip`` excepted)."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        found: dict[str, dict[int, Path]] = {}
        for entry in sorted(self.data_dir.iterdir()):
            if not entry.is_dir():
                continue
            name, sep, num = entry.name.rpartition("-")
            if not sep or not num.isdigit() or topic_name_problem(name) or name in skip:
                continue
            found.setdefault(name, {})[int(num)] = entry
        for name, dirs in found.items():
            count = max(dirs) + 1
            if sorted(dirs) != list(range(count)):
                log.warning("topic %s has missing partition directories: %s", name, sorted(dirs))
            topic_id = None
            for path in dirs.values():
                topic_id = read_partition_metadata(path)
                if topic_id is not None:
                    break
            topic = Topic(name, topic_id or uuid.uuid4())
            for p in range(count):
                topic.partitions.append(self._open(name, p, topic.topic_id))
            self._register(topic)
            log.info("loaded topic %s (%d partitions)", name, count)

    def _open(self, name: str, partition: int, topic_id: uuid.UUID) -> PartitionLog:
        path = self.data_dir / f"{name}-{partition}"
        fresh = not path.exists()
        path.mkdir(parents=True, exist_ok=True)
        if fresh or read_partition_metadata(path) is None:
            write_partition_metadata(path, topic_id, fsync=self.settings.fsync)
        s = self.settings
        return PartitionLog.open(
            path,
            segment_bytes=s.segment_bytes,
            index_interval_bytes=s.index_interval_bytes,
            fsync=s.fsync,
        )

    def _register(self, topic: Topic) -> None:
        self.topics[topic.name] = topic
        self.by_id[topic.topic_id] = topic

    # lookups ------------------------------------------------------------------------------------
    def get(self, name: str) -> Topic | None:
        return self.topics.get(name)

    def partition(self, name: str, index: int) -> PartitionLog | None:
        topic = self.topics.get(name)
        if topic is None or not 0 <= index < len(topic.partitions):
            return None
        return topic.partitions[index]

    # changes ------------------------------------------------------------------------------------
    def create(
        self,
        name: str,
        partitions: int,
        *,
        segment_bytes: int | None = None,
        validate_only: bool = False,
    ) -> Topic | None:
        from protocol.errors import ErrorCode

        problem = topic_name_problem(name)
        if problem:
            raise TopicError(ErrorCode.invalid_topic_exception, problem)
        if name in self.topics:
            raise TopicError(ErrorCode.topic_already_exists, f"topic {name!r} already exists")
        if partitions < 1:
            raise TopicError(ErrorCode.invalid_partitions, "number of partitions must be at least 1")
        if validate_only:
            return None
        topic = self._build(name, partitions, uuid.uuid4(), segment_bytes)
        log.info("created topic %s (%d partitions)", name, partitions)
        return topic

    def open_internal(self, name: str, partitions: int, segment_bytes: int) -> Topic:
        """Open (creating if needed) an internal topic such as ``__consumer_offsets``."""
        topic_id = None
        for p in range(partitions):
            path = self.data_dir / f"{name}-{p}"
            if path.is_dir():
                topic_id = read_partition_metadata(path)
                if topic_id is not None:
                    break
        return self._build(name, partitions, topic_id or uuid.uuid4(), segment_bytes)

    def _build(
        self, name: str, partitions: int, topic_id: uuid.UUID, segment_bytes: int | None
    ) -> Topic:
        topic = Topic(name, topic_id)
        saved = self.settings
        if segment_bytes is not None:
            self.settings = LogSettings(segment_bytes, saved.index_interval_bytes, saved.fsync)
        try:
            for p in range(partitions):
                topic.partitions.append(self._open(name, p, topic.topic_id))
        finally:
            self.settings = saved
        self._register(topic)
        return topic

    def add_partitions(self, name: str, count: int, validate_only: bool = False) -> None:
        from protocol.errors import ErrorCode

        topic = self.topics.get(name)
        if topic is None:
            raise TopicError(ErrorCode.unknown_topic_or_partition, f"topic {name!r} does not exist")
        if count <= len(topic.partitions):
            raise TopicError(
                ErrorCode.invalid_partitions,
                f"topic {name!r} has {len(topic.partitions)} partitions; {count} is not more",
            )
        if validate_only:
            return
        for p in range(len(topic.partitions), count):
            topic.partitions.append(self._open(name, p, topic.topic_id))
        log.info("topic %s now has %d partitions", name, count)

    def delete(self, name: str) -> Topic:
        from protocol.errors import ErrorCode

        topic = self.topics.get(name)
        if topic is None:
            raise TopicError(ErrorCode.unknown_topic_or_partition, f"topic {name!r} does not exist")
        if topic.internal:
            raise TopicError(
                ErrorCode.invalid_topic_exception, f"internal topic {name!r} cannot be deleted"
            )
        del self.topics[name]
        self.by_id.pop(topic.topic_id, None)
        for plog in topic.partitions:
            plog.delete()
        self.notify_appended()  # wake long-polling fetches so they see the topic is gone
        log.info("deleted topic %s", name)
        return topic

    def close(self) -> None:
        for topic in self.topics.values():
            for plog in topic.partitions:
                plog.close()

    # fetch long-poll support ----------------------------------------------------------------------
    def appended_future(self) -> asyncio.Future[None]:
        """A future resolved the next time any log gets new durable data."""
        if self._appended is None or self._appended.done():
            self._appended = asyncio.get_running_loop().create_future()
        return self._appended

    def notify_appended(self) -> None:
        fut = self._appended
        if fut is not None and not fut.done():
            fut.set_result(None)
        self._appended = None
