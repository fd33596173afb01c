"""The container files, as far as they can be tested without a container engine.

- docker-compose.yml parses; its KCOORD_* variables are known settings with valid values; the
  Prometheus it starts scrapes the broker's metrics port; the example consumer is pointed at
  the advertised address.
- The Dockerfile runs as a non-root user, keeps the data dir on a volume, exposes the Kafka and
  metrics ports, checks /healthz, and its ENTRYPOINT + CMD is ``kcoord serve ...``.
- That very command line starts from a fresh venv into which the project was pip-installed
  (only host, port and data dir are swapped for free local ones), answers /healthz and
  /readyz, serves a Kafka client, and stops cleanly on SIGTERM.
- The example consumer of the compose file runs against a broker and commits what it reads.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from broker.config import SETTINGS, Config

from .harness import ROOT, BrokerProcess, free_port, wait_for

FAST = {"group.initial.rebalance.delay.ms": 0, "group.min.session.timeout.ms": 1000}


def compose() -> dict[str, Any]:
    with open(ROOT / "docker-compose.yml") as f:
        return yaml.safe_load(f)  # type: ignore[no-any-return]


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in (ROOT / "Dockerfile").read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = pending + line
        pending = ""
        word, _, rest = line.partition(" ")
        out.append((word.upper(), rest.strip()))
    return out


def image_command() -> list[str]:
    """ENTRYPOINT + CMD (exec form) of the Dockerfile."""
    instr = dict(dockerfile_instructions())
    return list(json.loads(instr["ENTRYPOINT"])) + list(json.loads(instr["CMD"]))


def option(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_compose_file_parses_and_its_environment_is_known_settings() -> None:
    doc = compose()
    services = doc["services"]
    assert {"kcoord", "prometheus", "consumer"} <= set(services)
    env = {k: str(v) for k, v in services["kcoord"]["environment"].items()}
    assert env and all(k.startswith("KCOORD_") for k in env)
    known = {"KCOORD_" + n.upper().replace(".", "_") for n in SETTINGS}
    assert set(env) <= known, set(env) - known
    cfg = Config.load(environ=env)  # raises ConfigError on a bad value
    assert cfg.warnings == []
    for key in env:
        name = next(n for n in SETTINGS if "KCOORD_" + n.upper().replace(".", "_") == key)
        assert cfg.source(name) == f"env {key}"
    # The example consumer connects to the address the broker advertises.
    host, port = cfg.advertised
    advertised = f"{host}:{port}"
    assert services["consumer"]["environment"]["BOOTSTRAP_SERVERS"] == advertised
    assert advertised.startswith("kcoord:")
    # The data dir of the image is a named volume.
    data_dir = option(image_command(), "--data-dir")
    assert any(v.endswith(":" + data_dir) for v in services["kcoord"]["volumes"])


def test_prometheus_scrapes_the_metrics_port_of_the_broker_service() -> None:
    doc = compose()
    prom = doc["services"]["prometheus"]
    mount = next(v for v in prom["volumes"] if "prometheus.yml" in v)
    local = ROOT / mount.split(":")[0]
    with open(local) as f:
        config = yaml.safe_load(f)
    metrics_port = option(image_command(), "--metrics-port")
    targets = [t for job in config["scrape_configs"] for sc in job["static_configs"] for t in sc["targets"]]
    assert f"kcoord:{metrics_port}" in targets
    published = {p.split(":")[-1] for p in doc["services"]["kcoord"]["ports"]}
    assert {"9092", metrics_port} <= published


def test_dockerfile_runs_kcoord_serve_as_non_root_with_a_volume_and_a_healthcheck() -> None:
    instr = dockerfile_instructions()
    words = [w for w, _ in instr]
    assert instr[0][0] == "FROM" and "slim" in instr[0][1]
    user = [a for w, a in instr if w == "USER"]
    assert user and user[-1] not in ("root", "0")
    argv = image_command()
    assert argv[:2] == ["kcoord", "serve"]
    metrics_port = option(argv, "--metrics-port")
    exposed = " ".join(a for w, a in instr if w == "EXPOSE").split()
    assert option(argv, "--port") in exposed and metrics_port in exposed
    volumes = [a for w, a in instr if w == "VOLUME"]
    assert volumes and option(argv, "--data-dir") in volumes[0]
    health = next(a for w, a in instr if w == "HEALTHCHECK")
    assert f"{metrics_port}/healthz" in health
    assert "KCOORD_ADVERTISED_LISTENERS" in (ROOT / "Dockerfile").read_text()
    assert words.index("USER") < words.index("ENTRYPOINT")


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


@pytest.mark.slow
def test_image_command_starts_from_a_fresh_venv(tmp_path: Path) -> None:
    # What the Dockerfile does: copy the sources (what its COPY lines name), `pip install .`,
    # run ENTRYPOINT + CMD.
    src = tmp_path / "src"
    src.mkdir()
    copied = [
        name for word, args in dockerfile_instructions() if word == "COPY" for name in args.split()[:-1]
    ]
    assert {"pyproject.toml", "broker", "admin"} <= set(copied)
    for name in copied:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(ROOT / name, src / name)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    pip = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check", str(src)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert pip.returncode == 0, pip.stdout + pip.stderr

    argv = image_command()
    port, metrics_port = free_port(), free_port()
    argv[0] = str(venv / "bin" / argv[0])
    for flag, value in (
        ("--host", "127.0.0.1"),
        ("--port", str(port)),
        ("--data-dir", str(tmp_path / "data")),
        ("--metrics-port", str(metrics_port)),
    ):
        argv[argv.index(flag) + 1] = value
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update({k: str(v) for k, v in compose()["services"]["kcoord"]["environment"].items()})
    env["KCOORD_ADVERTISED_LISTENERS"] = f"127.0.0.1:{port}"
    log = tmp_path / "broker.log"
    with open(log, "wb") as out:
        # cwd outside the checkout: the installed package must be what runs.
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=tmp_path)
    try:
        base = f"http://127.0.0.1:{metrics_port}"

        def ready() -> bool:
            assert proc.poll() is None, log.read_text()
            return _get(base + "/readyz")[0] == 200

        wait_for(ready, 60, what="/readyz of the installed broker")
        assert _get(base + "/healthz") == (200, "ok\n")
        from confluent_kafka.admin import AdminClient

        md = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"}).list_topics(timeout=20)
        assert [(b.host, b.port) for b in md.brokers.values()] == [("127.0.0.1", port)]
        assert "kcoord_requests_total" in _get(base + "/metrics")[1]
        config = subprocess.run(
            [str(venv / "bin" / "kcoord"), "config"], capture_output=True, text=True, env=env, timeout=60
        )
        assert config.returncode == 0, config.stderr
        assert "env KCOORD_GROUP_INITIAL_REBALANCE_DELAY_MS" in config.stdout
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=30)
    assert code == 0, log.read_text()


def test_example_consumer_consumes_and_commits(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data", FAST).start()
    try:
        env = dict(os.environ)
        env.update(BOOTSTRAP_SERVERS=broker.bootstrap, TOPIC="ex", GROUP="ex-group", PARTITIONS="2")
        run = subprocess.run(
            [sys.executable, str(ROOT / "deploy" / "example_consumer.py"), "--max-messages", "3",
             "--interval", "0.05"],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        assert run.returncode == 0, run.stdout + run.stderr
        assert len([line for line in run.stdout.splitlines() if line.startswith("ex-")]) == 3
        from confluent_kafka import ConsumerGroupTopicPartitions
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        got = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions("ex-group")])
        committed = got["ex-group"].result(20).topic_partitions
        assert sum(tp.offset for tp in committed if tp.offset > 0) >= 3
    finally:
        broker.stop()
