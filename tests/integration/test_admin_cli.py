"""``kcoord groups`` / ``kcoord offsets`` against a live broker with real consumer groups.

Every command runs as a subprocess (the real CLI) and is checked against what the consumers
themselves see: their assignment (ConfluentMember threads), the committed offsets an ordinary
consumer of the group fetches, the high watermark it gets, and offsets_for_times.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

from .clients import create_topic, produce_confluent
from .groups import ConfluentMember, settle, wait_balanced
from .harness import ROOT, BrokerProcess, wait_for

FAST = {"group.initial.rebalance.delay.ms": 0, "group.min.session.timeout.ms": 1000}

OFFSETS_HEADER = [
    "GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST",
    "CLIENT-ID",
]  # fmt: skip


def kcoord(broker: BrokerProcess | str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    bootstrap = broker if isinstance(broker, str) else broker.bootstrap
    return subprocess.run(
        [sys.executable, "-m", "kcoord", *args, "--bootstrap-server", bootstrap],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=timeout,
    )


def kcoord_json(broker: BrokerProcess, *args: str) -> Any:
    r = kcoord(broker, *args, "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout)


def state_of(broker: BrokerProcess, group: str) -> tuple[str, int]:
    [row] = kcoord_json(broker, "groups", "describe", group, "--state")
    return row["state"], row["members"]


def commit(bootstrap: str, group: str, offsets: dict[tuple[str, int], int]) -> None:
    """Commit as a standalone consumer of ``group`` (the group must have no members)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        c.commit(
            offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()], asynchronous=False
        )
    finally:
        c.close()


def consumer_view(
    bootstrap: str, group: str, partitions: list[tuple[str, int]]
) -> tuple[dict[tuple[str, int], int | None], dict[tuple[str, int], int]]:
    """(committed offsets, high watermarks) as a consumer of ``group`` sees them."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        got = c.committed([TopicPartition(t, p) for t, p in partitions], timeout=20)
        committed = {(tp.topic, tp.partition): (tp.offset if tp.offset >= 0 else None) for tp in got}
        highs = {
            (t, p): c.get_watermark_offsets(TopicPartition(t, p), timeout=20)[1] for t, p in partitions
        }
    finally:
        c.close()
    return committed, highs


def test_describe_list_members_state_match_what_the_consumers_see(broker_factory: object) -> None:
    broker: BrokerProcess = broker_factory(FAST)  # type: ignore[operator]
    create_topic(broker.bootstrap, "orders", 4)
    produce_confluent(broker.bootstrap, "orders", [(p, b"k", b"v") for p in range(4) for _ in range(10)], "none")
    commit(broker.bootstrap, "billing", {("orders", 0): 3, ("orders", 1): 10, ("orders", 2): 0})
    members = [ConfluentMember(broker.bootstrap, "billing", "orders", f"m{i}") for i in range(2)]
    try:
        wait_balanced(members, 4)
        settle(members)
        wait_for(lambda: state_of(broker, "billing") == ("Stable", 2), 30, what="Stable with 2")
        tps = [("orders", p) for p in range(4)]

        # --offsets (the default): one row per partition, owner, committed offset, lag.
        rows = kcoord_json(broker, "groups", "describe", "billing")
        committed, highs = consumer_view(broker.bootstrap, "billing", tps)
        owner = {p: m for m in members for p in m.assignment}
        assert [(r["topic"], r["partition"]) for r in rows] == tps
        for r in rows:
            tp = (r["topic"], r["partition"])
            assert r["group"] == "billing"
            assert r["current_offset"] == committed[tp]
            assert r["log_end_offset"] == highs[tp] == 10
            assert r["lag"] == (None if committed[tp] is None else highs[tp] - committed[tp])
            assert r["client_id"] == owner[r["partition"]].name
            assert r["consumer_id"].startswith(owner[r["partition"]].name + "-")
        assert [r["lag"] for r in rows] == [7, 0, 10, None]

        # Lag follows produced records.
        produce_confluent(broker.bootstrap, "orders", [(1, b"k", b"v")] * 5, "none")
        rows = {r["partition"]: r for r in kcoord_json(broker, "groups", "describe", "billing")}
        _, highs = consumer_view(broker.bootstrap, "billing", tps)
        assert rows[1]["log_end_offset"] == highs[("orders", 1)] == 15
        assert rows[1]["lag"] == 5 and rows[0]["lag"] == 7

        # The table has kafka-consumer-groups.sh's columns and "-" where there is no value.
        table = kcoord(broker, "groups", "describe", "billing")
        assert table.returncode == 0, table.stderr
        lines = table.stdout.splitlines()
        assert lines[0].split() == OFFSETS_HEADER
        cells = {int(line.split()[2]): line.split() for line in lines[1:]}
        assert sorted(cells) == [0, 1, 2, 3]
        assert cells[3][3] == "-" and cells[3][5] == "-"  # no committed offset, no lag
        assert cells[0][3:6] == ["3", "10", "7"]

        # --members: who has what.
        listed = kcoord_json(broker, "groups", "describe", "billing", "--members")
        by_client = {m["client_id"]: m for m in listed}
        assert set(by_client) == {"m0", "m1"}
        for m in members:
            row = by_client[m.name]
            assert row["partitions"] == len(m.assignment)
            assert {(a["topic"], a["partition"]) for a in row["assignment"]} == {("orders", p) for p in m.assignment}
            assert row["group_instance_id"] is None
        table = kcoord(broker, "groups", "describe", "billing", "--members").stdout.splitlines()
        assert table[0].split() == [
            "GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"
        ]
        for line in table[1:]:
            cols = line.split()
            m = next(x for x in members if x.name == cols[4])
            assert cols[2] == "-" and int(cols[5]) == len(m.assignment)
            assert cols[6] == "orders(" + ",".join(map(str, sorted(m.assignment))) + ")"

        # --state
        [st] = kcoord_json(broker, "groups", "describe", "billing", "--state")
        assert st["state"] == "Stable" and st["members"] == 2
        assert st["assignment_strategy"] == "range"
        assert st["coordinator"] == {"id": 0, "host": "127.0.0.1", "port": broker.port}
        table = kcoord(broker, "groups", "describe", "billing", "--state").stdout.splitlines()
        assert table[0].split() == ["GROUP", "COORDINATOR", "(ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"]
        assert table[1].split() == ["billing", f"127.0.0.1:{broker.port}", "(0)", "range", "Stable", "2"]

        # groups list, with and without states
        commit(broker.bootstrap, "idle", {("orders", 0): 1})
        assert kcoord(broker, "groups", "list").stdout.split() == ["billing", "idle"]
        table = kcoord(broker, "groups", "list", "--state").stdout.splitlines()
        assert [line.split() for line in table] == [["GROUP", "STATE"], ["billing", "Stable"], ["idle", "Empty"]]
        assert kcoord_json(broker, "groups", "list", "--state", "empty") == [{"group": "idle", "state": "Empty", "type": "classic"}]
        assert kcoord_json(broker, "groups", "list", "--state", "Stable") == [
            {"group": "billing", "state": "Stable", "type": "classic"}
        ]
    finally:
        for m in members:
            m.stop()


def test_offsets_reset_refused_with_members_then_dry_run_and_execute(broker_factory: object) -> None:
    broker: BrokerProcess = broker_factory(FAST)  # type: ignore[operator]
    create_topic(broker.bootstrap, "r", 2)
    p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 0})
    for i in range(10):  # record i has timestamp (i + 1) s; one batch each
        for part in (0, 1):
            p.produce("r", value=b"x", partition=part, timestamp=(i + 1) * 1000)
        assert p.flush(30) == 0
    tps = [("r", 0), ("r", 1)]
    commit(broker.bootstrap, "g", {("r", 0): 2, ("r", 1): 2})
    member = ConfluentMember(broker.bootstrap, "g", "r", "m0")
    try:
        wait_for(lambda: len(member.assignment) == 2, 30, what="member assigned")
        refused = kcoord(broker, "offsets", "reset", "g", "--topic", "r", "--to-earliest", "--execute")
        assert refused.returncode == 1
        assert "inactive" in refused.stderr and "Stable" in refused.stderr, refused.stderr
        assert consumer_view(broker.bootstrap, "g", tps)[0] == {("r", 0): 2, ("r", 1): 2}
    finally:
        member.stop()
    wait_for(lambda: state_of(broker, "g") == ("Empty", 0), 30, what="group g Empty")

    def reset(*args: str) -> dict[tuple[str, int], int]:
        out = kcoord_json(broker, "offsets", "reset", "g", *args)
        return {(r["topic"], r["partition"]): r["new_offset"] for r in out["offsets"]}

    def committed() -> dict[tuple[str, int], int | None]:
        return consumer_view(broker.bootstrap, "g", tps)[0]

    # A dry run shows the plan and changes nothing.
    assert reset("--topic", "r", "--to-latest") == {("r", 0): 10, ("r", 1): 10}
    assert committed() == {("r", 0): 2, ("r", 1): 2}
    dry = kcoord(broker, "offsets", "reset", "g", "--topic", "r", "--to-latest")
    assert dry.stdout.splitlines()[0].split() == ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]
    assert "--execute" in dry.stderr

    assert reset("--topic", "r", "--to-offset", "4", "--execute") == {("r", 0): 4, ("r", 1): 4}
    assert committed() == {("r", 0): 4, ("r", 1): 4}
    assert reset("--topic", "r", "--to-offset", "99", "--execute") == {("r", 0): 10, ("r", 1): 10}
    assert reset("--topic", "r", "--to-earliest", "--execute") == {("r", 0): 0, ("r", 1): 0}
    assert committed() == {("r", 0): 0, ("r", 1): 0}
    assert reset("--topic", "r:1", "--shift-by", "3", "--execute") == {("r", 1): 3}
    assert reset("--topic", "r", "--shift-by", "-2", "--execute") == {("r", 0): 0, ("r", 1): 1}
    assert committed() == {("r", 0): 0, ("r", 1): 1}

    # --to-datetime: the first record at or after the time, as offsets_for_times answers.
    when = "1970-01-01T00:00:05.500+00:00"
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "probe"})
    try:
        [seen] = c.offsets_for_times([TopicPartition("r", 0, 5500)], timeout=20)
    finally:
        c.close()
    assert reset("--topic", "r:0", "--to-datetime", when, "--execute") == {("r", 0): seen.offset}
    assert seen.offset == 5
    assert committed() == {("r", 0): 5, ("r", 1): 1}
    # After the last record: the log end.
    assert reset("--topic", "r:0", "--to-datetime", "2100-01-01T00:00:00Z") == {("r", 0): 10}

    # Usage errors
    assert kcoord(broker, "offsets", "reset", "g", "--topic", "r").returncode == 2
    bad = kcoord(broker, "offsets", "reset", "g", "--topic", "r", "--to-datetime", "yesterday")
    assert bad.returncode == 2 and "ISO 8601" in bad.stderr
    none = kcoord(broker, "offsets", "reset", "fresh", "--topic", "r", "--shift-by", "1")
    assert none.returncode == 1 and "no committed offset" in none.stderr


def test_offsets_delete_and_groups_delete(broker_factory: object) -> None:
    broker: BrokerProcess = broker_factory(FAST)  # type: ignore[operator]
    create_topic(broker.bootstrap, "a", 2)
    create_topic(broker.bootstrap, "b", 1)
    tps = [("a", 0), ("a", 1), ("b", 0)]
    commit(broker.bootstrap, "d", {("a", 0): 1, ("a", 1): 1, ("b", 0): 1})
    member = ConfluentMember(broker.bootstrap, "d", "a", "m0")
    try:
        wait_for(lambda: len(member.assignment) == 2, 30, what="member assigned")
        # The member is subscribed to "a": its offsets cannot go; "b" can.
        r = kcoord(broker, "offsets", "delete", "d", "--topic", "a")
        assert r.returncode == 1
        assert "GROUP_SUBSCRIBED_TO_TOPIC" in r.stdout, r.stdout + r.stderr
        r = kcoord(broker, "offsets", "delete", "d", "--topic", "b")
        assert r.returncode == 0, r.stdout + r.stderr
        lines = r.stdout.splitlines()
        assert lines[0] == "Request succeed for deleting offsets with topic b group d"
        assert lines[2].split() == ["TOPIC", "PARTITION", "STATUS"]
        assert lines[3].split() == ["b", "0", "Successful"]
        assert consumer_view(broker.bootstrap, "d", tps)[0] == {("a", 0): 1, ("a", 1): 1, ("b", 0): None}

        r = kcoord(broker, "groups", "delete", "d")
        assert r.returncode == 1 and "NON_EMPTY_GROUP" in r.stdout, r.stdout
    finally:
        member.stop()
    wait_for(lambda: state_of(broker, "d") == ("Empty", 0), 30, what="group d Empty")
    r = kcoord(broker, "groups", "delete", "d")
    assert r.returncode == 0 and r.stdout.strip() == "Deletion of requested consumer groups ('d') was successful."
    assert "d" not in kcoord(broker, "groups", "list").stdout.split()
    gone = kcoord(broker, "groups", "describe", "d")
    assert gone.returncode == 1 and "does not exist" in gone.stderr
    assert consumer_view(broker.bootstrap, "d", tps)[0] == dict.fromkeys(tps)


def test_unreachable_broker_is_a_clean_error(tmp_path: object) -> None:
    from .harness import free_port

    r = kcoord(f"127.0.0.1:{free_port()}", "groups", "list", "--timeout", "2", timeout=60)
    assert r.returncode == 1
    assert r.stderr.startswith("Error: listing groups:"), r.stderr
    assert "Traceback" not in r.stderr
