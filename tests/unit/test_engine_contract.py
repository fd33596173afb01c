"""The storage interface's contract (``storage.engine``), run against every engine.

Each test gets a factory for an engine over one place (a data directory, a database), so that
it can "restart": a second engine over the same place sees what the first made durable. An
engine that is abandoned without ``close`` stands for a process that died.

``files_only``: what the PostgreSQL engine does not do yet, run on files alone (nothing at
present: compaction, the last such, runs on both).
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kcoord.protocol.control import encode_marker
from kcoord.protocol.record_encoding import build_batch
from kcoord.protocol.records import decode_batch
from kcoord.storage.compaction_rules import CompactionStats
from kcoord.storage.engine import Log, LogClosed, LogSpec, OffsetOutOfRange, StorageEngine
from kcoord.storage.file_engine import FileEngine
from kcoord.storage.offline import LogOffline
from kcoord.storage.postgres.engine import PostgresEngine

EngineFactory = Callable[[], StorageEngine]
NOW = 1_700_000_000_000
TOPIC_ID = uuid.UUID("00000000-0000-4000-8000-000000000001")
SPEC = LogSpec(segment_bytes=1 << 20)


@pytest.fixture(params=["files", "postgresql"])
def engines(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[EngineFactory]:
    """A factory of engines over one place, started."""
    made: list[StorageEngine] = []
    if request.param == "postgresql":
        if request.node.get_closest_marker("files_only"):
            pytest.skip("the PostgreSQL engine does not do this yet")
        url = request.getfixturevalue("postgres_url")

    def make() -> StorageEngine:
        engine: StorageEngine
        if request.param == "files":
            engine = FileEngine(tmp_path / "data")
        else:
            engine = PostgresEngine(url, pool_size=2)
        engine.start()
        made.append(engine)
        return engine

    yield make
    if request.param == "postgresql":
        for engine in made:
            engine.close()  # (the pools: the logs were left as a crash leaves them)


def batch(*entries: tuple[bytes | None, bytes | None], ts: int = NOW, **options: int) -> bytes:
    return build_batch(((k, v, [], ts) for k, v in entries), **options)  # type: ignore[arg-type]


def records(plog: Log, start: int | None = None) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every record from ``start`` on."""
    out = []
    for _, _, data in plog.iter_batches(start):
        for offset, _, r in decode_batch(bytes(data)).iter_records():
            out.append((offset, r.key, r.value))
    return out


def values(plog: Log) -> list[bytes | None]:
    return [v for _, _, v in records(plog)]


def create(
    engine: StorageEngine, topic: str = "t", partitions: int = 1, spec: LogSpec = SPEC
) -> list[Log]:
    return engine.create_logs(topic, TOPIC_ID, range(partitions), spec)


def reopen(
    engines: EngineFactory, topic: str = "t", partition: int = 0, spec: LogSpec = SPEC
) -> Log:
    engine = engines()
    stored = engine.stored_topics()[topic]
    assert stored.topic_id == TOPIC_ID and partition in stored.partitions
    return engine.open_log(topic, partition, TOPIC_ID, spec)


# -- appending and reading -------------------------------------------------------------------


def test_appends_get_consecutive_offsets_and_read_back_whole(engines: EngineFactory) -> None:
    (plog,) = create(engines())
    assert (plog.log_start_offset, plog.log_end_offset) == (0, 0)
    assert plog.append(batch((b"a", b"1"), (b"b", b"2"))) == (0, 1)
    assert plog.append(batch((b"c", b"3")) + batch((b"d", b"4"), (b"e", b"5"))) == (2, 4)
    assert plog.log_end_offset == 5
    assert records(plog) == [
        (0, b"a", b"1"),
        (1, b"b", b"2"),
        (2, b"c", b"3"),
        (3, b"d", b"4"),
        (4, b"e", b"5"),
    ]
    # a read starts with the batch holding the offset and returns whole batches
    first = decode_batch(plog.read(4, 1))
    assert first.base_offset == 3 and first.header.last_offset == 4
    assert [o for o, _, _ in records(plog, 4)] == [3, 4]


def test_reads_outside_the_log_and_of_a_closed_log_are_refused(engines: EngineFactory) -> None:
    (plog,) = create(engines())
    plog.append(batch((b"a", b"1"), (b"b", b"2")))
    plog.flush()
    plog.advance_log_start(1)
    assert plog.read(2, 100) == b""  # the log end: nothing yet
    for outside in (0, 3):
        with pytest.raises(OffsetOutOfRange):
            plog.read(outside, 100)
    plog.close()
    with pytest.raises(LogClosed):
        plog.read(1, 100)


def test_a_bad_batch_appends_nothing(engines: EngineFactory) -> None:
    (plog,) = create(engines())
    plog.append(batch((b"a", b"1")))
    good = batch((b"b", b"2"))
    corrupt = bytearray(batch((b"c", b"3")))
    corrupt[-1] ^= 0xFF  # the CRC no longer matches
    with pytest.raises(ValueError):
        plog.append(good + bytes(corrupt))
    assert plog.log_end_offset == 1 and values(plog) == [b"1"]


def test_flush_moves_the_durable_end(engines: EngineFactory) -> None:
    (plog,) = create(engines())
    plog.append(batch((b"a", b"1")))
    plog.flush()
    assert plog.flushed_offset == 1
    plog.append(batch((b"b", b"2")))
    plog.flush()
    assert plog.flushed_offset == plog.log_end_offset == 2


def test_what_was_flushed_survives_a_crash_and_appends_go_on(engines: EngineFactory) -> None:
    (plog,) = create(engines())
    plog.append(batch((b"a", b"1"), (b"b", b"2")))
    plog.flush()
    plog.append(batch((b"c", b"3")))  # never flushed: may or may not survive, but whole
    # the first engine is abandoned: a crash
    again = reopen(engines)
    assert again.log_end_offset in (2, 3)
    assert values(again) == [b"1", b"2", b"3"][: again.log_end_offset]
    assert again.append(batch((b"d", b"4")))[0] == again.log_end_offset - 1
    again.flush()
    assert values(reopen(engines))[-1] == b"4"


def test_timestamps_find_offsets(engines: EngineFactory) -> None:
    (plog,) = create(engines())
    plog.append(batch((b"a", b"1"), ts=NOW))
    plog.append(batch((b"b", b"2"), ts=NOW + 10))
    plog.append(batch((b"c", b"3"), ts=NOW + 5))
    assert plog.offset_for_timestamp(NOW + 1) == (1, NOW + 10)
    assert plog.offset_for_timestamp(NOW + 11) is None
    assert plog.max_timestamp_batch() == (1, NOW + 10)


# -- the log start, retention and compaction ------------------------------------------------


def test_a_moved_log_start_holds_after_a_checkpoint(engines: EngineFactory) -> None:
    engine = engines()
    (plog,) = create(engine)
    for i in range(4):
        plog.append(batch((b"k", b"%d" % i)))
    plog.flush()
    assert plog.advance_log_start(2)
    assert plog.log_start_offset == 2
    assert engine.write_checkpoint(engine.checkpoint([("t", [plog])]))
    plan = plog.plan_deletion(NOW)
    if plan is not None:
        plog.delete_planned(plan)
    assert plog.log_start_offset == 2
    plog.close()
    again = reopen(engines)
    assert again.log_start_offset == 2 and again.log_end_offset == 4
    assert [o for o, _, _ in records(again, 2) if o >= 2] == [2, 3]


def test_retention_by_time_deletes_old_records_only(engines: EngineFactory) -> None:
    (plog,) = create(engines(), spec=LogSpec(segment_bytes=200))
    for i in range(6):
        plog.append(batch((b"k", b"%d" % i), ts=NOW + i))
    plog.flush()
    plan = plog.plan_deletion(NOW + 100, retention_ms=97)  # records older than NOW + 3 may go
    assert plan is not None and 0 < plan.new_log_start <= 3
    plog.advance_log_start(plan.new_log_start)
    plog.delete_planned(plan)
    assert plog.log_start_offset == plan.new_log_start
    assert values(plog)[-1] == b"5"
    plog.append(batch((b"k", b"6"), ts=NOW + 6))
    plog.flush()
    size = plog.size_bytes
    plog.close()
    assert reopen(engines, spec=LogSpec(segment_bytes=200)).size_bytes == size


DAY = 86_400_000
COMPACTED = LogSpec(segment_bytes=300, compacted=True)


def fill(plog: Log, n: int = 12) -> None:
    """Records of keys of their own, so that the files engine seals what came before."""
    for i in range(n):
        plog.append(batch((b"filler-%d" % i, b"x")))


def compact(plog: Log, *, now_ms: int = NOW, delete_retention_ms: int = 0) -> CompactionStats:
    assert plog.compactable
    plan = plog.prepare_compaction(now_ms=now_ms, delete_retention_ms=delete_retention_ms)
    return plog.commit_compaction(plan)


def of_key(plog: Log, key: bytes) -> list[bytes | None]:
    return [v for _, k, v in records(plog) if k == key]


def test_compaction_keeps_the_newest_record_per_key(engines: EngineFactory) -> None:
    engine = engines()
    spec = LogSpec(segment_bytes=300, compacted=True)
    (plog,) = create(engine, spec=spec)
    for i in range(30):
        plog.append(batch((b"k%d" % (i % 3), b"v%d" % i)))
    plog.flush()
    if isinstance(engine, FileEngine):
        assert len(plog.segment_base_offsets) > 2
    assert plog.compactable
    plan = plog.prepare_compaction(now_ms=NOW, delete_retention_ms=0)
    stats = plog.commit_compaction(plan)
    assert stats.records_after < stats.records_before
    kept = records(plog)
    newest = {k: v for _, k, v in kept}
    assert newest == {b"k0": b"v27", b"k1": b"v28", b"k2": b"v29"}
    assert [o for o, _, _ in kept] == sorted(o for o, _, _ in kept)
    assert plog.log_end_offset == 30
    plog.close()
    assert {k: v for _, k, v in records(reopen(engines, spec=spec))} == newest


def test_an_aborted_compaction_changes_nothing(engines: EngineFactory) -> None:
    (plog,) = create(engines(), spec=LogSpec(segment_bytes=300, compacted=True))
    for i in range(20):
        plog.append(batch((b"k", b"v%d" % i)))
    before = records(plog)
    plog.abort_compaction(plog.prepare_compaction(now_ms=NOW, delete_retention_ms=0))
    assert records(plog) == before


def test_a_tombstone_goes_only_once_past_delete_retention(engines: EngineFactory) -> None:
    (plog,) = create(engines(), spec=COMPACTED)
    plog.append(batch((b"old", b"1"), (b"recent", b"1"), ts=NOW - 3 * DAY))
    plog.append(batch((b"old", None), ts=NOW - 2 * DAY))
    plog.append(batch((b"recent", None), ts=NOW - DAY // 2))
    fill(plog)
    plog.flush()
    stats = compact(plog, delete_retention_ms=DAY)
    assert stats.tombstones_dropped == 1
    assert of_key(plog, b"old") == []
    assert of_key(plog, b"recent") == [None]
    assert plog.log_start_offset == 0 and plog.log_end_offset == 16


def txn(plog: Log, pid: int, key: bytes, value: bytes) -> None:
    plog.append(batch((key, value), producer_id=pid, producer_epoch=0, is_transactional=True))


def test_aborted_records_go_and_committed_ones_compete_by_offset(engines: EngineFactory) -> None:
    (plog,) = create(engines(), spec=COMPACTED)
    plog.append(batch((b"a", b"old"), (b"b", b"old")))  # 0, 1
    txn(plog, 7, b"a", b"committed")  # 2
    txn(plog, 7, b"b", b"committed")  # 3
    plog.append(batch((b"b", b"newer")))  # 4: after the transaction's record, before its marker
    txn(plog, 8, b"a", b"aborted")  # 5
    plog.append(encode_marker(7, 0, True, 0, NOW))  # 6
    plog.append(encode_marker(8, 0, False, 0, NOW))  # 7
    fill(plog)
    plog.flush()
    aborted = plog.aborted_transactions(0, plog.log_end_offset)
    assert [a.producer_id for a in aborted] == [8]
    compact(plog)
    assert of_key(plog, b"a") == [b"committed"]
    assert of_key(plog, b"b") == [b"newer"]
    assert [o for o, h, _ in plog.iter_batches() if h.is_control] == [6, 7]
    assert plog.aborted_transactions(0, plog.log_end_offset) == aborted
    plog.close()
    again = reopen(engines, spec=COMPACTED)
    assert of_key(again, b"a") == [b"committed"]
    assert again.aborted_transactions(0, again.log_end_offset) == aborted


def test_a_plan_made_stale_by_retention_is_discarded(engines: EngineFactory) -> None:
    engine = engines()
    (plog,) = create(engine, spec=COMPACTED)
    for i in range(10):
        plog.append(batch((b"k", b"v%d" % i)))
    fill(plog)
    plog.flush()
    plan = plog.prepare_compaction(now_ms=NOW, delete_retention_ms=0)
    # retention deletes the oldest records (which the plan would have removed) meanwhile
    assert plog.advance_log_start(5)
    assert engine.write_checkpoint(engine.checkpoint([("t", [plog])]))
    deletion = plog.plan_deletion(NOW)
    assert deletion is not None and plog.delete_planned(deletion) > 0
    before, size = records(plog, 5), plog.size_bytes
    stats = plog.commit_compaction(plan)
    assert stats.stale and stats.records_after == stats.records_before
    assert records(plog, 5) == before and plog.size_bytes == size
    assert plog.log_start_offset == 5
    # the next compaction does it
    stats = compact(plog)
    assert not stats.stale and of_key(plog, b"k") == [b"v9"]
    plog.close()
    again = reopen(engines, spec=COMPACTED)
    assert again.log_start_offset == 5 and of_key(again, b"k") == [b"v9"]


def test_writes_made_while_a_plan_was_pending_stay_intact(engines: EngineFactory) -> None:
    (plog,) = create(engines(), spec=COMPACTED)
    for i in range(10):
        plog.append(batch((b"k", b"v%d" % i)))
    fill(plog)
    plog.flush()
    plan = plog.prepare_compaction(now_ms=NOW, delete_retention_ms=0)
    plog.append(batch((b"k", b"flushed meanwhile"), (b"new", b"1")))  # 22, 23
    plog.flush()
    plog.append(batch((b"k", b"still waiting"), (b"new", None)))  # 24, 25: not flushed
    stats = plog.commit_compaction(plan)
    later = [(22, b"k", b"flushed meanwhile"), (23, b"new", b"1")]
    later += [(24, b"k", b"still waiting"), (25, b"new", None)]
    assert records(plog, 22) == later
    assert plog.log_end_offset == 26
    assert not stats.stale  # applied, around what came after the plan
    assert of_key(plog, b"k") == [b"v9", b"flushed meanwhile", b"still waiting"]
    plog.flush()
    assert records(plog, 22) == later
    size = plog.size_bytes
    plog.close()
    again = reopen(engines, spec=COMPACTED)
    assert records(again, 22) == later and again.size_bytes == size


def test_a_compacted_log_reads_back_the_same_after_a_reopen(engines: EngineFactory) -> None:
    (plog,) = create(engines(), spec=COMPACTED)
    for i in range(40):
        value = None if i % 7 == 6 else b"v%d" % i
        plog.append(batch((b"k%d" % (i % 5), value), (b"j%d" % (i % 3), b"w%d" % i)))
    txn(plog, 9, b"k1", b"aborted")
    plog.append(encode_marker(9, 0, False, 0, NOW))
    fill(plog)
    plog.flush()
    stats = compact(plog, delete_retention_ms=DAY)
    assert stats.records_after < stats.records_before
    kept, size, end = records(plog), plog.size_bytes, plog.log_end_offset
    plog.close()
    again = reopen(engines, spec=COMPACTED)
    assert records(again) == kept
    assert (again.size_bytes, again.log_end_offset, again.log_start_offset) == (size, end, 0)


# -- the catalogue --------------------------------------------------------------------------


def test_created_partitions_are_listed_with_their_topic_id(engines: EngineFactory) -> None:
    engine = engines()
    logs = create(engine, "orders", 3)
    assert [plog.name for plog in logs] == ["orders-0", "orders-1", "orders-2"]
    stored = engines().stored_topics()["orders"]
    assert stored.topic_id == TOPIC_ID and stored.partitions == frozenset({0, 1, 2})
    more = engine.create_logs("orders", TOPIC_ID, range(3, 5), SPEC)
    assert [plog.log_end_offset for plog in more] == [0, 0]
    assert engines().stored_topics()["orders"].partitions == frozenset(range(5))


def test_a_deleted_topic_is_gone_after_a_crash(engines: EngineFactory) -> None:
    engine = engines()
    logs = create(engine, "doomed", 2)
    logs[0].append(batch((b"a", b"1")))
    logs[0].flush()
    create(engine, "kept")
    engine.delete_logs("doomed", logs)
    # not removed yet (remove_deleted not run): still gone for the next engine
    assert set(engines().stored_topics()) == {"kept"}
    engine.remove_deleted()
    assert set(engines().stored_topics()) == {"kept"}


def test_an_offline_log_refuses_everything(engines: EngineFactory) -> None:
    plog = engines().offline_log("t", 0, "the disk went away")
    assert plog.offline is not None
    with pytest.raises(LogOffline):
        plog.append(batch((b"a", b"1")))
    with pytest.raises(LogOffline):
        plog.read(0, 100)


def test_offline_logs_are_worth_reopening_only_where_they_can_come_back(
    engines: EngineFactory,
) -> None:
    engine = engines()
    # Files: an offline log stays so until a restart; PostgreSQL: whenever the database answers.
    assert engine.may_reopen() is not isinstance(engine, FileEngine)


# -- documents ------------------------------------------------------------------------------


def test_documents_are_replaced_whole_and_durable(engines: EngineFactory) -> None:
    engine = engines()
    assert engine.read_document("acls.json") is None
    engine.write_document("acls.json", b'{"v": 1}')
    engine.write_document("acls.json", b'{"v": 2}')
    engine.write_document("producer-ids", b"next.block.start=1000\n")
    again = engines()
    assert again.read_document("acls.json") == b'{"v": 2}'
    assert again.read_document("producer-ids") == b"next.block.start=1000\n"


def test_documents_are_not_topics(engines: EngineFactory) -> None:
    engine = engines()
    engine.write_document("topic-configs.json", b"{}")
    create(engine, "t")
    assert set(engines().stored_topics()) == {"t"}


def test_concurrent_document_updates_lose_nothing(engines: EngineFactory) -> None:
    """Writers in threads each add their items to one document, starting with no document at
    all: every item is there. On PostgreSQL two of them have engines of their own (as nodes of a
    cluster); a data directory has one engine (one process owns it: the broker's node.lock)."""
    first = engines()
    others = [first, first] if isinstance(first, FileEngine) else [engines(), engines()]
    writers = [first, first, *others]
    name = "shared.json"

    def add(item: str) -> Callable[[bytes | None], bytes | None]:
        def change(raw: bytes | None) -> bytes | None:
            items = json.loads(raw or b"[]")
            return json.dumps([*items, item]).encode()

        return change

    def work(w: int) -> None:
        for i in range(15):
            writers[w].update_document(name, add(f"{w}-{i}"))

    threads = [threading.Thread(target=work, args=(w,)) for w in range(len(writers))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    stored = engines().read_document(name)
    assert stored is not None
    assert sorted(json.loads(stored)) == sorted(f"{w}-{i}" for w in range(4) for i in range(15))
    # A change may leave the document as it is (None), and what it raises is raised.
    assert first.update_document(name, lambda raw: None) == stored
    with pytest.raises(KeyError):
        first.update_document(name, lambda raw: {}["x"])  # type: ignore[no-any-return]
    assert first.read_document(name) == stored
    assert first.update_document("absent.json", lambda raw: None) is None
    assert first.read_document("absent.json") is None
