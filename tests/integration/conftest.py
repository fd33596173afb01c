"""Fixtures: a fresh real broker process per test (or per module where stated)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from .harness import BrokerProcess


@pytest.fixture
def broker_factory(tmp_path: Path) -> Iterator[object]:
    started: list[BrokerProcess] = []

    def make(settings: dict[str, object] | None = None, name: str = "data") -> BrokerProcess:
        b = BrokerProcess(tmp_path / name, settings)
        started.append(b)
        return b.start()

    yield make
    for b in started:
        b.stop()


@pytest.fixture
def broker(broker_factory: object) -> BrokerProcess:
    return broker_factory()  # type: ignore[operator, no-any-return]
