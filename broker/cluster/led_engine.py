"""The storage engine as the topic registry sees it in a cluster: only led partitions open.

:class:`LedEngine` wraps the real engine and passes everything through, except that a
partition's log is opened only while this node leads it (``fences`` holds the leadership, set by
the member loop before it opens the log), with that leadership as the log's fence; any other
partition gets a placeholder, an offline log whose cause is ``NotLeader`` (clients are answered
NOT_LEADER_OR_FOLLOWER, coordinators NOT_COORDINATOR). New partitions are created in the
database with no leader and come back as placeholders too; ``on_created`` then wakes the member
loop so that their leaders are decided at once rather than at the next heartbeat.

So the topic registry, the reopener and the coordinators keep working as on one node: they open
what the engine lets them, and a partition that is not theirs is simply offline here.
"""

from __future__ import annotations

import errno
import uuid
from collections.abc import Callable, Iterable, Sequence

from kcoord.storage.engine import (
    DocumentChange,
    LeaderFence,
    Log,
    LogSpec,
    StorageEngine,
    StoredTopic,
)
from kcoord.storage.offline import NotLeader


class LedEngine:
    def __init__(self, engine: StorageEngine) -> None:
        self.engine = engine
        self.fences: dict[tuple[str, int], LeaderFence] = {}
        """The partitions this node leads, with the epoch it took each in."""
        self.on_created: Callable[[], None] = lambda: None

    def placeholder(self, topic: str, partition: int) -> Log:
        return self.engine.offline_log(
            topic, partition, NotLeader(errno.EAGAIN, "led by another node, or by none yet")
        )

    # the wrapped calls ----------------------------------------------------------------------------
    def open_log(
        self,
        topic: str,
        partition: int,
        topic_id: uuid.UUID,
        spec: LogSpec,
        leader: LeaderFence | None = None,
    ) -> Log:
        fence = leader or self.fences.get((topic, partition))
        if fence is None:
            return self.placeholder(topic, partition)
        return self.engine.open_log(topic, partition, topic_id, spec, leader=fence)

    def create_logs(
        self, topic: str, topic_id: uuid.UUID, partitions: range, spec: LogSpec
    ) -> list[Log]:
        for plog in self.engine.create_logs(topic, topic_id, partitions, spec):
            plog.close()  # nothing appended: closing writes nothing
        self.on_created()
        return [self.placeholder(topic, p) for p in partitions]

    # passed through ------------------------------------------------------------------------------
    @property
    def description(self) -> str:
        return self.engine.description

    def start(self) -> None:
        self.engine.start()

    def read_document(self, name: str) -> bytes | None:
        return self.engine.read_document(name)

    def write_document(self, name: str, data: bytes) -> None:
        self.engine.write_document(name, data)

    def update_document(self, name: str, change: DocumentChange) -> bytes | None:
        return self.engine.update_document(name, change)

    def stored_topics(self) -> dict[str, StoredTopic]:
        return self.engine.stored_topics()

    def offline_log(self, topic: str, partition: int, cause: BaseException | str) -> Log:
        return self.engine.offline_log(topic, partition, cause)

    def delete_logs(self, topic: str, logs: Sequence[Log]) -> None:
        self.engine.delete_logs(topic, logs)

    def remove_deleted(self) -> None:
        self.engine.remove_deleted()

    def may_reopen(self) -> bool:
        return self.engine.may_reopen()

    def checkpoint(self, topics: Iterable[tuple[str, Sequence[Log]]]) -> object:
        return self.engine.checkpoint(topics)

    def write_checkpoint(self, snapshot: object) -> bool:
        return self.engine.write_checkpoint(snapshot)

    def close(self) -> None:
        self.engine.close()
