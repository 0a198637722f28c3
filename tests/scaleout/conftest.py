"""Fixtures for the scale-out tests: one PostgreSQL server per session (``tests/scaleout/pg``),
a fresh database per test, and one ``mlflow server`` on PostgreSQL per session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.mlflow_server import Server
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


@pytest.fixture(scope="session")
def mlflow_pg_launched(pg_server: PgServer, tmp_path_factory: pytest.TempPathFactory
                       ) -> Iterator[Server]:
    """A real ``mlflow server`` whose backend store is a fresh PostgreSQL database (it runs
    MLflow's migrations as it starts), launched but maybe not up yet."""
    from tests.mlflow_server import start

    with pg_server.database() as db:
        srv = start(db, tmp_path_factory.mktemp("mlflow-pg"))
        try:
            yield srv
        finally:
            srv.stop()


@pytest.fixture(autouse=True)
def _launch_mlflow_early(request: pytest.FixtureRequest) -> None:
    """Launch the session's MLflow server at the first test on PostgreSQL: its start (~10 s of
    CPU) then overlaps the lease and storage tests, which mostly wait."""
    if {"pg_server", "pg_url"} & set(request.fixturenames):
        request.getfixturevalue("mlflow_pg_launched")


@pytest.fixture(scope="session")
def mlflow_pg(mlflow_pg_launched: Server) -> str:
    """The server's http:// URL, once it answers. One per session: tests use their own MLflow
    experiment names."""
    try:
        return mlflow_pg_launched.wait_up().url
    except RuntimeError as exc:
        pytest.fail(str(exc))
