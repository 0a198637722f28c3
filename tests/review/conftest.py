"""A real MLflow tracking server for the review tests, started once per session.

``mlflow server`` (tests/mlflow_server.py) on a SQLite store copied from a template (creating
a store runs every migration, ~7 s; the server is up in ~5 s, ~500 MB). Two short studies of
the quick experiment run against it through its HTTP tracking URI: ``before`` and ``after`` a
workload-mix change, so ``history`` has two studies to compare. Everything here is
session-scoped: the tests only read.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.mlflow_server import Server, free_port
from tests.mlflow_server import mlflow_server as start_mlflow_server

__all__ = ["ROOT", "TRIALS", "Server", "Study", "free_port", "quick_yaml", "run_study"]

ROOT = Path(__file__).resolve().parents[2]
QUICK = ROOT / "experiments" / "quick.yaml"
TRIALS = 5


@pytest.fixture(scope="session")
def review_mlflow_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An empty, fully migrated MLflow SQLite store (copy it, never write to it)."""
    from tuner.tracking import Tracker

    db = tmp_path_factory.mktemp("review-mlflow-template") / "mlflow.db"
    Tracker(f"sqlite:///{db}", "unused", db.parent).client().search_experiments()
    return db


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory,
                  review_mlflow_template: Path) -> Iterator[Server]:
    home = tmp_path_factory.mktemp("mlflow-server")
    db = home / "mlflow.db"
    shutil.copy(review_mlflow_template, db)
    with start_mlflow_server(f"sqlite:///{db}", home, timeout_s=90) as server:
        yield server


@dataclass
class Study:
    name: str
    results: Path
    storage: str
    tracking_uri: str
    experiment: str
    result: Any  # tuner.loop.StudyResult
    seconds: float = 0.0


def quick_yaml(alltoall_weight: float | None = None) -> str:
    """experiments/quick.yaml as shipped, or with the AlltoAll weight of its mix changed."""
    import yaml

    text = QUICK.read_text(encoding="utf-8")
    if alltoall_weight is None:
        return text
    doc = yaml.safe_load(text)
    parts = [p for p in doc["workload"]["parts"] if p.get("op") == "alltoall"]
    assert parts, "experiments/quick.yaml has no alltoall part: update tests/review"
    for p in parts:
        p["weight"] = alltoall_weight
    return str(yaml.safe_dump(doc, sort_keys=False))


def run_study(name: str, yaml_text: str, results: Path, tracking_uri: str) -> Study:
    from tuner.cluster import build_cluster
    from tuner.experiment import parse_experiment
    from tuner.loop import StudyRunner

    exp = parse_experiment(yaml_text, str(QUICK))
    # Loose guardrails: a study this short on quick.yaml meets its own guardrails (PFC within
    # 0.1 % of the time, p99 within 20 µs) with none of its first trials, and the review needs
    # candidates to show.
    loose = exp.objective.guardrails.model_copy(update={
        "max_tenant_loss_percent": 100.0, "max_pfc_pause_us_per_s": 1e6,
        "p99_allowance_percent": 1e6})
    exp = exp.model_copy(update={
        "results_dir": str(results),
        "objective": exp.objective.model_copy(update={"guardrails": loose}),
        "budget": exp.budget.model_copy(update={"trials": TRIALS, "repeats": 2,
                                                "confirm_top_k": 2, "confirm_repeats": 5}),
        "tracking": exp.tracking.model_copy(update={"uri": tracking_uri})})
    t0 = time.monotonic()
    cluster = build_cluster(exp)
    with cluster:
        res = StudyRunner(exp, yaml_text, cluster, study_name=name).run()
    return Study(name=name, results=results, storage=exp.storage_url,
                 tracking_uri=tracking_uri, experiment=exp.tracking_experiment, result=res,
                 seconds=time.monotonic() - t0)


@pytest.fixture(scope="session")
def studies(mlflow_server: Server, tmp_path_factory: pytest.TempPathFactory
            ) -> dict[str, Study]:
    """Two short quick-experiment studies logged to the server: ``before`` and ``after`` a
    mix change (AlltoAll weight -> 4), sharing one results folder and Optuna storage."""
    results = tmp_path_factory.mktemp("review-results")
    return {
        "before": run_study("review-before", quick_yaml(), results, mlflow_server.url),
        "after": run_study("review-after", quick_yaml(alltoall_weight=4), results,
                           mlflow_server.url),
    }
