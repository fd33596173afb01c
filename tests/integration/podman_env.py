"""A podman of the test suite's own, for building and running the real container image.

Owns: installing podman and its helpers (apt, when they are absent and we are root), a
configuration and storage kept under a test-owned directory (never the machine's defaults),
the locally made ``python:3.11-slim`` base image (debootstrap + ``podman import``, since no
registry can be reached from CI), and a small wrapper that runs ``podman`` and
``podman-compose`` against that configuration.

The directory is ``KCOORD_CONTAINER_DIR`` or ``<venv>/cache/container``: the storage in it
keeps the base image and the build cache between runs.
"""

from __future__ import annotations

import hashlib
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

BASE_IMAGE = "docker.io/library/python:3.11-slim"
# What the Debian mirror must give podman here (see docs/testing.md, test_container).
APT_PACKAGES = [
    "podman",
    "runc",
    "netavark",
    "aardvark-dns",
    "slirp4netns",
    "uidmap",
    "fuse-overlayfs",
    "iptables",
    "debootstrap",
    "podman-compose",
]
NEEDED_COMMANDS = ["podman", "runc", "debootstrap", "podman-compose"]
BASE_PACKAGES = "python3,python3-venv,python3-pip,python-is-python3,ca-certificates,tzdata,netbase"
CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"


class Unavailable(Exception):
    """Podman cannot run on this machine (the reason is the message)."""


def container_dir() -> Path:
    override = os.environ.get("KCOORD_CONTAINER_DIR")
    return Path(override) if override else Path(sys.prefix) / "cache" / "container"


def _run(cmd: Sequence[str], timeout: float, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return proc.stdout


def ensure_installed() -> None:
    """Install podman and friends with apt when any is missing; Unavailable when we cannot."""
    missing = [c for c in NEEDED_COMMANDS if shutil.which(c) is None]
    if not missing:
        return
    if os.geteuid() != 0:
        raise Unavailable(f"{', '.join(missing)} missing and not root (cannot apt-get install)")
    if shutil.which("apt-get") is None:
        raise Unavailable(f"{', '.join(missing)} missing and no apt-get")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    # Another apt on the machine holds the dpkg lock for a while: wait for it, bounded.
    lock = ["-o", "DPkg::Lock::Timeout=600"]
    _run(["apt-get", *lock, "update"], 900, env)
    _run(["apt-get", *lock, "install", "-y", "--no-install-recommends", *APT_PACKAGES], 1800, env)
    still = [c for c in NEEDED_COMMANDS if shutil.which(c) is None]
    if still:
        raise RuntimeError(f"apt-get installed {APT_PACKAGES} but {still} are still missing")


def _hard_limit(which: int, fallback: int) -> int:
    hard = resource.getrlimit(which)[1]
    return fallback if hard == resource.RLIM_INFINITY else int(hard)


class Podman:
    """``podman`` and ``podman-compose`` with the configuration and storage under ``root``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        # Podman's run-time state belongs on /run (a tmpfs: gone after a reboot, which podman
        # then notices); one directory per storage, as podman refuses a changed run root.
        digest = hashlib.sha256(str(root.resolve()).encode()).hexdigest()[:12]
        run_base = Path("/run") if os.geteuid() == 0 else Path(tempfile.gettempdir())
        self.run_dir = run_base / f"kcoord-podman-{digest}"
        nofile = min(_hard_limit(resource.RLIMIT_NOFILE, 1 << 20), 1 << 20)
        nproc = min(_hard_limit(resource.RLIMIT_NPROC, 32768), 32768)
        conf = root / "containers.conf"
        # crun refuses the hybrid cgroup layout of these machines; CNI gives containers no DNS
        # (compose services find each other by name through netavark + aardvark-dns); the
        # default ulimits must fit under the machine's hard limits.
        conf.write_text(
            "[containers]\n"
            f'default_ulimits = ["nofile={nofile}:{nofile}", "nproc={nproc}:{nproc}"]\n'
            "[engine]\n"
            'runtime = "runc"\n'
            'cgroup_manager = "cgroupfs"\n'
            'events_logger = "file"\n'
            f'tmp_dir = "{self.run_dir / "tmp"}"\n'
            "[network]\n"
            'network_backend = "netavark"\n'
            f'network_config_dir = "{root / "networks"}"\n'
        )
        storage = root / "storage.conf"
        storage.write_text(
            "[storage]\n"
            'driver = "overlay"\n'
            f'graphroot = "{root / "storage"}"\n'
            f'runroot = "{self.run_dir / "storage"}"\n'
        )
        self.env = dict(os.environ, CONTAINERS_CONF=str(conf), CONTAINERS_STORAGE_CONF=str(storage))
        # Compose must not pick up a docker host or a registries config of the machine's.
        self.env.pop("DOCKER_HOST", None)

    def run(self, *args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            ["podman", *args], capture_output=True, text=True, timeout=timeout, env=self.env
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"podman {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
        return proc

    def compose(
        self, project_dir: Path, *args: str, timeout: float = 300, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            ["podman-compose", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=self.env,
            cwd=project_dir,
        )
        if check and proc.returncode != 0:
            raise AssertionError(
                f"podman-compose {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
            )
        return proc

    def image_exists(self, name: str) -> bool:
        return self.run("image", "exists", name, check=False).returncode == 0

    def ensure_base_image(self) -> float:
        """Make ``python:3.11-slim`` locally unless the storage has it; seconds spent."""
        if self.image_exists(BASE_IMAGE):
            return 0.0
        start = time.monotonic()
        try:
            pulled = self.run("pull", "--quiet", BASE_IMAGE, timeout=120, check=False).returncode == 0
        except subprocess.TimeoutExpired:  # a registry that does not answer
            pulled = False
        if not pulled:
            self._make_base_image()
        return time.monotonic() - start

    def _make_base_image(self) -> None:
        rootfs = self.root / "rootfs"
        if rootfs.exists():
            shutil.rmtree(rootfs)
        _run(
            ["debootstrap", "--variant=minbase", f"--include={BASE_PACKAGES}", "bookworm", str(rootfs), apt_mirror()],
            1200,
        )
        # pip may install into the system Python, as in the official image.
        for marker in rootfs.glob("usr/lib/python3*/EXTERNALLY-MANAGED"):
            marker.unlink()
        # Slim, as the official image: no package caches, documentation or translations.
        for sub in ("var/cache/apt", "var/lib/apt/lists", "usr/share/doc", "usr/share/man",
                    "usr/share/info", "usr/share/locale"):
            for entry in (rootfs / sub).glob("*"):
                if entry.is_dir() and not entry.is_symlink():
                    shutil.rmtree(entry)
                else:
                    entry.unlink()
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        try:
            imported = subprocess.run(
                [
                    "podman", "import",
                    "--change", "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                    "--change", "ENV LANG=C.UTF-8",
                    "--change", 'CMD ["python3"]',
                    "-", BASE_IMAGE,
                ],
                stdin=tar.stdout,
                capture_output=True,
                text=True,
                timeout=600,
                env=self.env,
            )
        finally:
            assert tar.stdout is not None
            tar.stdout.close()
            tar.wait(timeout=60)
        if imported.returncode != 0:
            raise RuntimeError(f"podman import failed:\n{imported.stderr}")
        shutil.rmtree(rootfs)

    def build(self, context: Path, tag: str) -> float:
        """Build the Dockerfile of ``context`` (docker format: keeps the HEALTHCHECK); seconds."""
        start = time.monotonic()
        args = ["build", "--format", "docker", "--network", "host", "-t", tag]
        if Path(CA_BUNDLE).exists():
            # pip in the build trusts the host's certificate authorities; not kept in the image.
            args += ["-v", f"{CA_BUNDLE}:{CA_BUNDLE}:ro"]
        self.run(*args, str(context), timeout=900)
        return time.monotonic() - start


def apt_mirror() -> str:
    """The Debian mirror apt uses here (deb822 or one-line sources), else deb.debian.org."""
    sources = [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]
    for path in sources:
        try:
            text = path.read_text()
        except OSError:
            continue
        if path.suffix == ".sources":
            for block in text.split("\n\n"):
                uris = re.search(r"^URIs:\s*(\S+)", block, re.M)
                suites = re.search(r"^Suites:\s*(.*)$", block, re.M)
                if uris and suites and "bookworm" in suites.group(1).split():
                    return uris.group(1)
        else:
            for line in text.splitlines():
                m = re.match(r"\s*deb\s+(?:\[[^]]*\]\s+)?(\S+)\s+bookworm\s", line)
                if m:
                    return m.group(1)
    return "http://deb.debian.org/debian"
