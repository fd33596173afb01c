"""Produce on a full disk: a real broker whose data directory is a small tmpfs answers
KAFKA_STORAGE_ERROR, keeps the connection open, and still serves every acknowledged message.

The tmpfs is mounted in a private mount namespace (``unshare -m``) that the broker runs in, so
the mount exists only for the broker's lifetime and nothing leaks onto the machine. Skipped
where mounting is not allowed (not root, no ``unshare``, a container without CAP_SYS_ADMIN).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from kcoord.protocol.apis import ApiKey
from kcoord.protocol.errors import ErrorCode
from kcoord.protocol.record_encoding import build_batch

from .clients import consume_confluent, create_topic
from .harness import BrokerProcess
from .rawclient import RawClient

TMPFS_BYTES = 4 << 20
_MOUNT_THEN_EXEC = 'mount -t tmpfs -o size="$1" kcoord-full "$0" && shift && exec "$@"'


def _private_tmpfs_wrapper(mountpoint: Path) -> list[str]:
    unshare = shutil.which("unshare")
    if unshare is None or os.geteuid() != 0:
        pytest.skip("needs root and unshare(1) to mount a private tmpfs")
    wrapper = [unshare, "-m", "--propagation", "private", "sh", "-c", _MOUNT_THEN_EXEC]
    probe = subprocess.run(
        [*wrapper, str(mountpoint), str(TMPFS_BYTES), "true"], capture_output=True, timeout=30
    )
    if probe.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {probe.stderr.decode(errors='replace').strip()}")
    return [*wrapper, str(mountpoint), str(TMPFS_BYTES)]


def _produce(c: RawClient, records: bytes) -> tuple[int, str | None]:
    resp = c.request(
        ApiKey.PRODUCE,
        9,
        transactional_id=None,
        acks=-1,
        timeout=5000,
        topic_data=[dict(name="full", partition_data=[dict(index=0, records=records)])],
    )
    p = resp.responses[0].partition_responses[0]
    return int(p.error_code), p.error_message


def _latest(c: RawClient) -> int:
    resp = c.request(
        ApiKey.LIST_OFFSETS,
        7,
        replica_id=-1,
        isolation_level=0,
        topics=[
            dict(
                name="full",
                partitions=[dict(partition_index=0, current_leader_epoch=-1, timestamp=-1)],
            )
        ],
    )
    return int(resp.topics[0].partitions[0].offset)


def test_produce_on_a_full_disk_is_kafka_storage_error(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    broker = BrokerProcess(data, wrapper=_private_tmpfs_wrapper(data))
    broker.start()
    try:
        create_topic(broker.bootstrap, "full", 1)
        value = os.urandom(30_000)
        acknowledged = 0
        with RawClient(broker.port) as c:
            for i in range(TMPFS_BYTES // 60_000 + 50):  # two records of 30 KB per batch
                error, message = _produce(
                    c, build_batch([(b"k%d" % i, value, (), 1_700_000_000_000)] * 2)
                )
                if error != ErrorCode.none:
                    break
                acknowledged += 2
            assert error == ErrorCode.kafka_storage_error, (ErrorCode(error).name, message)
            assert "No space left" in (message or "")
            # Same connection: still answering, nothing half-written became visible.
            assert _produce(c, build_batch([(b"k", value, (), 1_700_000_000_000)] * 2))[0] == (
                ErrorCode.kafka_storage_error
            )
            assert _latest(c) == acknowledged
        assert acknowledged > 0
        consumed = consume_confluent(broker.bootstrap, "full", 1, acknowledged)
        assert [o for _, o, _, _ in consumed] == list(range(acknowledged))
        assert broker.alive()
    finally:
        broker.stop()
