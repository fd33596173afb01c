"""Builds the compiled hot modules with mypyc: ``python -m kcoord.compiled.build [--if-stale]``.

:data:`MODULES` is the one list of what is compiled: the codecs on the request path, the frame
loop, the group and offsets managers and the record encoding, chosen by profile (bench/compare.py).
They are compiled as one mypyc group (compiled/mypyc_setup.py) into ``compiled/_build/`` (see
:mod:`kcoord.compiled` for how the result is found and when it is not used); the build is made in a scratch directory and swapped in
whole, so a failed or interrupted build leaves the previous one (or none) in place. A compiled
module binds its functions and classes early: modules whose tests inject faults by replacing
their functions (the storage segments, the appender) stay interpreted, and so do the two codecs
mypyc cannot take as written (protocol/codec.py's ``bytes`` subclass, protocol/records.py).

Needs a C compiler, the Python headers and mypy (which ships mypyc; the ``compile`` extra pins it).
Exit status: 0 built or already current, 2 no compiler or headers here (nothing to do), 1 the build
failed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

from kcoord.compiled import (
    BUILD_DIR,
    MANIFEST,
    PACKAGE_DIR,
    ROOT,
    extension_suffix,
    source_digest,
    usable_build,
)

MODULES = (
    "protocol/framing.py",
    "protocol/headers.py",
    "protocol/heartbeat.py",
    "protocol/group_codec.py",
    "protocol/consumer_heartbeat.py",
    "protocol/offset_fetch.py",
    "protocol/record_encoding.py",
    "protocol/record_scan.py",
    "protocol/key_values.py",
    "protocol/responses.py",
    "protocol/tags.py",
    "protocol/batch.py",
    "protocol/javahash.py",
    "protocol/apis.py",
    "coordinator/timers.py",
    "coordinator/offsets.py",
    "coordinator/commit_records.py",
    "coordinator/offset_interface.py",
    "coordinator/classic/group.py",
    "coordinator/classic/join.py",
    "coordinator/classic/manager.py",
    "coordinator/classic/groups.py",
    "coordinator/shard.py",
    "coordinator/shard_views.py",
    "coordinator/append_failures.py",
    "coordinator/messages.py",
    "coordinator/schemas.py",
    "coordinator/loading.py",
    "coordinator/rebalances.py",
    "coordinator/rebalance_replay.py",
    "coordinator/sharing.py",
    "coordinator/output.py",
    "coordinator/subscription.py",
    "coordinator/offset_groups.py",
    "coordinator/write_size.py",
    "coordinator/consumer/manager.py",
    "coordinator/consumer/heartbeat_checks.py",
    "coordinator/consumer/group_epoch.py",
    "coordinator/consumer/group.py",
    "coordinator/consumer/member.py",
    "coordinator/consumer/target.py",
    "coordinator/consumer/assignors/spec.py",
    "coordinator/consumer/assignors/uniform.py",
    "coordinator/consumer/assignors/range.py",
    "coordinator/consumer/steady.py",
    "broker/net/connection.py",
    "broker/net/frame_loop.py",
    "broker/groups/runtime.py",
    "broker/groups/write_path.py",
    "broker/groups/offset_api.py",
    "broker/groups/fetch_answers.py",
    "broker/groups/api.py",
    "broker/groups/join_sync.py",
    "broker/groups/consumer_api.py",
)
GROUP = "kcoord.compiled.hot"  # the shared library: compiled/_build/kcoord/compiled/hot__mypyc.<suffix>


def missing_toolchain() -> str | None:
    """Why nothing can be compiled here, or None."""
    cc = os.environ.get("CC", "gcc").split()[0]
    if shutil.which(cc) is None and shutil.which("cc") is None:
        return "no C compiler (gcc or cc)"
    header = Path(sysconfig.get_paths()["include"]) / "Python.h"
    if not header.exists():
        return f"no Python headers ({header}; Debian: python3-dev)"
    try:
        import mypyc  # noqa: F401
    except ImportError:
        return "no mypyc (pip install mypy)"
    return None


def is_current() -> bool:
    """A build of exactly :data:`MODULES` exists, usable here (this interpreter, every source
    unchanged)."""
    if usable_build(MANIFEST, ROOT, {})[0] is None:
        return False
    return sorted(json.loads(MANIFEST.read_text()).get("sources", [])) == sorted(MODULES)


def _module_name(source: str) -> str:
    return "kcoord." + source.removesuffix(".py").replace("/", ".")


def build() -> None:
    """Compile :data:`MODULES` into a scratch directory, then swap it in as ``_build``."""
    import mypy.version

    digests = {src: source_digest(ROOT / src) for src in MODULES}
    scratch = Path(tempfile.mkdtemp(prefix="_build-", dir=PACKAGE_DIR))
    try:
        out, temp = scratch / "out", scratch / "temp"
        # The setup script runs in an empty directory (see compiled/mypyc_setup.py); mypyc finds
        # the sources through MYPYPATH, the folder that holds the kcoord package.
        env = dict(os.environ, MYPYPATH=str(ROOT.parent))
        proc = subprocess.run(
            [sys.executable, str(PACKAGE_DIR / "mypyc_setup.py"), str(out), str(temp), GROUP,
             *[str(ROOT / m) for m in MODULES]],
            cwd=scratch, env=env, capture_output=True, text=True,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"mypyc failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
        suffix = extension_suffix()
        modules: dict[str, dict[str, str]] = {}
        for src in MODULES:
            name = _module_name(src)
            file = name.replace(".", "/") + suffix
            if not (out / file).exists():
                raise RuntimeError(f"mypyc made no {file}")
            modules[name] = {"file": file, "source": src, "sha256": digests[src]}
        group_file = GROUP.replace(".", "/") + "__mypyc" + suffix
        if not (out / group_file).exists():
            raise RuntimeError(f"mypyc made no {group_file}")
        modules[GROUP + "__mypyc"] = {"file": group_file}
        manifest = {
            "suffix": suffix, "mypyc": mypy.version.__version__, "sources": list(MODULES),
            "built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "modules": modules,
        }
        (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
        old = PACKAGE_DIR / f"_build-old-{os.getpid()}"
        if BUILD_DIR.exists():
            BUILD_DIR.rename(old)
        (out).rename(BUILD_DIR)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--if-stale", action="store_true", help="do nothing if the build is current")
    args = p.parse_args(argv)
    if args.if_stale and is_current():
        return 0
    why = missing_toolchain()
    if why is not None:
        print(f"kcoord: not compiling the hot modules: {why}; pure Python runs instead", file=sys.stderr)
        return 2
    print(f"kcoord: compiling {len(MODULES)} hot modules with mypyc (a minute or two)", file=sys.stderr)
    started = time.monotonic()
    try:
        build()
    except RuntimeError as e:
        print(f"kcoord: {e}", file=sys.stderr)
        return 1
    print(f"kcoord: compiled in {time.monotonic() - started:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
