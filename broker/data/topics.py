"""The topic registry: which topics exist, their ids and their partition logs; creating,
growing and deleting topics within the partition limits. Two parts live beside it: the naming
rules and the internal topics (``broker.data.topic_names``, re-exported here) and the offset
checkpoints it keeps (``broker.data.topic_checkpoints``).

Topics live on disk as Kafka lays them out, one directory per partition
(``<data-dir>/<topic>-<partition>/``) with a ``partition.metadata`` file holding the topic id, so
the registry is rebuilt at start-up by listing the data directory. Internal topics are
registered too, so Metadata describes them; only their coordinators create them (``internal``:
with the partition counts their routing assumes) and write to them.

Creating partitions (new topics, CreatePartitions, auto-creation, ``__consumer_offsets``) is
all-or-nothing on disk (``storage.creation``: partitions are built in a staging directory and
moved into place after a commit point; start-up rolls an interrupted creation back or forward).
A change is first *reserved* on the event loop: the name (or the topic, for added partitions)
is taken, so a concurrent create gets TOPIC_ALREADY_EXISTS and Produce/Fetch never see a half
topic, and its partitions count against ``max.broker.partitions`` at once. The file work then
runs in a worker thread (:meth:`TopicStore.start`) and the topic is registered when it is done;
small auto-creations run it synchronously (:meth:`TopicStore.create`).

Limits (Kafka answers POLICY_VIOLATION for a controller operation that is too large):
``max.partitions.per.request`` bounds the partitions one request creates over all its topics,
``max.broker.partitions`` the partitions this node holds (``__consumer_offsets`` included, which
itself is exempt when it is created). Requests are judged topic by topic in request order.

Start-up opens every partition; one that cannot be opened is logged at ERROR and registered
offline (``storage.log.open_or_offline``) so that the others serve. Offsets lost since the last
checkpoint are logged at ERROR with their range (``broker.data.topic_checkpoints``).
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from kcoord.protocol.errors import ErrorCode
from kcoord.storage.creation import STAGING_DIR, CreationIncomplete, create_partitions, recover_staged
from kcoord.storage.files import FilePool, describe_error, fsync_dir
from kcoord.storage.log import PartitionLog, open_or_offline
from kcoord.storage.partition_metadata import read_partition_metadata, write_partition_metadata

from .topic_checkpoints import CheckpointSnapshot, OffsetCheckpoints, short_error
from .topic_configs import TopicConfigs, TopicSettings, builtin_defaults
from .topic_names import INTERNAL_TOPICS, OFFSETS_TOPIC, quoted, topic_name_problem

__all__ = [
    # re-exported from .topic_names for the modules that import them from here
    "INTERNAL_TOPICS",
    "OFFSETS_TOPIC",
    "quoted",
    "topic_name_problem",
    # the registry
    "LogSettings",
    "PartitionLimits",
    "Reservation",
    "Topic",
    "TopicError",
    "TopicStore",
]

log = logging.getLogger("kcoord.topics")


class TopicError(ValueError):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


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
    producer_expiration_ms: int = 86_400_000  # producer.id.expiration.ms


@dataclass(frozen=True, slots=True)
class PartitionLimits:
    """``max.broker.partitions`` and ``max.partitions.per.request``."""

    max_broker_partitions: int = 10000
    max_partitions_per_request: int = 4000


@dataclass(eq=False)
class Reservation:
    """A change reserved on the event loop and not yet done: partitions ``first..first+count-1``
    of ``name`` (a new topic when ``first`` is 0)."""

    name: str
    topic_id: uuid.UUID
    first: int
    count: int
    segment_bytes: int | None = None
    done: asyncio.Future[Topic] | None = None  # set by TopicStore.start
    configs: dict[str, str] = field(default_factory=dict)
    """A new topic's config overrides (broker/data/topic_configs.py), stored before its partitions."""

    @property
    def new_topic(self) -> bool:
        return self.first == 0


class TopicStore:
    def __init__(
        self,
        data_dir: Path,
        settings: LogSettings,
        limits: PartitionLimits | None = None,
        pool: FilePool | None = None,
        configs: TopicConfigs | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.settings = settings
        self.configs = configs or TopicConfigs(data_dir, builtin_defaults, fsync=settings.fsync)
        """Each topic's config overrides and the broker's defaults for them."""
        self.limits = limits or PartitionLimits()
        self.pool = pool
        self.topics: dict[str, Topic] = {}
        self.by_id: dict[uuid.UUID, Topic] = {}
        self.version = 0
        """Changes whenever a topic is created, deleted or gains partitions (consumer groups
        re-read their subscribed topics then)."""
        self._pending: dict[str, Reservation] = {}
        self._held = 0  # partitions of registered topics
        self._reserved = 0  # partitions of pending changes
        self._appended: asyncio.Future[None] | None = None
        self._checkpoints = OffsetCheckpoints(data_dir, fsync=settings.fsync)
        self._doomed: list[Path] = []  # directories of deleted partitions, to remove

    # start-up -----------------------------------------------------------------------------------
    def load(self, skip: frozenset[str] = frozenset()) -> None:
        """Open every partition directory found in the data dir (topics in ``skip`` excepted).

        First settles interrupted creations and deletions, and reads the checkpoints.
        """
        self.data_dir.mkdir(parents=True, exist_ok=True)
        recover_staged(self.data_dir, fsync=self.settings.fsync)
        self._checkpoints.read()
        self.configs.read()
        found: dict[str, dict[int, Path]] = {}
        present: set[str] = set()  # topics with a directory, skipped ones included
        for entry in sorted(self.data_dir.iterdir()):
            if entry.name == STAGING_DIR or not entry.is_dir():
                continue
            if entry.name.endswith("-delete"):  # a deletion the previous process did not finish
                shutil.rmtree(entry, ignore_errors=True)
                continue
            name, sep, num = entry.name.rpartition("-")
            if not sep or not num.isdigit() or topic_name_problem(name):
                continue
            present.add(name)
            if name not in skip:
                found.setdefault(name, {})[int(num)] = entry
        for name, dirs in found.items():
            count = max(dirs) + 1
            topic = Topic(name, self._topic_id_of(name, list(dirs.values())) or uuid.uuid4())
            missing = [p for p in range(count) if p not in dirs]
            if missing:
                log.error(
                    "topic %s has missing partition directories %s; they are created empty",
                    name,
                    missing,
                )
            for p in range(count):
                if p in dirs:
                    topic.partitions.append(self._open(name, p, topic.topic_id))
                else:
                    topic.partitions.append(self._recreate(name, p, topic.topic_id))
            self._register(topic)
            offline = sum(1 for plog in topic.partitions if plog.offline is not None)
            log.info(
                "loaded topic %s (%d partitions%s)",
                name,
                count,
                f", {offline} offline" if offline else "",
            )
        self._checkpoints.report_missing(present)
        self.configs.prune(self.by_id, keep_names=skip)

    def _topic_id_of(self, name: str, dirs: list[Path]) -> uuid.UUID | None:
        for path in dirs:
            try:
                topic_id = read_partition_metadata(path)
            except (OSError, ValueError) as e:
                log.warning("%s: unreadable partition.metadata: %s", path.name, short_error(e))
                continue
            if topic_id is not None:
                return topic_id
        return None

    def _open(self, name: str, partition: int, topic_id: uuid.UUID) -> PartitionLog:
        """Open an existing partition directory (offline if it cannot be opened), with its
        topic's settings and its checkpointed log start offset."""
        path = self.data_dir / f"{name}-{partition}"
        try:
            if read_partition_metadata(path) is None:
                write_partition_metadata(path, topic_id, fsync=self.settings.fsync)
        except (OSError, ValueError) as e:
            log.warning(
                "%s: could not check or write partition.metadata: %s", path.name, short_error(e)
            )
        s = self.settings
        topic = self.configs.settings(topic_id, name)
        plog = open_or_offline(
            path,
            segment_bytes=topic.segment_bytes,
            index_interval_bytes=s.index_interval_bytes,
            fsync=s.fsync,
            compacted=topic.compact,
            pool=self.pool,
            producer_expiration_ms=s.producer_expiration_ms,
        )
        self._checkpoints.restore_start(name, partition, plog)
        self._checkpoints.check_lost(name, partition, plog)
        return plog

    def _recreate(
        self, name: str, partition: int, topic_id: uuid.UUID, segment_bytes: int | None = None
    ) -> PartitionLog:
        """Create a missing partition of a loaded topic (offline if that fails)."""
        segment_bytes = segment_bytes or self.configs.settings(topic_id, name).segment_bytes
        try:
            logs = self._build(name, topic_id, range(partition, partition + 1), segment_bytes)
            plog = logs[0]
        except OSError as e:
            log.error(
                "partition %s-%d is offline: its directory is missing and could not be"
                " created: %s",
                name,
                partition,
                describe_error(e),
            )
            plog = PartitionLog.offline_log(self.data_dir / f"{name}-{partition}", e)
        self._checkpoints.check_lost(name, partition, plog)
        return plog

    def _register(self, topic: Topic) -> None:
        self.topics[topic.name] = topic
        self.by_id[topic.topic_id] = topic
        self._held += len(topic.partitions)
        self.version += 1

    # lookups ------------------------------------------------------------------------------------
    def get(self, name: str) -> Topic | None:
        return self.topics.get(name)

    def settings_of(self, topic: Topic) -> TopicSettings:
        """The topic's effective topic configs."""
        return self.configs.settings(topic.topic_id, topic.name)

    def partition(self, name: str, index: int) -> PartitionLog | None:
        topic = self.topics.get(name)
        if topic is None or not 0 <= index < len(topic.partitions):
            return None
        return topic.partitions[index]

    def all_partitions(self) -> Iterator[tuple[str, int, PartitionLog]]:
        """(topic, index, log) of every partition held."""
        for topic in list(self.topics.values()):
            for i, plog in enumerate(topic.partitions):
                yield topic.name, i, plog

    def pending(self, name: str) -> Reservation | None:
        """The change of ``name`` under way (a creation or added partitions), if any."""
        return self._pending.get(name)

    @property
    def partition_count(self) -> int:
        """Partitions this node holds, plus those of changes under way."""
        return self._held + self._reserved

    # reserving changes --------------------------------------------------------------------------
    def check_limits(self, count: int, in_request: int = 0) -> None:
        """Raise POLICY_VIOLATION if creating ``count`` more partitions (after ``in_request``
        created earlier in the same request) would pass a limit."""
        limits = self.limits
        if in_request + count > limits.max_partitions_per_request:
            raise TopicError(
                ErrorCode.policy_violation,
                f"the request would create {in_request + count} partitions; the limit"
                f" (max.partitions.per.request) is {limits.max_partitions_per_request}",
            )
        held = self.partition_count
        if held + count > limits.max_broker_partitions:
            raise TopicError(
                ErrorCode.policy_violation,
                f"this node would hold {held + count} partitions; the limit"
                f" (max.broker.partitions) is {limits.max_broker_partitions}",
            )

    def reserve_topic(
        self,
        name: str,
        partitions: int,
        *,
        segment_bytes: int | None = None,
        in_request: int = 0,
        internal: bool = False,
        configs: dict[str, str] | None = None,
    ) -> Reservation:
        """Validate and reserve a new topic (name, partitions, checked config overrides).
        Raises TopicError."""
        problem = topic_name_problem(name)
        if problem:
            raise TopicError(ErrorCode.invalid_topic_exception, problem)
        if name in INTERNAL_TOPICS and not internal:  # module docstring
            raise TopicError(ErrorCode.invalid_request, f"{name} is created by its coordinator")
        if name in self.topics or name in self._pending:
            raise TopicError(ErrorCode.topic_already_exists, f"topic {quoted(name)} already exists")
        if partitions < 1:
            raise TopicError(ErrorCode.invalid_partitions, "number of partitions must be at least 1")
        if not internal:
            self.check_limits(partitions, in_request)
        res = Reservation(name, uuid.uuid4(), 0, partitions, segment_bytes, configs=configs or {})
        return self._reserve(res)

    def reserve_partitions(self, name: str, total: int, *, in_request: int = 0) -> Reservation:
        """Validate and reserve growing topic ``name`` to ``total`` partitions. Raises
        TopicError; the topic must have no change under way (await :meth:`pending` first)."""
        topic = self.topics.get(name)
        if topic is None:
            raise TopicError(
                ErrorCode.unknown_topic_or_partition, f"topic {quoted(name)} does not exist"
            )
        if name in self._pending:
            raise RuntimeError(f"topic {name} already has a change under way")
        current = len(topic.partitions)
        if total <= current:
            raise TopicError(
                ErrorCode.invalid_partitions,
                f"topic {quoted(name)} has {current} partitions; {total} is not more",
            )
        self.check_limits(total - current, in_request)
        segment_bytes = self.settings_of(topic).segment_bytes  # the topic's own, if it has one
        return self._reserve(Reservation(name, topic.topic_id, current, total - current, segment_bytes))

    def _reserve(self, res: Reservation) -> Reservation:
        self._pending[res.name] = res
        self._reserved += res.count
        return res

    def release(self, res: Reservation) -> None:
        """Give up a reservation (validate-only requests, failures)."""
        if self._pending.get(res.name) is res:
            del self._pending[res.name]
            self._reserved -= res.count

    # doing changes ------------------------------------------------------------------------------
    def build(self, res: Reservation) -> list[PartitionLog]:
        """The file work of a reserved change (blocking; any thread): create its partitions
        all-or-nothing and return their logs, which hold no descriptor yet.

        Raises TopicError(KAFKA_STORAGE_ERROR) if nothing was created. If the creation was
        committed but could not be completed, the partitions it could not move are returned
        offline (the next start completes them).
        """
        try:
            if res.configs:
                self.configs.set(res.topic_id, res.name, res.configs)
            return self._build(
                res.name, res.topic_id, range(res.first, res.first + res.count), res.segment_bytes
            )
        except CreationIncomplete as e:
            log.error(
                "creating partitions of %s: committed but %d of %d not moved into place (%s);"
                " they are offline until the next start completes them",
                res.name,
                res.count - len(e.installed),
                res.count,
                describe_error(e.cause),
            )
            done = {p.name for p in e.installed}
            out = []
            for p in range(res.first, res.first + res.count):
                path = self.data_dir / f"{res.name}-{p}"
                if path.name in done:
                    out.append(self._fresh(path, res.segment_bytes))
                else:
                    out.append(PartitionLog.offline_log(path, e.cause))
            return out
        except OSError as e:
            raise TopicError(
                ErrorCode.kafka_storage_error,
                f"could not create the partitions: {describe_error(e)}",
            ) from e

    def _build(
        self, name: str, topic_id: uuid.UUID, partitions: range, segment_bytes: int | None
    ) -> list[PartitionLog]:
        paths = create_partitions(
            self.data_dir, name, topic_id, partitions, fsync=self.settings.fsync
        )
        return [self._fresh(path, segment_bytes) for path in paths]

    def _fresh(self, path: Path, segment_bytes: int | None) -> PartitionLog:
        s = self.settings
        return PartitionLog.fresh(
            path,
            segment_bytes=segment_bytes or s.segment_bytes,
            index_interval_bytes=s.index_interval_bytes,
            fsync=s.fsync,
            pool=self.pool,
            producer_expiration_ms=s.producer_expiration_ms,
        )

    def complete(self, res: Reservation, logs: list[PartitionLog]) -> Topic:
        """Register what :meth:`build` made (event loop)."""
        self.release(res)
        if res.new_topic:
            topic = Topic(res.name, res.topic_id, logs)
            self._register(topic)
            log.info("created topic %s (%d partitions)", res.name, res.count)
            return topic
        topic = self.topics[res.name]
        topic.partitions.extend(logs)
        self._held += len(logs)
        self.version += 1
        log.info("topic %s now has %d partitions", res.name, len(topic.partitions))
        return topic

    def start(self, res: Reservation) -> asyncio.Future[Topic]:
        """Do a reserved change in a worker thread; the returned future (also ``res.done``)
        gets the topic once registered, or a TopicError. The change completes even if nobody
        awaits it any more (await it through ``asyncio.shield``)."""
        res.done = asyncio.ensure_future(self._run(res))
        res.done.add_done_callback(_log_unawaited_failure)
        return res.done

    async def _run(self, res: Reservation) -> Topic:
        try:
            logs = await asyncio.to_thread(self.build, res)
        except BaseException:
            self.release(res)
            raise
        return self.complete(res, logs)

    def create(
        self,
        name: str,
        partitions: int,
        *,
        segment_bytes: int | None = None,
        validate_only: bool = False,
    ) -> Topic | None:
        """Create a topic synchronously (auto-creation: small). Raises TopicError, also for
        the limits (POLICY_VIOLATION) and storage failures (KAFKA_STORAGE_ERROR); nothing is
        left on disk by a failure."""
        res = self.reserve_topic(name, partitions, segment_bytes=segment_bytes)
        if validate_only:
            self.release(res)
            return None
        try:
            logs = self.build(res)
        except BaseException:
            self.release(res)
            raise
        return self.complete(res, logs)

    def add_partitions(self, name: str, count: int, validate_only: bool = False) -> None:
        """Grow topic ``name`` to ``count`` partitions synchronously. Raises TopicError."""
        res = self.reserve_partitions(name, count)
        if validate_only:
            self.release(res)
            return
        try:
            logs = self.build(res)
        except BaseException:
            self.release(res)
            raise
        self.complete(res, logs)

    def open_internal(self, name: str, partitions: int, segment_bytes: int) -> Topic:
        """Open (creating if needed) an internal topic such as ``__consumer_offsets``.

        Existing partitions are opened (offline if they cannot be); if none exists the topic is
        created all-or-nothing (TopicError(KAFKA_STORAGE_ERROR) if that fails, nothing left
        behind); missing ones of an existing topic are created (offline if that fails).
        """
        self.configs.set_internal(name, {"cleanup.policy": "compact", "segment.bytes": str(segment_bytes)})
        dirs = [self.data_dir / f"{name}-{p}" for p in range(partitions)]
        existing = [d for d in dirs if d.is_dir()]
        if not existing:
            res = self.reserve_topic(name, partitions, segment_bytes=segment_bytes, internal=True)
            try:
                logs = self.build(res)
            except BaseException:
                self.release(res)
                raise
            return self.complete(res, logs)
        topic = Topic(name, self._topic_id_of(name, existing) or uuid.uuid4())
        for p, d in enumerate(dirs):
            if d.is_dir():
                topic.partitions.append(self._open(name, p, topic.topic_id))
            else:
                log.error("%s: partition directory %s is missing; creating it empty", name, d.name)
                topic.partitions.append(self._recreate(name, p, topic.topic_id, segment_bytes))
        self._register(topic)
        return topic

    def delete(self, name: str) -> Topic:
        topic = self.topics.get(name)
        if topic is None:
            raise TopicError(
                ErrorCode.unknown_topic_or_partition, f"topic {quoted(name)} does not exist"
            )
        if topic.internal:
            raise TopicError(
                ErrorCode.invalid_topic_exception, f"internal topic {quoted(name)} cannot be deleted"
            )
        del self.topics[name]
        self.by_id.pop(topic.topic_id, None)
        self._held -= len(topic.partitions)
        self.version += 1
        # The checkpoints forget the topic first, so that its absence is not taken for a loss.
        self._checkpoints.forget(name, len(topic.partitions))
        self.write_checkpoints(self.checkpoint_snapshot())
        # Renamed to "-delete" names now (one directory fsync for all); the files themselves
        # are removed by remove_deleted(), off the event loop, or at the next start.
        for plog in topic.partitions:
            try:
                self._doomed.append(plog.detach())
            except OSError as e:
                log.error("deleting %s failed: %s", plog.path.name, describe_error(e))
        if self.settings.fsync:
            try:
                fsync_dir(self.data_dir)
            except OSError as e:
                log.warning("fsync of %s failed: %s", self.data_dir, describe_error(e))
        self.configs.forget(topic.topic_id)
        self.notify_appended()  # wake long-polling fetches so they see the topic is gone
        log.info("deleted topic %s", name)
        return topic

    def remove_deleted(self) -> None:
        """Remove the directories of deleted partitions (blocking; any thread)."""
        while True:
            try:
                path = self._doomed.pop()
            except IndexError:  # (another thread took the last one)
                return
            shutil.rmtree(path, ignore_errors=True)

    def close(self) -> None:
        self.remove_deleted()
        for topic in self.topics.values():
            for plog in topic.partitions:
                try:
                    plog.close()
                except OSError as e:
                    log.warning("closing %s: %s", plog.path.name, describe_error(e))

    # checkpoints --------------------------------------------------------------------------------
    def checkpoint_snapshot(self) -> CheckpointSnapshot:
        """The offsets to checkpoint, taken on the event loop: each partition's start and
        flushed offset; a partition offline since start-up (offsets unknown) keeps what the
        previous snapshot (or the checkpoint read at start-up) had. Deleted topics drop out."""
        return self._checkpoints.snapshot((t.name, t.partitions) for t in self.topics.values())

    def write_checkpoints(self, snap: CheckpointSnapshot) -> bool:
        """Write both checkpoint files from ``snap`` (blocking; any thread). A snapshot older
        than one already written is skipped. Failures are logged; returns whether it wrote."""
        return self._checkpoints.write(snap)

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


def _log_unawaited_failure(done: asyncio.Future[Topic]) -> None:
    """A change whose requester stopped waiting (timeout, closed connection) still says how
    it ended (and its exception counts as retrieved)."""
    if not done.cancelled() and done.exception() is not None:
        log.info("a topic change ended with an error: %s", done.exception())
