"""The ``./kcoord`` launcher (issue 19): ``./kcoord pipeline ...`` installs the pipeline extra on
first use, as ``./kcoord serve`` creates the venv; later runs and other commands do not.

The launcher runs in a copy of the checkout's layout whose ``scripts/bootstrap`` and venv are
stand-ins recording how they were called (no network, no real install)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _fake_checkout(tmp_path: Path, pipeline_installed: bool) -> Path:
    root = tmp_path / "checkout"
    (root / "scripts").mkdir(parents=True)
    (root / ".venv" / "bin").mkdir(parents=True)
    shutil.copy(ROOT / "kcoord", root / "kcoord")
    calls = root / "calls"
    (root / "scripts" / "bootstrap").write_text(f'#!/bin/sh\necho "bootstrap $*" >> {calls}\n')
    # the venv's python: imports of the pipeline packages succeed only once "installed"
    (root / ".venv" / "bin" / "python").write_text(
        f"#!/bin/sh\n{'exit 0' if pipeline_installed else 'exit 1'}\n"
    )
    (root / ".venv" / "bin" / "kcoord").write_text(f'#!/bin/sh\necho "kcoord $*" >> {calls}\n')
    for f in ("kcoord", "scripts/bootstrap", ".venv/bin/python", ".venv/bin/kcoord"):
        (root / f).chmod(0o755)
    return root


def _run(root: Path, *args: str) -> list[str]:
    subprocess.run([str(root / "kcoord"), *args], check=True, timeout=30)
    return (root / "calls").read_text().splitlines()


def test_pipeline_run_installs_the_pipeline_extra_on_first_use(tmp_path: Path) -> None:
    root = _fake_checkout(tmp_path, pipeline_installed=False)
    assert _run(root, "pipeline", "run", "--data-dir", "d", "--out", "o") == [
        "bootstrap pipeline",
        "kcoord pipeline run --data-dir d --out o",
    ]


def test_an_installed_pipeline_extra_is_not_installed_again(tmp_path: Path) -> None:
    root = _fake_checkout(tmp_path, pipeline_installed=True)
    assert _run(root, "pipeline", "run") == ["bootstrap ", "kcoord pipeline run"]


def test_other_commands_install_no_extra(tmp_path: Path) -> None:
    root = _fake_checkout(tmp_path, pipeline_installed=False)
    assert _run(root) == ["bootstrap ", "kcoord serve"]
    assert _run(root, "groups", "list")[-2:] == ["bootstrap ", "kcoord groups list"]
