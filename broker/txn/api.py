"""The transaction APIs on the wire: InitProducerId (idempotent and transactional),
AddPartitionsToTxn (v0-v3 from producers; v4, the batched form between brokers, whose
verify-only transactions answer a partition leader's KIP-890 check, ``broker.txn.remote``),
AddOffsetsToTxn, EndTxn, and the KIP-664 tools ListTransactions and DescribeTransactions.

Each handler checks what Kafka's KafkaApis checks (ACLs: WRITE on the TRANSACTIONAL_ID, READ on
the group of AddOffsetsToTxn, WRITE on the topics of AddPartitionsToTxn, DESCRIBE for the
tools, CLUSTER_ACTION for AddPartitionsToTxn v4), asks the state machine
(``coordinator.transactions``) and, when it answers with a transition, has the runtime
(``broker.txn.runtime``) make it durable before answering.
PRODUCER_FENCED is answered INVALID_PRODUCER_EPOCH to the versions that predate it, as Kafka
does.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from kcoord.coordinator.transactions.coordinator import ProducerIdsUnavailable, Transition
from kcoord.coordinator.transactions.model import TopicPartition, TxnState
from kcoord.protocol.errors import ErrorCode
from kcoord.protocol.responses import to_millis

from ..data.topic_names import INTERNAL_TOPICS, OFFSETS_TOPIC
from ..net.connection import RequestContext
from ..net.offload import SLICE, Sliced, encoded_off_loop, is_big, run_now, run_sliced
from ..security.acl.model import CLUSTER_NAME, Operation, ResourceType
from .runtime import TxnRuntime

log = logging.getLogger("kcoord.transactions")

_E = ErrorCode
_TXN = ResourceType.TRANSACTIONAL_ID
_SETTLE_S = 1.0
"""How long EndTxn waits for its transaction's markers before answering anyway."""


def _fenced_for(code: int, version: int, first_version: int) -> int:
    """PRODUCER_FENCED only from the version that introduced it (INVALID_PRODUCER_EPOCH before)."""
    if code == _E.producer_fenced and version < first_version:
        return _E.invalid_producer_epoch
    return code


class TxnApi:
    def __init__(
        self,
        runtime: TxnRuntime,
        partition_exists: Callable[[str, int], bool],
        group_partition: Callable[[str], int],
    ) -> None:
        self.runtime = runtime
        self.partition_exists = partition_exists
        self.group_partition = group_partition
        self._checking = asyncio.Lock()
        """Held while the entries of a big AddPartitionsToTxn are checked in slices: requests
        of many entries pipelined together take turns, one slice per turn of the event loop."""

    # FindCoordinator (key type TRANSACTION) -------------------------------------------------------
    def partition_of(self, transactional_id: str) -> int:
        return self.runtime.partition_of(transactional_id)

    def topic_creation(self) -> asyncio.Future[None] | None:
        return self.runtime.state_topic.creating

    def find_error(self, ctx: RequestContext, transactional_id: str) -> int:
        """0 if this node coordinates ``transactional_id`` for this client, else the error."""
        if not ctx.allowed(Operation.DESCRIBE, _TXN, transactional_id):
            return _E.transactional_id_authorization_failed
        code = self.runtime.coordinator_error(transactional_id)
        # Loading is answered by the requests that follow; the node is the coordinator.
        return 0 if code == _E.coordinator_load_in_progress else code

    # InitProducerId -------------------------------------------------------------------------------
    def init_producer_id(self, ctx: RequestContext, req: Any) -> Any:
        txn_id = req.transactional_id

        def answer(code: int, pid: int = -1, epoch: int = -1) -> Any:
            return ctx.respond(
                throttle_time=0,
                error_code=_fenced_for(code, ctx.version, 4),
                producer_id=pid if code == 0 else -1,
                producer_epoch=epoch if code == 0 else -1,
            )

        if txn_id is None:
            if not self._may_write_idempotently(ctx):
                return answer(_E.cluster_authorization_failed)
            try:
                return answer(0, self.runtime.allocate_producer_id(), 0)
            except ProducerIdsUnavailable:
                return answer(_E.coordinator_load_in_progress)
        if not ctx.allowed(Operation.WRITE, _TXN, txn_id):
            return answer(_E.transactional_id_authorization_failed)
        pid = getattr(req, "producer_id", -1)
        epoch = getattr(req, "producer_epoch", -1)
        if (pid == -1) != (epoch == -1):
            return answer(_E.invalid_request)
        expected = None if pid == -1 else (int(pid), int(epoch))
        code = self.runtime.coordinator_error(txn_id) if txn_id else 0
        if code:
            return answer(code)
        result = self.runtime.coordinator.init_producer_id(
            txn_id, to_millis(req.transaction_timeout), expected, self.runtime.clock()
        )
        if isinstance(result, int):
            return answer(result)
        return self._init_written(result, self.runtime.write(result), answer)

    @staticmethod
    async def _init_written(
        tr: Transition, written: Awaitable[int], answer: Callable[..., Any]
    ) -> Any:
        code = await written
        if code:
            return answer(code)
        assert tr.after is not None
        if tr.fence:
            # The previous epoch's transaction is being aborted: the client retries.
            return answer(_E.concurrent_transactions)
        log.info("transactional id %r: producer id %d epoch %d", tr.transactional_id,
                 tr.after.producer_id, tr.after.producer_epoch)
        return answer(0, tr.after.producer_id, tr.after.producer_epoch)

    @staticmethod
    def _may_write_idempotently(ctx: RequestContext) -> bool:
        """IDEMPOTENT_WRITE on the cluster, or WRITE on some topic (KIP-679)."""
        authorizer = ctx.connection.authorizer
        if authorizer is None or ctx.allowed(
            Operation.IDEMPOTENT_WRITE, ResourceType.CLUSTER, CLUSTER_NAME, quiet=True
        ):
            return True
        return authorizer.allows_some(
            ctx.connection.principal, ctx.client_host, Operation.WRITE, ResourceType.TOPIC
        )

    # AddPartitionsToTxn ---------------------------------------------------------------------------
    def add_partitions_to_txn(self, ctx: RequestContext, req: Any) -> Any:
        """AddPartitionsToTxn v0-v3 from a producer (v4+: :meth:`_from_broker`). Tens of
        thousands of partition entries are checked in slices, the event loop served between
        them, and their answer is built in the worker (broker/net/offload.py)."""
        if ctx.version >= 4:
            return self._from_broker(ctx, req)
        txn_id = req.v3_and_below_transactional_id
        wanted: list[TopicPartition] = [
            (t.name, int(p)) for t in req.v3_and_below_topics for p in t.partitions
        ]

        def answer(codes: dict[TopicPartition, int]) -> Any:
            by_topic: dict[str, list[dict[str, int]]] = {}
            for (topic, p), code in codes.items():
                by_topic.setdefault(topic, []).append(
                    dict(partition_index=p, partition_error_code=_fenced_for(code, ctx.version, 2))
                )
            return ctx.respond(
                throttle_time=0,
                results_by_topic_v3_and_below=[
                    dict(name=t, results_by_partition=rs) for t, rs in by_topic.items()
                ],
            )

        def all_(code: int) -> Any:
            return answer(dict.fromkeys(wanted, code))

        if not ctx.allowed(Operation.WRITE, _TXN, txn_id):
            return all_(_E.transactional_id_authorization_failed)
        check = self._refused(ctx, wanted)
        if is_big(len(wanted)):
            return self._add_many(txn_id, req, wanted, check, answer)
        refused = run_now(check)
        if refused:
            return answer({tp: refused.get(tp, _E.operation_not_attempted) for tp in wanted})
        return self._add(txn_id, req.v3_and_below_producer_id, req.v3_and_below_producer_epoch,
                         wanted, all_)

    def _refused(
        self, ctx: RequestContext, wanted: list[TopicPartition]
    ) -> Sliced[dict[TopicPartition, int]]:
        """The partitions the producer may not add, with the error for each."""
        refused: dict[TopicPartition, int] = {}
        allowed_topics: dict[str, bool] = {}
        for n, tp in enumerate(wanted, 1):
            if not n % SLICE:
                yield
            topic = tp[0]
            if topic not in allowed_topics:
                # Internal topics are never a client's to add (Kafka leaves them out of the
                # authorized ones); __consumer_offsets comes in through AddOffsetsToTxn.
                allowed_topics[topic] = topic not in INTERNAL_TOPICS and ctx.allowed(
                    Operation.WRITE, ResourceType.TOPIC, topic
                )
            if not allowed_topics[topic]:
                refused[tp] = _E.topic_authorization_failed
            elif not self.partition_exists(*tp):
                refused[tp] = _E.unknown_topic_or_partition
        return refused

    async def _add_many(
        self,
        txn_id: str,
        req: Any,
        wanted: list[TopicPartition],
        check: Sliced[dict[TopicPartition, int]],
        answer: Callable[[dict[TopicPartition, int]], Any],
    ) -> Any:
        """AddPartitionsToTxn of many partition entries: checked in slices, answered from the
        worker."""
        refused = await self._sliced(check)
        if refused:
            return await encoded_off_loop(lambda: answer(
                {tp: refused.get(tp, _E.operation_not_attempted) for tp in wanted}
            ))
        added = self._add(txn_id, req.v3_and_below_producer_id, req.v3_and_below_producer_epoch,
                          wanted, int)
        code = int(await added) if inspect.isawaitable(added) else int(added)
        return await encoded_off_loop(lambda: answer(dict.fromkeys(wanted, code)))

    def _add(
        self, txn_id: str, pid: int, epoch: int, partitions: Iterable[TopicPartition],
        answer: Callable[[int], Any],
    ) -> Any:
        code = self.runtime.coordinator_error(txn_id) if txn_id else 0
        if code:
            return answer(code)
        result = self.runtime.coordinator.add_partitions(
            txn_id, pid, epoch, partitions, self.runtime.clock()
        )
        if isinstance(result, int):
            return answer(result)
        return self._written(self.runtime.write(result), answer)

    @staticmethod
    async def _written(written: Awaitable[int], answer: Callable[[int], Any]) -> Any:
        return answer(await written)

    def _from_broker(self, ctx: RequestContext, req: Any) -> Any:
        """AddPartitionsToTxn v4, from another broker: several transactions, each either to
        verify (are these partitions in the producer's ongoing transaction? Kafka's answers:
        PRODUCER_FENCED, CONCURRENT_TRANSACTIONS while it completes, INVALID_TXN_STATE for a
        partition outside it; v5's TRANSACTION_ABORTABLE is not served) or to add to."""
        if not ctx.allowed(Operation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME):
            return ctx.respond(throttle_time=0, error_code=_E.cluster_authorization_failed,
                               results_by_transaction=[])
        return self._transactions(ctx, req)

    async def _transactions(self, ctx: RequestContext, req: Any) -> Any:
        """Each transaction's partitions checked in slices (with the loop served in between)
        once they are many, and the answer then built in the worker."""
        results = []
        entries = 0
        for t in req.transactions:
            wanted: list[TopicPartition] = [(x.name, int(p)) for x in t.topics for p in x.partitions]
            entries += len(wanted)
            codes: dict[TopicPartition, int]
            if t.verify_only:
                verified = self._verify(t.transactional_id, int(t.producer_id),
                                        int(t.producer_epoch), wanted)
                codes = await self._sliced(verified) if is_big(len(wanted)) else run_now(verified)
            else:
                codes = await self._add_for_broker(t.transactional_id, int(t.producer_id),
                                                   int(t.producer_epoch), wanted)
            by_topic: dict[str, list[dict[str, int]]] = {}
            for (topic, p), code in codes.items():
                by_topic.setdefault(topic, []).append(
                    dict(partition_index=p, partition_error_code=code)
                )
            results.append(dict(
                transactional_id=t.transactional_id,
                topic_results=[dict(name=n, results_by_partition=rs) for n, rs in by_topic.items()],
            ))
        if is_big(entries):
            return await encoded_off_loop(lambda: ctx.respond(
                throttle_time=0, error_code=0, results_by_transaction=results))
        return ctx.respond(throttle_time=0, error_code=0, results_by_transaction=results)

    def _verify(
        self, txn_id: str, pid: int, epoch: int, wanted: list[TopicPartition]
    ) -> Sliced[dict[TopicPartition, int]]:
        if not txn_id:
            return dict.fromkeys(wanted, _E.invalid_request)
        code = self.runtime.coordinator_error(txn_id)
        if code:
            return dict.fromkeys(wanted, code)
        coordinator = self.runtime.coordinator
        out = {}
        for n, tp in enumerate(wanted, 1):
            if not n % SLICE:
                yield
            code = coordinator.verify_partition(txn_id, pid, epoch, tp)
            # The coordinator's own answer for a fenced epoch (Produce maps it back).
            out[tp] = _E.producer_fenced if code == _E.invalid_producer_epoch else code
        return out

    async def _add_for_broker(
        self, txn_id: str, pid: int, epoch: int, wanted: list[TopicPartition]
    ) -> dict[TopicPartition, int]:
        exists = self._missing(wanted)
        missing = await self._sliced(exists) if is_big(len(wanted)) else run_now(exists)
        if missing:
            return {tp: missing.get(tp, _E.operation_not_attempted) for tp in wanted}
        if not txn_id:
            return dict.fromkeys(wanted, _E.invalid_request)
        answer: Any = self._add(txn_id, pid, epoch, wanted, int)
        code = int(await answer) if inspect.isawaitable(answer) else int(answer)
        return dict.fromkeys(wanted, code)

    async def _sliced(self, work: Sliced[dict[TopicPartition, int]]) -> dict[TopicPartition, int]:
        async with self._checking:
            return await run_sliced(work)

    def _missing(self, wanted: list[TopicPartition]) -> Sliced[dict[TopicPartition, int]]:
        missing: dict[TopicPartition, int] = {}
        for n, tp in enumerate(wanted, 1):
            if not n % SLICE:
                yield
            if not self.partition_exists(*tp):
                missing[tp] = _E.unknown_topic_or_partition
        return missing

    # AddOffsetsToTxn ------------------------------------------------------------------------------
    def add_offsets_to_txn(self, ctx: RequestContext, req: Any) -> Any:
        def answer(code: int) -> Any:
            return ctx.respond(throttle_time=0, error_code=_fenced_for(code, ctx.version, 2))

        if not ctx.allowed(Operation.WRITE, _TXN, req.transactional_id):
            return answer(_E.transactional_id_authorization_failed)
        if not ctx.allowed(Operation.READ, ResourceType.GROUP, req.group_id):
            return answer(_E.group_authorization_failed)
        partition = (OFFSETS_TOPIC, self.group_partition(req.group_id))
        return self._add(req.transactional_id, req.producer_id, req.producer_epoch, [partition],
                         answer)

    # EndTxn ---------------------------------------------------------------------------------------
    def end_txn(self, ctx: RequestContext, req: Any) -> Any:
        def answer(code: int) -> Any:
            return ctx.respond(throttle_time=0, error_code=_fenced_for(code, ctx.version, 2),
                               producer_id=-1, producer_epoch=-1)

        txn_id = req.transactional_id
        if not ctx.allowed(Operation.WRITE, _TXN, txn_id):
            return answer(_E.transactional_id_authorization_failed)
        code = self.runtime.coordinator_error(txn_id) if txn_id else 0
        if code:
            return answer(code)
        result = self.runtime.coordinator.end_txn(
            txn_id, req.producer_id, req.producer_epoch, req.committed, self.runtime.clock()
        )
        if isinstance(result, int):
            return answer(result)
        return self._ended(txn_id, self.runtime.write(result), answer)

    async def _ended(
        self, txn_id: str, written: Awaitable[int], answer: Callable[[int], Any]
    ) -> Any:
        """EndTxn's answer: once the decision is durable, and, for up to
        :data:`_SETTLE_S`, once its markers are written too. Kafka answers before the markers;
        on one node they take a moment, and a client whose next transaction finds this one
        still completing gets CONCURRENT_TRANSACTIONS and backs off (100 ms in librdkafka)."""
        code = await written
        if code == 0:
            await self.runtime.settled(txn_id, _SETTLE_S)
        return answer(code)

    # KIP-664 tools --------------------------------------------------------------------------------
    def list_transactions(self, ctx: RequestContext, req: Any) -> Any:
        runtime = self.runtime
        if not runtime.loaded:
            return ctx.respond(throttle_time=0, error_code=_E.coordinator_load_in_progress,
                               unknown_state_filters=[], transaction_states=[])
        states: list[TxnState] = []
        unknown: list[str] = []
        for name in req.state_filters:
            state = TxnState.from_name(name)
            if state is None:
                unknown.append(name)
            else:
                states.append(state)
        listed = [
            dict(transactional_id=m.transactional_id, producer_id=m.producer_id,
                 transaction_state=m.state.kafka_name)
            for m in runtime.coordinator.listed(
                states, req.producer_id_filters, getattr(req, "duration_filter", -1),
                runtime.clock(),
            )
            if ctx.allowed(Operation.DESCRIBE, _TXN, m.transactional_id, quiet=True)
        ]
        if unknown and not states:
            listed = []  # every filter named an unknown state: nothing can match
        return ctx.respond(throttle_time=0, error_code=0, unknown_state_filters=unknown,
                           transaction_states=listed)

    def describe_transactions(self, ctx: RequestContext, req: Any) -> Any:
        return ctx.respond(
            throttle_time=0,
            transaction_states=[self._describe(ctx, t) for t in req.transactional_ids],
        )

    def _describe(self, ctx: RequestContext, txn_id: str) -> dict[str, Any]:
        empty: dict[str, Any] = dict(
            transactional_id=txn_id, transaction_state="", transaction_timeout=0,
            transaction_start_time=-1, producer_id=-1, producer_epoch=-1, topics=[],
        )
        if not ctx.allowed(Operation.DESCRIBE, _TXN, txn_id):
            return dict(empty, error_code=_E.transactional_id_authorization_failed)
        if not txn_id:
            return dict(empty, error_code=_E.invalid_request)
        code = self.runtime.coordinator_error(txn_id)
        if code:
            return dict(empty, error_code=code)
        meta = self.runtime.coordinator.get(txn_id)
        if meta is None:
            return dict(empty, error_code=_E.transactional_id_not_found)
        topics: dict[str, list[int]] = {}
        for topic, p in sorted(meta.partitions):
            topics.setdefault(topic, []).append(p)
        return dict(
            error_code=0,
            transactional_id=txn_id,
            transaction_state=meta.state.kafka_name,
            transaction_timeout=meta.timeout_ms,
            transaction_start_time=meta.start_ms,
            producer_id=meta.producer_id,
            producer_epoch=meta.producer_epoch,
            topics=[
                dict(topic=t, partitions=ps) for t, ps in topics.items()
                if ctx.allowed(Operation.DESCRIBE, ResourceType.TOPIC, t, quiet=True)
            ],
        )
