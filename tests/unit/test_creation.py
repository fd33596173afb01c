"""storage.creation (all-or-nothing partition directories, rolled back or forward at start-up),
storage.checkpoint (Kafka's checkpoint files, lost offsets), and the topic registry using them:
limits judged in request order, failed creations leaving nothing, interrupted ones loading
whole or not at all, losses since the last checkpoint logged."""

from __future__ import annotations

import errno
import logging
import os
import threading
import uuid
from pathlib import Path

import pytest

import kcoord.storage.creation as creation
from kcoord.broker.data.topics import PartitionLimits, TopicError, TopicStore
from kcoord.protocol.errors import ErrorCode
from kcoord.storage.checkpoint import (
    CheckpointError,
    lost_offsets,
    read_checkpoint,
    write_checkpoint,
)
from kcoord.storage.creation import COMMIT_MARKER, STAGING_DIR, StagedPartitions, create_partitions
from kcoord.storage.engine import LogClosed
from kcoord.storage.file_engine import FileEngine
from kcoord.storage.log import PartitionLog
from kcoord.storage.partition_metadata import read_partition_metadata

from .test_log import make_batch

SEGMENT_BYTES = 1 << 20


def started(data_dir: Path) -> FileEngine:
    """A files engine over ``data_dir`` that has settled what an earlier process left."""
    engine = FileEngine(data_dir)
    engine.start()
    return engine


def _partition_dirs(data: Path) -> list[str]:
    return sorted(p.name for p in data.iterdir() if p.is_dir() and p.name != STAGING_DIR)


def _staged(data: Path) -> list[str]:
    """What is left in the staging area (which is removed once empty)."""
    root = data / STAGING_DIR
    return sorted(os.listdir(root)) if root.exists() else []


# -- storage.creation ---------------------------------------------------------------------------


@pytest.mark.parametrize("n", [3, creation.SYNCFS_FROM + 5])  # fsyncs; one syncfs
def test_created_partitions_are_complete_and_nothing_is_left_in_staging(
    tmp_path: Path, n: int
) -> None:
    topic_id = uuid.uuid4()
    paths = create_partitions(tmp_path, "t", topic_id, range(n))
    assert [p.name for p in paths] == [f"t-{p}" for p in range(n)]
    assert _partition_dirs(tmp_path) == sorted(f"t-{p}" for p in range(n))
    assert not (tmp_path / STAGING_DIR).exists()
    for p in paths:
        assert read_partition_metadata(p) == topic_id
        assert sorted(os.listdir(p)) == sorted(
            ["partition.metadata"] + [f"{0:020d}{s}" for s in (".log", ".index", ".timeindex")]
        )
        log = PartitionLog.fresh(p)
        log.append(make_batch())
        log.close()
        assert PartitionLog.open(p).log_end_offset == 1


def test_a_failure_part_way_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = creation.write_partition_metadata
    calls = [0]

    def full_disk(*args: object, **kw: object) -> None:
        calls[0] += 1
        if calls[0] == 3:
            raise OSError(errno.ENOSPC, "No space left on device")
        real(*args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(creation, "write_partition_metadata", full_disk)
    with pytest.raises(OSError):
        create_partitions(tmp_path, "t", uuid.uuid4(), range(5))
    assert _partition_dirs(tmp_path) == [] and _staged(tmp_path) == []


def test_an_existing_target_aborts_before_the_commit_point(tmp_path: Path) -> None:
    (tmp_path / "t-1").mkdir()
    with pytest.raises(FileExistsError):
        create_partitions(tmp_path, "t", uuid.uuid4(), range(3))
    assert _partition_dirs(tmp_path) == ["t-1"] and _staged(tmp_path) == []


def _interrupted(data: Path, n: int, *, committed: bool, moved: int = 0) -> None:
    """A creation of topic ``t`` stopped as a crash would: built, maybe committed, ``moved``
    partitions renamed into place."""
    staged = StagedPartitions(data)
    for p in range(n):
        staged.add("t", p, uuid.uuid4())
    if committed:
        (staged.dir / COMMIT_MARKER).touch()
        for name in staged.names[:moved]:
            os.rename(staged.dir / name, data / name)


@pytest.mark.parametrize(
    ("committed", "moved", "whole"),
    [(False, 0, False), (True, 0, True), (True, 2, True), (True, 5, True)],
)
def test_start_up_rolls_an_interrupted_creation_back_or_forward(
    tmp_path: Path, committed: bool, moved: int, whole: bool
) -> None:
    _interrupted(tmp_path, 5, committed=committed, moved=moved)
    store = TopicStore(started(tmp_path), SEGMENT_BYTES)
    store.load()
    assert _staged(tmp_path) == []
    if whole:
        topic = store.get("t")
        assert topic is not None and len(topic.partitions) == 5
        assert _partition_dirs(tmp_path) == [f"t-{p}" for p in range(5)]
    else:
        assert store.get("t") is None and _partition_dirs(tmp_path) == []
    store.close()


def test_a_committed_creation_whose_target_exists_is_left_staged_and_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _interrupted(tmp_path, 3, committed=True)
    (tmp_path / "t-1").mkdir()  # made by hand meanwhile
    with caplog.at_level(logging.ERROR):
        creation.recover_staged(tmp_path)
    assert any("already exist" in r.getMessage() for r in caplog.records)
    assert _partition_dirs(tmp_path) == ["t-0", "t-1", "t-2"]
    assert len(_staged(tmp_path)) == 1  # the staged t-1 is kept for inspection


def test_interrupted_growth_keeps_the_old_count_or_completes(tmp_path: Path) -> None:
    store = TopicStore(started(tmp_path), SEGMENT_BYTES)
    store.load()
    topic_id = store.create("g", 2).topic_id  # type: ignore[union-attr]
    store.close()
    staged = StagedPartitions(tmp_path)
    for p in range(2, 6):
        staged.add("g", p, topic_id)  # not committed: rolled back
    store = TopicStore(started(tmp_path), SEGMENT_BYTES)
    store.load()
    assert len(store.topics["g"].partitions) == 2
    store.close()
    staged = StagedPartitions(tmp_path)
    for p in range(2, 6):
        staged.add("g", p, topic_id)
    (staged.dir / COMMIT_MARKER).touch()
    os.rename(staged.dir / "g-3", tmp_path / "g-3")
    store = TopicStore(started(tmp_path), SEGMENT_BYTES)
    store.load()
    assert len(store.topics["g"].partitions) == 6 and _staged(tmp_path) == []
    assert store.topics["g"].topic_id == topic_id
    store.close()


def test_a_creation_finishing_while_another_cleans_up_keeps_the_staging_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The interleaving behind "could not remove finished creation ...: No such file or
    directory": creation A removes its directory, then creation B finishes whole (and, being the
    last in the staging root, would remove it) before A fsyncs the root."""
    root = tmp_path / STAGING_DIR
    a, b = StagedPartitions(tmp_path), StagedPartitions(tmp_path)
    a.add("a", 0, uuid.uuid4())
    b.add("b", 0, uuid.uuid4())
    real = creation.fsync_dir
    b_done: list[Path] = []
    b_started = [False]

    def fsync_dir(path: Path) -> None:
        if path == root and not a.dir.exists() and not b_started[0]:
            b_started[0] = True
            b_done.extend(b.commit())  # B runs to its end in A's window
        real(path)

    monkeypatch.setattr(creation, "fsync_dir", fsync_dir)
    with caplog.at_level(logging.WARNING, logger="kcoord.storage"):
        assert [p.name for p in a.commit()] == ["a-0"]
    assert [p.name for p in b_done] == ["b-0"]
    assert [r.getMessage() for r in caplog.records] == []
    assert _partition_dirs(tmp_path) == ["a-0", "b-0"] and not root.exists()


def test_many_concurrent_creations_log_nothing_and_all_complete(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    threads, rounds = 24, 4
    errors: list[BaseException] = []

    def create(name: str, start: threading.Barrier) -> None:
        start.wait(timeout=30)
        try:
            create_partitions(tmp_path, name, uuid.uuid4(), range(2))
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    with caplog.at_level(logging.WARNING, logger="kcoord.storage"):
        for r in range(rounds):
            start = threading.Barrier(threads)
            workers = [
                threading.Thread(target=create, args=(f"t{r}x{i}", start)) for i in range(threads)
            ]
            for w in workers:
                w.start()
            for w in workers:
                w.join(timeout=60)
                assert not w.is_alive()
    assert errors == []
    assert [r.getMessage() for r in caplog.records] == []
    expected = sorted(f"t{r}x{i}-{p}" for r in range(rounds) for i in range(threads) for p in (0, 1))
    assert _partition_dirs(tmp_path) == expected
    assert not (tmp_path / STAGING_DIR).exists()


# -- storage.checkpoint -------------------------------------------------------------------------


def test_checkpoint_files_in_kafkas_format(tmp_path: Path) -> None:
    path = tmp_path / "recovery-point-offset-checkpoint"
    write_checkpoint(path, {("a", 0): 5, ("b.c", 12): 0})
    assert path.read_text() == "0\n2\na 0 5\nb.c 12 0\n"
    assert read_checkpoint(path) == {("a", 0): 5, ("b.c", 12): 0}
    assert read_checkpoint(tmp_path / "missing") == {}
    for bad in ("1\n0\n", "0\n2\na 0 5\n", "0\nx\n", "0\n1\na b 5\n", ""):
        path.write_text(bad)
        with pytest.raises(CheckpointError):
            read_checkpoint(path)


def test_lost_offsets() -> None:
    assert lost_offsets(0, 10, 0, 10) == []
    assert lost_offsets(0, 12, 0, 10) == []  # more than checkpointed: fine
    assert lost_offsets(0, 0, 0, 6) == [(0, 5)]  # the active segment went
    assert lost_offsets(100, 200, 0, 150) == [(0, 99)]  # the first segment went
    assert lost_offsets(100, 100, 0, 150) == [(0, 149)]  # merged
    assert lost_offsets(0, 10, None, None) == []


# -- the topic registry ---------------------------------------------------------------------------


def test_limits_are_judged_in_request_order(tmp_path: Path) -> None:
    limits = PartitionLimits(max_broker_partitions=20, max_partitions_per_request=10)
    store = TopicStore(started(tmp_path), SEGMENT_BYTES, limits)
    store.load()
    in_request = 0
    outcomes = []
    for name, count in [("a", 4), ("b", 7), ("c", 6), ("d", 1)]:
        try:
            res = store.reserve_topic(name, count, in_request=in_request)
        except TopicError as e:
            outcomes.append((name, e.code, str(e)))
            continue
        in_request += count
        store.complete(res, store.build(res))
        outcomes.append((name, 0, ""))
    assert [(n, c) for n, c, _ in outcomes] == [
        ("a", 0),
        ("b", ErrorCode.policy_violation),
        ("c", 0),
        ("d", ErrorCode.policy_violation),
    ]
    assert "max.partitions.per.request" in outcomes[1][2]
    assert store.partition_count == 10
    store.create("e", 10)
    for change in (lambda: store.create("f", 1), lambda: store.add_partitions("e", 11)):
        with pytest.raises(TopicError) as exc:
            change()
        assert exc.value.code == ErrorCode.policy_violation
        assert "max.broker.partitions" in str(exc.value) and len(str(exc.value)) < 120
    assert _partition_dirs(tmp_path) == [f"a-{p}" for p in range(4)] + [
        f"c-{p}" for p in range(6)
    ] + [f"e-{p}" for p in range(10)]
    store.close()


def test_a_reserved_name_is_taken_until_done(tmp_path: Path) -> None:
    store = TopicStore(started(tmp_path), SEGMENT_BYTES)
    store.load()
    res = store.reserve_topic("busy", 3)
    with pytest.raises(TopicError) as exc:
        store.create("busy", 1)
    assert exc.value.code == ErrorCode.topic_already_exists
    assert store.get("busy") is None and store.partition("busy", 0) is None
    assert store.partition_count == 3
    store.release(res)
    assert store.partition_count == 0
    store.create("busy", 1)
    store.close()


def test_a_failed_creation_raises_a_storage_error_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = TopicStore(started(tmp_path), SEGMENT_BYTES)
    store.load()
    real = PartitionLog.initialize
    calls = [0]

    def emfile(path: Path, *, fsync: bool = True) -> None:
        calls[0] += 1
        if calls[0] == 4:
            raise OSError(errno.EMFILE, "Too many open files")
        real(path, fsync=fsync)

    monkeypatch.setattr(PartitionLog, "initialize", staticmethod(emfile))
    with pytest.raises(TopicError) as exc:
        store.create("doomed", 6)
    assert exc.value.code == ErrorCode.kafka_storage_error
    assert "Too many open files" in str(exc.value)
    assert _partition_dirs(tmp_path) == [] and _staged(tmp_path) == []
    assert store.partition_count == 0 and store.get("doomed") is None
    store.close()


def test_losses_since_the_last_checkpoint_are_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = TopicStore(started(tmp_path), SEGMENT_BYTES)
    store.load()
    for name in ("kept", "hurt", "gone"):
        store.create(name, 1)
        plog = store.partition(name, 0)
        assert plog is not None
        for _ in range(6):
            plog.append(make_batch())
        plog.flush()
    store.close()
    assert store.write_checkpoints(store.checkpoint_snapshot())
    (tmp_path / "hurt-0" / f"{0:020d}.log").unlink()
    for f in (tmp_path / "gone-0").iterdir():
        f.unlink()
    (tmp_path / "gone-0").rmdir()
    store = TopicStore(started(tmp_path), SEGMENT_BYTES)
    with caplog.at_level(logging.ERROR):
        store.load()
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert any("hurt-0" in m and "offsets 0 to 5" in m for m in errors), errors
    assert any("gone-0" in m and "offsets 0 to 5" in m for m in errors), errors
    assert not any("kept" in m for m in errors)
    # The next checkpoint records the logs as they are now: no second alarm.
    assert store.write_checkpoints(store.checkpoint_snapshot())
    store.close()
    caplog.clear()
    store = TopicStore(started(tmp_path), SEGMENT_BYTES)
    with caplog.at_level(logging.ERROR):
        store.load()
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []
    # Deleting a topic is no loss.
    store.delete("kept")
    store.close()
    store = TopicStore(started(tmp_path), SEGMENT_BYTES)
    with caplog.at_level(logging.ERROR):
        store.load()
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []
    store.close()


def test_start_up_registers_an_unopenable_partition_offline(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = TopicStore(started(tmp_path), SEGMENT_BYTES)
    store.load()
    store.create("t", 3)
    store.close()
    seg = tmp_path / "t-1" / f"{0:020d}.log"
    seg.unlink()
    seg.mkdir()
    store = TopicStore(started(tmp_path), SEGMENT_BYTES)
    with caplog.at_level(logging.ERROR):
        store.load()
    topic = store.get("t")
    assert topic is not None
    assert [p.offline is not None for p in topic.partitions] == [False, True, False]
    assert any("t-1" in r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR)
    store.close()


def test_a_retired_topic_keeps_its_name_until_erased_and_its_checkpoint_goes_first(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """DeleteTopics in two steps (issue 32): retire on the event loop, erase in a worker
    thread. Meanwhile the topic is gone from the registry but its name is taken (Kafka's
    TOPIC_ALREADY_EXISTS "marked for deletion"); afterwards the directories are gone, the
    name is free, and the next start reports no loss."""
    import asyncio

    store = TopicStore(started(tmp_path), SEGMENT_BYTES)
    store.load()
    for name in ("a", "b", "kept"):
        store.create(name, 2)
    plog = store.partition("a", 0)
    assert plog is not None
    plog.append(make_batch())
    plog.flush()
    assert store.write_checkpoints(store.checkpoint_snapshot())

    async def delete() -> None:
        retired = [store.retire("a"), store.retire("b")]
        assert store.get("a") is None and store.partition_count == 2
        pending = store.pending("a")
        assert pending is not None and pending.deleting
        with pytest.raises(TopicError) as refused:
            store.reserve_topic("a", 1)
        assert refused.value.code == ErrorCode.topic_already_exists
        assert "marked for deletion" in str(refused.value)
        assert await store.erase(retired) == {}
        assert store.pending("a") is None and store.pending("b") is None
        with pytest.raises(LogClosed):  # the worker thread closed it under the event loop
            plog.append(make_batch())

    asyncio.run(delete())
    store.remove_deleted()
    assert _partition_dirs(tmp_path) == ["kept-0", "kept-1"]
    store.create("a", 1)  # the name is free again
    store.close()
    store = TopicStore(started(tmp_path), SEGMENT_BYTES)
    with caplog.at_level(logging.ERROR):
        store.load()
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []
    assert store.get("b") is None and len(store.get("a").partitions) == 1  # type: ignore[union-attr]
    store.close()
