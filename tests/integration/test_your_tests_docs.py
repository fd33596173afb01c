"""docs/your-tests.md's examples, run as written: each ``python`` block is copied into a test
module of a project of its own, and pytest runs that project in a subprocess with nothing but
kcoord's plugin (loaded from its entry point where kcoord is installed with it, else named with
``-p``): the fixtures, the context manager and the three client libraries work as the page says.
Then the plugin's own parts: ``--kcoord-set`` reaches the session broker, and a factory's
brokers are gone after their test.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import subprocess
import sys
from pathlib import Path

from .harness import ROOT

PAGE = ROOT / "docs" / "your-tests.md"


def _examples() -> list[str]:
    return re.findall(r"```python\n(.*?)```", PAGE.read_text(), flags=re.S)


def _pytest(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    registered = any(
        ep.value == "kcoord.pytest_plugin" for ep in importlib.metadata.entry_points(group="pytest11")
    )
    plugin = [] if registered else ["-p", "kcoord.pytest_plugin"]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "src"), env.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
         *plugin, "--rootdir", str(project), *args, str(project)],
        capture_output=True, text=True, cwd=project, env=env, timeout=300,
    )


def test_the_pages_examples_pass_as_written(tmp_path: Path) -> None:
    examples = _examples()
    assert len(examples) == 4, "confluent-kafka, aiokafka, kafka-python, the context manager"
    tests = 0
    for i, code in enumerate(examples):
        (tmp_path / f"test_example_{i}.py").write_text(code)
        tests += len(re.findall(r"^def test_", code, flags=re.M))
    done = _pytest(tmp_path)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    assert f"{tests} passed" in done.stdout, done.stdout[-3000:]


def test_kcoord_set_reaches_the_session_broker_and_factory_brokers_go(tmp_path: Path) -> None:
    (tmp_path / "test_plugin.py").write_text(
        '''
from confluent_kafka.admin import ConfigResource

LEFT = []


def test_session_broker_settings(kafka_broker, kafka_bootstrap):
    assert kafka_broker.bootstrap == kafka_bootstrap
    admin = kafka_broker.admin()
    resource = ConfigResource(ConfigResource.Type.BROKER, "0")
    configs = admin.describe_configs([resource])[resource].result(timeout=10)
    assert configs["num.partitions"].value == "7"
    assert configs["group.initial.rebalance.delay.ms"].value == "0"  # the --dev preset


def test_factory_makes_its_own(kafka_broker_factory, kafka_bootstrap):
    mine = kafka_broker_factory({"num.partitions": 2}, dev=False)
    assert mine.bootstrap != kafka_bootstrap
    resource = ConfigResource(ConfigResource.Type.BROKER, "0")
    admin = mine.admin()
    configs = admin.describe_configs([resource])[resource].result(timeout=10)
    assert configs["num.partitions"].value == "2"
    assert configs["group.initial.rebalance.delay.ms"].value == "3000"
    LEFT.append(mine)


def test_the_factory_broker_is_gone():
    (mine,) = LEFT
    assert not mine.alive() and not mine.data_dir.exists()
'''
    )
    done = _pytest(tmp_path, "--kcoord-set", "num.partitions=7")
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    assert "3 passed" in done.stdout, done.stdout[-3000:]
