"""Requests over 64 KiB are decoded in the broker's worker thread, off the event loop
(broker/net/connection.py): the connection hands on nothing behind such a request until it is
decoded and handled, so what a client pipelines still reaches the handlers, and is answered, in
the order sent; a big frame that does not decode still closes only its own connection."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kcoord.protocol.apis import ApiKey
from tests.integration.clients import create_topic
from tests.integration.harness import BrokerProcess
from tests.integration.rawclient import RawClient

TOPIC = "big-requests"
PARTITIONS = 16
ENTRIES = 6_000  # some 100 KiB of OffsetCommit: over the 64 KiB decoded in the worker


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(Path(tmp_path_factory.mktemp("big-requests")) / "data").start()
    try:
        create_topic(b.bootstrap, TOPIC, PARTITIONS)
        yield b
    finally:
        b.stop()


def test_a_big_commit_pipelined_before_a_fetch_is_handled_first(broker: BrokerProcess) -> None:
    with RawClient(broker.port, timeout=30) as client:
        found = client.request_coordinated(
            ApiKey.FIND_COORDINATOR, 4, key_type=0, coordinator_keys=["big-commit"]
        )
        assert found.coordinators[0].error_code == 0, found
        partitions = [
            dict(partition_index=i % PARTITIONS, committed_offset=i, committed_leader_epoch=-1,
                 committed_metadata=None)
            for i in range(ENTRIES)
        ]
        commit = client.send_request(
            ApiKey.OFFSET_COMMIT, 8, group_id="big-commit", generation_id_or_member_epoch=-1,
            member_id="", group_instance_id=None, topics=[dict(name=TOPIC, partitions=partitions)],
        )  # fmt: skip
        versions = client.send_request(ApiKey.API_VERSIONS, 0)
        fetch = client.send_request(
            ApiKey.OFFSET_FETCH, 8, groups=[dict(group_id="big-commit", topics=None)],
            require_stable=True,
        )  # fmt: skip
        committed = client.response(ApiKey.OFFSET_COMMIT, 8, commit)  # each in the order sent
        assert [p.error_code for t in committed.topics for p in t.partitions] == [0] * ENTRIES
        assert client.response(ApiKey.API_VERSIONS, 0, versions).error_code == 0
        fetched = client.response(ApiKey.OFFSET_FETCH, 8, fetch)
    (group,) = fetched.groups
    assert group.error_code == 0
    offsets = {p.partition_index: p.committed_offset for t in group.topics for p in t.partitions}
    # The last entry of each partition wins, as it was written last.
    assert offsets == {p: ENTRIES - PARTITIONS + p for p in range(PARTITIONS)}


def test_a_big_frame_that_does_not_decode_closes_its_connection_only(
    broker: BrokerProcess,
) -> None:
    with RawClient(broker.port, timeout=30) as bad, RawClient(broker.port, timeout=30) as good:
        bad.send(ApiKey.OFFSET_COMMIT, 8, b"\xff" * 100_000)
        assert bad.closed_by_peer()
        assert good.request(ApiKey.API_VERSIONS, 0).error_code == 0
