"""Fixtures for the scale-out tests: one PostgreSQL server per session (``tests/scaleout/pg``)
and a fresh database per test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.scaleout.pg import PgServer, server


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    with server() as s:
        if isinstance(s, str):
            pytest.skip(s)
        yield s


@pytest.fixture
def pg_url(pg_server: PgServer) -> Iterator[str]:
    """The URL of a fresh, empty database (no password in it)."""
    with pg_server.database() as url:
        yield url
