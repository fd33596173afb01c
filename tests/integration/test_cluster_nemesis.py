"""The short fault-injection run of tests/integration/nemesis.py (about two minutes): SIGKILL,
SIGSTOP past the session, SIGTERM restarts and PostgreSQL SIGKILLs, one at a time, under an
idempotent producer and a classic and a KIP-848 group committing; then nothing acknowledged
may be missing, no acknowledged commit may be followed by a lower one, and no two leaderships
may have interleaved their writes. ``bench/nemesis.py`` is the long run."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from . import nemesis

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(600)]


def test_faults_lose_nothing_acknowledged_and_leaderships_never_interleave(tmp_path: Path) -> None:
    seed = random.randrange(1 << 30)
    report = nemesis.run(tmp_path, seconds=75, seed=seed, log=print, min_faults=8)
    print(report)
    assert sum(report.faults.values()) >= 8, report
    assert report.records_acknowledged > 1000 and report.commits_acknowledged > 100, report
    assert report.batches_checked > 0
    assert report.anomalies == [], f"seed {seed}: {report.anomalies}"
