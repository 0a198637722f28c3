"""Fixtures for the scale-out tests: one PostgreSQL server per session (``tests/scaleout/pg``)
and a fresh database per test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

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


@pytest.fixture(scope="session")
def mlflow_pg(pg_server: PgServer, tmp_path_factory: pytest.TempPathFactory
              ) -> Iterator[str]:
    """An ``mlflow server`` whose backend store is a PostgreSQL database (its migrations run
    once per session); yields its http:// URL."""
    from tests.scaleout.mlflow_server import mlflow_server

    with pg_server.database() as db, mlflow_server(db, tmp_path_factory.mktemp("mlflow-pg")
                                                   ) as url:
        yield url


@pytest.fixture(scope="session")
def mlflow_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An empty, migrated MLflow SQLite store to copy (creating one takes ~7 s)."""
    from mlflow.tracking import MlflowClient

    db = tmp_path_factory.mktemp("mlflow-template") / "mlflow.db"
    MlflowClient(tracking_uri=f"sqlite:///{db}").search_experiments()
    return db
