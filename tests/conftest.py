"""Fixtures shared by every test folder: a real PostgreSQL server (``tests/pg_server.py``)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from .pg_server import PostgresServer, ensure_installed


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """One PostgreSQL server for the whole run, started on first use."""
    bindir = ensure_installed()
    if isinstance(bindir, str):
        if os.environ.get("KCOORDTEST_REQUIRE_POSTGRES") == "1":
            pytest.fail(bindir)
        pytest.skip(bindir)
    server = PostgresServer(bindir)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def postgres_url(postgres: PostgresServer) -> str:
    """The URL of a new, empty database on the shared server."""
    return postgres.database()
