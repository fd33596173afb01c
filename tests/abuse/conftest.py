"""The abuse suite: hostile or broken clients against a real broker process.

Every module gets one broker, run under an address-space limit (``prlimit --as``, 2 GiB) so that
an allocation a request tricks it into fails instead of succeeding on an overcommitting machine,
and one healthy consumer group beside it (:class:`HealthyGroup`) that must keep consuming while
the probes run. A module may define ``BROKER_SETTINGS`` (a dict of ``--set`` values) to tune its
broker; ``{port}`` in a value stands for the broker's own port (for ``listeners``, which replaces
``--port``), and ``BROKER_NOFILE`` (an int) to run its broker under that descriptor limit
(``prlimit --nofile``) as well. Each probe checks that the offending client got an error or a clean close, that the
broker is alive, and that the healthy group still makes progress.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.harness import BrokerProcess, free_port

from .healthy import HealthyGroup

MEMORY_LIMIT = 2 * 1024**3
"""The broker's address-space limit (prlimit --as)."""

RSS_BOUND = 512 * 1024**2
"""The broker's resident memory must stay under this through every memory probe."""

_BASE_SETTINGS: dict[str, object] = {
    "group.initial.rebalance.delay.ms": 0,
    "log.cleaner.backoff.ms": 1000,
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.abuse)


def _wrapper(nofile: int | None = None) -> list[str]:
    prlimit = shutil.which("prlimit")
    if prlimit is None:  # util-linux; present on every Debian machine
        raise RuntimeError("prlimit (util-linux) is needed by the abuse suite")
    limits = [f"--as={MEMORY_LIMIT}"]
    if nofile is not None:
        limits.append(f"--nofile={nofile}")
    return [prlimit, *limits]


@pytest.fixture(scope="module")
def abuse_broker(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BrokerProcess]:
    settings = dict(_BASE_SETTINGS)
    settings.update(getattr(request.module, "BROKER_SETTINGS", {}))
    data = tmp_path_factory.mktemp("abuse") / "data"
    nofile = getattr(request.module, "BROKER_NOFILE", None)
    broker = BrokerProcess(data, settings, metrics_port=free_port(), wrapper=_wrapper(nofile))
    for name, value in settings.items():
        if isinstance(value, str):
            broker.settings[name] = value.replace("{port}", str(broker.port))
    broker.start()
    yield broker
    broker.stop()


@pytest.fixture(scope="module")
def healthy(abuse_broker: BrokerProcess) -> Iterator[HealthyGroup]:
    group = HealthyGroup(abuse_broker.bootstrap)
    group.start()
    yield group
    group.stop()


def peak_rss(pid: int) -> int:
    """The process's peak resident set size in bytes (VmHWM)."""
    return _status_kb(pid, "VmHWM") * 1024


def rss(pid: int) -> int:
    """The process's resident set size in bytes now (VmRSS)."""
    return _status_kb(pid, "VmRSS") * 1024


def _status_kb(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} in /proc/{pid}/status")


def internal_errors(broker: BrokerProcess) -> list[str]:
    """Log lines of connections closed because a handler or an encoder failed: bad input
    must get an error code or a clean close, never reach such a failure."""
    text = broker.log_path.read_text(errors="replace")
    return [line for line in text.splitlines() if line.endswith(": internal error")]


def tracebacks(broker: BrokerProcess) -> list[str]:
    """The log's tracebacks, each by its last line: bad input must never cause one (the
    compiled build once logged one per undecodable request, where pure Python logged none)."""
    lines = broker.log_path.read_text(errors="replace").splitlines()
    found = []
    for i, line in enumerate(lines):
        if line.startswith("Traceback (most recent call last)"):
            end = next((j for j in range(i + 1, len(lines)) if not lines[j].startswith(" ")), i)
            found.append(lines[end])
    return found


def assert_survived(broker: BrokerProcess, group: HealthyGroup, what: str) -> None:
    """The broker is alive, no request made a handler fail or logged a traceback, and the
    healthy group consumes again after the probe ``what``."""
    assert broker.alive(), f"broker died after {what}:\n{broker.log()}"
    group.wait_progress(what=what)
    assert broker.alive(), f"broker died after {what}:\n{broker.log()}"
    failures = internal_errors(broker)
    assert not failures, f"handler failures after {what}: {failures[:5]}\n{broker.log()}"
    logged = tracebacks(broker)
    assert not logged, f"{len(logged)} tracebacks logged after {what}: {logged[:5]}"
