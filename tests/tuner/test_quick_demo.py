"""The README's main job: experiments/quick.yaml beats the vendor-default baseline (slow)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tuner.experiment import load_experiment
from tuner.loop import StudyRunner, build_cluster

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_quick_yaml_recommendation_beats_vendor_defaults(tmp_path: Path,
                                                         mlflow_template: Path) -> None:
    path = ROOT / "experiments" / "quick.yaml"
    exp = load_experiment(path)
    exp = exp.model_copy(update={"results_dir": str(tmp_path / "r")})
    (tmp_path / "r").mkdir()
    shutil.copy(mlflow_template, tmp_path / "r" / "mlflow.db")
    cluster = build_cluster(exp)
    base = cluster.snapshot()
    assert base.flat()["kmin_bytes"] == 1_048_576  # vendor defaults: 1 MiB / 2 MiB / 5 %
    res = StudyRunner(exp, path.read_text(), cluster, study_name="demo").run()
    assert res.best is not None and not res.best.is_baseline
    assert res.improvement_percent is not None and res.improvement_percent > 5.0
    conf = res.confirmation
    assert conf is not None and not conf["problem"]
    assert conf["best_score"] > conf["baseline_score"]  # fresh repeats agree
    assert cluster.read_back() == base
