"""``scripts/test --help`` and ``--quick`` (issue 30): the help says what the script installs,
how long the whole run takes and how to run a part; ``--quick`` runs ruff, mypy, the unit tests
and one smoke integration test on pure Python, without the compiled build, Java or Node.js.

The script runs in a copy of the checkout's layout whose ``scripts/bootstrap`` and venv tools
are stand-ins recording how they were called (no install, no real test run)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _fake_checkout(tmp_path: Path) -> Path:
    root = tmp_path / "checkout"
    (root / "scripts").mkdir(parents=True)
    (root / ".venv" / "bin").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "test", root / "scripts" / "test")
    calls = root / "calls"
    record = f'#!/bin/sh\necho "$(basename "$0") pure=${{KCOORD_PURE_PYTHON:-}} $*" >> {calls}\n'
    for tool in ("scripts/bootstrap", ".venv/bin/ruff", ".venv/bin/mypy", ".venv/bin/pytest",
                 ".venv/bin/python"):
        (root / tool).write_text(record)
        (root / tool).chmod(0o755)
    return root


def test_help_describes_the_script_and_runs_nothing(tmp_path: Path) -> None:
    root = _fake_checkout(tmp_path)
    done = subprocess.run([str(root / "scripts" / "test"), "--help"], capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert text.startswith("Usage: scripts/test")
    assert "30 minutes" in text and "--quick" in text  # how long, and the short run
    assert "kafkajs" in text and "mypyc" in text and ".venv" in text  # what it installs
    assert "-m abuse" in text and "test_groups.py -k static" in text  # a marker, one file
    assert not (root / "calls").exists()


def test_quick_runs_lint_types_unit_tests_and_one_smoke_test_on_pure_python(
    tmp_path: Path,
) -> None:
    root = _fake_checkout(tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "KCOORD_PURE_PYTHON"}
    env["PATH"] = "/usr/bin:/bin"  # no java or node needed (if present, not asked for)
    done = subprocess.run([str(root / "scripts" / "test"), "--quick"], capture_output=True,
                          text=True, env=env, timeout=30)
    assert done.returncode == 0, done.stderr
    calls = (root / "calls").read_text().splitlines()
    assert [c.split()[0] for c in calls] == ["bootstrap", "ruff", "mypy", "pytest"], calls
    assert all(" pure=1 " in c for c in calls), calls
    pytest_args = calls[-1].split()[2:]
    assert "tests/unit" in pytest_args
    (smoke,) = [a for a in pytest_args if a.startswith("tests/integration/")]
    path, _, name = smoke.partition("::")
    assert re.search(rf"^def {re.escape(name)}\(", (ROOT / path).read_text(), flags=re.M), smoke


def test_quick_takes_no_other_arguments(tmp_path: Path) -> None:
    root = _fake_checkout(tmp_path)
    done = subprocess.run([str(root / "scripts" / "test"), "--quick", "-k", "x"],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and "--quick" in done.stderr
    assert not (root / "calls").exists()
