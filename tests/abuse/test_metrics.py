"""Probe against ``/metrics``: one client creates very many consumer groups, then the broker is
scraped. The scrape stays bounded (per-group series for at most ``metrics.max.groups`` groups,
the most lagging, the rest summed into ``consumergroup="__other__"``) and the healthy group
keeps consuming while the coordinator's state is read.

The groups are standalone: one pipelined OffsetCommit (generation -1) each, over a few raw
connections. 100,000 of them keep the module well under a minute on a two-core machine
(about 20 s to create, each commit durable before its answer); bench/loop_stalls.py scrapes a
broker holding 400,000 groups.
"""

from __future__ import annotations

import json
import socket
import struct
import threading
import urllib.request
from collections import defaultdict

from prometheus_client.parser import text_string_to_metric_families

from tests.integration.clients import create_topic, produce_confluent
from tests.integration.harness import BrokerProcess

from .conftest import assert_survived
from .healthy import HealthyGroup

GROUPS = 100_000
TOPIC = "mt"
PARTITIONS = 4
END = 10  # messages per partition: the log end offset the lag is measured from
MAX_GROUPS = 1000  # metrics.max.groups, the default
OTHER = "__other__"

CONNECTIONS = 4  # more commits waiting for each group-commit fsync
_CLIENT_ID = b"abuse"
_RESPONSE = 26  # bytes of each OffsetCommit v2 response frame: one topic, one partition


def group_name(i: int) -> str:
    return f"m-{i:06d}"


def committed(i: int) -> int:
    return i % END  # so group i lags END - i % END behind


def commit_frame(correlation: int, group: str, partition: int, offset: int) -> bytes:
    """OffsetCommit v2 of one partition, generation -1, by hand (checked against the codec)."""
    g = group.encode()
    body = (
        struct.pack(">h", len(g)) + g
        + struct.pack(">ihqi", -1, 0, -1, 1)  # generation, member id "", retention, 1 topic
        + struct.pack(">h", len(TOPIC)) + TOPIC.encode()
        + struct.pack(">iiqh", 1, partition, offset, -1)  # 1 partition, no metadata
    )  # fmt: skip
    header = struct.pack(">hhih", 8, 2, correlation, len(_CLIENT_ID)) + _CLIENT_ID
    return struct.pack(">i", len(header) + len(body)) + header + body


def create_groups(broker: BrokerProcess) -> None:
    """GROUPS standalone groups, pipelined over CONNECTIONS connections; every commit NONE."""
    answers: list[bytes] = []
    failures: list[BaseException] = []

    def committer(first: int) -> None:
        indexes = range(first, GROUPS, CONNECTIONS)
        frames = [commit_frame(i + 1, group_name(i), i % PARTITIONS, committed(i)) for i in indexes]
        try:
            with socket.create_connection(("127.0.0.1", broker.port), timeout=120) as sock:

                def send() -> None:
                    for i in range(0, len(frames), 1000):
                        sock.sendall(b"".join(frames[i : i + 1000]))

                sender = threading.Thread(target=send, daemon=True)
                sender.start()
                got = bytearray()
                while len(got) < len(frames) * _RESPONSE:
                    chunk = sock.recv(1 << 20)
                    assert chunk, "the broker closed the connection"
                    got += chunk
                sender.join(timeout=60)
            answers.append(bytes(got))
        except BaseException as e:  # reported by the test thread
            failures.append(e)

    threads = [threading.Thread(target=committer, args=(c,)) for c in range(CONNECTIONS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not failures, failures
    got = b"".join(answers)
    assert len(got) == GROUPS * _RESPONSE
    assert set(got[_RESPONSE - 2 :: _RESPONSE]) == {0}  # every error code NONE
    assert set(got[_RESPONSE - 1 :: _RESPONSE]) == {0}


def scrape(broker: BrokerProcess) -> bytes:
    url = f"http://127.0.0.1:{broker.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=120) as r:
        assert r.status == 200
        body: bytes = r.read()
    return body


def test_the_frame_by_hand_is_the_codec_s() -> None:
    from kcoord.protocol.codec import encode_body, request_type
    from kcoord.protocol.responses import build

    body = encode_body(
        build(
            request_type(8, 2),
            group_id="m-000007",
            generation_id_or_member_epoch=-1,
            member_id="",
            retention_time_ms=-1,
            topics=[dict(name=TOPIC, partitions=[
                dict(partition_index=3, committed_offset=7, committed_metadata=None)])],
        )  # fmt: skip
    )
    header = struct.pack(">hhih", 8, 2, 8, len(_CLIENT_ID)) + _CLIENT_ID
    assert commit_frame(8, "m-000007", 3, 7) == struct.pack(">i", len(header) + len(body)) + header + body


def test_metrics_with_100000_groups_is_bounded_and_does_not_stall(
    abuse_broker: BrokerProcess, healthy: HealthyGroup
) -> None:
    create_topic(abuse_broker.bootstrap, TOPIC, PARTITIONS)
    produce_confluent(
        abuse_broker.bootstrap, TOPIC, [(p, b"k", b"v") for p in range(PARTITIONS) for _ in range(END)], "none"
    )
    create_groups(abuse_broker)
    assert_survived(abuse_broker, healthy, f"creating {GROUPS} groups")

    body = scrape(abuse_broker)
    assert len(body) < 2_000_000  # bounded by metrics.max.groups, not by the groups held
    lag_sum: dict[str, float] = defaultdict(float)
    members: dict[str, float] = {}
    groups_by_state: dict[str, float] = {}
    for family in text_string_to_metric_families(body.decode()):
        for s in family.samples:
            if s.name == "kafka_consumergroup_lag_sum":
                lag_sum[s.labels["consumergroup"]] += s.value
            elif s.name == "kafka_consumergroup_members":
                members[s.labels["consumergroup"]] = s.value
            elif s.name == "kcoord_groups":
                groups_by_state[s.labels["state"]] = s.value
    assert sum(groups_by_state.values()) >= GROUPS  # every group counted...
    assert OTHER in members and len(members) == MAX_GROUPS + 1  # ...but series for 1000 only

    # The rule: the groups with the most lag, ties to the smaller id. Lag END (the most any
    # probe group has) goes to every tenth group; the healthy group may also be listed.
    listed = {g for g in members if g.startswith("m-")}
    k = len(listed)
    assert k >= MAX_GROUPS - 1  # at most the healthy group besides
    assert listed == {group_name(i) for i in range(0, END * k, END)}
    assert all(lag_sum[g] == END for g in listed)
    # The others' lag, summed into __other__ on the probe's topic (plus the healthy group's,
    # on its own topic, if it is not listed).
    probe_total = sum(END - committed(i) for i in range(GROUPS))
    other_on_topic = [
        s.value
        for family in text_string_to_metric_families(body.decode())
        for s in family.samples
        if s.name == "kafka_consumergroup_lag_sum"
        and s.labels == {"consumergroup": OTHER, "topic": TOPIC}
    ]
    assert other_on_topic == [probe_total - END * k]

    assert_survived(abuse_broker, healthy, f"a /metrics scrape with {GROUPS} groups")

    # The console's groups list is bounded too (at most 10,000 rows, saying it was cut), and
    # reading every group for it does not stop the healthy group.
    url = f"http://127.0.0.1:{abuse_broker.metrics_port}/api/groups"
    with urllib.request.urlopen(url, timeout=120) as r:
        page = json.loads(r.read())
    assert page["total"] >= GROUPS and page["truncated"] and len(page["groups"]) == 10_000
    assert_survived(abuse_broker, healthy, f"the console's groups list with {GROUPS} groups")
