"""What a shard holds, as the runtime, its metrics and the tests read it: the shard's mode, its
groups of every type, their committed offsets, its timer queue; and the hook through which it
reports completed rebalances.

:class:`ShardViews` is the base class of :class:`coordinator.shard.GroupShard` that holds these
accessors, so that the shard's own module is its routing and its operations. They read the
managers the shard built (its ``classic``, ``consumer``, ``offsets`` and ``timers``) as they
are now, with no routing check (partition, loading) and no Output; only setting
``rebalance_observer`` and taking the queued regex resolutions and offloaded target computations
change anything. The routing check itself (:meth:`ShardViews._gate`),
which reads the shard's mode and partition, is here too.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from enum import Enum

from kcoord.coordinator.classic.group import ClassicGroup
from kcoord.coordinator.classic.manager import ClassicGroupManager
from kcoord.coordinator.consumer.batching import AssignmentRequest
from kcoord.coordinator.consumer.group import ConsumerGroup
from kcoord.coordinator.consumer.manager import ConsumerGroupManager
from kcoord.coordinator.consumer.regex_refresh import RegexRequest
from kcoord.coordinator.offsets import OffsetManager
from kcoord.coordinator.output import Operation, RebalanceCompleted
from kcoord.coordinator.rebalances import RebalanceStart
from kcoord.coordinator.schemas import OffsetCommitValue
from kcoord.coordinator.share.group import ShareGroup
from kcoord.coordinator.share.manager import ShareGroupManager
from kcoord.coordinator.timers import Timers
from kcoord.protocol.errors import ErrorCode


class ShardMode(Enum):
    LOADING = "loading"
    ACTIVE = "active"
    UNLOADED = "unloaded"


_ACTIVE = ShardMode.ACTIVE


class ShardViews:
    """The read-only accessors of a shard (module docstring). The attributes declared here
    are set by :class:`coordinator.shard.GroupShard`, the one subclass."""

    classic: ClassicGroupManager
    consumer: ConsumerGroupManager
    share: ShareGroupManager
    offsets: OffsetManager
    timers: Timers
    partition: int
    _mode: ShardMode
    _op: Operation
    _partition_for: Callable[[str], int] | None

    @property
    def mode(self) -> ShardMode:
        return self._mode

    @property
    def loading(self) -> bool:
        return self._mode is ShardMode.LOADING

    @property
    def stamp(self) -> int:
        """Changes with every operation of the shard but its reads (coordinator/output.py), to a
        value no shard had before: while it is the same, an OffsetFetch gets the same answer
        (``fetch_offsets`` reads only the mode, the offsets and the pending transactional ones,
        all changed in such operations alone)."""
        return self._op.stamp

    @property
    def rebalance_observer(self) -> Callable[[RebalanceCompleted], None] | None:
        """Called with each completed rebalance (the runtime's metrics hook)."""
        return self.classic.state.rebalance_observer

    @rebalance_observer.setter
    def rebalance_observer(self, observer: Callable[[RebalanceCompleted], None] | None) -> None:
        self.classic.state.rebalance_observer = observer
        self.consumer.rebalance_observer = observer

    @property
    def offsets_committed(self) -> int:
        """Partition offsets accepted by OffsetCommit since start (a metrics counter)."""
        return self.offsets.committed_count

    @property
    def offsets_expired(self) -> int:
        """Offsets removed by the retention check since start (a metrics counter)."""
        return self.offsets.expired_count

    @property
    def offsets_deleted(self) -> int:
        """Offsets removed by OffsetDelete since start (a metrics counter)."""
        return self.offsets.deleted_count

    @property
    def share_rebalances(self) -> int:
        """Share-group epoch bumps since start (a metrics counter, as Kafka counts share
        rebalances)."""
        return self.share.rebalances

    def group(self, group_id: str) -> ClassicGroup | None:
        """The live group (read-only by convention), None if unknown."""
        return self.classic.groups.get(group_id)

    def groups(self) -> Iterator[ClassicGroup]:
        """The classic groups."""
        return iter(self.classic)

    def consumer_group(self, group_id: str) -> ConsumerGroup | None:
        """The live consumer (KIP-848) group (read-only by convention), None if unknown."""
        return self.consumer.get(group_id)

    def consumer_groups(self) -> Iterator[ConsumerGroup]:
        return iter(self.consumer)

    def share_group(self, group_id: str) -> ShareGroup | None:
        """The live share (KIP-932) group (read-only by convention), None if unknown."""
        return self.share.get(group_id)

    def share_groups(self) -> Iterator[ShareGroup]:
        return iter(self.share)

    def group_count(self) -> int:
        """The groups held, of every type (classic, consumer, share)."""
        return sum(1 for _ in itertools.chain(self.groups(), self.consumer_groups(), self.share_groups()))

    def rebalance_under_way(self, group_id: str) -> RebalanceStart | None:
        """The start of the group's rebalance under way, if one is (either type)."""
        consumer = self.consumer.get(group_id)
        if consumer is not None:
            return consumer.rebalance
        return self.classic.state.rebalance_under_way(group_id)

    def committed_offsets(self, group_id: str) -> dict[tuple[str, int], OffsetCommitValue]:
        """A copy of the latest committed offsets of ``group_id`` ((topic, partition) keys)."""
        return dict(self.offsets.of(group_id))

    def offset_count(self) -> int:
        """Committed offsets held, over every group."""
        return self.offsets.count()

    def offset_count_of(self, group_id: str) -> int:
        """Committed offsets held for ``group_id``."""
        return len(self.offsets.of(group_id))

    def pending_partitions(self, group_id: str) -> set[tuple[str, int]]:
        """Partitions of ``group_id`` with pending transactional offsets (RequireStable)."""
        return self.offsets.pending.pending_partitions(group_id)

    def offsets_snapshot(
        self, group_id: str
    ) -> tuple[int, dict[tuple[str, int], OffsetCommitValue]]:
        """What an OffsetFetch of ``group_id`` reads, copied as it is now: the group-level
        error (NONE if none) and the committed values. The runtime answers a big fetch from
        it with :func:`coordinator.offsets.fetched_offsets`, off the event loop."""
        self._op.not_reentered()
        error = self._gate(group_id, empty_id_ok=True)
        if error is not None:
            return error, {}
        return ErrorCode.none, dict(self.offsets.of(group_id))

    def offset_holders(self) -> list[str]:
        """The groups holding committed or pending transactional offsets, as they are now."""
        return self.offsets.holders()

    def pending_timer_count(self) -> int:
        """Timer entries queued, stale ones included (for metrics/tests)."""
        return len(self.timers)

    # ---- routing: the one check every request of a group passes first ----------------------

    # ---- what the runtime takes to run off the event loop --------------------------------------

    def take_regex_requests(self) -> list[RegexRequest]:
        """The regex resolutions consumer groups asked for since the last call (the runtime
        resolves them and hands each back to ``GroupShard.regexes_resolved``)."""
        requests = self.consumer.regex_requests
        if not requests:
            return []
        self.consumer.regex_requests = []
        return requests

    def take_assignment_requests(self) -> list[AssignmentRequest]:
        """The offloaded target computations consumer groups asked for since the last call
        (KIP-1263: the runtime runs each in a worker thread and hands the result back to
        ``GroupShard.assignment_computed``)."""
        return self.consumer.batching.take()

    def _gate(self, group_id: str, *, empty_id_ok: bool) -> int | None:
        """D1's first checks: invalid group id, not coordinator, loading."""
        if self._mode is _ACTIVE and group_id:  # the usual case, answered first
            route = self._partition_for
            if route is None or route(group_id) == self.partition:
                return None
        if group_id == "" and not empty_id_ok:
            return ErrorCode.invalid_group_id
        if self._mode is ShardMode.UNLOADED:
            return ErrorCode.not_coordinator
        if self._partition_for is not None and self._partition_for(group_id) != self.partition:
            return ErrorCode.not_coordinator
        if self._mode is ShardMode.LOADING:
            return ErrorCode.coordinator_load_in_progress
        return None
