"""Fixtures: a fresh real broker process per test (or per module where stated)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from . import harness
from .harness import ENGINE_ENV, BrokerProcess


@pytest.fixture(autouse=True, scope="session")
def engine_under_test(request: pytest.FixtureRequest) -> Iterator[str]:
    """The storage engine of every broker of the run: ``KCOORDTEST_ENGINE`` (files unless
    it says postgresql; scripts/test runs the group, offsets, transactions and security tests
    on both)."""
    engine = os.environ.get(ENGINE_ENV, "files")
    if engine != "postgresql":
        yield engine
        return
    harness.database_factory = request.getfixturevalue("postgres").database
    try:
        yield engine
    finally:
        harness.database_factory = None


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
