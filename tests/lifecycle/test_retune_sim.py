"""``ecntune retune`` on the simulated backend (slow: two short studies each).

The issue's flow: a study on new-cluster.yaml, then retune on moe-mix.yaml; and the same from a
study with a real confirmed winner (quick.yaml), whose winner is re-measured under the new mix
and confirmed alongside the new candidates. Both studies log to one MLflow store, where the
new study's parent run names the old one (linked runs)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from tuner import optuna_io
from tuner.cli import main
from tuner.lifecycle.retune import OLD_WINNER

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from mlflow.tracking import MlflowClient

    db = tmp_path_factory.mktemp("mlflow") / "mlflow.db"
    MlflowClient(tracking_uri=f"sqlite:///{db}").search_experiments()
    return db


def _exp(name: str, tmp: Path, db: Path, trials: int, loose: bool = False) -> Path:
    e = yaml.safe_load((ROOT / f"experiments/{name}.yaml").read_text())
    e["budget"] = {"trials": trials, "repeats": 1, "confirm_repeats": 5, "confirm_top_k": 2,
                   "baseline_every": 0, "wall_time_s": 600}
    e["tracking"] = {"uri": f"sqlite:///{db}"}
    if loose:  # quick's warm starts cost the storage tenants goodput, raise probe p99 and
        # leave PFC pause over 0.1 % on some placements: allowed here (and under the new mix),
        # so that the old study has a winner, judged on busbw alone, to carry over. That
        # winner is a warm start that gains busbw where the twin reads dce_tcp_g as the share
        # kept (quick's defaults then pause 1.3 % of the time); under mstflint's reading, the
        # default, none of the four gains significantly in 4 trials. Both studies read it so.
        e["objective"].setdefault("guardrails", {}).update(max_tenant_loss_percent=100,
                                            p99_allowance_percent=1e6,
                                            max_pfc_pause_us_per_s=1e6)
        e["fabric"]["topology"]["dce_tcp_g_reading"] = "kept"
    e["results_dir"] = str(tmp / "results" / name)
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(e))
    return path


def _parent_run(db: Path, study: str) -> object:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{db}")
    exps = [x.experiment_id for x in client.search_experiments()]
    runs = client.search_runs(exps, filter_string=f"tags.`ecntune.study` = '{study}'")
    return next(r for r in runs if "mlflow.parentRunId" not in r.data.tags)


def _newest(results: Path) -> object:
    url = f"sqlite:///{results / 'optuna.db'}"
    return optuna_io.load_study(optuna_io.study_names(url)[-1], url)


@pytest.mark.parametrize("old", ["new-cluster", "quick"])
def test_retune_links_and_summarises(old: str, tmp_path: Path, store: Path) -> None:
    db = tmp_path / "mlflow.db"
    shutil.copy(store, db)
    # Named studies: the confirmation placements are drawn from the name, so every run of the
    # test measures the same ones.
    loose = old == "quick"
    first = CliRunner().invoke(main, ["run", str(_exp(old, tmp_path, db, 4, loose)), "--quiet",
                                      "--study", f"{old}-old"])
    assert first.exit_code == 0, first.output
    prior = _newest(tmp_path / "results" / old)
    res = CliRunner().invoke(main, ["retune", "--from", str(tmp_path / "results" / old),
                                    str(_exp("moe-mix", tmp_path, db, 3, loose)), "--quiet",
                                    "--study", f"moe-mix-from-{old}"])
    assert res.exit_code == 0, res.output
    new = _newest(tmp_path / "results/moe-mix")
    summary = res.output[res.output.index("re-tune of study"):]
    assert summary.startswith(f"re-tune of study {prior.study_name} as {new.study_name}")
    assert "old choice on the new mix" in summary and "busbw/line" in summary, summary

    # Linked: the study attribute and the MLflow parent runs.
    assert new.user_attrs["lineage"]["retuned_from"] == prior.study_name
    run = _parent_run(db, new.study_name)
    old_run = _parent_run(db, prior.study_name)
    assert run.data.tags["ecntune.retuned_from"] == prior.study_name  # type: ignore[attr-defined]
    assert run.data.tags["ecntune.retuned_from_run"] == old_run.info.run_id  # type: ignore[attr-defined]

    roles = {t.user_attrs.get("role") for t in new.trials}
    conf = new.user_attrs["confirmation"]
    if old == "quick":  # a real winner: re-measured under the new mix, confirmed alongside
        win = next(t for t in prior.trials
                   if t.number == prior.user_attrs["confirmation"]["winner"])
        mine = next(t for t in new.trials if t.user_attrs.get("role") == f"warm:{OLD_WINNER}")
        assert mine.user_attrs["values"] == win.user_attrs["values"]
        assert mine.number == 1  # right after trial 0, before any proposal
        # Seeds are fixed (sampler and replicates): the old winner completes within the limits
        # under the new mix, so the confirmation measures it next to the new candidates.
        assert mine.state.name == "COMPLETE" and mine.user_attrs.get("verdict") == "ok"
        assert mine.number in [c["trial"] for c in conf["candidates"]]
        assert f"(trial {mine.number})" in summary and "vs the deployed settings" in summary
        assert "retune_old_winner_percent" in run.data.metrics  # type: ignore[attr-defined]
    else:  # nothing beat new-cluster's vendor defaults: the old choice is its baseline
        assert f"warm:{OLD_WINNER}" not in roles  # equal to moe-mix's deployed defaults
        assert "it is what runs now (trial 0, the baseline" in summary
