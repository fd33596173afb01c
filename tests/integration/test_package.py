"""kcoord installed as a user installs it: a wheel built from the checkout, installed into a
clean venv, adds one top-level package, ``kcoord``, and nothing else; its ``kcoord`` command and
``python -m kcoord`` run from there, the broker included.

The wheel is built from a copy of the checkout's files (with its links: src/kcoord links the
top-level folders in), by the project venv's pip, without the dependencies. The clean venv gets only the
wheel; the dependencies are read from the project venv's site-packages (on ``PYTHONPATH``, which
does not run that venv's ``.pth`` files, so its editable kcoord stays out of sight).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

from .harness import ROOT, free_port, wait_for

pytestmark = pytest.mark.slow

def _copy_checkout(to: Path) -> None:
    """The files a clone would have (and those not yet committed), links kept as links."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, capture_output=True, check=True, timeout=60,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        src, dst = ROOT / name, to / name
        if not src.is_symlink() and not src.is_file():
            continue  # deleted but not yet committed
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            dst.symlink_to(os.readlink(src))
        else:
            shutil.copy2(src, dst)


def _site_packages(env_dir: Path) -> Path:
    return Path(
        sysconfig.get_path("purelib", vars={"base": str(env_dir), "platbase": str(env_dir)})
    )


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, set[str]]:
    """A clean venv with the wheel installed, and what the install added to its site-packages."""
    tmp = tmp_path_factory.mktemp("package")
    source = tmp / "source"
    _copy_checkout(source)
    wheels = tmp / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
         "--wheel-dir", str(wheels), str(source)],
        check=True, timeout=600,
    )
    (wheel,) = wheels.glob("kcoord-*.whl")
    env_dir = tmp / "venv"
    venv.create(env_dir, with_pip=True)
    site = _site_packages(env_dir)
    before = {p.name for p in site.iterdir()}
    subprocess.run(
        [str(env_dir / "bin" / "python"), "-m", "pip", "install", "--quiet", "--no-deps",
         "--disable-pip-version-check", str(wheel)],
        check=True, timeout=600,
    )
    added = {p.name for p in site.iterdir()} - before
    return env_dir, added


def _env() -> dict[str, str]:
    """The project venv's dependencies, without its editable kcoord."""
    return dict(os.environ, PYTHONPATH=sysconfig.get_path("purelib"), KCOORD_PURE_PYTHON="1")


def test_the_wheel_adds_exactly_one_top_level_package(installed: tuple[Path, set[str]]) -> None:
    _, added = installed
    packages = {name for name in added if not name.endswith(".dist-info")}
    assert packages == {"kcoord"}, sorted(added)
    assert len(added) == 2, sorted(added)  # and its .dist-info


def test_the_kcoord_command_and_python_m_kcoord_run_from_the_wheel(
    installed: tuple[Path, set[str]], tmp_path: Path
) -> None:
    env_dir, _ = installed
    helped = subprocess.run(
        [str(env_dir / "bin" / "kcoord"), "--help"], capture_output=True, text=True, env=_env(),
        timeout=60,
    )
    assert helped.returncode == 0, helped.stderr
    assert "serve" in helped.stdout and "groups" in helped.stdout
    located = subprocess.run(
        [str(env_dir / "bin" / "python"), "-c", "import kcoord.broker.app as m; print(m.__file__)"],
        capture_output=True, text=True, env=_env(), timeout=60,
    )
    assert located.stdout.strip().startswith(str(env_dir)), located.stdout + located.stderr

    port = free_port()
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [str(env_dir / "bin" / "python"), "-m", "kcoord", "serve", "--port", str(port),
             "--data-dir", str(tmp_path / "data"), "--no-console"],
            stdout=out, stderr=subprocess.STDOUT, env=_env(),
        )
    try:
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"})
        wait_for(
            lambda: admin.list_topics(timeout=2).brokers, 60, what="the installed broker's Metadata"
        )
        assert "pure Python: KCOORD_PURE_PYTHON is set" in log.read_text()
    finally:
        proc.terminate()
        assert proc.wait(timeout=30) == 0, log.read_text()[-3000:]


PROJECT_TEST = '''
import sys

import kcoord
from confluent_kafka import Consumer, Producer, TopicPartition


def test_a_group_consumes_and_commits(kafka_bootstrap):
    assert kcoord.__file__.startswith(sys.prefix), kcoord.__file__  # the wheel's kcoord
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for i in range(6):
        producer.produce("jobs", value=b"job %d" % i, partition=i % 3)
    assert producer.flush(10) == 0
    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": "workers",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe(["jobs"])
    seen = []
    while len(seen) < 6:
        message = consumer.poll(10)
        assert message is not None and message.error() is None
        seen.append(message.value())
    consumer.commit(asynchronous=False)
    committed = consumer.committed([TopicPartition("jobs", p) for p in range(3)], timeout=10)
    consumer.close()
    assert sorted(seen) == sorted(b"job %d" % i for i in range(6))
    assert [tp.offset for tp in committed] == [2, 2, 2]
'''


def test_the_wheels_pytest_plugin_gives_a_project_a_broker(
    installed: tuple[Path, set[str]], tmp_path: Path
) -> None:
    """A project whose only kcoord is the plugin's fixture, run by the clean venv's pytest:
    the entry point registers the plugin (no -p, no conftest), and a confluent-kafka consumer
    group consumes and commits against the broker it starts."""
    env_dir, _ = installed
    project = tmp_path / "project"
    project.mkdir()
    (project / "test_app.py").write_text(PROJECT_TEST)
    done = subprocess.run(
        [str(env_dir / "bin" / "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "-p", "no:xdist", str(project)],
        capture_output=True, text=True, env=_env(), cwd=project, timeout=300,
    )
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    assert "1 passed" in done.stdout, done.stdout[-3000:]
