"""The transaction coordinator's state is a function of its log: random sequences of requests
(InitProducerId, AddPartitionsToTxn, EndTxn, completions, timeouts, expiry), each transition
recorded as the runtime writes it, replayed into a fresh coordinator, give the same ids in the
same states (all but the last epoch and the previous producer id, which a version 0 record does
not carry, as in Kafka)."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from kcoord.coordinator.transactions.coordinator import Transition, TxnConfig, TxnCoordinator
from kcoord.coordinator.transactions.records import (
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)

IDS = ["a", "b", "c"]
PARTS = [("t", 0), ("t", 1), ("u", 0), ("__consumer_offsets", 7)]

op = st.one_of(
    st.tuples(st.just("init"), st.sampled_from(IDS), st.booleans()),
    st.tuples(st.just("add"), st.sampled_from(IDS), st.lists(st.sampled_from(PARTS), max_size=3)),
    st.tuples(st.just("end"), st.sampled_from(IDS), st.booleans()),
    st.tuples(st.just("complete"), st.sampled_from(IDS), st.just(None)),
    st.tuples(st.just("tick"), st.sampled_from(IDS), st.integers(0, 5000)),
    st.tuples(st.just("fail"), st.sampled_from(IDS), st.just(None)),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(op, max_size=60))
def test_replaying_the_log_gives_the_live_state(ops: list[tuple[str, str, object]]) -> None:
    pids = itertools.count()
    live = TxnCoordinator(TxnConfig(max_timeout_ms=2000, id_expiration_ms=8000), lambda: next(pids))
    log: list[tuple[bytes, bytes | None]] = []
    now = 0

    def write(answer: int | Transition, fail: bool = False) -> None:
        if not isinstance(answer, Transition):
            return
        live.begin(answer)
        if fail:  # the append failed: nothing in the log, nothing changed
            live.abandon(answer)
            return
        value = None if answer.after is None else encode_value(answer.after)
        log.append((encode_key(answer.transactional_id), value))
        live.apply(answer)

    for kind, txn, arg in ops:
        meta = live.get(txn)
        if kind == "init":
            expected = (meta.producer_id, meta.producer_epoch) if meta and arg else None
            write(live.init_producer_id(txn, 1000, expected, now))
        elif kind == "add" and meta is not None:
            write(live.add_partitions(txn, meta.producer_id, meta.producer_epoch, arg, now))  # type: ignore[arg-type]
        elif kind == "end" and meta is not None:
            write(live.end_txn(txn, meta.producer_id, meta.producer_epoch, bool(arg), now))
        elif kind == "complete":
            tr = live.complete(txn, now)
            if tr is not None:
                write(tr)
        elif kind == "tick":
            now += int(arg)  # type: ignore[call-overload]
            for timed_out in live.timed_out(now):
                tr = live.fence_abort(timed_out, now)
                if tr is not None:
                    write(tr)
            for removal in live.expired(now):
                write(removal)
        elif kind == "fail" and meta is not None:
            write(live.init_producer_id(txn, 1000, None, now), fail=True)
        assert not live.pending

    replayed = TxnCoordinator(TxnConfig(), lambda: 0)
    for key, value in log:
        txn_id = decode_key(key)
        replayed.replay(txn_id, None if value is None else decode_value(txn_id, value))
    def persisted(c: TxnCoordinator) -> dict[str, object]:
        return {t: m.but(last_producer_epoch=-1, previous_producer_id=-1) for t, m in c.txns.items()}

    assert persisted(replayed) == persisted(live)
