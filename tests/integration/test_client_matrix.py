"""The client matrix: every client library and assignor through join, leave, crash, commit and
resume after a broker restart; admin APIs of two libraries; mixed-library groups.

Each member is its own process (so a crash is a real SIGKILL), speaking the protocol of
``scripts/matrix_consumer.py`` / ``tests/js/consumer.js``.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Iterable
from pathlib import Path

import pytest

from kcoord.protocol.apis import ApiKey

from .clients import create_topic, produce_confluent
from .harness import ROOT, BrokerProcess, wait_for
from .rawclient import RawClient

PARTITIONS = 6
FAST = {"group.initial.rebalance.delay.ms": 0, "group.min.session.timeout.ms": 1000}
PY_SCRIPT = Path(__file__).parent / "scripts" / "matrix_consumer.py"
JS_DIR = ROOT / "tests" / "js"


class MemberProc:
    def __init__(self, client: str, broker: BrokerProcess, group: str, topic: str, assignor: str,
                 out: Path) -> None:
        self.client = client
        self.out = out
        self.partitions: frozenset[int] = frozenset()
        self.events: list[dict[str, object]] = []
        common = ["--bootstrap", broker.bootstrap, "--group", group, "--topic", topic,
                  "--out", str(out), "--session-ms", "3000"]
        if client == "kafkajs":
            cmd = ["node", str(JS_DIR / "consumer.js"), *common]
        else:
            cmd = [sys.executable, str(PY_SCRIPT), "--client", client, "--assignor", assignor, *common]
        with open(out.with_suffix(".err"), "ab") as err:  # kept for post-mortems
            self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, cwd=ROOT)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        wait_for(lambda: any(e["event"] == "started" for e in self.events), 30, what=f"{client} started")

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            self.events.append(event)
            if event["event"] == "assigned":
                self.partitions = frozenset(event["partitions"])  # type: ignore[arg-type]

    def describe(self) -> str:
        state = "running" if self.proc.poll() is None else f"exited {self.proc.returncode}"
        err = self.out.with_suffix(".err")
        tail = err.read_text(errors="replace").strip().splitlines()[-3:] if err.exists() else []
        return f"{self.client} {sorted(self.partitions)} {state} {tail}"

    def terminate(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(30)
        self.partitions = frozenset()

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(10)
        self.partitions = frozenset()


def _balanced(members: Iterable[MemberProc]) -> bool:
    members = list(members)
    owned = sorted(p for m in members for p in m.partitions)
    return owned == list(range(PARTITIONS)) and all(m.partitions for m in members)


def _wait_balanced(members: list[MemberProc], timeout: float = 60) -> None:
    try:
        wait_for(lambda: _balanced(members), timeout, what="a complete disjoint assignment")
    except AssertionError as e:
        raise AssertionError(f"{e}; members: {[m.describe() for m in members]}") from None


def _processed(path: Path) -> list[tuple[int, int]]:
    if not path.exists():
        return []
    return [tuple(map(int, line.split())) for line in path.read_text().splitlines() if line.strip()]  # type: ignore[misc]


def _committed(port: int, group: str, topic: str) -> dict[int, int]:
    with RawClient(port) as c:
        r = c.request(ApiKey.OFFSET_FETCH, 7, group_id=group,
                      topics=[dict(name=topic, partition_indexes=list(range(PARTITIONS)))],
                      require_stable=False)
    return {p.partition_index: p.committed_offset for p in r.topics[0].partitions}


def _produce(broker: BrokerProcess, topic: str, start: int, count: int) -> None:
    produce_confluent(broker.bootstrap, topic,
                      [(i % PARTITIONS, b"k", b"m%d" % i) for i in range(start, start + count)], "none")


MATRIX = [
    ("confluent", "range"),
    ("confluent", "roundrobin"),
    ("confluent", "cooperative-sticky"),
    ("kafka-python", "range"),
    ("kafka-python", "roundrobin"),
    ("kafka-python", "sticky"),
    ("aiokafka", "range"),
    ("aiokafka", "roundrobin"),
    ("kafkajs", "default"),
]


def _node_ready() -> None:
    if shutil.which("node") is None or not (JS_DIR / "node_modules" / "kafkajs").is_dir():
        raise AssertionError("kafkajs needs node and `npm install --prefix tests/js` (scripts/test does it)")


@pytest.mark.parametrize("client, assignor", MATRIX, ids=[f"{c}-{a}" for c, a in MATRIX])
def test_client_joins_rebalances_commits_and_resumes(
    broker_factory: object, tmp_path: Path, client: str, assignor: str
) -> None:
    if client == "kafkajs":
        _node_ready()
    broker: BrokerProcess = broker_factory(FAST)  # type: ignore[operator]
    topic, group = "matrix", f"matrix-{client}-{assignor}"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    _produce(broker, topic, 0, 60)
    members: list[MemberProc] = []

    def join(name: str) -> MemberProc:
        m = MemberProc(client, broker, group, topic, assignor, tmp_path / f"{name}.txt")
        members.append(m)
        return m

    try:
        a = join("a")
        _wait_balanced([a])
        b = join("b")
        _wait_balanced([a, b])  # rebalance on join
        c = join("c")
        _wait_balanced([a, b, c])
        a.terminate()  # leave
        _wait_balanced([b, c])
        c.kill()  # crash: removed after its session timeout
        _wait_balanced([b])
        wait_for(lambda: sum(_committed(broker.port, group, topic).values()) == 60, 30,
                 what="everything committed")
        seen = {pm for m in members for pm in _processed(m.out)}
        assert len(seen) == 60  # every message processed at least once
        b.terminate()

        broker.kill()
        broker.restart()
        _produce(broker, topic, 60, 60)
        d = join("d")
        _wait_balanced([d])
        wait_for(lambda: sum(_committed(broker.port, group, topic).values()) == 120, 60,
                 what="new messages committed after the restart")
        # d resumed from the committed offsets: it never saw the first 60 messages.
        assert sorted(_processed(d.out)) == sorted((i % PARTITIONS, 10 + i // PARTITIONS) for i in range(60))
    finally:
        for m in members:
            if m.proc.poll() is None:
                m.kill()


def test_mixed_group_and_a_member_without_a_common_protocol(
    broker_factory: object, tmp_path: Path
) -> None:
    _node_ready()
    broker: BrokerProcess = broker_factory(FAST)  # type: ignore[operator]
    create_topic(broker.bootstrap, "mixed", PARTITIONS)
    members = [
        MemberProc(client, broker, "mixed-rr", "mixed", "roundrobin", tmp_path / f"{client}.txt")
        for client in ("confluent", "kafka-python", "aiokafka")
    ]
    try:
        _wait_balanced(members)
        before = {m.client: m.partitions for m in members}
        # kafkajs speaks "RoundRobinAssigner", a protocol no other member supports.
        outsider = MemberProc("kafkajs", broker, "mixed-rr", "mixed", "default", tmp_path / "js.txt")
        wait_for(lambda: outsider.proc.poll() is not None, 60, what="kafkajs refused")
        assert outsider.partitions == frozenset()
        assert {m.client: m.partitions for m in members} == before
        assert _balanced(members)
    finally:
        for m in members:
            m.terminate()


def test_admin_apis_of_confluent_and_kafka_python(broker_factory: object, tmp_path: Path) -> None:
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import AdminClient
    from kafka import TopicPartition as KTP
    from kafka.admin import KafkaAdminClient
    from kafka.structs import OffsetAndMetadata

    broker: BrokerProcess = broker_factory(FAST)  # type: ignore[operator]
    create_topic(broker.bootstrap, "adm", PARTITIONS)
    _produce(broker, "adm", 0, 60)
    live = MemberProc("confluent", broker, "live", "adm", "range", tmp_path / "live.txt")
    ck = AdminClient({"bootstrap.servers": broker.bootstrap})
    kp = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        _wait_balanced([live])
        wait_for(lambda: sum(_committed(broker.port, "live", "adm").values()) == 60, 30)
        # Offsets of an empty group: alter, list, delete (both libraries).
        ck.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(
            "idle-c", [TopicPartition("adm", p, 5) for p in range(PARTITIONS)])])["idle-c"].result(20)
        kp.alter_group_offsets("idle-k", {KTP("adm", p): OffsetAndMetadata(7, "", -1) for p in range(PARTITIONS)})
        listed = ck.list_consumer_group_offsets([ConsumerGroupTopicPartitions("idle-c")])["idle-c"].result(20)
        assert {tp.partition: tp.offset for tp in listed.topic_partitions} == dict.fromkeys(range(PARTITIONS), 5)
        assert {tp.partition: o.offset for tp, o in kp.list_group_offsets("idle-k")["idle-k"].items()} == dict.fromkeys(range(PARTITIONS), 7)
        # (confluent-kafka's AdminClient has no OffsetDelete; kafka-python's does.)
        kp.delete_group_offsets("idle-k", [KTP("adm", 1)])
        assert KTP("adm", 1) not in {tp for tp, o in kp.list_group_offsets("idle-k")["idle-k"].items() if o.offset >= 0}

        # List and describe: the live group is Stable with one member holding everything.
        listed_groups = ck.list_consumer_groups().result(20)
        assert {"live", "idle-c", "idle-k"} <= {g.group_id for g in listed_groups.valid}
        assert {"live", "idle-c", "idle-k"} <= {g["group_id"] for g in kp.list_groups()}
        desc = ck.describe_consumer_groups(["live"])["live"].result(20)
        assert str(desc.state).endswith("STABLE") and len(desc.members) == 1
        assert {tp.partition for tp in desc.members[0].assignment.topic_partitions} == set(range(PARTITIONS))
        kdesc = kp.describe_groups(["live"])["live"]
        assert kdesc["group_state"] == "Stable" and kdesc["error"] is None
        assert len(kdesc["members"]) == 1

        # Delete: refused while the group has members, then allowed.
        with pytest.raises(Exception, match="NON_EMPTY_GROUP"):
            ck.delete_consumer_groups(["live"])["live"].result(20)
        live.terminate()
        ck.delete_consumer_groups(["idle-c"])["idle-c"].result(20)
        kp.delete_groups(["live", "idle-k"])
        remaining = {g.group_id for g in ck.list_consumer_groups().result(20).valid}
        assert not {"live", "idle-c", "idle-k"} & remaining
    finally:
        live.terminate()
        kp.close()
