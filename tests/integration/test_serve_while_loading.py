"""A broker restarted on a big consumer group serves while it loads (issue 34, finding 10).

The data directory holds one KIP-848 group of 1,000 members over 10,000 partitions and its
history (tests/integration/big_group.py), in one ``__consumer_offsets`` partition. As Kafka does, the
broker answers from the start: ApiVersions and FindCoordinator at once, the group's requests
COORDINATOR_LOAD_IN_PROGRESS until its partition is loaded (``/readyz`` says 503 meanwhile),
then the member's heartbeat is served. Before, loading held the event loop: nothing was answered
until the group was loaded.
"""

from __future__ import annotations

import re
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from .big_group import BigGroup, write_big_group
from .harness import BrokerProcess, free_port, wait_for
from .rawclient import RawClient

COORDINATOR_LOAD_IN_PROGRESS = 14


def _heartbeat(client: RawClient, group: BigGroup) -> Any:
    return client.request(
        68, 1, group_id=group.group_id, member_id=group.member_ids[0], member_epoch=group.epoch,
        instance_id=None, rack_id=None, rebalance_timeout=-1, subscribed_topic_names=None,
        subscribed_topic_regex=None, server_assignor=None, topic_partitions=None,
    )


def _readyz(port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=10) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


def test_a_restart_on_a_big_group_serves_while_it_loads(tmp_path: Path) -> None:
    data = tmp_path / "data"
    group = write_big_group(data, members=1_000, partitions=10_000, create_topic=False)
    broker = BrokerProcess(data, {"log.cleaner.enable": "false"}, metrics_port=free_port())
    broker.launch()
    try:
        client = wait_for(lambda: RawClient(broker.port), 30, interval=0.01, what="the Kafka port")
        assert isinstance(client, RawClient)
        with client:
            # The first answers: the group's partition is still being read.
            assert _readyz(broker.metrics_port) == 503  # type: ignore[arg-type]
            first = _heartbeat(client, group)
            assert first.error_code == COORDINATOR_LOAD_IN_PROGRESS, (first, broker.log())
            found = client.request(10, 4, key_type=0, coordinator_keys=[group.group_id])
            assert [c.error_code for c in found.coordinators] == [0]
            assert found.coordinators[0].port == broker.port
            # Then it is served, as the member it was before the restart.
            served = wait_for(
                lambda: (r := _heartbeat(client, group)).error_code != COORDINATOR_LOAD_IN_PROGRESS and r,
                60,
                interval=0.1,
                what="the heartbeat served",
            )
            assert served.error_code == 0, served  # type: ignore[attr-defined]
            assert served.member_id == group.member_ids[0]  # type: ignore[attr-defined]
            assert served.member_epoch >= group.epoch  # type: ignore[attr-defined]
        assert re.search(rf"partition {group.offsets_partition} loaded \(\d+/50\): 1 groups", broker.log())
        assert _readyz(broker.metrics_port) == 200  # type: ignore[arg-type]
        assert broker.alive()
    finally:
        broker.stop()
