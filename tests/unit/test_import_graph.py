"""The shape of the code: no import cycles, no Kafka client in the broker, no oversized module.

Imports are read from the source with ``ast``, not by importing anything, so that every import
counts: those made only for type checking (``if TYPE_CHECKING:``), those inside functions, and
relative ones. An edge goes from a module to each project module it names:

* ``import a.b`` names ``a.b``;
* ``from a import b`` names ``a.b`` when that is a module, and ``a`` itself otherwise (``b`` is
  then read from ``a``'s namespace).

Loading a submodule also runs its parent packages' ``__init__``; that alone is not an edge
here, because Python completes such an import even while the parent package is still being
initialised. Reading a name from a package's namespace is one (the second rule above).
"""

from __future__ import annotations

import ast
import functools
import subprocess
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "kcoord"
SUBPACKAGES = ("protocol", "storage", "coordinator", "share", "broker", "pipeline", "admin", "compiled")
"""The repository's top-level folders that are the package's subpackages (src/kcoord links them)."""
MAX_MODULE_LINES = 600
KAFKA_CLIENTS = frozenset({"confluent_kafka", "kafka", "aiokafka"})
"""Client libraries that belong in the command-line tools and tests, never in the server."""


@dataclass(frozen=True, slots=True)
class ImportLine:
    """One import statement: the absolute name it imports from, the names it takes, its line."""

    module: str
    names: tuple[str, ...]  # empty for ``import module``
    line: int


def module_files(root: Path, packages: Iterable[str], prefix: str = "") -> dict[str, Path]:
    """Every module of ``packages`` under ``root``, by dotted name (a package by its own),
    each name after ``prefix``."""
    found: dict[str, Path] = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            if "_build" in path.parts:
                continue
            parts = path.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[prefix + ".".join(parts)] = path
    return found


def imports_of(name: str, path: Path) -> Iterator[ImportLine]:
    """Every import statement of the module ``name`` (source ``path``), anywhere in it,
    relative ones made absolute."""
    is_package = path.name == "__init__.py"
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield ImportLine(alias.name, (), node.lineno)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                # One dot is the module's own package: a package's __init__ is its own.
                parts = name.split(".")
                drop = node.level - 1 if is_package else node.level
                if drop >= len(parts):
                    raise AssertionError(f"{path}:{node.lineno}: relative import beyond the top")
                anchor = parts[: len(parts) - drop]
                base = ".".join([*anchor, base] if base else anchor)
            yield ImportLine(base, tuple(alias.name for alias in node.names), node.lineno)


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the project modules it imports (see the module docstring for the rules)."""
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for imp in imports_of(name, path):
            if not imp.names:
                targets = [imp.module]
            else:
                targets = [
                    f"{imp.module}.{n}" if f"{imp.module}.{n}" in modules else imp.module
                    for n in imp.names
                ]
            graph[name].update(t for t in targets if t in modules)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a path ``[a, b, ..., a]``, or None if the graph has none."""
    WHITE, GREY, BLACK = 0, 1, 2
    colour = dict.fromkeys(graph, WHITE)
    for start in sorted(graph):
        if colour[start] != WHITE:
            continue
        path = [start]
        stack = [iter(sorted(graph[start]))]
        colour[start] = GREY
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                colour[path.pop()] = BLACK
                stack.pop()
            elif colour[nxt] == GREY:
                return [*path[path.index(nxt) :], nxt]
            elif colour[nxt] == WHITE:
                colour[nxt] = GREY
                path.append(nxt)
                stack.append(iter(sorted(graph[nxt])))
    return None


# the project ----------------------------------------------------------------------------------
MODULES = {
    # the package's own modules (src/kcoord/*.py), then the folders it links in
    **{f"{PACKAGE}.{p.stem}" if p.stem != "__init__" else PACKAGE: p for p in (ROOT / "src" / PACKAGE).glob("*.py")},
    **module_files(ROOT, SUBPACKAGES, prefix=f"{PACKAGE}."),
}


@functools.cache
def project_graph() -> dict[str, set[str]]:
    return import_graph(MODULES)


def test_the_walk_finds_every_package_and_its_imports() -> None:
    for package in SUBPACKAGES:
        assert f"{PACKAGE}.{package}" in MODULES, f"{package}/__init__.py not found under {ROOT}"
    graph = project_graph()
    assert "kcoord.broker.net.connection" in graph["kcoord.broker.app"]  # a relative import
    assert "kcoord.broker.config" in graph["kcoord.broker.net.connection"]  # TYPE_CHECKING only
    assert "kcoord.broker.app" in graph["kcoord.cli"]  # inside a function


def test_no_import_cycle() -> None:
    cycle = find_cycle(project_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_only_the_command_line_imports_the_broker_app() -> None:
    # Every other part is handed the services it uses (broker/services.py), not the broker.
    graph = project_graph()
    importers = sorted(name for name, targets in graph.items() if "kcoord.broker.app" in targets)
    assert importers == ["kcoord.cli"]


def test_broker_imports_no_kafka_client() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{imp.line} imports {imp.module}"
        for name, path in MODULES.items()
        if name.startswith("kcoord.broker.")
        for imp in imports_of(name, path)
        if imp.module.split(".")[0] in KAFKA_CLIENTS
    ]
    assert not found, "the broker is not a Kafka client: " + "; ".join(found)


def test_everything_imports_the_package_by_its_one_name() -> None:
    # In a checkout the top-level folders are importable under their bare names too (the
    # repository root is on pytest's path): a module imported as both `protocol.x` and
    # `kcoord.protocol.x` would be two modules with two states. Tests and benchmarks included.
    files = [*MODULES.items()]
    for folder in ("tests", "bench"):
        files += [(f"{folder}.{p.stem}", p) for p in sorted((ROOT / folder).rglob("*.py"))]
    found = [
        f"{path.relative_to(ROOT)}:{imp.line} imports {imp.module}"
        for name, path in files
        for imp in imports_of(name, path)
        if imp.module.split(".")[0] in SUBPACKAGES
    ]
    assert not found, "import kcoord.<subpackage>, never the bare name: " + "; ".join(found)


LAYERS = ("protocol", "storage", "coordinator", "share", "broker")
"""The core's layers, lowest first: each may import only itself and the ones before it."""


def test_dependencies_point_one_way_and_the_core_does_no_io() -> None:
    wrong = []
    for name, targets in project_graph().items():
        layer = name.split(".")[1] if name.count(".") else ""
        if layer not in LAYERS[:-1]:
            continue
        allowed = {f"{PACKAGE}.{below}" for below in LAYERS[: LAYERS.index(layer) + 1]}
        wrong += [
            f"{name} imports {t}" for t in targets if ".".join(t.split(".")[:2]) not in allowed
        ]
        wrong += [
            f"{name} imports {imp.module}"
            for imp in imports_of(name, MODULES[name])
            if imp.module.split(".")[0] in ("asyncio", "socket")
        ]
    assert not wrong, "the sans-IO core depends only downwards: " + "; ".join(wrong)


def test_the_broker_is_folders_by_concept() -> None:
    # The loose modules of broker/ are the ones every part shares; the rest live in a folder.
    loose = sorted(p.name for p in (ROOT / "broker").glob("*.py"))
    assert loose == ["__init__.py", "app.py", "services.py"]


def test_every_folder_of_modules_is_a_package_in_git() -> None:
    # A folder without __init__.py would still import (a namespace package) but is easy to
    # lose: a wheel built by setuptools' find leaves it out. And .gitignore must not hide any.
    folders = {path.parent for path in MODULES.values()}
    missing = sorted(str(f.relative_to(ROOT)) for f in folders if not (f / "__init__.py").is_file())
    assert not missing, f"folders of modules without __init__.py: {missing}"
    ignored = subprocess.run(
        ["git", "check-ignore", "--no-index", *(str(p) for p in MODULES.values())],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    ).stdout.split()
    assert not ignored, f"modules .gitignore hides: {ignored}"


def test_no_module_is_too_long() -> None:
    too_long = {}
    for path in MODULES.values():
        rel = path.relative_to(ROOT).as_posix()
        lines = len(path.read_text().splitlines())
        if lines > MAX_MODULE_LINES:
            too_long[rel] = lines
    assert not too_long, f"modules over {MAX_MODULE_LINES} lines: {too_long}"


# the checker itself, on packages written for it ---------------------------------------------------
def _write(root: Path, files: dict[str, str]) -> dict[str, Path]:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return module_files(root, {rel.split("/")[0] for rel in files})


def test_a_cycle_through_a_type_checking_import_is_found(tmp_path: Path) -> None:
    modules = _write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/app.py": "from .api import Api\n",
            "pkg/api.py": (
                "from typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n"
                "    from .app import App\n"
            ),
        },
    )
    assert find_cycle(import_graph(modules)) == ["pkg.api", "pkg.app", "pkg.api"]


@pytest.mark.parametrize(
    "statement",
    [
        "from pkg import a",  # a submodule taken from its package
        "from .. import a",
        "import pkg.a",
        "from ..a import thing",
        "def later():\n    from pkg.a import thing\n",
        "try:\n    import pkg.a as a\nexcept ImportError:\n    a = None\n",
    ],
)
def test_each_form_of_import_is_an_edge(tmp_path: Path, statement: str) -> None:
    modules = _write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "from .sub.b import x\n",
            "pkg/sub/__init__.py": "",
            "pkg/sub/b.py": statement,
        },
    )
    assert find_cycle(import_graph(modules)) == ["pkg.a", "pkg.sub.b", "pkg.a"]


def test_a_name_read_from_a_package_is_an_edge_to_the_package(tmp_path: Path) -> None:
    modules = _write(
        tmp_path,
        {
            "pkg/__init__.py": "from .a import thing\n",
            "pkg/a.py": "from pkg import other\nthing = 1\n",
        },
    )
    assert find_cycle(import_graph(modules)) == ["pkg", "pkg.a", "pkg"]


def test_submodules_of_one_package_without_a_cycle_pass(tmp_path: Path) -> None:
    modules = _write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "from . import b\nfrom .b import x\nimport json\n",
            "pkg/b.py": "from typing import TYPE_CHECKING\nx = 1\n",
        },
    )
    assert import_graph(modules)["pkg.a"] == {"pkg.b"}
    assert find_cycle(import_graph(modules)) is None
