"""The storage interface's contract (``storage.engine``), run against every engine.

Each test gets a factory for an engine over one place (a data directory, a database), so that
it can "restart": a second engine over the same place sees what the first made durable. An
engine that is abandoned without ``close`` stands for a process that died.

``files_only``: what the PostgreSQL engine does not do yet (compaction), run on files alone.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kcoord.protocol.record_encoding import build_batch
from kcoord.protocol.records import decode_batch
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


def batch(*entries: tuple[bytes | None, bytes | None], ts: int = NOW) -> bytes:
    return build_batch(((k, v, [], ts) for k, v in entries))


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


@pytest.mark.files_only
def test_compaction_keeps_the_newest_record_per_key(engines: EngineFactory) -> None:
    spec = LogSpec(segment_bytes=300, compacted=True)
    (plog,) = create(engines(), spec=spec)
    for i in range(30):
        plog.append(batch((b"k%d" % (i % 3), b"v%d" % i)))
    plog.flush()
    assert len(plog.segment_base_offsets) > 2
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


@pytest.mark.files_only
def test_an_aborted_compaction_changes_nothing(engines: EngineFactory) -> None:
    (plog,) = create(engines(), spec=LogSpec(segment_bytes=300, compacted=True))
    for i in range(20):
        plog.append(batch((b"k", b"v%d" % i)))
    before = records(plog)
    plog.abort_compaction(plog.prepare_compaction(now_ms=NOW, delete_retention_ms=0))
    assert records(plog) == before


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
