"""The ``kcoord`` command Kafka's way, as a user runs it: ``topics`` create/list/describe/
add-partitions/delete, ``produce`` and ``consume`` (kcat-like), and kafka-consumer-groups.sh's
flags on ``groups`` against a real confluent-kafka consumer group; closed pipes and errors.

One broker for the module; every command is a subprocess (the real CLI), checked against what
a confluent-kafka client sees.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer

from .clients import create_topic, produce_confluent
from .groups import ConfluentMember, wait_balanced
from .harness import ROOT, BrokerProcess, wait_for
from .test_admin_cli import FAST, OFFSETS_HEADER, commit, consumer_view


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    # Few coordinator shards: __consumer_offsets and __transaction_state are made at first use.
    settings: dict[str, object] = {
        **FAST, "offsets.topic.num.partitions": 4, "transaction.state.log.num.partitions": 2,
    }  # fmt: skip
    b = BrokerProcess(tmp_path_factory.mktemp("kcoord-cli") / "data", settings).start()
    yield b
    b.stop()


def kc(
    broker: BrokerProcess, *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kcoord", *args, "--bootstrap-server", broker.bootstrap],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )


def ok(broker: BrokerProcess, *args: str, stdin: str | None = None) -> str:
    r = kc(broker, *args, stdin=stdin)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Traceback" not in r.stderr, r.stderr
    return r.stdout


def one_line_error(r: subprocess.CompletedProcess[str], code: int = 1) -> str:
    assert r.returncode == code, r.stdout + r.stderr
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), r.stderr
    return lines[0]


def test_topics_create_list_describe_add_partitions_delete(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "seed", 1)
    commit(broker.bootstrap, "seeder", {("seed", 0): 0})  # so that __consumer_offsets exists
    out = ok(broker, "topics", "create", "orders", "--partitions", "3", "--replication-factor", "1",
             "--config", "retention.ms=3600000", "--config", "cleanup.policy=compact")  # fmt: skip
    assert out == "Created topic orders.\n"
    err = one_line_error(kc(broker, "topics", "create", "orders"))
    assert "TOPIC_ALREADY_EXISTS" in err
    ok(broker, "topics", "create", "orders", "--if-not-exists")

    listed = ok(broker, "topics", "list").split()
    assert "orders" in listed and "__consumer_offsets" in listed
    listed = ok(broker, "topics", "list", "--exclude-internal").split()
    assert "orders" in listed and not [t for t in listed if t.startswith("__")]

    # kafka-topics.sh's lines first, so that `| head -1` shows the topic's summary.
    r = subprocess.run(
        f"'{sys.executable}' -m kcoord topics describe orders --bootstrap-server {broker.bootstrap}"
        " | head -1",
        shell=True, capture_output=True, text=True, cwd=ROOT, timeout=60,
    )  # fmt: skip
    assert r.returncode == 0 and r.stderr == "", r.stderr
    [summary] = r.stdout.splitlines()
    fields = dict(f.split(": ", 1) for f in summary.split("\t"))
    assert fields["Topic"] == "orders" and fields["PartitionCount"] == "3"
    assert fields["ReplicationFactor"] == "1" and len(fields["TopicId"]) == 22
    assert sorted(fields["Configs"].split(",")) == ["cleanup.policy=compact", "retention.ms=3600000"]
    # A reader gone before anything was written: still quiet (status 1, as `kcoord config`).
    p = subprocess.Popen(
        [sys.executable, "-m", "kcoord", "topics", "describe", "orders", "--bootstrap-server",
         broker.bootstrap],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT,
    )  # fmt: skip
    assert p.stdout is not None and p.stderr is not None
    p.stdout.close()
    assert p.wait(timeout=60) == 1
    assert p.stderr.read() == b""
    p.stderr.close()

    assert ok(broker, "topics", "add-partitions", "orders", "--partitions", "4")
    described = json.loads(ok(broker, "topics", "describe", "orders", "--json"))
    assert [p["partition"] for p in described["partitions"]] == [0, 1, 2, 3]
    assert {c["name"]: c["source"] for c in described["configs"]}["retention.ms"] == "topic"
    assert "INVALID_PARTITIONS" in one_line_error(
        kc(broker, "topics", "add-partitions", "orders", "--partitions", "2")
    )

    assert ok(broker, "topics", "delete", "orders") == "Deleted topic orders.\n"
    assert "orders" not in ok(broker, "topics", "list").split()
    assert "UNKNOWN_TOPIC_OR_PART" in one_line_error(kc(broker, "topics", "delete", "orders"))
    ok(broker, "topics", "delete", "orders", "--if-exists")


def test_produce_then_consume_keys_headers_offsets_count_group(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "lines", 2)
    ok(broker, "produce", "lines", "-p", "1", "-K", ":", "-H", "app=cli", "-H", "n=1",
       stdin="k0:v0\nk1:v:1\nno key\nk3:\n")  # fmt: skip
    ok(broker, "produce", "lines", "-p", "0", stdin="zero\n")

    # Every partition to its end, kcat's format string.
    out = ok(broker, "consume", "lines", "-e", "-f", r"%t %p %o %k=%s [%h] %K/%S\n")
    assert sorted(out.splitlines()) == [
        "lines 0 0 =zero [] -1/4",
        "lines 1 0 k0=v0 [app=cli,n=1] 2/2",
        "lines 1 1 k1=v:1 [app=cli,n=1] 2/3",
        "lines 1 2 =no key [app=cli,n=1] -1/6",
        "lines 1 3 k3= [app=cli,n=1] 2/0",
    ]
    # The last record of each partition (-o -1), as JSON.
    records = [json.loads(line) for line in ok(broker, "consume", "lines", "-o", "-1", "-e",
                                               "--format", "json").splitlines()]  # fmt: skip
    by_partition = {r["partition"]: r for r in records}
    assert sorted(by_partition) == [0, 1] and len(records) == 2
    assert by_partition[1]["offset"] == 3 and by_partition[1]["key"] == "k3"
    assert by_partition[1]["headers"] == [["app", "cli"], ["n", "1"]]
    assert by_partition[0]["value"] == "zero" and by_partition[0]["key"] is None
    # An offset, one partition, a count; key SEP value.
    assert ok(broker, "consume", "lines", "-p", "1", "-o", "1", "-c", "2", "-K", "|") == (
        "k1|v:1\n|no key\n"
    )

    # In a group: commits what it printed.
    got = ok(broker, "consume", "lines", "--group", "readers", "-c", "5").splitlines()
    assert sorted(got) == ["", "no key", "v0", "v:1", "zero"]
    committed, highs = consumer_view(broker.bootstrap, "readers", [("lines", 0), ("lines", 1)])
    assert committed == highs == {("lines", 0): 1, ("lines", 1): 4}


def test_consume_read_committed_hides_aborted_records(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "txn-lines", 1)
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "cli-t"})
    p.init_transactions(30)
    for value, commit_it in ((b"aborted", False), (b"committed", True)):
        p.begin_transaction()
        p.produce("txn-lines", value)
        p.flush(30)
        if commit_it:
            p.commit_transaction(30)
        else:
            p.abort_transaction(30)
    assert ok(broker, "consume", "txn-lines", "-e", "--isolation", "read_committed") == "committed\n"
    assert ok(broker, "consume", "txn-lines", "-e") == "aborted\ncommitted\n"


def test_groups_kafka_flags_describe_a_live_group(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "live", 2)
    produce_confluent(broker.bootstrap, "live", [(p, b"k", b"v") for p in range(2) for _ in range(3)], "none")
    commit(broker.bootstrap, "live-g", {("live", 0): 1})
    members = [ConfluentMember(broker.bootstrap, "live-g", "live", f"cli{i}") for i in range(2)]
    try:
        wait_balanced(members, 2)

        def stable() -> bool:
            out = ok(broker, "groups", "--describe", "--group", "live-g", "--state").splitlines()
            return out[1].split()[4:] == ["Stable", "2"]

        wait_for(stable, 30, what="live-g Stable with 2 members")
        state = ok(broker, "groups", "--describe", "--group", "live-g", "--state").splitlines()
        assert state[0].split() == ["GROUP", "COORDINATOR", "(ID)", "ASSIGNMENT-STRATEGY", "STATE",
                                    "#MEMBERS"]  # fmt: skip
        assert state[1].split()[0] == "live-g" and state[1].split()[3] == "range"

        table = ok(broker, "groups", "--describe", "--group", "live-g", "--members", "--verbose")
        lines = table.splitlines()
        assert lines[0].split() == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS",
                                    "CURRENT-EPOCH", "CURRENT-ASSIGNMENT", "TARGET-EPOCH",
                                    "TARGET-ASSIGNMENT"]  # fmt: skip
        seen = {}
        for line in lines[1:]:
            cells = line.split()
            seen[cells[3]] = (cells[4], cells[6])
        assert seen == {m.name: ("1", f"live:{p}") for m in members for p in m.assignment}
        plain = ok(broker, "groups", "--describe", "--group", "live-g", "--members").splitlines()
        assert plain[0].split() == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"]

        offsets = ok(broker, "groups", "--describe", "--group", "live-g", "--offsets").splitlines()
        assert offsets[0].split() == OFFSETS_HEADER
        rows = {int(line.split()[2]): line.split() for line in offsets[1:]}
        assert rows[0][3:6] == ["1", "3", "2"] and rows[1][3] == "-"
        # The subcommand form takes --group as well, and keeps its own columns.
        sub = ok(broker, "groups", "describe", "--group", "live-g", "--members").splitlines()
        assert sub[0].split()[2] == "GROUP-INSTANCE-ID"

        # A reset of a group with members is refused: one line, status 1.
        r = kc(broker, "groups", "--reset-offsets", "--group", "live-g", "--all-topics",
               "--to-earliest", "--execute")  # fmt: skip
        assert "inactive" in one_line_error(r)
    finally:
        for m in members:
            m.stop()


def test_reset_offsets_dry_run_execute_export_from_file(broker: BrokerProcess, tmp_path: Path) -> None:
    create_topic(broker.bootstrap, "resets", 2)
    produce_confluent(broker.bootstrap, "resets", [(p, b"k", b"v") for p in range(2) for _ in range(10)], "none")
    tps = [("resets", 0), ("resets", 1)]
    commit(broker.bootstrap, "rg", {("resets", 0): 4})

    def committed() -> dict[tuple[str, int], int | None]:
        return consumer_view(broker.bootstrap, "rg", tps)[0]

    # --dry-run (and no mode at all) prints the plan and changes nothing.
    for mode in ("--dry-run", None):
        out = ok(broker, "groups", "--reset-offsets", "--group", "rg", "--topic", "resets",
                 "--to-offset", "7", *([mode] if mode else []))  # fmt: skip
        lines = out.splitlines()
        assert lines[0].split() == ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]
        assert [line.split() for line in lines[1:]] == [["rg", "resets", "0", "7"], ["rg", "resets", "1", "7"]]
    assert committed() == {("resets", 0): 4, ("resets", 1): None}

    # --to-current: the committed offset, else the log end; --export writes Kafka's CSV.
    plan = ok(broker, "groups", "--reset-offsets", "--group", "rg", "--topic", "resets",
              "--to-current", "--export")  # fmt: skip
    assert plan == "resets,0,4\nresets,1,10\n"

    ok(broker, "offsets", "reset", "--group", "rg", "--topic", "resets:0", "--shift-by", "3", "--execute")
    assert committed() == {("resets", 0): 7, ("resets", 1): None}
    # The exported plan back (--from-file) restores it, and sets partition 1.
    csv = tmp_path / "plan.csv"
    csv.write_text(plan)
    ok(broker, "groups", "--reset-offsets", "--group", "rg", "--from-file", str(csv), "--execute")
    assert committed() == {("resets", 0): 4, ("resets", 1): 10}

    # --by-duration: the records are younger than an hour, so an hour ago is the log start.
    out = ok(broker, "groups", "--reset-offsets", "--group", "rg", "--all-topics", "--by-duration",
             "PT1H", "--execute")  # fmt: skip
    assert [line.split()[-1] for line in out.splitlines()[1:]] == ["0", "0"]
    assert committed() == {("resets", 0): 0, ("resets", 1): 0}

    # Several groups: --all-groups, and the CSV then names each group.
    commit(broker.bootstrap, "rg2", {("resets", 1): 2})
    exported = ok(broker, "groups", "--reset-offsets", "--all-groups", "--topic", "resets:1",
                  "--to-current", "--export").splitlines()  # fmt: skip
    assert "rg,resets,1,0" in exported and "rg2,resets,1,2" in exported

    assert "--by-duration" in one_line_error(
        kc(broker, "groups", "--reset-offsets", "--group", "rg", "--all-topics", "--by-duration", "1h"), 2
    )
    assert "no group given" in one_line_error(
        kc(broker, "groups", "--reset-offsets", "--all-topics", "--to-earliest"), 2
    )
