"""storage/postgres/cluster.py against a real PostgreSQL: sessions by the database's clock,
takes that raise the epoch only over an absent or dead leader, releases that cannot undo a
successor's take, and flushes fenced by the epoch inside their own transaction."""

from __future__ import annotations

import time
import uuid

import psycopg
import pytest

from kcoord.protocol.record_encoding import build_batch
from kcoord.storage.engine import LeaderFence, LogSpec
from kcoord.storage.offline import LogFenced, LogOffline
from kcoord.storage.postgres.cluster import ClusterStore, NodeIdTaken
from kcoord.storage.postgres.engine import PostgresEngine

TOPIC_ID = uuid.UUID("00000000-0000-4000-8000-000000000003")
SESSION_MS = 60_000
ENDPOINTS = (("PLAINTEXT", "127.0.0.1", 9092),)


def engine_with_topic(url: str, partitions: int = 2) -> PostgresEngine:
    engine = PostgresEngine(url, pool_size=2)
    engine.start()
    engine.create_logs("t", TOPIC_ID, range(partitions), LogSpec(1 << 20))
    return engine


def node(engine: PostgresEngine, node_id: int, session_ms: int = SESSION_MS) -> ClusterStore:
    store = engine.cluster_store(node_id, uuid.uuid4(), session_ms)
    store.register(ENDPOINTS, None, None)
    return store


def expire(url: str, node_id: int) -> None:
    """The node's session ends (as if it stopped renewing long ago)."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("UPDATE nodes SET expires_at = now() - interval '1 second' WHERE node_id = %s",
                     (node_id,))


def test_a_live_node_id_is_refused_unless_it_is_this_directorys_former_self(postgres_url: str) -> None:
    engine = engine_with_topic(postgres_url)
    first = node(engine, 1)
    second = engine.cluster_store(1, uuid.uuid4(), SESSION_MS)
    with pytest.raises(NodeIdTaken):
        second.register(ENDPOINTS, None, None)
    second.register(ENDPOINTS, None, first.incarnation)  # the former self: taken back at once
    assert not first.renew()  # the old incarnation learns it lost the id
    assert second.renew()
    expire(postgres_url, 1)
    third = engine.cluster_store(1, uuid.uuid4(), SESSION_MS)
    third.register(ENDPOINTS, None, None)  # a dead holder's id is free
    engine.close()


def test_take_raises_the_epoch_only_over_an_absent_or_dead_leader(postgres_url: str) -> None:
    engine = engine_with_topic(postgres_url)
    a, b = node(engine, 1), node(engine, 2)
    rows = {r.partition: r.row_id for r in a.snapshot().partitions}
    assert a.take([rows[0]]) == {rows[0]: 1}
    assert b.take([rows[0], rows[1]]) == {rows[1]: 1}  # partition 0 has a live leader
    expire(postgres_url, 1)
    assert b.take([rows[0]]) == {rows[0]: 2}
    assert a.take([rows[1]]) == {}  # a dead node takes nothing back
    snap = b.snapshot()
    assert [n.node_id for n in snap.nodes] == [2]
    assert {(r.partition, r.leader, r.epoch) for r in snap.partitions} == {(0, 2, 2), (1, 2, 1)}
    assert not a.snapshot().alive
    a.release({rows[0]: 1})  # a stale release changes nothing
    assert {r.leader for r in b.snapshot().partitions} == {2}
    b.release({rows[0]: 2})
    assert {r.partition for r in b.snapshot().partitions if r.leader is None} == {0}
    engine.close()


def test_a_flush_of_a_deposed_leader_is_fenced_in_its_own_transaction(postgres_url: str) -> None:
    engine = engine_with_topic(postgres_url, 1)
    a, b = node(engine, 1), node(engine, 2)
    row = a.snapshot().partitions[0].row_id
    epoch = a.take([row])[row]
    old = engine.open_log("t", 0, TOPIC_ID, LogSpec(1 << 20), leader=LeaderFence(1, epoch))
    old.append(build_batch([(b"k", b"first", [], 1)]))
    old.flush()
    old.append(build_batch([(b"k", b"late", [], 2)]))  # appended, then node 1 is paused
    expire(postgres_url, 1)
    new_epoch = b.take([row])[row]
    new = engine.open_log("t", 0, TOPIC_ID, LogSpec(1 << 20), leader=LeaderFence(2, new_epoch))
    assert new.log_end_offset == 1
    with pytest.raises(LogOffline) as failed:
        old.flush()
    assert isinstance(failed.value.cause, LogFenced)
    new.append(build_batch([(b"k", b"successor", [], 3)]))
    new.flush()
    stored = [(h.base_offset, h.partition_leader_epoch) for _, h, _ in new.iter_batches()]
    assert stored == [(0, epoch), (1, new_epoch)]  # each batch stamped by its leader's epoch
    engine.close()


def test_sessions_run_on_the_database_clock(postgres_url: str) -> None:
    engine = engine_with_topic(postgres_url)
    short = node(engine, 5, session_ms=300)
    assert short.snapshot().alive
    deadline = time.monotonic() + 10
    while short.snapshot().alive:  # expires without renewals, by now() of the database
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert short.renew() and short.snapshot().alive
    short.leave()
    assert short.holder() is None
    engine.close()
