"""``kcoord serve``'s first moments, as a user meets them (issue 30): ``--port 0`` binds a free
port and advertises it, ``--ready-file`` says when and where the broker accepts requests, one
start-up line names every address, the console is on by default (127.0.0.1:9308, or said why
not), and a mistake the user can fix ends start-up with one line and exit status 2.

Every broker here is a real ``python -m kcoord serve`` process. The default console's fixed port
is tried only inside a network namespace of this test's own (as root), where it is surely free.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from .harness import ROOT, free_port, wait_for

DEFAULT_CONSOLE_PORT = 9308


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))


class Serve:
    """One ``kcoord serve`` process, its output in a file."""

    def __init__(self, tmp_path: Path, *args: str, runner: list[str] | None = None) -> None:
        self.log_path = tmp_path / f"serve-{len(list(tmp_path.glob('serve-*.log')))}.log"
        with self.log_path.open("wb") as out:
            self.proc = subprocess.Popen(
                [*(runner or []), sys.executable, "-m", "kcoord", "serve", *args],
                stdout=out, stderr=subprocess.STDOUT, env=_env(), cwd=tmp_path,
            )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_file(self, path: Path, timeout: float = 30.0) -> str:
        def written() -> str | None:
            if self.proc.poll() is not None:
                raise AssertionError(f"kcoord serve exited with {self.proc.returncode}:\n{self.log()}")
            return path.read_text() if path.exists() else None

        return str(wait_for(written, timeout, what=f"{path} to be written"))

    def serving_line(self) -> str:
        line = next((x for x in self.log().splitlines() if "kcoord serving on" in x), None)
        assert line is not None, self.log()
        return line

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=30)


@pytest.fixture
def serves() -> Iterator[list[Serve]]:
    started: list[Serve] = []
    yield started
    for s in started:
        if s.proc.poll() is None:
            s.proc.kill()
            s.proc.wait(timeout=10)


def _get(url: str) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.status, r.read().decode()


def test_port_0_is_bound_advertised_logged_and_written_to_the_ready_file(
    tmp_path: Path, serves: list[Serve]
) -> None:
    from confluent_kafka.admin import AdminClient

    ready = tmp_path / "ready"
    broker = Serve(tmp_path, "--port", "0", "--metrics-port", "0", "--data-dir",
                   str(tmp_path / "data"), "--ready-file", str(ready))
    serves.append(broker)
    bootstrap = broker.wait_file(ready).strip()
    host, _, port = bootstrap.rpartition(":")
    assert host == "127.0.0.1" and int(port) > 0, bootstrap
    # Written once the broker accepts requests: a client is answered at once, sent to the real port.
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
    assert [(b.host, b.port) for b in metadata.brokers.values()] == [("127.0.0.1", int(port))]
    # One line names every address: the Kafka listener, the console and the metrics.
    line = broker.serving_line()
    assert f"PLAINTEXT://127.0.0.1:{port} (advertised 127.0.0.1:{port})" in line, line
    console = re.search(r"console (http://127\.0\.0\.1:(\d+)/)", line)
    assert console and int(console.group(2)) not in (0, int(port)), line
    assert f"metrics {console.group(1)}metrics" in line, line
    status, page = _get(console.group(1))
    assert status == 200 and "<html" in page.lower()
    assert broker.stop() == 0, broker.log()
    assert not ready.exists(), "a clean shutdown takes the ready file away"


def test_a_stale_ready_file_is_removed_before_start_up(tmp_path: Path, serves: list[Serve]) -> None:
    ready = tmp_path / "ready"
    ready.write_text("127.0.0.1:1\n")
    broker = Serve(tmp_path, "--port", "0", "--no-console", "--data-dir", str(tmp_path / "data"),
                   "--ready-file", str(ready))
    serves.append(broker)
    wait_for(lambda: not ready.exists() or ready.read_text() != "127.0.0.1:1\n", 30,
             what="the stale ready file replaced")
    bootstrap = broker.wait_file(ready).strip()
    assert bootstrap != "127.0.0.1:1"
    assert ", console http" not in broker.serving_line()  # --no-console
    assert broker.stop() == 0


def _error_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("kcoord: ")]


def _refused(tmp_path: Path, *args: str) -> str:
    """Run ``kcoord serve`` with ``args``; it must stop with status 2 and one ``kcoord:`` line
    (and no traceback), which is returned."""
    done = subprocess.run(
        [sys.executable, "-m", "kcoord", "serve", *args], capture_output=True, text=True,
        env=_env(), cwd=tmp_path, timeout=60,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 2, output
    assert "Traceback" not in output, output
    lines = _error_lines(output)
    assert len(lines) == 1, output
    return lines[0]


def test_a_kafka_port_in_use_is_one_line_and_exit_2(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        line = _refused(tmp_path, "--port", str(port), "--no-console", "--data-dir", "d")
    assert f"cannot listen on 127.0.0.1:{port}" in line and "already in use" in line, line
    assert "--port" in line, line  # what to do


def test_a_metrics_port_asked_for_and_in_use_is_one_line_and_exit_2(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        line = _refused(tmp_path, "--port", "0", "--metrics-port", str(port), "--data-dir", "d")
    assert f"127.0.0.1:{port}" in line and "console" in line and "in use" in line, line
    assert "--metrics-port" in line, line


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["--set", "num.partitions=zero"], ["num.partitions", "an integer"]),
        (["--set", "num.partition=3"], ["unknown setting", "num.partitions"]),
        (["--data-dir", "a-file/data"], ["data directory", "--data-dir"]),
        (["--ready-file", "missing/ready"], ["--ready-file", "does not exist"]),
        (["--port", "70000"], ["--port 70000", "0 to 65535"]),
    ],
    ids=["bad-value", "unknown-setting", "data-dir-under-a-file", "ready-file-dir", "bad-port"],
)
def test_a_mistake_is_one_line_saying_what_and_exit_2(
    tmp_path: Path, args: list[str], needles: list[str]
) -> None:
    (tmp_path / "a-file").write_text("not a directory")
    base = ["--port", "0", "--no-console", "--data-dir", "d"]
    line = _refused(tmp_path, *base, *args)
    assert all(n in line for n in needles), line


def _namespace() -> list[str]:
    if os.geteuid() != 0:
        pytest.skip("the default console port is tried in a network namespace, which needs root")
    for tool in ("unshare", "ip"):
        if shutil.which(tool) is None:
            pytest.skip(f"a network namespace needs {tool} (util-linux, iproute2)")
    return ["unshare", "--net"]


def test_the_console_is_on_by_default_on_127_0_0_1_9308(tmp_path: Path) -> None:
    runner = _namespace()
    ready, page = tmp_path / "ready", tmp_path / "page.html"
    # In the namespace: loopback up, the broker with no console option, its console fetched.
    script = "\n".join([
        "set -eu",
        "ip link set lo up",
        f'"{sys.executable}" -m kcoord serve --port 9092 --data-dir {tmp_path / "data"}'
        f" --ready-file {ready} > {tmp_path / 'serve.log'} 2>&1 &",
        "broker=$!",
        f'for _ in $(seq 600); do [ -s {ready} ] && break; kill -0 $broker; sleep 0.1; done',
        f'"{sys.executable}" -c "import sys, urllib.request; open(sys.argv[2], \'wb\').write('
        f'urllib.request.urlopen(sys.argv[1], timeout=10).read())"'
        f" http://127.0.0.1:{DEFAULT_CONSOLE_PORT}/ {page}",
        "kill -TERM $broker; wait $broker",
    ])
    done = subprocess.run([*runner, "bash", "-c", script], capture_output=True, text=True,
                          env=_env(), timeout=120)
    log = (tmp_path / "serve.log").read_text()
    assert done.returncode == 0, done.stderr + log
    assert f"console http://127.0.0.1:{DEFAULT_CONSOLE_PORT}/" in log, log
    assert "<html" in page.read_text().lower()


def test_a_taken_default_console_port_is_said_and_kafka_still_served(
    tmp_path: Path, serves: list[Serve]
) -> None:
    from confluent_kafka.admin import AdminClient

    with socket.socket() as taken:
        # Held here, or by something else on this machine: taken either way.
        with contextlib.suppress(OSError):
            taken.bind(("127.0.0.1", DEFAULT_CONSOLE_PORT))
            taken.listen()
        ready = tmp_path / "ready"
        broker = Serve(tmp_path, "--port", str(free_port()), "--data-dir",
                       str(tmp_path / "data"), "--ready-file", str(ready))
        serves.append(broker)
        bootstrap = broker.wait_file(ready).strip()
        assert AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).brokers
    warnings = [x for x in broker.log().splitlines() if "WARNING" in x and "console" in x]
    assert len(warnings) == 1, broker.log()
    assert f"127.0.0.1:{DEFAULT_CONSOLE_PORT}" in warnings[0] and "in use" in warnings[0]
    assert "--metrics-port" in warnings[0] and "--no-console" in warnings[0]
    assert ", console http" not in broker.serving_line()
    assert broker.stop() == 0


def test_dev_preset_is_printed_at_start_up_takes_effect_and_yields_to_set(
    tmp_path: Path, serves: list[Serve]
) -> None:
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, ConfigResource

    ready = tmp_path / "ready"
    broker = Serve(tmp_path, "--dev", "--port", "0", "--no-console", "--data-dir",
                   str(tmp_path / "data"), "--ready-file", str(ready),
                   "--set", "group.min.session.timeout.ms=2000")
    serves.append(broker)
    bootstrap = broker.wait_file(ready).strip()
    preset = next(x for x in broker.log().splitlines() if "development preset (--dev)" in x)
    assert "group.initial.rebalance.delay.ms=0" in preset and "num.partitions=3" in preset
    assert "group.consumer.heartbeat.interval.ms=500" in preset
    assert "group.consumer.session.timeout.ms=6000" in preset
    assert "group.min.session.timeout.ms=2000" in preset, preset  # the value in force
    assert "(group.min.session.timeout.ms given elsewhere)" in preset, preset

    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ConfigResource.Type.BROKER, "0")
    configs = admin.describe_configs([resource])[resource].result(timeout=10)
    assert configs["group.initial.rebalance.delay.ms"].value == "0"
    assert configs["group.consumer.heartbeat.interval.ms"].value == "500"
    assert configs["group.min.session.timeout.ms"].value == "2000"
    # A topic a producer names is created with three partitions, all assigned to a consumer.
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce("dev-topic", b"first")
    assert producer.flush(30) == 0
    assert len(admin.list_topics("dev-topic", timeout=10).topics["dev-topic"].partitions) == 3
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "dev-group",
                         "session.timeout.ms": 2000})
    try:
        consumer.subscribe(["dev-topic"])

        def assigned() -> int:
            consumer.poll(0.2)
            return len(consumer.assignment())

        assert wait_for(assigned, 30, what="the group's assignment") == 3
    finally:
        consumer.close()
    assert broker.stop() == 0
