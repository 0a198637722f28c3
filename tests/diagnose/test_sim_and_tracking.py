"""``diagnose`` on the simulator backend (no hosts: "not checked", the fabric seam) and the
MLflow run it logs when tracking is on."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from tuner.cli import main

QUICK = Path(__file__).resolve().parents[2] / "experiments" / "quick.yaml"


@pytest.mark.slow  # MLflow's sqlite store is created on first use (~10 s)
def test_sim_backend_hosts_not_checked_and_logged_to_mlflow(tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient

    from tuner.experiment import load_experiment

    exp_file = tmp_path / "quick.yaml"
    exp_file.write_text(QUICK.read_text() + f"\nresults_dir: {tmp_path / 'results'}\n")
    res = CliRunner().invoke(main, ["diagnose", str(exp_file), "--sample-s", "0"])
    fabric = importlib.util.find_spec("tuner.diagnose.fabric") is not None
    # without the fabric checks nothing at all could be checked on a simulator: exit 3
    assert res.exit_code == (res.exit_code if fabric else 3), res.output
    diag = json.loads((tmp_path / "results" / "diagnosis.json").read_text())
    assert diag["backend"] == "sim"
    skipped = {(n["layer"], n["check"]) for n in diag["not_checked"]}
    assert {("physical", "hosts"), ("host", "hosts"), ("ip", "hosts"),
            ("rdma", "hosts")} <= skipped
    exp = load_experiment(exp_file)
    client = MlflowClient(exp.tracking_uri)
    runs = client.search_runs(
        [client.get_experiment_by_name(exp.tracking_experiment).experiment_id],
        filter_string="tags.`ecntune.role` = 'diagnose'")
    assert len(runs) == 1 and runs[0].data.tags["ecntune.backend"] == "sim"
    assert runs[0].data.metrics["diagnose_findings"] == len(diag["findings"])
    assert runs[0].data.metrics["diagnose_not_checked"] == len(diag["not_checked"])
    logged = json.loads(Path(client.download_artifacts(runs[0].info.run_id,
                                                       "diagnosis.json")).read_text())
    assert logged == diag
