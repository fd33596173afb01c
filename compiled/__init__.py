"""Which build of the hot modules runs: the mypyc-compiled one where it was built, else pure Python.

The pure-Python sources are the only source of truth. ``python -m kcoord.compiled.build`` (run by
``scripts/bootstrap`` where a C compiler and the Python headers exist, and by the container's build
stage) compiles the modules listed in :mod:`kcoord.compiled.build` with mypyc into
``compiled/_build/``, next to a ``manifest.json`` naming each extension file and the SHA-256 of the
source it was made from. Nothing there is imported by accident: the ``kcoord`` package imports this
one before anything else, and only then, if the build is usable, a finder at the head of
``sys.meta_path`` hands out the extension instead of the ``.py``.

The build is used only if it was made for this interpreter (same extension suffix) and every
compiled module's source still has the hash it was compiled from; an edited source therefore runs
as pure Python until the next build, never as stale machine code. ``KCOORD_PURE_PYTHON=1`` turns
the build off (the test suite runs the unit tests that way too). :func:`describe` is the line
``kcoord serve`` logs at start-up.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
from collections.abc import Mapping, Sequence
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import ModuleType

# Not resolved: in a checkout src/kcoord/ links the top-level folders in, and the sources are
# named from the package's root, the way they are imported.
PACKAGE_DIR = Path(__file__).absolute().parent
ROOT = PACKAGE_DIR.parent  # the kcoord package: src/kcoord in a checkout, or in site-packages
BUILD_DIR = PACKAGE_DIR / "_build"
MANIFEST = BUILD_DIR / "manifest.json"
PURE_ENV = "KCOORD_PURE_PYTHON"


def source_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def extension_suffix() -> str:
    return importlib.machinery.EXTENSION_SUFFIXES[0]


class CompiledFinder(importlib.abc.MetaPathFinder):
    """Finds the compiled extension of exactly the modules in the manifest; defers on the rest."""

    def __init__(self, files: dict[str, Path]) -> None:
        self.files = files

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        file = self.files.get(fullname)
        if file is None:
            return None
        loader = importlib.machinery.ExtensionFileLoader(fullname, str(file))
        return importlib.util.spec_from_file_location(fullname, file, loader=loader)


def usable_build(
    manifest_path: Path, root: Path, environ: Mapping[str, str]
) -> tuple[dict[str, Path] | None, str]:
    """The extension file of each compiled module if the build at ``manifest_path`` may be used
    for the sources under ``root``, else None; and the reason, said in a few words."""
    if environ.get(PURE_ENV, "") not in ("", "0"):
        return None, f"{PURE_ENV} is set"
    try:
        manifest = json.loads(manifest_path.read_text())
    except FileNotFoundError:
        return None, "no compiled build (python -m kcoord.compiled.build makes one; it needs gcc and the Python headers)"
    except (OSError, ValueError) as e:
        return None, f"unreadable {manifest_path}: {e}"
    if manifest.get("suffix") != extension_suffix():
        return None, f"the compiled build is for {manifest.get('suffix')}, this interpreter loads {extension_suffix()}"
    files: dict[str, Path] = {}
    sources = 0
    for name, entry in manifest["modules"].items():
        source = entry.get("source")
        if source is not None:
            sources += 1
            try:
                fresh = source_digest(root / source) == entry["sha256"]
            except OSError:
                fresh = False
            if not fresh:
                return None, f"the compiled build is older than {source} (python -m kcoord.compiled.build remakes it)"
        files[name] = manifest_path.parent / entry["file"]
    return files, f"{sources} modules, mypyc {manifest.get('mypyc', '?')}"


_FILES, REASON = usable_build(MANIFEST, ROOT, os.environ)
if _FILES is not None:
    sys.meta_path.insert(0, CompiledFinder(_FILES))
ACTIVE = _FILES is not None


def describe() -> str:
    """One line: whether the hot modules run compiled, and why not if they do not."""
    if ACTIVE:
        return f"compiled hot modules in use ({REASON})"
    return f"pure Python: {REASON}"


def is_compiled(module: ModuleType) -> bool:
    """True if ``module`` was loaded from a compiled extension, not from its source."""
    return (module.__file__ or "").endswith(extension_suffix())
