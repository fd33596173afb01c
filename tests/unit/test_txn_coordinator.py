"""The transaction coordinator's state machine (coordinator/transactions), driven by hand with a
fake clock: InitProducerId (new ids, epoch bumps, KIP-360 recovery, epoch exhaustion, fencing an
ongoing transaction), AddPartitionsToTxn, EndTxn (retries, concurrent calls, wrong states,
zombies), timeouts, expiry, and a reload from the records in every state."""

from __future__ import annotations

import itertools

import pytest

from kcoord.coordinator.transactions.coordinator import (
    ProducerIdsUnavailable,
    Transition,
    TxnConfig,
    TxnCoordinator,
)
from kcoord.coordinator.transactions.model import MAX_EPOCH, TxnMetadata, TxnState
from kcoord.coordinator.transactions.records import (
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from kcoord.protocol.errors import ErrorCode as E

T0 = 1_700_000_000_000
TP = ("t", 0)
TP1 = ("t", 1)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> int:
        return self.now


def coordinator(**config: int) -> TxnCoordinator:
    ids = itertools.count(1000)
    return TxnCoordinator(TxnConfig(**config), lambda: next(ids))


def done(c: TxnCoordinator, answer: int | Transition) -> Transition:
    """Make a transition durable (what the runtime does once the write is fsynced)."""
    assert isinstance(answer, Transition), f"expected a transition, got {E(answer).name}"
    c.begin(answer)
    c.apply(answer)
    return answer


def init(c: TxnCoordinator, txn: str = "tx", now: int = T0, timeout: int = 60_000,
         expected: tuple[int, int] | None = None) -> TxnMetadata:
    tr = done(c, c.init_producer_id(txn, timeout, expected, now))
    assert tr.after is not None
    return tr.after


def ongoing(c: TxnCoordinator, txn: str = "tx", now: int = T0) -> TxnMetadata:
    m = init(c, txn, now)
    done(c, c.add_partitions(txn, m.producer_id, m.producer_epoch, [TP, TP1], now))
    meta = c.get(txn)
    assert meta is not None
    return meta


# InitProducerId ----------------------------------------------------------------------------------
def test_new_id_gets_a_new_producer_id_and_epoch_0_then_each_init_bumps_the_epoch() -> None:
    c = coordinator()
    m = init(c)
    assert (m.producer_id, m.producer_epoch, m.state) == (1000, 0, TxnState.EMPTY)
    m2 = init(c, now=T0 + 5)
    assert (m2.producer_id, m2.producer_epoch, m2.last_update_ms) == (1000, 1, T0 + 5)
    assert init(c, "other").producer_id == 1001


def test_transaction_timeout_is_bounded_by_transaction_max_timeout_ms() -> None:
    c = coordinator(max_timeout_ms=1000)
    assert c.init_producer_id("tx", 1001, None, T0) == E.invalid_transaction_timeout
    assert c.init_producer_id("tx", 0, None, T0) == E.invalid_transaction_timeout
    assert c.init_producer_id("", 100, None, T0) == E.invalid_request
    assert isinstance(c.init_producer_id("tx", 1000, None, T0), Transition)


def test_kip360_recovery_bumps_from_the_current_epoch_and_a_retry_gets_the_same_answer() -> None:
    c = coordinator()
    m = init(c)
    bumped = init(c, expected=(m.producer_id, m.producer_epoch))
    assert (bumped.producer_epoch, bumped.last_producer_epoch) == (1, 0)
    # The answer was lost: the producer retries with the epoch it had.
    again = init(c, expected=(m.producer_id, 0))
    assert again.producer_epoch == 1
    # Another producer id, or an epoch that is neither current nor the last: fenced.
    assert c.init_producer_id("tx", 60_000, (999, 1), T0) == E.producer_fenced
    init(c)  # a new producer instance: the last epoch is forgotten
    assert c.init_producer_id("tx", 60_000, (m.producer_id, 0), T0) == E.producer_fenced


def test_epoch_exhaustion_rotates_the_producer_id() -> None:
    c = coordinator()
    m = init(c)
    c.txns["tx"] = m.but(producer_epoch=MAX_EPOCH - 2)
    m2 = init(c)
    assert (m2.producer_id, m2.producer_epoch) == (m.producer_id, MAX_EPOCH - 1)
    m3 = init(c, expected=(m2.producer_id, m2.producer_epoch))
    assert (m3.producer_id, m3.producer_epoch) == (1001, 0)
    assert (m3.previous_producer_id, m3.last_producer_epoch) == (m.producer_id, MAX_EPOCH - 1)
    # A retry of that rotation with the old id and the exhausted epoch gets the same answer.
    m4 = init(c, expected=(m.producer_id, MAX_EPOCH - 1))
    assert (m4.producer_id, m4.producer_epoch) == (1001, 0)


def test_an_allocator_that_cannot_give_an_id_answers_a_retriable_error() -> None:
    def broken() -> int:
        raise ProducerIdsUnavailable("disk full")

    c = TxnCoordinator(TxnConfig(), broken)
    assert c.init_producer_id("tx", 1000, None, T0) == E.coordinator_load_in_progress


def test_init_on_an_ongoing_transaction_fences_it_and_aborts_with_a_bumped_epoch() -> None:
    c = coordinator()
    m = ongoing(c)
    tr = c.init_producer_id("tx", 60_000, None, T0 + 1)
    assert isinstance(tr, Transition) and tr.fence and tr.after is not None
    assert (tr.after.state, tr.after.producer_epoch) == (TxnState.PREPARE_ABORT, m.producer_epoch + 1)
    assert tr.after.partitions == {TP, TP1}
    c.begin(tr)
    # While the fence is being written, everything else waits.
    assert c.init_producer_id("tx", 60_000, None, T0) == E.concurrent_transactions
    assert c.end_txn("tx", m.producer_id, m.producer_epoch, True, T0) == E.concurrent_transactions
    c.apply(tr)
    # Once written, the old epoch is fenced.
    assert c.end_txn("tx", m.producer_id, m.producer_epoch, True, T0) == E.producer_fenced
    # The new producer retries InitProducerId until the abort is complete.
    assert c.init_producer_id("tx", 60_000, None, T0) == E.concurrent_transactions
    assert c.to_complete() == ["tx"]
    done(c, c.complete("tx", T0 + 2))
    assert c.get("tx").state == TxnState.COMPLETE_ABORT  # type: ignore[union-attr]
    m2 = init(c)
    assert m2.producer_epoch == m.producer_epoch + 2


# AddPartitionsToTxn ------------------------------------------------------------------------------
def test_add_partitions_starts_the_transaction_and_repeats_answer_at_once() -> None:
    c = coordinator()
    m = init(c)
    tr = done(c, c.add_partitions("tx", m.producer_id, m.producer_epoch, [TP], T0 + 10))
    assert tr.after is not None
    assert (tr.after.state, tr.after.start_ms, tr.after.partitions) == (
        TxnState.ONGOING, T0 + 10, {TP}
    )
    assert c.add_partitions("tx", m.producer_id, m.producer_epoch, [TP], T0 + 20) == 0
    tr2 = done(c, c.add_partitions("tx", m.producer_id, m.producer_epoch, [TP1], T0 + 30))
    assert tr2.after is not None and tr2.after.start_ms == T0 + 10
    assert tr2.after.partitions == {TP, TP1}


def test_add_partitions_errors() -> None:
    c = coordinator()
    assert c.add_partitions("nope", 1, 0, [TP], T0) == E.invalid_producer_id_mapping
    m = init(c)
    assert c.add_partitions("tx", m.producer_id + 1, 0, [TP], T0) == E.invalid_producer_id_mapping
    assert c.add_partitions("tx", m.producer_id, 5, [TP], T0) == E.producer_fenced
    tr = c.add_partitions("tx", m.producer_id, 0, [TP], T0)
    assert isinstance(tr, Transition)
    c.begin(tr)
    assert c.add_partitions("tx", m.producer_id, 0, [TP1], T0) == E.concurrent_transactions
    c.apply(tr)
    done(c, c.end_txn("tx", m.producer_id, 0, True, T0))
    assert c.add_partitions("tx", m.producer_id, 0, [TP1], T0) == E.concurrent_transactions


# verifying a transactional Produce (KIP-890) -----------------------------------------------------
def test_a_transactional_batch_is_verified_against_the_ongoing_transaction() -> None:
    c = coordinator()
    assert c.verify_partition("nope", 1, 0, TP) == E.invalid_producer_id_mapping
    assert c.verify_partition("", 1, 0, TP) == E.invalid_producer_id_mapping
    m = init(c)
    pid, epoch = m.producer_id, m.producer_epoch
    assert c.verify_partition("tx", pid + 1, epoch, TP) == E.invalid_producer_id_mapping
    assert c.verify_partition("tx", pid, epoch, TP) == E.invalid_txn_state  # Empty
    done(c, c.add_partitions("tx", pid, epoch, [TP], T0))
    assert c.verify_partition("tx", pid, epoch, TP) == 0
    assert c.verify_partition("tx", pid, epoch, TP1) == E.invalid_txn_state  # not added
    assert c.verify_partition("tx", pid, epoch + 1, TP) == E.invalid_producer_epoch
    assert c.verify_partition("tx", pid, epoch - 1, TP) == E.invalid_producer_epoch
    done(c, c.end_txn("tx", pid, epoch, True, T0 + 1))
    assert c.verify_partition("tx", pid, epoch, TP) == E.concurrent_transactions  # PrepareCommit
    done(c, c.complete("tx", T0 + 2))
    assert c.verify_partition("tx", pid, epoch, TP) == E.invalid_txn_state  # CompleteCommit


# EndTxn ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("commit", [True, False])
def test_end_txn_prepares_then_completes_and_a_retry_succeeds(commit: bool) -> None:
    c = coordinator()
    m = ongoing(c)
    pid, epoch = m.producer_id, m.producer_epoch
    tr = c.end_txn("tx", pid, epoch, commit, T0 + 1)
    assert isinstance(tr, Transition) and tr.after is not None
    prepare = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
    assert tr.after.state == prepare
    c.begin(tr)
    # A second EndTxn while the first is being written (concurrent EndTxn).
    assert c.end_txn("tx", pid, epoch, commit, T0 + 1) == E.concurrent_transactions
    c.apply(tr)
    # Retried while the markers are written: retriable; the other outcome: a wrong state.
    assert c.end_txn("tx", pid, epoch, commit, T0 + 2) == E.concurrent_transactions
    assert c.end_txn("tx", pid, epoch, not commit, T0 + 2) == E.invalid_txn_state
    assert c.complete("tx", T0 + 3) is not None
    done(c, c.complete("tx", T0 + 3))
    meta = c.get("tx")
    assert meta is not None and meta.partitions == frozenset()
    assert meta.state == (TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT)
    assert c.end_txn("tx", pid, epoch, commit, T0 + 4) == 0
    assert c.end_txn("tx", pid, epoch, not commit, T0 + 4) == E.invalid_txn_state
    assert c.complete("tx", T0 + 5) is None


def test_end_txn_errors() -> None:
    c = coordinator()
    assert c.end_txn("nope", 1, 0, True, T0) == E.invalid_producer_id_mapping
    m = init(c)
    assert c.end_txn("tx", m.producer_id, 0, True, T0) == E.invalid_txn_state  # Empty
    assert c.end_txn("tx", m.producer_id, 1, True, T0) == E.producer_fenced
    assert c.end_txn("", m.producer_id, 0, True, T0) == E.invalid_request


def test_zombie_producer_is_fenced_on_add_partitions_and_end_txn() -> None:
    c = coordinator()
    zombie = ongoing(c)
    done(c, c.init_producer_id("tx", 60_000, None, T0))  # the new instance fences it
    done(c, c.complete("tx", T0))
    fresh = init(c)
    assert fresh.producer_epoch == zombie.producer_epoch + 2
    assert c.add_partitions("tx", zombie.producer_id, zombie.producer_epoch, [TP], T0) == (
        E.producer_fenced
    )
    assert c.end_txn("tx", zombie.producer_id, zombie.producer_epoch, True, T0) == E.producer_fenced
    done(c, c.add_partitions("tx", fresh.producer_id, fresh.producer_epoch, [TP], T0))


# timeouts and expiry ------------------------------------------------------------------------------
def test_a_transaction_past_its_timeout_is_aborted_with_the_epoch_bumped() -> None:
    clock = Clock()
    c = coordinator()
    m = init(c, timeout=1000)
    done(c, c.add_partitions("tx", m.producer_id, 0, [TP], clock()))
    clock.now += 1000
    assert c.timed_out(clock()) == []
    clock.now += 1
    assert c.timed_out(clock()) == ["tx"]
    tr = c.fence_abort("tx", clock())
    assert tr is not None and tr.after is not None and not tr.fence
    assert (tr.after.state, tr.after.producer_epoch) == (TxnState.PREPARE_ABORT, 1)
    c.begin(tr)
    assert c.timed_out(clock()) == []  # nothing pending is looked at twice
    assert c.fence_abort("tx", clock()) is None
    c.apply(tr)
    assert c.timed_out(clock()) == []
    # The producer of the timed-out transaction is fenced when it tries to commit.
    assert c.end_txn("tx", m.producer_id, 0, True, clock()) == E.producer_fenced


def test_idle_ids_expire_only_outside_a_transaction() -> None:
    clock = Clock()
    c = coordinator(id_expiration_ms=10_000)
    init(c, "idle", clock())
    ongoing(c, "busy", clock())
    clock.now += 10_000
    expired = c.expired(clock())
    assert [(t.transactional_id, t.after) for t in expired] == [("idle", None)]
    done(c, expired[0])
    assert c.get("idle") is None and c.get("busy") is not None


def test_list_filters() -> None:
    c = coordinator()
    init(c, "a")
    ongoing(c, "b", now=T0)
    names = lambda states, pids=(), d=-1, now=T0: sorted(  # noqa: E731
        m.transactional_id for m in c.listed(states, pids, d, now)
    )
    assert names([]) == ["a", "b"]
    assert names([TxnState.ONGOING]) == ["b"]
    assert names([], [c.get("a").producer_id]) == ["a"]  # type: ignore[union-attr]
    assert names([TxnState.ONGOING], d=5000, now=T0 + 5000) == []
    assert names([TxnState.ONGOING], d=5000, now=T0 + 5001) == ["b"]


# records and reload -------------------------------------------------------------------------------
def test_records_are_kafkas_transaction_log_layout() -> None:
    assert encode_key("tx") == b"\x00\x00\x00\x02tx"
    m = TxnMetadata("tx", 7, 3, 60_000, TxnState.ONGOING, frozenset({("t", 1), ("t", 0)}),
                    start_ms=5, last_update_ms=6)
    assert encode_value(m) == (
        b"\x00\x00"  # version 0
        + (7).to_bytes(8, "big") + (3).to_bytes(2, "big") + (60_000).to_bytes(4, "big") + b"\x01"
        + b"\x00\x00\x00\x01" + b"\x00\x01t" + b"\x00\x00\x00\x02" + b"\x00\x00\x00\x00"
        + b"\x00\x00\x00\x01"
        + (6).to_bytes(8, "big") + (5).to_bytes(8, "big")
    )
    empty = m.but(state=TxnState.EMPTY, partitions=frozenset(), start_ms=-1)
    assert encode_value(empty)[17:21] == b"\xff\xff\xff\xff"  # a null partition list


def test_value_version_1_flexible_is_read() -> None:
    value = (
        b"\x00\x01" + (7).to_bytes(8, "big") + (3).to_bytes(2, "big")
        + (60_000).to_bytes(4, "big") + b"\x02"
        + b"\x02" + b"\x02t" + b"\x02" + (4).to_bytes(4, "big") + b"\x00"  # [t: [4]]
        + (6).to_bytes(8, "big") + (5).to_bytes(8, "big")
        + b"\x02" + b"\x00\x08" + (42).to_bytes(8, "big") + b"\x02\x02\x00\x02"  # tags 0 and 2
    )
    m = decode_value("tx", value)
    assert (m.producer_id, m.producer_epoch, m.state, m.partitions) == (
        7, 3, TxnState.PREPARE_COMMIT, {("t", 4)}
    )
    assert (m.last_update_ms, m.start_ms, m.previous_producer_id) == (6, 5, 42)


def _reloaded(c: TxnCoordinator) -> TxnCoordinator:
    fresh = coordinator()
    for txn_id, meta in c.txns.items():
        fresh.replay(decode_key(encode_key(txn_id)), decode_value(txn_id, encode_value(meta)))
    return fresh


def test_reload_in_each_state() -> None:
    clock = Clock()
    c = coordinator()
    init(c, "empty", clock())
    ongoing(c, "ongoing", clock())
    for txn, commit in (("pc", True), ("pa", False), ("cc", True), ("ca", False)):
        m = ongoing(c, txn, clock())
        done(c, c.end_txn(txn, m.producer_id, m.producer_epoch, commit, clock()))
        if txn.startswith("c"):
            done(c, c.complete(txn, clock()))
    r = _reloaded(c)
    assert {t: m.state for t, m in r.txns.items()} == {
        "empty": TxnState.EMPTY,
        "ongoing": TxnState.ONGOING,
        "pc": TxnState.PREPARE_COMMIT,
        "pa": TxnState.PREPARE_ABORT,
        "cc": TxnState.COMPLETE_COMMIT,
        "ca": TxnState.COMPLETE_ABORT,
    }
    # Prepared ones are completed (their markers written) at once; the ongoing one is aborted
    # once past its timeout; the others carry on.
    assert sorted(r.to_complete()) == ["pa", "pc"]
    assert r.get("pc").partitions == {TP, TP1}  # type: ignore[union-attr]
    assert r.timed_out(clock() + 60_000) == []
    assert r.timed_out(clock() + 60_001) == ["ongoing"]
    for txn in ("empty", "cc", "ca"):
        before = r.get(txn)
        assert before is not None
        assert init(r, txn).producer_epoch == before.producer_epoch + 1
    m = r.get("ongoing")
    assert m is not None
    assert r.end_txn("ongoing", m.producer_id, m.producer_epoch, True, clock()) != E.producer_fenced
    r.replay("cc", None)  # a tombstone removes the id
    assert r.get("cc") is None


def test_a_partition_read_again_replaces_only_its_own_ids() -> None:
    """What the runtime does when a partition's log is online again: the log's records win
    over memory, for that partition's ids alone."""
    c = coordinator()
    logged = init(c, "a")  # as the log holds it
    done(c, c.add_partitions("a", logged.producer_id, logged.producer_epoch, [TP], T0))  # lost
    init(c, "b")  # its write was reported failed, yet committed: memory does not know
    other = init(c, "elsewhere")
    committed_b = c.get("b")
    assert committed_b is not None
    c.replay("b", None)  # memory forgot it (the failed write was undone)

    c.reload(lambda t: t != "elsewhere", {"a": logged, "b": committed_b, "gone": None})
    assert c.get("a") == logged and c.get("b") == committed_b and c.get("gone") is None
    assert c.get("elsewhere") == other
