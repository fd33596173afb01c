"""The container: its files read and checked, then the real image built and run with podman.

- docker-compose.yml parses; its KCOORD_* variables are known settings with valid values; the
  Prometheus it starts scrapes the broker's metrics port; the example consumer is pointed at
  the advertised address.
- The Dockerfile runs as a non-root user, keeps the data dir on a volume, exposes the Kafka and
  metrics ports, checks /healthz, and its ENTRYPOINT + CMD is ``kcoord serve ...``.
- That very command line starts from a fresh venv into which the project was pip-installed
  (only host, port and data dir are swapped for free local ones), answers /healthz and
  /readyz, serves a Kafka client, and stops cleanly on SIGTERM.
- The example consumer of the compose file runs against a broker and commits what it reads.
- Marker ``container`` (podman set up by ``podman_env.py``): the image built from the Dockerfile
  as it is, run with a named volume: health, a consumer group through the published port, a
  clean stop, offsets surviving in a new container, KCOORD_* settings, a non-root user; and the
  compose stack (broker and example consumer) up and down with podman-compose.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kcoord.broker.config import SETTINGS, Config

from .harness import ROOT, BrokerProcess, free_port, wait_for
from .podman_env import Podman, Unavailable, container_dir, ensure_installed

# The first test carries installing podman, the base image and the build (minutes on a fresh
# machine, with the other tests running beside it).
pytestmark = pytest.mark.timeout(900)

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
    # The example consumer runs the broker's image, whose HEALTHCHECK probes a metrics port
    # that the consumer does not serve: its own is off (["NONE"], which podman-compose knows).
    assert services["consumer"]["healthcheck"] == {"test": ["NONE"]}
    # The data dir of the image is a named volume.
    data_dir = option(image_command(), "--data-dir")
    assert any(v.endswith(":" + data_dir) for v in services["kcoord"]["volumes"])


def test_the_cluster_compose_file_gives_three_nodes_one_database_and_known_settings() -> None:
    """docker-compose.cluster.yml (docs/cluster.md): every node's environment is known
    settings with valid values, the nodes share one storage.url and have their own node.id,
    and each advertises every listener it has."""
    with open(ROOT / "docker-compose.cluster.yml") as f:
        doc = yaml.safe_load(f)
    nodes = {name: svc for name, svc in doc["services"].items() if name.startswith("kcoord")}
    assert len(nodes) == 3
    ids, urls = set(), set()
    for name, svc in nodes.items():
        env = {k: str(v) for k, v in svc["environment"].items()}
        cfg = Config.load(environ=env)
        assert cfg.warnings == [], (name, cfg.warnings)
        ids.add(cfg["node.id"])
        urls.add(cfg.storage_url)
        listeners = {x.split("://")[0] for x in env["KCOORD_LISTENERS"].split(",")}
        advertised = {x.split("://")[0] for x in env["KCOORD_ADVERTISED_LISTENERS"].split(",")}
        assert listeners == advertised == {"INTERNAL", "EXTERNAL"}
        assert f"INTERNAL://{name}:9092" in env["KCOORD_ADVERTISED_LISTENERS"]
        assert svc["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert ids == {1, 2, 3} and len(urls) == 1


def test_the_kubernetes_example_runs_the_image_as_a_cluster_from_a_secret() -> None:
    with open(ROOT / "deploy" / "kubernetes" / "kcoord-cluster.yaml") as f:
        service, stateful_set = list(yaml.safe_load_all(f))
    assert service["spec"]["clusterIP"] == "None"
    pod = stateful_set["spec"]["template"]["spec"]
    container = pod["containers"][0]
    env = {e["name"]: e for e in container["env"]}
    assert env["KCOORD_STORAGE_URL"]["valueFrom"]["secretKeyRef"]["name"] == "kcoord-storage"
    known = {"KCOORD_" + n.upper().replace(".", "_") for n in SETTINGS}
    assert set(env) <= known
    command = container["args"][0]
    assert "node.id=${HOSTNAME##*-}" in command
    assert f"advertised.listeners=${{HOSTNAME}}.{stateful_set['spec']['serviceName']}:9092" in command


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
    assert {"19092", metrics_port} <= published  # the EXTERNAL listener for the host, /metrics


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
    # What the Dockerfile does: copy the sources (what the build stage's COPY lines name; the
    # image takes them from there), `pip install .`, run ENTRYPOINT + CMD.
    src = tmp_path / "src"
    src.mkdir()
    copied = [
        name
        for word, args in dockerfile_instructions()
        if word == "COPY" and not args.startswith("--from=")
        for name in args.split()[:-1]
    ]
    assert {"pyproject.toml", "broker", "admin", "compiled"} <= set(copied)
    for name in copied:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "_build-*"))
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
    # One listener on the free port given to --port, instead of the compose file's two.
    del env["KCOORD_LISTENERS"], env["KCOORD_LISTENER_SECURITY_PROTOCOL_MAP"]
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


# --- The real image, built and run with podman (marker `container`; podman_env.py) ---

IMAGE = "localhost/kcoord:latest"  # the name docker-compose.yml runs
DATA_DIR = "/var/lib/kcoord/data"
TIMINGS: dict[str, float] = {}


@pytest.fixture(scope="module")
def podman() -> Podman:
    start = time.monotonic()
    try:
        ensure_installed()
    except Unavailable as e:
        pytest.skip(f"podman cannot run here: {e}")
    TIMINGS["install_s"] = round(time.monotonic() - start, 1)
    podman = Podman(container_dir())
    info = podman.run("info", check=False)
    if info.returncode != 0 and os.geteuid() != 0:
        pytest.skip(f"podman cannot run here without root: {info.stderr.strip()}")
    assert info.returncode == 0, info.stderr
    return podman


@pytest.fixture(scope="module")
def image(podman: Podman) -> Iterator[str]:
    TIMINGS["base_image_s"] = round(podman.ensure_base_image(), 1)
    TIMINGS["build_s"] = round(podman.build(ROOT, IMAGE), 1)
    size = int(podman.run("image", "inspect", "--format", "{{.Size}}", IMAGE).stdout)
    TIMINGS["image_mb"] = round(size / 1e6, 1)
    yield IMAGE
    # Left in the test's own storage: the next run's build starts from its cached layers.
    (container_dir() / "timings.json").write_text(json.dumps(TIMINGS, indent=2) + "\n")


def _inspect(podman: Podman, name: str, fmt: str) -> str:
    return podman.run("inspect", "--format", fmt, name).stdout.strip()


def _start(podman: Podman, name: str, volume: str, env: dict[str, str]) -> tuple[int, int]:
    """Run the image detached with its ports published on free loopback ports."""
    port, metrics_port = free_port(), free_port()
    args = ["run", "-d", "--name", name, "-v", f"{volume}:{DATA_DIR}"]
    args += ["-p", f"127.0.0.1:{port}:9092", "-p", f"127.0.0.1:{metrics_port}:9308"]
    env = dict(env, KCOORD_ADVERTISED_LISTENERS=f"127.0.0.1:{port}")
    for key, value in env.items():
        args += ["-e", f"{key}={value}"]
    podman.run(*args, IMAGE)
    base = f"http://127.0.0.1:{metrics_port}"

    def ready() -> bool:
        state = _inspect(podman, name, "{{.State.Status}}")
        assert state == "running", podman.run("logs", name).stderr
        return _get(base + "/readyz")[0] == 200

    wait_for(ready, 60, interval=0.1, what=f"/readyz of container {name}")
    assert _get(base + "/healthz") == (200, "ok\n")
    return port, metrics_port


def _stop_cleanly(podman: Podman, name: str) -> float:
    """``podman stop`` (SIGTERM, SIGKILL after 10 s): seconds it took; exit 0 and "stopped"."""
    start = time.monotonic()
    podman.run("stop", "-t", "10", name, timeout=60)
    took = time.monotonic() - start
    logs = podman.run("logs", name)
    assert _inspect(podman, name, "{{.State.ExitCode}}") == "0", logs.stdout + logs.stderr
    assert "stopped" in logs.stdout + logs.stderr
    assert took < 10, f"podman stop took {took:.1f}s"
    return took


@pytest.fixture
def names(podman: Podman) -> Iterator[dict[str, str]]:
    tag = f"kcoord-test-{os.getpid()}-{time.monotonic_ns() % 100000}"
    made = {"first": f"{tag}-a", "second": f"{tag}-b", "volume": f"{tag}-data"}
    yield made
    podman.run("rm", "-f", "-v", "-t", "0", made["first"], made["second"], check=False)
    podman.run("volume", "rm", "-f", made["volume"], check=False)


@pytest.mark.container
def test_image_is_docker_format_with_its_healthcheck_and_a_non_root_user(
    podman: Podman, image: str
) -> None:
    assert _inspect(podman, image, "{{.Config.User}}") == "kcoord"
    health = _inspect(podman, image, "{{json .HealthCheck}}")
    assert "9308/healthz" in health, health
    # Dependencies and code in pip layers; no compiler or pip cache kept (gcc and mypyc stay in
    # the build stage).
    tools = podman.run("run", "--rm", "--entrypoint", "sh", image, "-c",
                       "command -v gcc cc make || true; ls /root/.cache 2>/dev/null || true")
    assert tools.stdout.strip() == "", tools.stdout
    assert TIMINGS["image_mb"] < 300, TIMINGS
    # The hot modules were compiled in the build stage: the image runs them compiled.
    described = podman.run("run", "--rm", "--entrypoint", "python", image, "-c",
                           "from kcoord import compiled; print(compiled.describe())")
    assert described.stdout.startswith("compiled hot modules in use ("), described.stdout + described.stderr


@pytest.mark.container
def test_container_serves_a_group_stops_cleanly_and_keeps_offsets_on_its_volume(
    podman: Podman, image: str, names: dict[str, str]
) -> None:
    from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer
    from confluent_kafka.admin import AdminClient

    env = {"KCOORD_GROUP_INITIAL_REBALANCE_DELAY_MS": "0", "KCOORD_NUM_PARTITIONS": "3"}
    podman.run("volume", "create", names["volume"])
    start = time.monotonic()
    port, _ = _start(podman, names["first"], names["volume"], env)
    TIMINGS["run_to_ready_s"] = round(time.monotonic() - start, 1)
    checked = podman.run("healthcheck", "run", names["first"], check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert _inspect(podman, names["first"], "{{.State.Health.Status}}") == "healthy"
    assert podman.run("exec", names["first"], "id", "-un").stdout.strip() == "kcoord"
    assert podman.run("exec", names["first"], "id", "-u").stdout.strip() != "0"

    # KCOORD_* settings reach the broker: `kcoord config` in the container names their source,
    # and an auto-created topic gets num.partitions.
    shown = json.loads(podman.run("exec", names["first"], "kcoord", "config", "--json").stdout)
    row = next(r for r in shown if r["name"] == "num.partitions")
    assert (row["value"], row["source"]) == (3, "env KCOORD_NUM_PARTITIONS"), row

    bootstrap = f"127.0.0.1:{port}"
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(30):
        producer.produce("events", key=str(i).encode(), value=f"v{i}".encode())
    assert producer.flush(30) == 0
    del producer  # no reconnects to the container once it is stopped
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics("events", timeout=20)
    assert [(b.host, b.port) for b in md.brokers.values()] == [("127.0.0.1", port)]
    assert len(md.topics["events"].partitions) == 3

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "box", "auto.offset.reset": "earliest",
         "enable.auto.commit": False}
    )
    consumer.subscribe(["events"])
    seen: set[bytes] = set()
    deadline = time.monotonic() + 60
    try:
        while len(seen) < 30 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            seen.add(msg.value() or b"")
            consumer.commit(message=msg, asynchronous=False)
    finally:
        consumer.close()
    assert len(seen) == 30

    TIMINGS["stop_s"] = round(_stop_cleanly(podman, names["first"]), 2)

    # A new container on the same volume serves the group's committed offsets.
    port, _ = _start(podman, names["second"], names["volume"], env)
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"})
    got = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions("box")])
    committed = got["box"].result(30).topic_partitions
    assert sum(tp.offset for tp in committed if tp.offset > 0) == 30, committed
    _stop_cleanly(podman, names["second"])


COMMITTED_SCRIPT = """
import json, sys
from confluent_kafka import ConsumerGroupTopicPartitions
from confluent_kafka.admin import AdminClient
admin = AdminClient({"bootstrap.servers": "kcoord:9092"})
got = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions("example-group")])
print(sum(tp.offset for tp in got["example-group"].result(20).topic_partitions if tp.offset > 0))
"""


@pytest.mark.container
def test_compose_stack_runs_the_example_consumer_group_and_comes_down_cleanly(
    podman: Podman, image: str
) -> None:
    # Prometheus's image cannot be pulled here: only the broker and the example consumer start.
    published = {int(p.split(":")[-2]) for p in compose()["services"]["kcoord"]["ports"]}
    for port in published:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                pytest.fail(f"port {port}, which docker-compose.yml publishes, is in use on this host")
    project = f"kcoordtest{os.getpid()}"
    broker, consumer = f"{project}_kcoord_1", f"{project}_consumer_1"
    files = ["-p", project, "-f", str(ROOT / "docker-compose.yml")]
    start = time.monotonic()
    try:
        podman.compose(ROOT, *files, "up", "-d", "--no-build", "kcoord", "consumer")

        def healthy() -> bool:
            return podman.run("healthcheck", "run", broker, check=False).returncode == 0

        wait_for(healthy, 60, interval=0.5, what="the compose broker to be healthy")

        def consumed() -> int:
            logs = podman.run("logs", consumer, check=False).stdout
            return len([line for line in logs.splitlines() if line.startswith("example-events-")])

        wait_for(lambda: consumed() >= 3, 120, interval=0.5, what="the example consumer to consume")
        committed = podman.run("exec", consumer, "python", "-c", COMMITTED_SCRIPT, timeout=60)
        assert int(committed.stdout.strip()) >= 3, committed.stdout + committed.stderr
        TIMINGS["compose_up_to_commits_s"] = round(time.monotonic() - start, 1)
        # The consumer's own healthcheck is off: no probe of a metrics port it does not serve.
        assert _inspect(podman, consumer, "{{.State.Health.Status}}") in ("", "<nil>")

        stop = time.monotonic()
        podman.compose(ROOT, *files, "stop", timeout=120)
        TIMINGS["compose_stop_s"] = round(time.monotonic() - stop, 1)
        for name in (broker, consumer):
            logs = podman.run("logs", name)
            assert _inspect(podman, name, "{{.State.ExitCode}}") == "0", logs.stdout + logs.stderr
        logs = podman.run("logs", broker)
        assert "stopped" in logs.stdout + logs.stderr
    finally:
        # The consumer runs the broker's image, so it has an anonymous volume of its own (the
        # image's VOLUME), which `down -v` leaves behind.
        anonymous = podman.run(
            "inspect", "--format", "{{range .Mounts}}{{.Name}} {{end}}", consumer, check=False
        ).stdout.split()
        down = podman.compose(ROOT, *files, "down", "-v", timeout=120, check=False)
        podman.run("network", "rm", "-f", f"{project}_default", check=False)
        podman.run("volume", "rm", "-f", *anonymous, check=False)
    assert down.returncode == 0, down.stdout + down.stderr
    left = podman.run("ps", "-a", "--filter", f"name={project}", "--format", "{{.Names}}").stdout
    assert left.strip() == ""
    volumes = podman.run("volume", "ls", "--format", "{{.Name}}").stdout.split()
    assert not [v for v in volumes if v.startswith(project)], volumes
