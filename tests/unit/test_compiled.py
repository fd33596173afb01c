"""The compiled build of the hot modules: used where it can be made, refused when stale or
turned off, and never a change in behaviour (the rest of the suite runs against it, and the unit
tests run again on pure Python: scripts/test)."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

from kcoord import compiled
from kcoord.compiled.build import MODULES, missing_toolchain
from kcoord.coordinator import offsets as coordinator_offsets
from kcoord.protocol import heartbeat as protocol_heartbeat

ROOT = Path(__file__).resolve().parents[2]


def _write_manifest(tmp: Path, source: str, sha256: str, suffix: str | None = None) -> Path:
    manifest = tmp / "manifest.json"
    manifest.write_text(
        json.dumps(
            {
                "suffix": suffix or compiled.extension_suffix(),
                "mypyc": "9.9",
                "modules": {
                    "pkg.hot": {"file": "pkg/hot.so", "source": source, "sha256": sha256},
                    "group__mypyc": {"file": "group__mypyc.so"},
                },
            }
        )
    )
    return manifest


def test_the_build_is_in_use_wherever_it_can_be_made() -> None:
    if os.environ.get(compiled.PURE_ENV, "") not in ("", "0"):
        assert not compiled.ACTIVE
        assert not compiled.is_compiled(coordinator_offsets)
        assert compiled.describe() == f"pure Python: {compiled.PURE_ENV} is set"
    elif missing_toolchain() is None:
        # scripts/bootstrap compiles where gcc, the headers and mypyc exist: CI runs compiled.
        assert compiled.ACTIVE, compiled.describe()
        assert compiled.is_compiled(coordinator_offsets) and compiled.is_compiled(protocol_heartbeat)
        assert compiled.describe().startswith(f"compiled hot modules in use ({len(MODULES)} modules")
    else:
        assert compiled.describe().startswith("pure Python: ")


def test_a_fresh_manifest_gives_every_extension_file(tmp_path: Path) -> None:
    (tmp_path / "src.py").write_text("x = 1\n")
    manifest = _write_manifest(tmp_path, "src.py", compiled.source_digest(tmp_path / "src.py"))
    files, reason = compiled.usable_build(manifest, tmp_path, {})
    assert files == {"pkg.hot": tmp_path / "pkg/hot.so", "group__mypyc": tmp_path / "group__mypyc.so"}
    assert reason == "1 modules, mypyc 9.9"


def test_an_edited_source_runs_as_python_until_rebuilt(tmp_path: Path) -> None:
    (tmp_path / "src.py").write_text("x = 1\n")
    manifest = _write_manifest(tmp_path, "src.py", compiled.source_digest(tmp_path / "src.py"))
    (tmp_path / "src.py").write_text("x = 2\n")
    files, reason = compiled.usable_build(manifest, tmp_path, {})
    assert files is None and "older than src.py" in reason
    (tmp_path / "src.py").unlink()
    assert compiled.usable_build(manifest, tmp_path, {})[0] is None


def test_no_build_another_interpreter_or_turned_off_means_pure_python(tmp_path: Path) -> None:
    files, reason = compiled.usable_build(tmp_path / "manifest.json", tmp_path, {})
    assert files is None and reason.startswith("no compiled build")
    (tmp_path / "src.py").write_text("x = 1\n")
    other = _write_manifest(tmp_path, "src.py", compiled.source_digest(tmp_path / "src.py"), ".cpython-39-x.so")
    files, reason = compiled.usable_build(other, tmp_path, {})
    assert files is None and ".cpython-39-x.so" in reason
    fresh = _write_manifest(tmp_path, "src.py", compiled.source_digest(tmp_path / "src.py"))
    assert compiled.usable_build(fresh, tmp_path, {compiled.PURE_ENV: "0"})[0] is not None
    assert compiled.usable_build(fresh, tmp_path, {compiled.PURE_ENV: "1"}) == (
        None,
        f"{compiled.PURE_ENV} is set",
    )
    (tmp_path / "manifest.json").write_text("{not json")
    assert compiled.usable_build(fresh, tmp_path, {})[1].startswith("unreadable ")


def test_turned_off_the_modules_load_from_their_sources() -> None:
    code = (
        "from kcoord import compiled; import kcoord.coordinator.offsets as m;"
        "print(compiled.describe(), compiled.is_compiled(m), m.__file__.endswith('.py'))"
    )
    env = dict(os.environ, **{compiled.PURE_ENV: "1"})
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, timeout=60, check=True
    ).stdout
    assert out.split() == ["pure", "Python:", compiled.PURE_ENV, "is", "set", "False", "True"]


def test_every_listed_module_exists_and_no_module_is_listed_twice() -> None:
    assert len(set(MODULES)) == len(MODULES)
    assert all((ROOT / source).is_file() for source in MODULES)


def test_no_compiled_function_binds_one_name_to_two_exception_types() -> None:
    # Compiled, a local has one type: the first `except A as e` fixes it, and a later
    # `except B as e` in the same function raises TypeError when B is caught. The broker once
    # logged a traceback per undecodable request that way (HeaderError, then DecodeError).
    found = []
    for source in MODULES:
        tree = ast.parse((ROOT / source).read_text())
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            types: dict[str, set[str]] = {}
            for node in ast.walk(fn):
                if isinstance(node, ast.ExceptHandler) and node.name:
                    kind = ast.unparse(node.type) if node.type else "BaseException"
                    types.setdefault(node.name, set()).add(kind)
            found += [f"{source}:{fn.name}: {n} {sorted(t)}" for n, t in types.items() if len(t) > 1]
    assert not found, "one except name, two types (use a name each): " + "; ".join(found)
