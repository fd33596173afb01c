"""The Spark pipeline over share groups: a real broker where two confluent-kafka ShareConsumers
(explicit acknowledgement) consumed a two-partition topic, releasing some records once and
rejecting others; then the broker is stopped and ``pipeline.job.run_job`` reads its data
directory. The share tables are compared with what the consumers did and with the state the
share coordinator's shard rebuilds from the same ``__share_group_state`` log (what
DescribeShareGroupOffsets answers from). The ``spark`` session is conftest.py's.

How the rejections are made visible in the state log: the first record of each partition is
released until every other record of the partition has had its final acknowledgement sent, so
the start offset stays at 0 while the rejections are written (ARCHIVED at or past it); only
then is it accepted and the start offset moves past them all.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kcoord.protocol.apis import ApiKey

from .clients import create_topic
from .harness import BrokerProcess, wait_for
from .rawclient import RawClient
from .shares import Received, ShareMember
from .test_share_groups import ACCEPT, REJECT, RELEASE, SETTINGS, earliest, produce

TOPIC = "jobs"
GROUP = "sg"
PARTITIONS = 2
PER_PARTITION = 30
REJECTED = [o for o in range(1, PER_PARTITION) if o % 5 == 3]
RELEASED_ONCE = [o for o in range(1, PER_PARTITION) if o % 7 == 2 and o not in REJECTED]
BROKER = {
    **SETTINGS,
    "group.share.delivery.count.limit": 10,  # the first records come back a few times
    "share.coordinator.snapshot.update.records.per.snapshot": 3,  # snapshots and updates
    "share.coordinator.state.topic.num.partitions": 3,
}


def everything() -> list[tuple[int, int]]:
    """(partition, offset) of every record produced."""
    return [(p, o) for p in range(PARTITIONS) for o in range(PER_PARTITION)]


class Decisions:
    """The acknowledgement of every record, shared by the members, and when it was sent."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.members: dict[str, ShareMember] = {}
        self.final: dict[tuple[int, int], tuple[str, int]] = {}  # -> (member, its poll count)
        self.deliveries: dict[tuple[int, int], int] = {}

    def sent(self, key: tuple[int, int]) -> bool:
        """The record's final acknowledgement has been committed by its member."""
        if key not in self.final:
            return False
        name, polls = self.final[key]
        member = self.members.get(name)
        return member is not None and member.committed > polls

    def decider(self, name: str) -> Callable[[Received], int]:
        def decide(record: Received) -> int:
            _, partition, offset, _ = record
            key = (partition, offset)
            with self.lock:
                n = self.deliveries[key] = self.deliveries.get(key, 0) + 1
                if offset == 0:
                    others = all(self.sent((partition, o)) for o in range(1, PER_PARTITION))
                    ack = ACCEPT if others else RELEASE
                elif offset in REJECTED:
                    ack = REJECT
                elif offset in RELEASED_ONCE and n == 1:
                    ack = RELEASE
                else:
                    ack = ACCEPT
                if ack != RELEASE:
                    member = self.members.get(name)
                    self.final[key] = (name, member.committed if member is not None else 0)
                return ack

        return decide


def replayed_state(data_dir: Path) -> dict[tuple[str, str, int], Any]:
    """The state the share coordinator loads from the ``__share_group_state`` segments: each
    record replayed into a ShareStateShard in log order (as broker/share/state_runtime.py
    does), keyed by (group, topic id in Kafka's text form, partition)."""
    from kcoord.pipeline import fs
    from kcoord.pipeline.logs import ScanStats, offsets_segments, scan_batches
    from kcoord.protocol.batch import HEADER_SIZE
    from kcoord.protocol.key_values import decode_key_values
    from kcoord.share.state_records import decode_key
    from kcoord.share.state_shard import ShareStateShard
    from kcoord.storage.partition_metadata import topic_id_to_str

    refs, problems = offsets_segments(str(data_dir), "__share_group_state")
    assert not problems
    shards: dict[int, ShareStateShard] = {}
    keys = set()
    for ref in sorted(refs, key=lambda r: (r.log_partition, r.base_offset)):
        shard = shards.setdefault(ref.log_partition, ShareStateShard(snapshot_every=3))
        f = fs.open_read(ref.uri)
        try:
            for h, batch in scan_batches(f, ScanStats(), allow_torn_tail=True):
                for key, value in decode_key_values(h, batch[HEADER_SIZE:]):
                    assert key is not None
                    shard.replay(key, value, h.base_offset)
                    keys.add((ref.log_partition, decode_key(key).share_key))
        finally:
            f.close()
    return {
        (k.group_id, topic_id_to_str(k.topic_id), k.partition): shards[lp].read(k) for lp, k in keys
    }


def _members(broker: BrokerProcess) -> int:
    with RawClient(broker.port) as c:
        r = c.request(ApiKey.SHARE_GROUP_DESCRIBE, 1, group_ids=[GROUP], include_authorized_operations=False)
    (group,) = r.groups
    assert group.error_code == 0
    return len(group.members)


def consume_with_rejects(broker: BrokerProcess) -> Decisions:
    """Two members of GROUP consume TOPIC (produced here) as the module docstring says,
    then leave; what they decided. A member's errors fail it."""
    create_topic(broker.bootstrap, TOPIC, PARTITIONS)
    earliest(broker, GROUP)
    produce(broker, TOPIC, PARTITIONS * PER_PARTITION, PARTITIONS)
    decisions = Decisions()
    members = []
    for name in ("m1", "m2"):
        m = ShareMember(broker.bootstrap, GROUP, [TOPIC], name, decide=decisions.decider(name),
                        **{"client.id": name})
        decisions.members[name] = m
        members.append(m)
    try:
        wait_for(lambda: all(decisions.sent(k) for k in everything()), 90,
                 what="every record accepted or rejected, and the acknowledgements sent")
    finally:
        for m in members:
            m.stop()
    errors = [e for m in members for e in m.errors]
    assert not errors, errors
    wait_for(lambda: _members(broker) == 0, 30, what="both members left")
    return decisions


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory, spark: Any) -> Iterator[dict[str, Any]]:
    from kcoord.pipeline.job import run_job

    base = tmp_path_factory.mktemp("pipeline-share")
    broker = BrokerProcess(base / "data", BROKER).start()
    try:
        decisions = consume_with_rejects(broker)
        broker.stop()
        out = base / "out"
        summary = run_job(spark, str(broker.data_dir), str(out))
        tables = {
            name: [r.asDict(recursive=True) for r in spark.read.parquet(str(out / name)).collect()]
            for name in ("share_group_epochs", "share_state_history", "share_state_latest")
        }
        yield {
            "out": out, "summary": summary, "tables": tables, "decisions": decisions,
            "state": replayed_state(broker.data_dir),
        }
    finally:
        broker.stop()


def test_the_start_offsets_are_the_share_coordinators(scenario: dict[str, Any]) -> None:
    latest = {(r["group"], r["topic_id"], r["partition"]): r for r in scenario["tables"]["share_state_latest"]}
    state = scenario["state"]
    assert set(latest) == set(state) and len(state) == PARTITIONS
    for key, r in latest.items():
        assert r["start_offset"] == state[key].start_offset == PER_PARTITION, key
        assert (r["group"], r["topic"]) == (GROUP, TOPIC)
        # every record is done and below the start offset: nothing in flight any more
        assert (r["in_flight_batches"], r["delivery_complete_count"], r["available_records"]) == ([], 0, 0)
        assert r["first_start_offset"] == 0 and r["start_offset_advance"] == PER_PARTITION
    assert scenario["summary"].problems == []


def test_archived_records_are_the_rejected_ones(scenario: dict[str, Any]) -> None:
    latest = scenario["tables"]["share_state_latest"]
    assert sorted(r["archived_total"] for r in latest) == [len(REJECTED)] * PARTITIONS
    history = scenario["tables"]["share_state_history"]
    for p in range(PARTITIONS):
        rows = sorted((r for r in history if r["partition"] == p), key=lambda r: r["log_offset"])
        starts = [r["start_offset"] for r in rows]
        assert starts == sorted(starts) and starts[-1] == PER_PARTITION
        # Before the first record was accepted, everything else was done at or past offset 0.
        assert max(r["archived_records"] for r in rows) == len(REJECTED)
        assert max(r["delivery_complete_count"] for r in rows) == PER_PARTITION - 1
        assert {r["record_type"] for r in rows} == {"snapshot", "update"}
        assert all(r["time"] is not None for r in rows)
    # the records released once came back and were accepted the second time
    deliveries = scenario["decisions"].deliveries
    assert [k for k in everything() if k[1] in RELEASED_ONCE and deliveries[k] != 2] == []
    assert [k for k in everything() if k[1] in REJECTED and deliveries[k] != 1] == []


def test_share_group_epochs_name_the_members_and_their_partitions(scenario: dict[str, Any]) -> None:
    epochs = sorted(
        (e for e in scenario["tables"]["share_group_epochs"] if e["group"] == GROUP),
        key=lambda e: e["log_offset"],
    )
    assert [e["group_epoch"] for e in epochs] == sorted(e["group_epoch"] for e in epochs)
    full = [e for e in epochs if e["member_count"] == 2]
    assert full, [(e["group_epoch"], e["member_count"]) for e in epochs]
    for e in full:
        assert sorted(m["client_id"] for m in e["members"]) == ["m1", "m2"]
        assert all(m["subscribed_topic_names"] == [TOPIC] for m in e["members"])
        if e["converged"]:
            assigned = {(a["topic"], p) for m in e["members"] for a in m["assignment"] for p in a["partitions"]}
            assert assigned == {(TOPIC, p) for p in range(PARTITIONS)}
    assert any(e["converged"] for e in full)
    assert epochs[-1]["member_count"] == 0  # both left when they were stopped
    totals = scenario["summary"].totals
    assert totals["share_group_records"] > 0 and totals["share_snapshots"] > 0 and totals["share_updates"] > 0


def test_report_has_the_share_groups(scenario: dict[str, Any]) -> None:
    report = scenario["out"] / "report"
    page = (report / "index.html").read_text()
    assert "<h2>Share groups</h2>" in page and f"<td>{GROUP}</td>" in page
    assert 'src="share_start_offsets.png"' in page
    assert (report / "share_start_offsets.png").read_bytes().startswith(b"\x89PNG")
    assert scenario["summary"].rows["share_state_latest"] == PARTITIONS
