"""The storage interface: everything the broker asks of wherever durable bytes live.

Two kinds of things are stored:

* **Partition logs** (:class:`Log`): every partition, ``__consumer_offsets`` and
  ``__transaction_state`` included, is a log of Kafka v2 record batches. The broker appends
  batches (offsets assigned at once, durable after :meth:`Log.flush`), reads them back by offset
  or timestamp, moves the log start (DeleteRecords, retention), compacts, and keeps the producer
  state the log implies. Every engine stores Kafka's own batch bytes, so every reader (the
  coordinator's load, Fetch, the pipeline) decodes one format.
* **The catalogue and small stores** (:class:`StorageEngine`): which topics and partitions
  exist (with their topic ids), the offsets checkpointed for them, and whole small documents
  (topic configs, ACLs, SCRAM credentials, producer-id blocks, the cluster id), each read whole
  at start-up and replaced atomically.

The contract every engine keeps (its tests run against each engine: ``tests/unit/test_engine_contract.py``):

* an append is all-or-nothing and its records are readable (by the broker; Fetch serves only up
  to :attr:`Log.flushed_offset`) at once; :meth:`Log.flush` returns only once everything
  appended before it is durable, and then moves ``flushed_offset``;
* what was flushed survives a crash of the process; what was appended and not flushed may be
  lost, and then wholly from some batch on (never a hole);
* creating partitions is all-or-nothing; deleting a topic is durable once
  :meth:`StorageEngine.delete_logs` returns;
* a document write is atomic and durable once :meth:`StorageEngine.write_document` returns;
  :meth:`Documents.update_document` applies a change to the document as it stands, and two
  updates of one document (threads, processes, nodes of a cluster) never lose each other's;
* a read outside [log start, log end] raises :class:`OffsetOutOfRange`; a closed log raises
  :class:`LogClosed`, an offline one ``storage.offline.LogOffline`` (an OSError).

Threading, as the files engine: one writer per log (the event loop); ``flush``, compaction's
first phase, ``delete_logs``, ``remove_deleted`` and ``write_checkpoints`` may run in worker
threads.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from kcoord.protocol.batch import BatchHeader
from kcoord.storage.compaction_rules import CompactionStats, PreparedCompaction
from kcoord.storage.offline import LogOffline
from kcoord.storage.producer_state import ProducerState
from kcoord.storage.retention import DeletionPlan
from kcoord.storage.txn_index import AbortedTxn


class OffsetOutOfRange(Exception):
    """A read asked for an offset outside [log_start_offset, log_end_offset]."""

    def __init__(self, offset: int, log_start_offset: int, log_end_offset: int) -> None:
        super().__init__(f"offset {offset} out of range [{log_start_offset}, {log_end_offset}]")
        self.offset = offset
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset


class LogClosed(RuntimeError):
    """The log was closed or deleted."""


@dataclass(frozen=True, slots=True)
class LogSpec:
    """How one partition's log is kept: its segment size (a log rolls past it; also the
    largest batch group one segment holds), whether it is compacted (so offsets may be
    missing between batches without that meaning lost data) and whether it is journaled."""

    segment_bytes: int
    compacted: bool = False
    journaled: bool = False
    """Written by many small durable writes at once (``__consumer_offsets``): an engine may
    make them durable together, in a journal shared by such logs (the files engine does)."""


@dataclass(frozen=True, slots=True)
class LeaderFence:
    """The leadership a log's writes are made under (cluster mode): node ``node_id`` took the
    partition in ``epoch``. An engine that knows leaders (PostgreSQL) writes a flush only if the
    partition is still led by that node in that epoch, checked inside the flush's own
    transaction; otherwise the flush fails with ``LogFenced`` and the log goes offline."""

    node_id: int
    epoch: int


@dataclass(frozen=True, slots=True)
class StoredTopic:
    """A topic found in storage at start-up: its id (None if no partition recorded one) and the
    partitions present (a partition below the highest that is not here is missing)."""

    name: str
    topic_id: uuid.UUID | None
    partitions: frozenset[int]


class Log(Protocol):
    """One partition's log, as the broker uses it, whatever engine keeps it."""

    @property
    def name(self) -> str:
        """``<topic>-<partition>``, for log lines."""

    @property
    def offline(self) -> LogOffline | None:
        """Why the log cannot be used (every operation then raises that), or None."""

    @property
    def log_start_offset(self) -> int: ...

    @property
    def log_end_offset(self) -> int: ...

    @property
    def high_watermark(self) -> int: ...

    @property
    def flushed_offset(self) -> int:
        """Every offset below this is durable; Fetch serves only below it."""

    @property
    def size_bytes(self) -> int: ...

    @property
    def segment_base_offsets(self) -> list[int]:
        """The base offsets of the log's segments (one for an engine without segments)."""

    @property
    def compactable(self) -> bool:
        """Whether compaction could clean anything now: the files engine needs a sealed
        segment; PostgreSQL, rows flushed since the last compaction covered them."""

    @property
    def producer_state(self) -> ProducerState: ...

    def append(self, batches: bytes | bytearray | memoryview) -> tuple[int, int]:
        """Append whole v2 batches (validated first; all or nothing), assigning offsets from
        the log end. Returns (first offset, last offset). Not durable until :meth:`flush`."""

    @property
    def shared_flush(self) -> SharedFlush | None:
        """What flushes this log together with others of its engine (one database
        transaction), or None: it flushes alone."""

    def flush(self) -> None:
        """Make everything appended so far durable (blocking; any thread)."""

    def read(self, offset: int, max_bytes: int) -> bytes:
        """Whole batches from the one holding ``offset``, about ``max_bytes`` worth (at least
        one batch)."""

    def reads_locally(self, offset: int) -> bool:
        """Whether :meth:`read` from ``offset`` is answered from memory or local files, without
        waiting on another server: cheap enough for the event loop. PostgreSQL: only from the
        batches it keeps in memory on."""

    @property
    def looks_up_locally(self) -> bool:
        """Whether :meth:`offset_for_timestamp` and :meth:`max_timestamp_batch` are answered
        locally (the files engine's time indexes), not by a database query."""

    def iter_batches(
        self, start_offset: int | None = None
    ) -> Iterator[tuple[int, BatchHeader, memoryview]]: ...

    def offset_for_timestamp(self, ts_ms: int) -> tuple[int, int] | None: ...

    def max_timestamp_batch(self) -> tuple[int, int] | None: ...

    def last_stable_offset(self, high_watermark: int) -> int: ...

    def aborted_transactions(self, start: int, upper: int) -> list[AbortedTxn]: ...

    # the log start, retention and rolls
    def advance_log_start(self, offset: int) -> bool: ...

    def restore_log_start(self, offset: int) -> None: ...

    def set_segment_bytes(self, segment_bytes: int) -> None: ...

    def roll_if_due(self, now_ms: int, segment_ms: int) -> bool: ...

    def plan_deletion(
        self, now_ms: int, *, retention_ms: int = -1, retention_bytes: int = -1
    ) -> DeletionPlan | None: ...

    def delete_planned(self, plan: DeletionPlan) -> int: ...

    # compaction: prepare (any thread), then commit or abort (the writer, or any thread where
    # compaction_commits_anywhere) with this log's plan
    @property
    def compaction_commits_anywhere(self) -> bool:
        """Whether :meth:`commit_compaction` may run in any thread: PostgreSQL's is one database
        transaction under the partition row's lock; the files engine swaps segment files under
        the appends, so its runs on the writer (the event loop)."""

    def prepare_compaction(
        self, *, now_ms: int, delete_retention_ms: int
    ) -> PreparedCompaction: ...

    def commit_compaction(self, plan: PreparedCompaction) -> CompactionStats: ...

    def abort_compaction(self, plan: PreparedCompaction) -> None: ...

    def close(self) -> None: ...


class SharedFlush(Protocol):
    """An engine's way to flush several of its logs at once (broker/data/flusher.py)."""

    def flush_all(self, logs: Sequence[Any]) -> Mapping[Any, BaseException]:
        """Flush these logs, all of this engine (blocking); those that failed, with their
        errors."""


DocumentChange = Callable[[bytes | None], bytes | None]
"""A change of a document: its new bytes given its current ones (None: no document / no
change); see :meth:`Documents.update_document`."""


class Documents(Protocol):
    """Small documents, each read whole and replaced whole (what a store of configs, ACLs or
    credentials needs of an engine)."""

    def read_document(self, name: str) -> bytes | None:
        """The document ``name`` (e.g. ``acls.json``) as last written, or None if never."""

    def write_document(self, name: str, data: bytes) -> None:
        """Replace the document ``name`` atomically and durably. Raises OSError."""

    def update_document(self, name: str, change: DocumentChange) -> bytes | None:
        """Apply ``change`` to the document ``name`` as it stands and store what it returns,
        atomically and durably, such that no other update of the document made meanwhile (by
        this process or another) is lost: the change is made on the latest document and nobody
        writes it between that read and this write. ``change`` gets the current bytes (None if
        there is no document) and returns the new bytes, or None to leave the document as it
        is; it may be called more than once (each call on the document as it then stands: make
        it a function of its argument) and what it raises is raised here, nothing written.
        Returns the document as it stands after (blocking; any thread). Raises OSError."""


class StorageEngine(Documents, Protocol):
    """The catalogue of partitions, their logs and the small documents of one broker."""

    @property
    def description(self) -> str:
        """Where the bytes live, for the start-up line (a path or a URL without password)."""

    def start(self) -> None:
        """Settle what an earlier process left unfinished (creations, deletions) and read what
        the engine keeps about its logs (checkpoints). Blocking."""

    # partitions
    def stored_topics(self) -> dict[str, StoredTopic]:
        """Every topic with at least one partition in storage."""

    def open_log(
        self,
        topic: str,
        partition: int,
        topic_id: uuid.UUID,
        spec: LogSpec,
        leader: LeaderFence | None = None,
    ) -> Log:
        """The existing partition's log, recovered; an offline log if it cannot be opened
        (logged at ERROR with the offsets affected). ``leader``: the leadership its flushes
        are fenced by (engines without leaders ignore it)."""

    def create_logs(
        self, topic: str, topic_id: uuid.UUID, partitions: range, spec: LogSpec
    ) -> list[Log]:
        """Create empty partitions, all or nothing (blocking; any thread). Raises OSError if
        none was created; partitions whose creation was decided but not completed come back
        offline (the next start completes them)."""

    def offline_log(self, topic: str, partition: int, cause: BaseException | str) -> Log:
        """A log for a partition that cannot be had; every operation raises ``LogOffline``."""

    def delete_logs(self, topic: str, logs: Sequence[Log]) -> None:
        """Delete a topic's partitions, durably (blocking; any thread: the broker calls it
        from a worker thread once nothing new can find the logs, and an append still under
        way on the event loop finishes first or gets :class:`LogClosed`); what takes long is
        left to :meth:`remove_deleted`."""

    def remove_deleted(self) -> None:
        """Finish deletions (blocking; any thread)."""

    def may_reopen(self) -> bool:
        """Whether offline logs are worth opening again now (blocking; any thread): never for
        the files engine, whose offline logs stay so until a restart (as a failed log directory
        does in Kafka); for PostgreSQL, whenever the database answers."""

    # checkpoints of each partition's start and durable end
    def checkpoint(self, topics: Iterable[tuple[str, Sequence[Log]]]) -> object:
        """Take, on the event loop, what :meth:`write_checkpoint` writes: every listed
        partition's log start and flushed offset (partitions not listed are forgotten)."""

    def write_checkpoint(self, snapshot: object) -> bool:
        """Make a :meth:`checkpoint` durable (blocking; any thread); False if it could not be
        (logged) or a newer one was already written. Retention deletes records below a moved
        log start only after this."""

    def close(self) -> None: ...
