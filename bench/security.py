"""What TLS and SASL cost: the same work over PLAINTEXT, SSL and SASL_SSL (SCRAM-SHA-512) in one
run, against one kcoord broker with the three listeners.

* ``connections``: connections set up one after another (TCP, then the TLS handshake, then the
  SASL exchange: SaslHandshake and two SaslAuthenticate rounds), each followed by one
  ApiVersions; connections per second and the broker's CPU per connection.
* ``heartbeat`` and ``commit``: one client connection sending a request and waiting for its
  answer, for ``--seconds``: a member's Heartbeat (one-member group) and a one-partition
  OffsetCommit; requests per second, latency p50/p99 and the broker's CPU per request.
* the same over SASL_SSL on a second broker with ACLs on (``authorizer.class.name``, the user
  allowed READ on the ``bench-`` groups and the topic by ACLs, not a super user): what the
  authorization checks cost, Heartbeat then taking the generic path instead of its fast one.

The client is plain Python (sockets, ``ssl``, the SCRAM client of the admin commands,
``admin/security.py``), which computes the salted password at every login, so the throughput
and set-up figures are the client's as much as the broker's; compare the listeners with each
other and read the broker CPU columns for the broker's own cost.

    .venv/bin/python bench/security.py [--seconds 3] [--connections 200]

Prints one JSON document.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


from bench._peers import cpu_seconds  # noqa: E402
from kcoord.admin.client import exchange  # noqa: E402
from kcoord.admin.security import connect  # noqa: E402
from kcoord.protocol.apis import ApiKey  # noqa: E402
from tests.integration.harness import BrokerProcess, free_port  # noqa: E402
from tests.integration.test_tls import make_certs  # noqa: E402

PASSWORD = "bench-secret"


class Client:
    """One blocking connection, secured and spoken as the admin commands do
    (admin/security.py, admin/client.py)."""

    def __init__(self, port: int, conf: dict[str, str]) -> None:
        self.sock = connect("localhost", port, 10, conf, exchange)

    def request(self, api_key: int, version: int, **fields: Any) -> Any:
        return exchange(self.sock, api_key, version, fields)

    def close(self) -> None:
        self.sock.close()


def connections(port: int, conf: dict[str, str], n: int, pid: int) -> dict[str, Any]:
    cpu0 = cpu_seconds(pid)
    started = time.perf_counter()
    for _ in range(n):
        c = Client(port, conf)
        assert c.request(ApiKey.API_VERSIONS, 3, client_software_name="b", client_software_version="1").error_code == 0
        c.close()
    wall = time.perf_counter() - started
    return {
        "connections_per_s": round(n / wall, 1),
        "broker_cpu_ms_per_connection": round((cpu_seconds(pid) - cpu0) / n * 1000, 3),
    }


def timed(client: Client, seconds: float, pid: int, send: Any) -> dict[str, Any]:
    latencies = []
    cpu0 = cpu_seconds(pid)
    end = time.perf_counter() + seconds
    while (now := time.perf_counter()) < end:
        send()
        latencies.append(time.perf_counter() - now)
    cpu = cpu_seconds(pid) - cpu0
    latencies.sort()
    return {
        "requests_per_s": round(len(latencies) / seconds),
        "p50_ms": round(statistics.median(latencies) * 1000, 3),
        "p99_ms": round(latencies[int(len(latencies) * 0.99)] * 1000, 3),
        "broker_cpu_us_per_request": round(cpu / len(latencies) * 1e6, 1),
    }


def workloads(port: int, conf: dict[str, str], seconds: float, pid: int, tag: str) -> dict[str, Any]:
    c = Client(port, conf)
    try:
        group = f"bench-{tag}"
        join = c.request(
            ApiKey.JOIN_GROUP, 5, group_id=group, session_timeout=30000, rebalance_timeout=30000,
            member_id="", group_instance_id=None, protocol_type="consumer",
            protocols=[dict(name="range", metadata=b"")],
        )
        if join.error_code == 79:  # MEMBER_ID_REQUIRED
            join = c.request(
                ApiKey.JOIN_GROUP, 5, group_id=group, session_timeout=30000, rebalance_timeout=30000,
                member_id=join.member_id, group_instance_id=None, protocol_type="consumer",
                protocols=[dict(name="range", metadata=b"")],
            )
        assert join.error_code == 0, join
        sync = c.request(
            ApiKey.SYNC_GROUP, 3, group_id=group, generation_id=join.generation_id, member_id=join.member_id,
            group_instance_id=None, assignments=[dict(member_id=join.member_id, assignment=b"")],
        )
        assert sync.error_code == 0, sync

        def heartbeat() -> None:
            r = c.request(ApiKey.HEARTBEAT, 3, group_id=group, generation_id=join.generation_id,
                          member_id=join.member_id, group_instance_id=None)
            assert r.error_code == 0, r

        def commit() -> None:
            r = c.request(
                ApiKey.OFFSET_COMMIT, 7, group_id=f"{group}-commit", generation_id_or_member_epoch=-1,
                member_id="", group_instance_id=None,
                topics=[dict(name="bench", partitions=[dict(partition_index=0, committed_offset=1,
                                                            committed_leader_epoch=-1, committed_metadata=None)])],
            )
            assert r.topics[0].partitions[0].error_code == 0, r

        return {"heartbeat": timed(c, seconds, pid, heartbeat), "commit": timed(c, seconds, pid, commit)}
    finally:
        c.close()


def _start(tmp: Path, certs: Path, name: str, extra: dict[str, object]) -> tuple[BrokerProcess, int, int, int]:
    data = tmp / name
    subprocess.run([sys.executable, "-m", "kcoord", "users", "add", "bench", "--password", PASSWORD,
                    "--mechanism", "SCRAM-SHA-512", "--data-dir", str(data)], check=True)
    plain, tls_port, sasl_port = free_port(), free_port(), free_port()
    broker = BrokerProcess(data, {
        "group.initial.rebalance.delay.ms": 0,
        "listeners": f"PLAINTEXT://127.0.0.1:{plain},SSL://127.0.0.1:{tls_port},SASL_SSL://127.0.0.1:{sasl_port}",
        "ssl.keystore.location": str(certs / "broker-keystore.pem"),
        **extra,
    })
    broker.port = plain
    broker.start()
    c = Client(plain, {})
    try:
        r = c.request(ApiKey.CREATE_TOPICS, 5, timeout=30000, validate_only=False, topics=[
            dict(name="bench", num_partitions=1, replication_factor=1, assignments=[], configs=[])
        ])
        assert r.topics[0].error_code == 0, r
    finally:
        c.close()
    return broker, plain, tls_port, sasl_port


def _allow_bench(port: int, conf: dict[str, str]) -> None:
    """ACLs for the bench user: READ on the bench- groups (prefixed) and the bench topic."""
    c = Client(port, conf)
    try:
        acl = dict(principal="User:bench", host="*", operation=3, permission_type=3)
        r = c.request(ApiKey.CREATE_ACLS, 3, creations=[
            dict(acl, resource_type=3, resource_name="bench-", resource_pattern_type=4),
            dict(acl, resource_type=2, resource_name="bench", resource_pattern_type=3),
        ])
        assert all(x.error_code == 0 for x in r.results), r
    finally:
        c.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--connections", type=int, default=200)
    args = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        certs = make_certs(Path(tmp))
        tls = {"security.protocol": "SSL", "ssl.ca.location": str(certs / "ca.pem")}
        sasl = {**tls, "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                "sasl.username": "bench", "sasl.password": PASSWORD}
        broker, plain, tls_port, sasl_port = _start(Path(tmp), certs, "data", {})
        try:
            assert broker.proc is not None
            pid = broker.proc.pid
            for name, port, conf in (
                ("PLAINTEXT", plain, {}),
                ("SSL", tls_port, tls),
                ("SASL_SSL/SCRAM-SHA-512", sasl_port, sasl),
            ):
                results[name] = {
                    "connections": connections(port, conf, args.connections, pid),
                    **workloads(port, conf, args.seconds, pid, name.split("/")[0].lower()),
                }
                print(name, json.dumps(results[name]), file=sys.stderr)
        finally:
            broker.stop()
        acls = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                "super.users": "User:ANONYMOUS"}  # the PLAINTEXT listener creates the ACLs
        broker, plain, _tls_port, sasl_port = _start(Path(tmp), certs, "data-acls", acls)
        try:
            assert broker.proc is not None
            _allow_bench(plain, {})
            name = "SASL_SSL/SCRAM-SHA-512+ACLs"
            results[name] = workloads(sasl_port, sasl, args.seconds, broker.proc.pid, "sasl_ssl")
            print(name, json.dumps(results[name]), file=sys.stderr)
        finally:
            broker.stop()
    print(json.dumps({"benchmark": "security", "date": datetime.date.today().isoformat(),
                      "seconds": args.seconds, "results": results}, indent=2))


if __name__ == "__main__":
    main()
