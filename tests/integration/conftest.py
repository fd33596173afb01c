"""Fixtures: a fresh real broker process per test (or per module where stated)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One local SparkSession (``local[2]``) for the pipeline tests; Spark needs Java, and
    without it they fail (they do not skip)."""
    from kcoord.pipeline.session import build_session, java_version

    if java_version() is None:
        pytest.fail(
            "the pipeline tests need a Java runtime for Spark (17 or 21): `java -version` failed; "
            "install e.g. openjdk-17-jre-headless or set JAVA_HOME"
        )
    session = build_session(
        "local[2]", shuffle_partitions=2, conf={"spark.ui.enabled": "false"}
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
