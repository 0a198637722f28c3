"""``tracking.uri`` pointing at an ``mlflow server`` whose store is PostgreSQL, with the study
itself on PostgreSQL: one parent run, one nested run per trial, the storage URL recorded
without credentials."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.scaleout.test_storage import tiny_yaml


def test_study_logs_to_an_mlflow_server_backed_by_postgresql(
        mlflow_pg: str, pg_url: str, tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient

    from tuner.cluster import build_cluster
    from tuner.experiment import parse_experiment
    from tuner.loop import StudyRunner

    text = tiny_yaml(tmp_path / "r", pg_url).replace(
        "tracking: {enabled: false}", f"tracking: {{uri: '{mlflow_pg}', experiment: t-pg}}")
    exp = parse_experiment(text, "tiny.yaml")
    with build_cluster(exp) as cluster:
        res = StudyRunner(exp, text, cluster, study_name="srv1").run()
    assert res.tracking_failures == []
    client = MlflowClient(tracking_uri=mlflow_pg)
    runs = client.search_runs([res.mlflow_experiment_id or ""])
    parents = [r for r in runs if r.data.tags.get("ecntune.role") == "study"]
    trials = [r for r in runs if r.data.tags.get("ecntune.role") == "trial"]
    assert [p.info.run_id for p in parents] == [res.parent_run_id]
    assert sorted(int(r.data.tags["ecntune.trial"]) for r in trials) == [0, 1, 2]
    assert {r.data.tags["mlflow.parentRunId"] for r in trials} == {res.parent_run_id}
    assert parents[0].data.tags["ecntune.storage"] == pg_url


# ~40 s: the server runs every MLflow migration on a fresh PostgreSQL database, the study its
# report.
pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::DeprecationWarning")]
