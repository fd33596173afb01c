"""One client's wide request or burst must not hold the event loop (issue 34, finding 11).

Every probe runs beside the module's healthy group and :class:`SessionWatch`, a classic group
member with a short session (1 s) heartbeating on its own connection and waiting for each answer
no longer than that session, as a Kafka client gives up on a coordinator that does not answer in
time. While one request keeps the loop nobody is answered, so the condition each probe checks is
that the watcher never goes unanswered for a session nor is fenced, and that the probe's requests
all get their right answers. The probes are sized so that the loop, held for the whole of the
work before it was cut into turns, was held for a session or more:

* forty transactions over 400 partitions each, ended together (their markers are now appended
  in slices of a few milliseconds);
* sixteen AddPartitionsToTxn of 99,000 partition entries each, pipelined on one connection (the
  entries are now checked in slices and the answers built in the worker, and a connection's pass
  ends after any request that took a while), then one verifying as many in the brokers' form.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from kcoord.protocol.apis import ApiKey
from kcoord.protocol.errors import ErrorCode
from tests.integration.clients import create_topic
from tests.integration.harness import BrokerProcess, wait_for
from tests.integration.rawclient import RawClient

from .conftest import assert_survived
from .healthy import HealthyGroup

SESSION_MS = 1000
BROKER_SETTINGS = {"group.min.session.timeout.ms": 1000}
EMPTY_PROTOCOL = b"\x00\x00" + b"\x00\x00\x00\x00" + b"\xff\xff\xff\xff"
WIDE = "wide"
WIDE_PARTITIONS = 400


def join_request(group: str, session_ms: int) -> dict[str, object]:
    return dict(group_id=group, session_timeout=session_ms, rebalance_timeout=session_ms,
                member_id="", group_instance_id=None, protocol_type="consumer",
                protocols=[dict(name="range", metadata=EMPTY_PROTOCOL)])


class SessionWatch(threading.Thread):
    """A member of its own classic group, session :data:`SESSION_MS`, heartbeating every
    100 ms; ``errors`` says why it stopped: a heartbeat answered with an error (fenced), or not
    answered within the session."""

    def __init__(self, port: int, group: str) -> None:
        super().__init__(daemon=True, name=f"watch-{group}")
        self.client = RawClient(port, timeout=30)
        self.group = group
        self.errors: list[str] = []
        self.beats = 0
        self._done = threading.Event()
        joined = self.client.request(ApiKey.JOIN_GROUP, 3, **join_request(group, SESSION_MS))
        assert joined.error_code == 0, joined
        self.member_id, self.generation = joined.member_id, int(joined.generation_id)
        synced = self.client.request(
            ApiKey.SYNC_GROUP, 3, group_id=group, generation_id=self.generation,
            member_id=self.member_id, group_instance_id=None,
            assignments=[dict(member_id=self.member_id, assignment=b"")],
        )
        assert synced.error_code == 0, synced

    def run(self) -> None:
        self.client.sock.settimeout(SESSION_MS / 1000)
        while not self._done.wait(0.1):
            try:
                r = self.client.request(ApiKey.HEARTBEAT, 3, group_id=self.group,
                                        generation_id=self.generation, member_id=self.member_id,
                                        group_instance_id=None)
            except OSError as e:  # socket.timeout: no answer within the session
                self.errors.append(f"heartbeat not answered within the session: {e!r}")
                return
            self.beats += 1
            if r.error_code != 0:
                self.errors.append(ErrorCode(r.error_code).name)
                return

    def stop(self) -> None:
        self._done.set()
        self.join(timeout=30)
        self.client.close()


@pytest.fixture
def watch(abuse_broker: BrokerProcess, healthy: HealthyGroup,
          request: pytest.FixtureRequest) -> Iterator[SessionWatch]:
    w = SessionWatch(abuse_broker.port, f"watch-{request.node.name}")
    w.start()
    wait_for(lambda: w.beats >= 3 or bool(w.errors), 30, what="the watcher's first heartbeats")
    yield w
    w.stop()
    assert not w.errors, f"the watcher was fenced while the probe ran: {w.errors}"
    assert_survived(abuse_broker, healthy, request.node.name)


@pytest.fixture(scope="module")
def wide_topic(abuse_broker: BrokerProcess) -> str:
    create_topic(abuse_broker.bootstrap, WIDE, WIDE_PARTITIONS, timeout=60)
    # __transaction_state is made at the first InitProducerId: made here, before any watcher,
    # it is not part of what the probes measure.
    with RawClient(abuse_broker.port, timeout=60) as c:
        wait_for(lambda: c.request(ApiKey.INIT_PRODUCER_ID, 4, transactional_id="warm-up",
                                   transaction_timeout=60_000, producer_id=-1,
                                   producer_epoch=-1).error_code == 0,
                 60, what="the transaction coordinator")
    return WIDE


def _begin(c: RawClient, txn_id: str, topic: str, entries: int) -> tuple[int, int]:
    init = c.request(ApiKey.INIT_PRODUCER_ID, 4, transactional_id=txn_id,
                     transaction_timeout=60_000, producer_id=-1, producer_epoch=-1)
    assert init.error_code == 0, init
    pid, epoch = int(init.producer_id), int(init.producer_epoch)
    added = _add(c, txn_id, pid, epoch, topic, entries)
    assert added == {0}, added
    return pid, epoch


def _add_fields(txn_id: str, pid: int, epoch: int, topic: str, entries: int) -> dict[str, object]:
    return dict(v3_and_below_transactional_id=txn_id, v3_and_below_producer_id=pid,
                v3_and_below_producer_epoch=epoch,
                v3_and_below_topics=[dict(name=topic, partitions=[
                    i % WIDE_PARTITIONS for i in range(entries)])])


def _codes(resp: object) -> set[int]:
    return {int(p.partition_error_code) for t in resp.results_by_topic_v3_and_below  # type: ignore[attr-defined]
            for p in t.results_by_partition}


def _add(c: RawClient, txn_id: str, pid: int, epoch: int, topic: str, entries: int) -> set[int]:
    resp = c.request(ApiKey.ADD_PARTITIONS_TO_TXN, 3, **_add_fields(txn_id, pid, epoch, topic, entries))
    assert len(resp.results_by_topic_v3_and_below[0].results_by_partition) == min(entries, WIDE_PARTITIONS)
    return _codes(resp)


def _states(c: RawClient, ids: list[str]) -> set[str]:
    resp = c.request(ApiKey.DESCRIBE_TRANSACTIONS, 0, transactional_ids=ids)
    return {s.transaction_state for s in resp.transaction_states}


def test_transactions_over_hundreds_of_partitions_end_together_fencing_nobody(
    abuse_broker: BrokerProcess, watch: SessionWatch, wide_topic: str
) -> None:
    ids = [f"wide-end-{k}" for k in range(40)]
    with RawClient(abuse_broker.port, timeout=60) as c:
        producers = [_begin(c, txn_id, wide_topic, WIDE_PARTITIONS) for txn_id in ids]
        sent = [c.send_request(ApiKey.END_TXN, 3, transactional_id=txn_id, producer_id=pid,
                               producer_epoch=epoch, committed=True)
                for txn_id, (pid, epoch) in zip(ids, producers, strict=True)]
        assert [int(c.response(ApiKey.END_TXN, 3, cid).error_code) for cid in sent] == [0] * len(ids)
        wait_for(lambda: _states(c, ids) == {"CompleteCommit"}, 60,
                 what="every marker of the ten transactions")


def test_sixteen_pipelined_add_partitions_of_99000_entries_fence_nobody(
    abuse_broker: BrokerProcess, watch: SessionWatch, wide_topic: str
) -> None:
    with RawClient(abuse_broker.port, timeout=60) as c:
        init = c.request(ApiKey.INIT_PRODUCER_ID, 4, transactional_id="wide-add",
                         transaction_timeout=60_000, producer_id=-1, producer_epoch=-1)
        pid, epoch = int(init.producer_id), int(init.producer_epoch)
        fields = _add_fields("wide-add", pid, epoch, wide_topic, 99_000)
        sent = [c.send_request(ApiKey.ADD_PARTITIONS_TO_TXN, 3, **fields) for _ in range(16)]
        answers = [c.response(ApiKey.ADD_PARTITIONS_TO_TXN, 3, cid) for cid in sent]
        # The first adds the partitions; the others find them added, or the first's write
        # still under way (CONCURRENT_TRANSACTIONS), for every partition alike.
        assert _codes(answers[0]) == {0}
        for a in answers[1:]:
            assert _codes(a) in ({0}, {int(ErrorCode.concurrent_transactions)}), _codes(a)
        assert _states(c, ["wide-add"]) == {"Ongoing"}
        # The brokers' form (v4), verifying as many entries: every partition is in.
        verified = c.request(ApiKey.ADD_PARTITIONS_TO_TXN, 4, transactions=[dict(
            transactional_id="wide-add", producer_id=pid, producer_epoch=epoch, verify_only=True,
            topics=fields["v3_and_below_topics"])])
        results = verified.results_by_transaction[0].topic_results[0].results_by_partition
        assert len(results) == WIDE_PARTITIONS
        assert {int(p.partition_error_code) for p in results} == {0}
