"""Transactional offsets against a real broker: TxnOffsetCommit (raw, with a producer id and
epoch) stays pending -- invisible to OffsetFetch, UNSTABLE_OFFSET_COMMIT with RequireStable --
until a COMMIT marker written through ``GroupRuntime.write_txn_marker``; an ABORT drops it; a
zombie's older epoch is fenced; and after SIGKILL the committed offsets are there and the
pending ones still pending, until a marker written after the restart completes them.

The markers come from ``scripts/txn_marker_broker.py``: the broker run in a process whose stdin
takes markers (no transaction coordinator exists on this branch); restarts in between use the
plain ``kcoord serve`` broker on the same data directory."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from kcoord.protocol.errors import ErrorCode
from kcoord.protocol.javahash import partition_for

from .clients import create_topic
from .harness import ROOT, BrokerProcess, free_port, storage_url, wait_for
from .rawclient import RawClient

E = ErrorCode
GROUP = "eos-group"
PID = 7001


class MarkerBroker:
    """scripts/txn_marker_broker.py as a child process."""

    def __init__(self, data_dir: Path, port: int) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        self.log = open(data_dir.parent / f"marker-broker-{port}.log", "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).parent / "scripts" / "txn_marker_broker.py"),
             str(port), str(data_dir), *filter(None, [storage_url(data_dir)])],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, cwd=ROOT, env=env,
        )
        assert self.proc.stdout is not None
        assert self.proc.stdout.readline().strip() == b"ready"
        self.port = port

    def marker(self, pid: int, epoch: int, commit: bool, coordinator_epoch: int = 0) -> int:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        partition = partition_for(GROUP, 50)
        self.proc.stdin.write(f"{partition} {pid} {epoch} {int(commit)} {coordinator_epoch}\n".encode())
        self.proc.stdin.flush()
        word, code = self.proc.stdout.readline().split()
        assert word == b"done"
        return int(code)

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)
        self.log.close()


def txn_commit(client: RawClient, offsets: dict[int, int], *, pid: int = PID, epoch: int = 0,
               version: int = 4) -> dict[int, int]:
    fields: dict[str, Any] = dict(
        transactional_id="tx-1", group_id=GROUP, producer_id=pid, producer_epoch=epoch,
        topics=[dict(name="in", partitions=[
            dict(partition_index=p, committed_offset=o, committed_leader_epoch=-1, committed_metadata="m")
            for p, o in offsets.items()])],
    )
    if version >= 3:
        fields.update(generation_id=-1, member_id="", group_instance_id=None)
    r = client.request(28, version, **fields)
    return {p.partition_index: int(p.error_code) for t in r.topics for p in t.partitions}


def fetch(client: RawClient, *, stable: bool) -> dict[int, tuple[int, int]]:
    r = client.request(9, 7, group_id=GROUP, require_stable=stable,
                       topics=[dict(name="in", partition_indexes=[0, 1])])
    assert r.error_code == 0
    return {p.partition_index: (int(p.committed_offset), int(p.error_code))
            for t in r.topics for p in t.partitions}


def loaded(client: RawClient) -> bool:
    r = client.request(9, 7, group_id=GROUP, require_stable=False,
                       topics=[dict(name="in", partition_indexes=[0])])
    return int(r.error_code) == 0


def connect(port: int) -> RawClient:
    return wait_for(lambda: _try_connect(port), 30, what="broker")  # type: ignore[return-value]


def _try_connect(port: int) -> RawClient | None:
    try:
        return RawClient(port)
    except OSError:
        return None


def test_txn_offsets_pending_commit_abort_fencing_and_sigkill(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    port = free_port()
    mb = MarkerBroker(data_dir, port)
    plain: BrokerProcess | None = None
    try:
        create_topic(f"127.0.0.1:{port}", "in", 2)
        with connect(port) as c:
            # v0 (no member fields) and v4 both accepted; pending until the marker
            assert txn_commit(c, {0: 10}, version=0) == {0: E.none}
            assert txn_commit(c, {0: 11, 1: 5}) == {0: E.none, 1: E.none}
            assert fetch(c, stable=False) == {0: (-1, E.none), 1: (-1, E.none)}
            assert fetch(c, stable=True) == {0: (-1, E.unstable_offset_commit),
                                             1: (-1, E.unstable_offset_commit)}
            assert mb.marker(PID, 0, commit=True) == E.none
            assert fetch(c, stable=True) == {0: (11, E.none), 1: (5, E.none)}

            # an aborted transaction leaves nothing
            assert txn_commit(c, {0: 99}) == {0: E.none}
            assert mb.marker(PID, 0, commit=False) == E.none
            assert fetch(c, stable=True) == {0: (11, E.none), 1: (5, E.none)}

            # the producer is bumped (epoch 1); the zombie at epoch 0 is fenced
            assert txn_commit(c, {0: 20}, epoch=1) == {0: E.none}
            assert txn_commit(c, {1: 21}, epoch=0) == {1: E.invalid_producer_epoch}
            assert mb.marker(PID, 0, commit=True) == E.invalid_producer_epoch
            assert fetch(c, stable=True) == {0: (-1, E.unstable_offset_commit), 1: (5, E.none)}
            # OffsetFetch v8+ (several groups): per group, the same answer
            r = c.request(9, 8, require_stable=True, groups=[
                dict(group_id=GROUP, topics=[dict(name="in", partition_indexes=[0, 1])]),
                dict(group_id="other", topics=None)])
            assert [(g.group_id, int(g.error_code)) for g in r.groups] == [(GROUP, 0), ("other", 0)]
            assert [(int(p.committed_offset), int(p.error_code)) for p in r.groups[0].topics[0].partitions] == [
                (-1, E.unstable_offset_commit), (5, E.none)]
            # unknown topics are refused per partition
            r = c.request(28, 4, transactional_id="tx-1", group_id=GROUP, producer_id=PID,
                          producer_epoch=1, generation_id=-1, member_id="", group_instance_id=None,
                          topics=[dict(name="nope", partitions=[dict(
                              partition_index=0, committed_offset=1, committed_leader_epoch=-1,
                              committed_metadata=None)])])
            assert [int(p.error_code) for t in r.topics for p in t.partitions] == [
                E.unknown_topic_or_partition]
        mb.kill()  # SIGKILL with a committed transaction and a pending one

        plain = BrokerProcess(data_dir)
        plain.port = port
        plain.start()
        with connect(port) as c:
            wait_for(lambda: loaded(c), 30, what="offsets loaded")
            assert fetch(c, stable=False) == {0: (11, E.none), 1: (5, E.none)}
            assert fetch(c, stable=True) == {0: (-1, E.unstable_offset_commit), 1: (5, E.none)}
            # the fence survived the restart too
            assert txn_commit(c, {1: 30}, epoch=0) == {1: E.invalid_producer_epoch}
        plain.kill()
        plain = None

        mb = MarkerBroker(data_dir, port)  # the coordinator completes it after the restart
        with connect(port) as c:
            wait_for(lambda: loaded(c), 30, what="offsets loaded")
        assert mb.marker(PID, 1, commit=True) == E.none
        with connect(port) as c:
            assert fetch(c, stable=True) == {0: (20, E.none), 1: (5, E.none)}
        mb.kill()

        plain = BrokerProcess(data_dir)
        plain.port = port
        plain.start()
        with connect(port) as c:
            wait_for(lambda: loaded(c), 30, what="offsets loaded")
            assert fetch(c, stable=True) == {0: (20, E.none), 1: (5, E.none)}
    finally:
        if mb.proc.poll() is None:
            mb.kill()
        if plain is not None:
            plain.stop()
