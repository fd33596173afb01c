"""Debian packages the tests need and install themselves: ``apt-get`` as root, once per run.

The README's test command must work on a fresh machine; programs such as PostgreSQL's server
or kcat come from Debian's packages, installed here where they are missing. Without root or
apt-get nothing is installed and the caller says why its tests skip (or fail, when
``scripts/test`` asks for everything to run).
"""

from __future__ import annotations

import os
import shutil
import subprocess

REQUIRE_ENV = "KCOORDTEST_REQUIRE_TOOLS"  # "1": a missing program fails its tests, never skips


def apt_install(*packages: str) -> str | None:
    """Install ``packages`` with apt-get: None when done, else why not."""
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        return f"cannot install {' '.join(packages)}: not root, or no apt-get"
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    lock = ["-o", "DPkg::Lock::Timeout=600"]  # another apt (podman's, chromium's) may hold it
    for cmd in (["update", "-qq"], ["install", "-y", "-qq", "--no-install-recommends", *packages]):
        done = subprocess.run(
            ["apt-get", *lock, *cmd], capture_output=True, text=True, env=env, timeout=1800
        )
        if done.returncode != 0:
            return f"apt-get {' '.join(cmd)} failed: {done.stderr[-2000:]}"
    return None


def program(name: str, package: str) -> str:
    """The path of program ``name``, installing Debian's ``package`` first if it is missing;
    the test skips without it (fails under :data:`REQUIRE_ENV`)."""
    import pytest

    found = shutil.which(name)
    if found is None:
        why = apt_install(package)
        found = shutil.which(name)
        if found is None:
            reason = why or f"{package} installed no {name}"
            if os.environ.get(REQUIRE_ENV) == "1":
                pytest.fail(reason)
            pytest.skip(reason)
    return found
