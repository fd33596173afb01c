"""The setup script :mod:`kcoord.compiled.build` runs to compile the hot modules with mypyc.

``python mypyc_setup.py OUT TEMP GROUP SOURCE...``, run in an empty directory (in the project's,
setuptools would read the project's pyproject.toml), with the folder holding the kcoord package
on ``MYPYPATH``.

The group is generated as one C file per module (mypyc's ``multi_file``) and those files are
compiled in parallel, one per core. distutils compiles an extension's sources one after
another, and the group is one extension: as a single 24 MB C file, gcc -O3 took about 170 s of
one core; as one file per module on two cores, about 60 s (and less CPU in all).
"""

from __future__ import annotations

import os
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any


def _parallel_compile(
    self: Any,
    sources: list[str],
    output_dir: str | None = None,
    macros: Any = None,
    include_dirs: Any = None,
    debug: bool = False,
    extra_preargs: Any = None,
    extra_postargs: Any = None,
    depends: Any = None,
) -> list[str]:
    """``CCompiler.compile`` with each source compiled in a thread of its own (the threads wait
    on gcc processes); otherwise what distutils does."""
    macros, objects, extra_postargs, pp_opts, build = self._setup_compile(
        output_dir, macros, include_dirs, sources, depends, extra_postargs
    )
    cc_args = self._get_cc_args(pp_opts, debug, extra_preargs)

    def one(obj: str) -> None:
        src, ext = build[obj]
        self._compile(obj, src, ext, cc_args, extra_postargs, pp_opts)

    with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        list(pool.map(one, objects))
    return list(objects)


def main(argv: list[str]) -> None:
    from mypyc.build import mypycify
    from setuptools import setup
    from setuptools._distutils import ccompiler

    out, temp, group, *sources = argv
    target = os.path.join(temp, "c")
    extensions = mypycify(
        sources, opt_level="3", group_name=group, target_dir=target, multi_file=True
    )
    # The group's header is written beside its shared library's name (kcoord/compiled/), but
    # the per-module C files sit at the top of the target and include it by its bare name.
    for extension in extensions:
        extension.include_dirs.append(os.path.join(target, *group.split(".")[:-1]))
    ccompiler.CCompiler.compile = _parallel_compile  # type: ignore[method-assign,assignment]
    setup(
        name="kcoord-compiled",
        py_modules=[],
        packages=[],
        ext_modules=extensions,
        script_args=["build_ext", "--build-lib", out, "--build-temp", temp],
    )


if __name__ == "__main__":
    main(sys.argv[1:])
