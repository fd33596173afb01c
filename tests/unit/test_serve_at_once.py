"""The first ``./kcoord serve`` serves at once (issue 30): the launcher's ``scripts/bootstrap``
starts the mypyc build in the background and the broker is started without waiting for it;
``scripts/bootstrap`` alone (what ``scripts/test`` runs) still builds in the foreground.

The real launcher and bootstrap run in a copy of the checkout's layout whose venv is made of
stand-ins: its ``python`` records how it was called and, as the build, holds until the test
releases it; its ``kcoord`` records the command. The venv counts as installed (its stamp
matches pyproject.toml), so nothing is installed."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

from tests.integration.harness import wait_for

ROOT = Path(__file__).resolve().parents[2]

PYTHON_STUB = """#!/bin/sh
case "$*" in
  *kcoord.compiled.build*)
    echo "build started $*" >> {calls}
    i=0
    while [ ! -f {release} ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done
    echo "build done" >> {calls}
    ;;
  *) echo "python $*" >> {calls} ;;
esac
"""


def _checkout(tmp_path: Path) -> Path:
    root = tmp_path / "checkout"
    (root / "scripts").mkdir(parents=True)
    (root / ".venv" / "bin").mkdir(parents=True)
    for f in ("kcoord", "scripts/bootstrap", "pyproject.toml"):
        shutil.copy(ROOT / f, root / f)
    calls, release = root / "calls", root / "release"
    (root / ".venv" / "bin" / "python").write_text(PYTHON_STUB.format(calls=calls, release=release))
    (root / ".venv" / "bin" / "kcoord").write_text(f'#!/bin/sh\necho "kcoord $*" >> {calls}\n')
    for f in (".venv/bin/python", ".venv/bin/kcoord"):
        (root / f).chmod(0o755)
    stamp = hashlib.sha256((root / "pyproject.toml").read_bytes() + b"\n").hexdigest()
    (root / ".venv" / ".kcoord-installed").write_text(stamp + "\n")
    return root


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("KCOORD_PURE_PYTHON", "KCOORD_BUILD")}


def _calls(root: Path) -> list[str]:
    path = root / "calls"
    return path.read_text().splitlines() if path.exists() else []


def test_first_serve_starts_the_broker_while_the_build_runs_in_the_background(
    tmp_path: Path,
) -> None:
    root = _checkout(tmp_path)
    done = subprocess.run([str(root / "kcoord"), "serve", "--port", "0"], capture_output=True,
                          text=True, env=_env(), timeout=60)
    assert done.returncode == 0, done.stderr
    # The launcher has returned: the broker was started; the build holds until released.
    wait_for(lambda: any(c.startswith("build started") for c in _calls(root)), 30,
             what="the background build to start")
    calls = _calls(root)
    assert "kcoord serve --port 0" in calls, calls
    assert "build done" not in calls, calls
    assert any("--if-stale" in c for c in calls if c.startswith("build started"))
    assert "serving on pure Python now" in done.stderr and "background" in done.stderr
    assert str(root / ".venv" / "kcoord-build.log") in done.stderr
    (root / "release").touch()
    wait_for(lambda: "build done" in _calls(root), 30, what="the released build to end")


def test_bootstrap_alone_builds_in_the_foreground(tmp_path: Path) -> None:
    root = _checkout(tmp_path)
    (root / "release").touch()  # the stand-in build ends at once
    done = subprocess.run([str(root / "scripts" / "bootstrap")], capture_output=True, text=True,
                          env=_env(), timeout=60)
    assert done.returncode == 0, done.stderr
    calls = _calls(root)
    assert calls[-2:] == [calls[-2], "build done"] and calls[-2].startswith("build started")


def test_pure_python_builds_nothing(tmp_path: Path) -> None:
    root = _checkout(tmp_path)
    env = dict(_env(), KCOORD_PURE_PYTHON="1")
    done = subprocess.run([str(root / "kcoord")], capture_output=True, text=True, env=env,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert _calls(root) == ["kcoord serve"]
    assert "compiling" not in done.stderr
