"""The console's JSON (``/api/groups``, ``/api/groups/<group>``, ``/api/topics``) on the
``--metrics-port`` server of a real broker with real confluent-kafka consumers, checked against
``kcoord groups describe``; and bad input: unknown groups, malformed paths and query strings,
oversized requests answer 404/400 and leave the broker serving; the actions' POSTs need the
CSRF token and this server as origin; the message browser's read_committed.
"""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import quote

from .clients import create_topic, produce_confluent
from .groups import ConfluentMember, settle, wait_balanced
from .harness import BrokerProcess, free_port, wait_for
from .test_admin_cli import commit, kcoord_json, state_of
from .test_metrics import get

FAST = {
    "group.initial.rebalance.delay.ms": 0,
    "group.min.session.timeout.ms": 1000,
    "group.consumer.min.heartbeat.interval.ms": 100,
    "group.consumer.heartbeat.interval.ms": 500,
    "group.consumer.min.session.timeout.ms": 1000,
    "group.consumer.session.timeout.ms": 6000,
}


def api(broker: BrokerProcess, path: str) -> tuple[int, Any]:
    assert broker.metrics_port is not None
    status, text = get(broker.metrics_port, path)
    return status, json.loads(text) if text.startswith(("{", "[")) else text


def post(
    port: int, path: str, body: Any, token: str | None, origin: str | None
) -> tuple[int, Any]:
    """(status, JSON answer) of a console action, with the CSRF token and Origin given."""
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(), method="POST"
    )
    if token is not None:
        request.add_header("X-CSRF-Token", token)
    if origin is not None:
        request.add_header("Origin", origin)
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def raw(port: int, request: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(request)
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def test_groups_group_and_topics_json(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data", FAST, metrics_port=free_port()).start()
    members: list[ConfluentMember] = []
    try:
        create_topic(broker.bootstrap, "orders", 4)
        before = time.time()
        produce_confluent(
            broker.bootstrap,
            "orders",
            [(p, b"k", b"v") for p in range(4) for _ in range(10)],
            "none",
        )
        commit(broker.bootstrap, "billing", {("orders", 0): 3, ("orders", 1): 10, ("orders", 2): 0})
        members = [
            ConfluentMember(broker.bootstrap, "billing", "orders", f"m{i}") for i in range(2)
        ]
        wait_balanced(members, 4)
        settle(members)
        wait_for(lambda: state_of(broker, "billing") == ("Stable", 2), 30, what="Stable with 2")
        kip848 = [
            ConfluentMember(
                broker.bootstrap, "kip", "orders", f"k{i}", assignor="uniform", protocol="consumer"
            )
            for i in range(2)
        ]
        members += kip848
        wait_balanced(kip848, 4)

        status, groups = api(broker, "/api/groups")
        assert status == 200
        rows = {g["group"]: g for g in groups["groups"]}
        assert set(rows) == {"billing", "kip"} and groups["total"] == 2
        billing = rows["billing"]
        assert (billing["type"], billing["state"], billing["members"]) == ("classic", "Stable", 2)
        assert billing["protocol"] == "range" and billing["lag"] == 7 + 0 + 10
        assert billing["rebalances_last_hour"] >= 1 and billing["stuck"] is False
        wait_for(
            lambda: api(broker, "/api/groups")[1]["groups"][1]["state"] == "Stable",
            30,
            what="kip Stable",
        )
        kip = {g["group"]: g for g in api(broker, "/api/groups")[1]["groups"]}["kip"]
        assert (kip["type"], kip["protocol"], kip["members"]) == ("consumer", "uniform", 2)

        # the group page: lag per partition as `kcoord groups describe` shows it
        status, g = api(broker, "/api/groups/billing")
        assert status == 200 and g["group"] == "billing" and g["generation"] >= 1
        described = {
            r["partition"]: r for r in kcoord_json(broker, "groups", "describe", "billing")
        }
        parts = {p["partition"]: p for p in g["partitions"] if p["topic"] == "orders"}
        assert set(parts) == set(described) == {0, 1, 2, 3}
        for p, row in described.items():
            assert parts[p]["committed"] == row["current_offset"]
            assert parts[p]["log_end"] == row["log_end_offset"]
            assert parts[p]["lag"] == row["lag"]
            assert row["consumer_id"] == parts[p]["member_id"]
        assert parts[1]["lag_seconds"] == 0.0 and parts[3]["lag_seconds"] is None
        assert 0 <= parts[0]["lag_seconds"] <= time.time() - before + 1
        assert {m["client_id"] for m in g["members_detail"]} == {"m0", "m1"}
        last = g["rebalances"][-1]
        assert (
            last["type"] == "classic"
            and last["members_after"] == 2
            and last["end_ms"] >= last["start_ms"]
        )

        status, k = api(broker, "/api/groups/kip")
        assert status == 200 and k["type"] == "consumer" and k["epoch"] >= 2
        assert sorted(p for m in k["members_detail"] for p in m["assignment"]["orders"]) == [
            0,
            1,
            2,
            3,
        ]
        assert any(
            e["type"] == "consumer" and e["trigger"] == "member_joined" for e in k["rebalances"]
        )

        status, topics = api(broker, "/api/topics")
        assert status == 200
        orders = {t["topic"]: t for t in topics["topics"]}["orders"]
        assert orders["partition_count"] == 4 and orders["size_bytes"] > 0
        assert [p["log_end"] for p in orders["partitions"]] == [10, 10, 10, 10]
        assert orders["partitions"][0]["groups"] == ["billing"]
        status, filtered = api(broker, "/api/groups?q=kip&limit=1&stuck_ms=0")
        assert status == 200 and [g["group"] for g in filtered["groups"]] == ["kip"]

        # the cluster page on one node: this node alone, leading and coordinating everything
        status, cluster = api(broker, "/api/cluster")
        assert status == 200 and cluster["unreachable"] == []
        [me] = cluster["nodes"]
        assert me["this"] and me["alive"] and me["port"] == broker.port
        assert me["node_id"] == cluster["node_id"] == cluster["controller_id"]
        led = {e["topic"]: e for e in cluster["leadership"]}
        assert (led["orders"]["node_id"], led["orders"]["ranges"]) == (me["node_id"], "0-3")
        assert {(g["group"], g["type"], g["coordinator"]) for g in cluster["groups"]} == {
            ("billing", "classic", me["node_id"]),
            ("kip", "consumer", me["node_id"]),
        }
        assert me["groups"] == 2 and me["group_shards"] == led["__consumer_offsets"]["count"]

        # the structured line and the histogram by trigger
        assert (
            "kcoord.rebalance rebalance group=billing type=classic trigger=member_joined"
            in broker.log()
        )
        assert (
            get(broker.metrics_port, "/metrics")[1].count(  # type: ignore[arg-type]
                'kcoord_group_rebalance_trigger_seconds_count{trigger="member_joined",type="consumer"}'
            )
            == 1
        )
    finally:
        for m in members:
            m.stop()
        broker.stop()


BAD = [
    ("/api/groups/nope", 404),
    ("/api/groups/" + quote("ü/x y"), 404),
    ("/api/nope", 404),
    ("/api", 404),
    ("/api/groups/", 400),
    ("/api/groups/%ff%fe", 400),
    ("/api/groups/%00", 400),
    ("/api/groups/" + "g" * 2000, 400),
    ("/api/groups?limit=0", 400),
    ("/api/groups?limit=abc", 400),
    ("/api/groups?limit=99999999999999999999", 400),
    ("/api/groups?limit=1&limit=2", 400),
    ("/api/groups?bogus=1", 400),
    ("/api/groups?q=" + "x" * 300, 400),
    ("/api/groups?" + "a=1&" * 50, 400),
    ("/api/groups?q=" + "x" * 10_000, 400),
    ("/api/topics?stuck_ms=1", 400),
    ("/api/cluster?stuck_ms=1", 400),
    ("/api/cluster?limit=0", 400),
    ("/console.js/../../etc/passwd", 404),
    ("/static/../metrics.py", 404),
    ("/nope", 404),
]


def test_bad_input_answers_404_or_400_and_the_broker_keeps_serving(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data", FAST, metrics_port=free_port()).start()
    try:
        port = broker.metrics_port
        assert port is not None
        create_topic(broker.bootstrap, "t", 1)
        commit(broker.bootstrap, "g1", {("t", 0): 1})
        for path, expected in BAD:
            status, _ = get(port, path)
            assert status == expected, path
        # a request line over the reader's limit, and endless headers
        assert raw(port, b"GET /api/groups?q=" + b"x" * 100_000 + b" HTTP/1.1\r\n\r\n").startswith(
            b"HTTP/1.1 400"
        )
        assert raw(port, b"GET / HTTP/1.1\r\n" + b"X: y\r\n" * 200 + b"\r\n").startswith(
            b"HTTP/1.1 400"
        )
        assert raw(port, b"POST /api/groups HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 405")
        assert raw(port, b"garbage\r\n\r\n") == b""
        # the actions: a POST needs the session's CSRF token and this server as its origin
        status, session = api(broker, "/api/session")
        assert status == 200 and session["principal"] is None and len(session["csrf_token"]) == 64
        origin = f"http://127.0.0.1:{port}"
        delete = "/api/groups/g1/delete"
        assert post(port, delete, {}, None, origin)[0] == 403  # no token
        assert post(port, delete, {}, "0" * 64, origin)[0] == 403  # a wrong one
        assert post(port, delete, {}, session["csrf_token"], None)[0] == 403  # no Origin
        assert post(port, delete, {}, session["csrf_token"], "http://evil.example")[0] == 403
        reset = "/api/groups/g1/reset-offsets"
        token = session["csrf_token"]
        assert post(port, reset, {"to": "sideways"}, token, origin)[0] == 400
        assert post(port, reset, {"to": "offset", "offset": -1}, token, origin)[0] == 400
        assert post(port, "/api/groups/g1/explode", {}, token, origin)[0] == 405
        assert post(port, "/api/groups/nobody/delete", {}, token, origin)[0] == 404
        assert raw(port, b"POST " + delete.encode() + b" HTTP/1.1\r\nContent-Length: 99999\r\n\r\n"
                   ).startswith(b"HTTP/1.1 413")  # fmt: skip
        status, plan = post(port, reset, {"to": "earliest"}, token, origin)  # a dry run
        assert status == 200 and plan["executed"] is False and plan["offsets"][0]["new"] == 0
        assert api(broker, "/api/groups/g1")[1]["partitions"][0]["committed"] == 1
        for path in ("/api/messages", "/api/messages?topic=t&limit=101", "/api/messages?topic=t&x=1",
                     "/api/messages?topic=t&isolation=dirty"):  # fmt: skip
            assert api(broker, path)[0] == 400, path
        assert api(broker, "/api/messages?topic=nope")[0] == 404
        # read_committed leaves out an aborted transaction's records; no marker is ever shown
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "tx"})
        producer.init_transactions(20)
        for value, commit_it in ((b"kept", True), (b"dropped", False)):
            producer.begin_transaction()
            producer.produce("t", value=value, partition=0)
            assert producer.flush(20) == 0  # on the broker before the end (an abort drops the queue)
            producer.commit_transaction(20) if commit_it else producer.abort_transaction(20)
        del producer

        def values(isolation: str) -> list[str]:
            page = api(broker, f"/api/messages?topic=t&offset=0&isolation={isolation}")[1]
            return [m["value"]["text"] for m in page["messages"]]

        assert values("read_committed") == ["kept"]
        assert values("read_uncommitted") == ["kept", "dropped"]
        # still serving: the console, the API, /healthz and Kafka clients
        assert get(port, "/")[0] == 200 and "<title>kcoord console</title>" in get(port, "/")[1]
        assert get(port, "/console.js")[0] == 200 and get(port, "/console.css")[0] == 200
        assert api(broker, "/api/groups/g1")[0] == 200
        assert get(port, "/healthz") == (200, "ok\n")
        assert state_of(broker, "g1") == ("Empty", 0)
        assert broker.alive and "Traceback" not in broker.log()
    finally:
        broker.stop()


def test_the_timeline_is_rebuilt_from_consumer_offsets_after_a_restart(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data", FAST, metrics_port=free_port()).start()
    members: list[ConfluentMember] = []
    try:
        create_topic(broker.bootstrap, "orders", 4)
        members = [ConfluentMember(broker.bootstrap, "shop", "orders", "m0")]
        wait_balanced(members, 4)
        members.append(ConfluentMember(broker.bootstrap, "shop", "orders", "m1"))
        wait_balanced(members, 4)
        settle(members)
        members.pop().stop()  # LeaveGroup: another rebalance
        wait_for(lambda: state_of(broker, "shop") == ("Stable", 1), 30, what="Stable with 1")
        before = api(broker, "/api/groups/shop")[1]["rebalances"]
        assert [e["members_after"] for e in before] == [1, 2, 1]
        for m in members:
            m.stop()
        members = []
        wait_for(lambda: state_of(broker, "shop")[0] == "Empty", 30, what="Empty")
        before = api(broker, "/api/groups/shop")[1]["rebalances"]
        broker.stop()
        broker.restart()
        wait_for(lambda: get(broker.metrics_port, "/readyz")[0] == 200, 30, what="/readyz")  # type: ignore[arg-type]
        status, g = api(broker, "/api/groups/shop")
        assert status == 200
        after = g["rebalances"]
        assert [e["generation"] for e in after] == [e["generation"] for e in before]
        assert [(e["members_before"], e["members_after"]) for e in after] == [
            (e["members_before"], e["members_after"]) for e in before
        ]
        assert [e["partitions_moved"] for e in after] == [e["partitions_moved"] for e in before]
        assert [e["trigger"] for e in after][:2] == ["member_joined", "member_joined"]
        assert after[2]["trigger"] == "restored" and after[2]["member"] == before[2]["member"]
    finally:
        for m in members:
            m.stop()
        broker.stop()
