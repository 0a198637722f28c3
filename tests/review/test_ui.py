"""``ecntune ui`` without starting another server: addresses, store choice, port checks, and
the address of a study on an already running server (the session's). Starting the UI for
real is the browser test's job (``test_browser.py``)."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.review.conftest import Server, Study
from tuner.cli import main
from tuner.cli.ui import pick_store, port_free, runs_url
from tuner.errors import ConfigError


def test_runs_url() -> None:
    assert runs_url("http://127.0.0.1:5000", "7") == (
        "http://127.0.0.1:5000/#/experiments/7/runs?workflowType=machine_learning")
    assert runs_url("http://h:1", "7", flat=True).endswith(
        "/runs?workflowType=machine_learning&orderByKey=attributes.run_name&orderByAsc=true")
    assert runs_url("http://h:1", None) == "http://h:1/#/experiments"


def test_port_free() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        taken = s.getsockname()[1]
        assert not port_free("127.0.0.1", taken)
    assert port_free("127.0.0.1", taken)


def test_pick_store(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no mlflow.db"):
        pick_store(None, str(tmp_path), None)
    old, new = tmp_path / "old", tmp_path / "new"
    for d in (old, new):
        d.mkdir()
        (d / "mlflow.db").write_bytes(b"")
    past = time.time() - 3600
    os.utime(old / "mlflow.db", (past, past))
    assert pick_store(None, str(tmp_path), None) == (f"sqlite:///{new / 'mlflow.db'}", None)
    assert pick_store(str(old), "unused", None) == (f"sqlite:///{old / 'mlflow.db'}", None)
    assert pick_store("s1", "r", "http://127.0.0.1:9") == ("http://127.0.0.1:9", "s1")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="no mlflow.db in this results folder"):
        pick_store(str(tmp_path / "empty"), "unused", None)


def test_ui_points_at_a_running_server(mlflow_server: Server,
                                       studies: dict[str, Study]) -> None:
    exp = mlflow_server.get("/api/2.0/mlflow/experiments/get-by-name",
                            experiment_name=studies["before"].experiment)["experiment"]
    res = CliRunner().invoke(main, ["ui", "review-before", "--tracking-uri", mlflow_server.url])
    assert res.exit_code == 0, res.output
    assert res.output.strip() == (
        f"MLflow UI: {mlflow_server.url}/#/experiments/{exp['experiment_id']}/runs?"
        "workflowType=machine_learning  (already running)")


def test_ui_refuses_a_busy_port(tmp_path: Path) -> None:
    (tmp_path / "mlflow.db").write_bytes(b"")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        res = CliRunner().invoke(main, ["ui", str(tmp_path), "--port", str(port)])
    assert res.exit_code == 2
    assert f"--port {port}: already in use" in res.output
