"""Fixtures shared by every test folder: a real PostgreSQL server (``tests/pg_server.py``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .pg_server import PostgresServer, running_server


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """One PostgreSQL server for the whole run, started on first use."""
    with running_server() as server:
        yield server


@pytest.fixture
def postgres_url(postgres: PostgresServer) -> str:
    """The URL of a new, empty database on the shared server."""
    return postgres.database()
