"""The topic registry: which topics exist, their ids and their partition logs; creating,
growing and deleting topics within the partition limits. The naming rules and the internal
topics live beside it (``broker.data.topic_names``, re-exported here).

The partitions themselves, their topic ids and their checkpointed offsets are the storage
engine's (``storage.engine``), so the registry is rebuilt at start-up from what the engine holds.
Internal topics are registered too, so Metadata describes them; only their coordinators create
them (``internal``: with the partition counts their routing assumes) and write to them.

Creating partitions (new topics, CreatePartitions, auto-creation, ``__consumer_offsets``) is
all-or-nothing in storage. A change is first *reserved* on the event loop: the name (or the
topic, for added partitions) is taken, so a concurrent create gets TOPIC_ALREADY_EXISTS and
Produce/Fetch never see a half topic, and its partitions count against
``max.broker.partitions`` at once. The storage work then runs in a worker thread
(:meth:`TopicStore.start`) and the topic is registered when it is done; small auto-creations
run it synchronously (:meth:`TopicStore.create`). Deleting is the mirror image: the topic
leaves the registry on the event loop (:meth:`TopicStore.retire`), keeping its name taken, and
its storage goes in a worker thread (:meth:`TopicStore.erase`), after which the name is free.

Limits (Kafka answers POLICY_VIOLATION for a controller operation that is too large):
``max.partitions.per.request`` bounds the partitions one request creates over all its topics,
``max.broker.partitions`` the partitions this node holds (``__consumer_offsets`` included, which
itself is exempt when it is created). Requests are judged topic by topic in request order.

Start-up opens every partition; one that cannot be opened is logged at ERROR and registered
offline so that the others serve.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Collection, Iterator

from kcoord.protocol.errors import ErrorCode
from kcoord.storage.engine import Log, LogSpec, StorageEngine
from kcoord.storage.files import describe_error
from kcoord.storage.offline import LogOffline, moved_away

from .topic_configs import TopicConfigs, TopicSettings, builtin_defaults
from .topic_model import PartitionLimits, Reservation, Topic, TopicError
from .topic_names import (
    INTERNAL_CLEANUP_POLICY,
    INTERNAL_TOPICS,
    JOURNALED_TOPICS,
    OFFSETS_TOPIC,
    quoted,
    topic_name_problem,
)

__all__ = [
    # re-exported from .topic_names for the modules that import them from here
    "INTERNAL_TOPICS",
    "OFFSETS_TOPIC",
    "quoted",
    "topic_name_problem",
    # the registry
    "PartitionLimits",
    "Reservation",
    "Topic",
    "TopicError",
    "TopicStore",
    "storage_error_code",
]

log = logging.getLogger("kcoord.topics")


def storage_error_code(error: BaseException | None) -> int:
    """The code for a partition whose log is offline or failed with ``error``:
    NOT_LEADER_OR_FOLLOWER when the partition is another node's (cluster mode: the client looks
    its leader up again), KAFKA_STORAGE_ERROR otherwise."""
    if isinstance(error, LogOffline) and moved_away(error):
        return ErrorCode.not_leader_or_follower
    return ErrorCode.kafka_storage_error


class TopicStore:
    """The topics of ``engine``; ``segment_bytes``: ``log.segment.bytes``, for topics without
    their own."""

    def __init__(
        self,
        engine: StorageEngine,
        segment_bytes: int,
        limits: PartitionLimits | None = None,
        configs: TopicConfigs | None = None,
    ) -> None:
        self.engine = engine
        self.segment_bytes = segment_bytes
        self.configs = configs or TopicConfigs(engine, builtin_defaults)
        """Each topic's config overrides and the broker's defaults for them."""
        self.limits = limits or PartitionLimits()
        self.topics: dict[str, Topic] = {}
        self.by_id: dict[uuid.UUID, Topic] = {}
        self.version = 0
        """Changes whenever a topic is created, deleted or gains partitions (consumer groups
        re-read their subscribed topics then)."""
        self._pending: dict[str, Reservation] = {}
        self._held = 0  # partitions of registered topics
        self._reserved = 0  # partitions of pending changes
        self._appended: asyncio.Future[None] | None = None
        self.deleted_hooks: list[Callable[[Topic], None]] = []
        """Called with each topic that leaves the registry (deleted here or, in cluster mode,
        by another node), on the event loop: the coordinator drops its offsets."""

    # start-up -----------------------------------------------------------------------------------
    def load(self, skip: frozenset[str] = frozenset()) -> None:
        """Open every partition in storage (topics in ``skip`` excepted); the engine has been
        started (``StorageEngine.start``: interrupted creations and deletions settled)."""
        self.configs.read()
        for name, stored in self.engine.stored_topics().items():
            if name in skip or topic_name_problem(name):
                continue
            count = max(stored.partitions) + 1
            topic_id = stored.topic_id or uuid.uuid4()
            topic = self._open_topic(name, topic_id, count, stored.partitions)
            self._register(topic)
            offline = sum(1 for plog in topic.partitions if plog.offline is not None)
            log.info(
                "loaded topic %s (%d partitions%s)",
                name,
                count,
                f", {offline} offline" if offline else "",
            )
        self.configs.prune(self.by_id, keep_names=skip)

    def _open_topic(
        self,
        name: str,
        topic_id: uuid.UUID,
        count: int,
        present: Collection[int],
        segment_bytes: int | None = None,
    ) -> Topic:
        """The topic's ``count`` partitions: those ``present`` opened (offline if they cannot
        be), the others created empty (offline if that fails)."""
        missing = [p for p in range(count) if p not in present]
        if missing:
            log.error("topic %s has missing partitions %s; they are created empty", name, missing)
        topic = Topic(name, topic_id)
        for p in range(count):
            if p in present:
                plog = self.engine.open_log(name, p, topic_id, self._spec(topic_id, name))
            else:
                plog = self._recreate(name, p, topic_id, segment_bytes)
            topic.partitions.append(plog)
        return topic

    def _spec(self, topic_id: uuid.UUID, name: str) -> LogSpec:
        topic = self.configs.settings(topic_id, name)
        return LogSpec(topic.segment_bytes, topic.compact, journaled=name in JOURNALED_TOPICS)

    def _recreate(
        self, name: str, partition: int, topic_id: uuid.UUID, segment_bytes: int | None = None
    ) -> Log:
        """Create a missing partition of a loaded topic (offline if that fails)."""
        segment_bytes = segment_bytes or self.configs.settings(topic_id, name).segment_bytes
        spec = LogSpec(segment_bytes, journaled=name in JOURNALED_TOPICS)
        try:
            return self.engine.create_logs(name, topic_id, range(partition, partition + 1), spec)[0]
        except OSError as e:
            log.error(
                "partition %s-%d is offline: it is missing and could not be created: %s",
                name,
                partition,
                describe_error(e),
            )
            return self.engine.offline_log(name, partition, e)

    def _register(self, topic: Topic) -> None:
        self.topics[topic.name] = topic
        self.by_id[topic.topic_id] = topic
        self._held += len(topic.partitions)
        self.version += 1

    def stored_partitions(self, name: str) -> frozenset[int]:
        """The partitions of topic ``name`` in storage, registered or not (the internal topics
        are opened by their coordinators, after :meth:`load`)."""
        stored = self.engine.stored_topics().get(name)
        return frozenset() if stored is None else stored.partitions

    def get(self, name: str) -> Topic | None:
        return self.topics.get(name)

    def settings_of(self, topic: Topic) -> TopicSettings:
        """The topic's effective topic configs."""
        return self.configs.settings(topic.topic_id, topic.name)

    def partition(self, name: str, index: int) -> Log | None:
        topic = self.topics.get(name)
        if topic is None or not 0 <= index < len(topic.partitions):
            return None
        return topic.partitions[index]

    def all_partitions(self) -> Iterator[tuple[str, int, Log]]:
        """(topic, index, log) of every partition held."""
        for topic in list(self.topics.values()):
            for i, plog in enumerate(topic.partitions):
                yield topic.name, i, plog

    # offline partitions opened again (broker/data/reopening.py) ---------------------------------
    def offline_partitions(self) -> list[tuple[Topic, int, Log]]:
        """The partitions offline here that might open again (not those led elsewhere)."""
        return [
            (topic, i, plog)
            for topic in list(self.topics.values())
            for i, plog in enumerate(topic.partitions)
            if plog.offline is not None and not moved_away(plog.offline)
        ]

    # topics other nodes changed (cluster mode: broker/cluster/member.py) -------------------------
    def adopt(self, name: str, topic_id: uuid.UUID, count: int) -> Topic:
        """Register a topic another node created (its logs as the engine opens them)."""
        topic = self._open_topic(name, topic_id, count, range(count))
        self._register(topic)
        log.info("topic %s (%d partitions) was created in the cluster", name, count)
        return topic

    def grow(self, name: str, count: int) -> None:
        """Another node added partitions to ``name``: now ``count``."""
        topic = self.topics[name]
        first = len(topic.partitions)
        spec = self.spec_of(topic)
        for p in range(first, count):
            topic.partitions.append(self.engine.open_log(name, p, topic.topic_id, spec))
        self._held += count - first
        self.version += 1

    def forget(self, name: str) -> None:
        """Another node deleted ``name``: drop it here (its storage is that node's to delete)."""
        _close_logs(self._unregister(name).partitions)
        log.info("topic %s was deleted in the cluster", name)

    def spec_of(self, topic: Topic) -> LogSpec:
        return self._spec(topic.topic_id, topic.name)

    def replace_log(self, topic: Topic, index: int, old: Log, new: Log) -> bool:
        """Put ``new`` in the place of partition ``index``'s offline log ``old``; False, and
        nothing changed, if ``old`` is not that log any more (the topic was deleted)."""
        if self.topics.get(topic.name) is not topic or topic.partitions[index] is not old:
            return False
        topic.partitions[index] = new
        old.close()
        return True

    def pending(self, name: str) -> Reservation | None:
        """The change of ``name`` under way (a creation, added partitions or a deletion), if
        any."""
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
        under_way = self._pending.get(name)
        if under_way is not None and under_way.deleting:  # Kafka's answer while it deletes one
            raise TopicError(
                ErrorCode.topic_already_exists, f"topic {quoted(name)} is marked for deletion"
            )
        if name in self.topics or under_way is not None:
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
    def build(self, res: Reservation) -> list[Log]:
        """The storage work of a reserved change (blocking; any thread): create its partitions
        all-or-nothing and return their logs.

        Raises TopicError(KAFKA_STORAGE_ERROR) if nothing was created. If the creation was
        decided but could not be completed, the partitions it could not finish come back
        offline (the next start completes them).
        """
        try:
            if res.configs:
                self.configs.set(res.topic_id, res.name, res.configs)
            return self.engine.create_logs(
                res.name,
                res.topic_id,
                range(res.first, res.first + res.count),
                LogSpec(res.segment_bytes or self.segment_bytes, False, res.name in JOURNALED_TOPICS),
            )
        except OSError as e:
            raise TopicError(
                ErrorCode.kafka_storage_error,
                f"could not create the partitions: {describe_error(e)}",
            ) from e

    def complete(self, res: Reservation, logs: list[Log]) -> Topic:
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

    def _do_now(self, res: Reservation) -> Topic:
        """Do a reserved change on the calling thread (small ones, and start-up)."""
        try:
            logs = self.build(res)
        except BaseException:
            self.release(res)
            raise
        return self.complete(res, logs)

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
        return self._do_now(res)

    def add_partitions(self, name: str, count: int, validate_only: bool = False) -> None:
        """Grow topic ``name`` to ``count`` partitions synchronously. Raises TopicError."""
        res = self.reserve_partitions(name, count)
        if validate_only:
            self.release(res)
            return
        self._do_now(res)

    def open_internal(self, name: str, partitions: int, segment_bytes: int) -> Topic:
        """Open (creating if needed) an internal topic such as ``__consumer_offsets``.

        Existing partitions are opened (offline if they cannot be); if none exists the topic is
        created all-or-nothing (TopicError(KAFKA_STORAGE_ERROR) if that fails, nothing left
        behind); missing ones of an existing topic are created (offline if that fails).
        """
        self._set_internal(name, segment_bytes)
        stored = self.engine.stored_topics().get(name)
        if stored is None:
            return self._do_now(
                self.reserve_topic(name, partitions, segment_bytes=segment_bytes, internal=True)
            )
        topic = self._open_topic(
            name, stored.topic_id or uuid.uuid4(), partitions, stored.partitions, segment_bytes
        )
        self._register(topic)
        return topic

    async def open_internal_off_loop(self, name: str, partitions: int, segment_bytes: int) -> Topic:
        """:meth:`open_internal` with its storage work in a worker thread (a first use while
        serving: broker/data/internal_topic.py)."""
        self._set_internal(name, segment_bytes)
        stored = (await asyncio.to_thread(self.engine.stored_topics)).get(name)
        if stored is None:
            return await self.start(
                self.reserve_topic(name, partitions, segment_bytes=segment_bytes, internal=True)
            )
        topic_id = stored.topic_id or uuid.uuid4()
        topic = await asyncio.to_thread(
            self._open_topic, name, topic_id, partitions, stored.partitions, segment_bytes
        )
        self._register(topic)
        return topic

    def _set_internal(self, name: str, segment_bytes: int) -> None:
        self.configs.set_internal(
            name,
            {"cleanup.policy": INTERNAL_CLEANUP_POLICY[name], "segment.bytes": str(segment_bytes)},
        )

    # deleting -----------------------------------------------------------------------------------
    def retire(self, name: str) -> Topic:
        """The first step of deleting ``name`` (event loop, quick): the topic leaves the
        registry, so Produce, Fetch and Metadata no longer find it, and its name stays taken
        (a creation gets TOPIC_ALREADY_EXISTS, :meth:`pending` has the deletion) until
        :meth:`erase` has made the deletion durable. Raises TopicError."""
        topic = self._unregister(name)
        res = Reservation(name, topic.topic_id, 0, 0, deleting=True)
        res.done = asyncio.get_running_loop().create_future()
        self._pending[name] = res
        return topic

    def delete(self, name: str) -> Topic:
        """Delete ``name`` at once, storage included (blocking: tools and tests; the broker
        uses :meth:`retire` and :meth:`erase`). Raises TopicError."""
        topic = self._unregister(name)
        failed = self._erase([topic], self.checkpoint_snapshot())
        if failed:
            raise failed[name]
        return topic

    def _unregister(self, name: str) -> Topic:
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
        self.notify_appended()  # wake long-polling fetches so they see the topic is gone
        for hook in self.deleted_hooks:
            hook(topic)
        return topic

    async def erase(self, topics: list[Topic]) -> dict[str, TopicError]:
        """The second step of deleting retired ``topics``: their storage, in a worker thread
        (:meth:`_erase`), so the event loop keeps serving; then their names are free again.
        Returns the topics whose partitions could not be deleted, with the error. The work
        goes on to its end even if the caller stops waiting."""
        snapshot = self.checkpoint_snapshot()  # taken here, without the retired topics
        work = asyncio.ensure_future(asyncio.to_thread(self._erase, topics, snapshot))

        def release(_: object) -> None:
            for topic in topics:
                res = self._pending.get(topic.name)
                if res is not None and res.deleting:
                    del self._pending[topic.name]
                    if res.done is not None and not res.done.done():
                        res.done.set_result(topic)

        work.add_done_callback(release)
        return await asyncio.shield(work)

    def _erase(self, topics: list[Topic], snapshot: object) -> dict[str, TopicError]:
        """Blocking; any thread. The checkpoints drop the topics first (one write for all), so
        that their absence is not taken for a loss at the next start; then each topic's
        partitions (durable when ``delete_logs`` returns) and config overrides."""
        self.write_checkpoints(snapshot)
        failed: dict[str, TopicError] = {}
        for topic in topics:
            try:
                self.engine.delete_logs(topic.name, topic.partitions)
            except OSError as e:
                log.error("deleting topic %s failed: %s", topic.name, describe_error(e))
                failed[topic.name] = TopicError(
                    ErrorCode.kafka_storage_error,
                    f"could not delete the partitions: {describe_error(e)}",
                )
                continue
            self.configs.forget(topic.topic_id)
            log.info("deleted topic %s", topic.name)
        return failed

    def remove_deleted(self) -> None:
        """Finish deleting removed partitions (blocking; any thread)."""
        self.engine.remove_deleted()

    def close(self) -> None:
        """Close every log (the engine stays open: its owner closes it)."""
        self.remove_deleted()
        for topic in self.topics.values():
            _close_logs(topic.partitions)

    # checkpoints --------------------------------------------------------------------------------
    def checkpoint_snapshot(self) -> object:
        """The offsets to checkpoint, taken on the event loop: each partition's start and
        durable end (``StorageEngine.checkpoint``). Deleted topics drop out."""
        return self.engine.checkpoint((t.name, t.partitions) for t in self.topics.values())

    def write_checkpoints(self, snap: object) -> bool:
        """Write a snapshot (blocking; any thread); whether it was written (failures are
        logged, older snapshots skipped)."""
        return self.engine.write_checkpoint(snap)

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


def _close_logs(logs: list[Log]) -> None:
    """Close each log; one that fails to is logged and the others still closed."""
    for plog in logs:
        try:
            plog.close()
        except OSError as e:
            log.warning("closing %s: %s", plog.name, describe_error(e))


def _log_unawaited_failure(done: asyncio.Future[Topic]) -> None:
    """A change whose requester stopped waiting (timeout, closed connection) still says how
    it ended (and its exception counts as retrieved)."""
    if not done.cancelled() and done.exception() is not None:
        log.info("a topic change ended with an error: %s", done.exception())
