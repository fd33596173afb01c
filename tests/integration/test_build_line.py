"""``kcoord serve`` says at start-up which build of the hot modules it runs (:mod:`compiled`)."""

from __future__ import annotations

from pathlib import Path

from kcoord import compiled
from tests.integration.harness import BrokerProcess, wait_for


def test_serve_logs_whether_it_runs_compiled(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data-a").start()
    try:
        # The broker sees the same build as this process (same interpreter and checkout).
        wait_for(lambda: f"INFO kcoord {compiled.describe()}" in broker.log(), 10, what="the build line")
    finally:
        broker.stop()
    pure = BrokerProcess(tmp_path / "data-b", wrapper=["env", f"{compiled.PURE_ENV}=1"]).start()
    try:
        line = f"INFO kcoord pure Python: {compiled.PURE_ENV} is set"
        wait_for(lambda: line in pure.log(), 10, what="the pure-Python line")
        assert "names no setting" not in pure.log()  # not taken for a mistyped setting
    finally:
        pure.stop()
