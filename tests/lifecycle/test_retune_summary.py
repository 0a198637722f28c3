"""The re-tune summary from a study's paired confirmation (a small in-memory Optuna study):
"recovered" is the new winner against the old choice on the same replicates; what the old study
chose (its confirmed winner, or its baseline) comes from the lineage; the same numbers go to the
CLI lines, the MLflow metrics and the summary.json block."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest

from objectives.score import log2_percent
from tuner.experiment import parse_experiment
from tuner.lifecycle.retune import (
    OLD_WINNER,
    lineage,
    old_tracking_uri,
    resumed,
    same_store,
    summarize,
    summary_for_tracking,
)

ROOT = Path(__file__).resolve().parents[2]


def _study(old_role: str | None, old_diffs: list[float], new_diffs: list[float],
           *, winner: int | None = 2, name: str = "moe-2") -> optuna.Study:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    st = optuna.create_study(study_name=name, direction="maximize")
    dist = {"x": optuna.distributions.FloatDistribution(0, 1)}
    roles = ["baseline", old_role or "proposal", "proposal"]
    for i, role in enumerate(roles):
        st.add_trial(optuna.trial.create_trial(
            params={"x": i / 10}, distributions=dist, value=float(i),
            user_attrs={"role": role, "values": {"kmin_bytes": 1000 * (i + 1)},
                        "verdict": "ok",
                        "metrics": {"busbw_norm": 0.2 + i / 10, "p99_us": 50.0 - i,
                                    "pause_us_per_s": 0.0}}))
    checks = [
        {"trial": 1, "diffs": old_diffs, "improvement_percent": 1.0, "ci95_low": -1.0,
         "ci95_high": 3.0, "problem": "", "confirmed": False},
        {"trial": 2, "diffs": new_diffs, "improvement_percent": 41.0, "ci95_low": 30.0,
         "ci95_high": 52.0, "problem": "", "confirmed": winner == 2}]
    st.set_user_attr("confirmation", {"candidates": checks, "paired_repeats": 4,
                                      "winner": winner})
    st.set_user_attr("lineage", {"retuned_from": "nc-1", "retuned_from_run": "abc",
                                 "retuned_from_choice": "baseline",
                                 "retuned_from_evidence": "its baseline: nothing beat it"})
    return st


def test_recovered_is_paired_on_the_replicates() -> None:
    s = summarize(_study(f"warm:{OLD_WINNER}", [0.1, 0.2, 0.0, 0.1], [0.5, 0.6, 0.4, 0.5]))
    assert (s.old_trial, s.new_trial, s.pairs) == (1, 2, 4)
    assert s.recovered_percent == pytest.approx(log2_percent(0.4))  # every pair 0.4
    assert s.recovered_ci == pytest.approx((log2_percent(0.4),) * 2)
    text = "\n".join(s.lines())
    assert "re-tune of study nc-1 as moe-2" in text
    assert "old choice on the new mix (trial 1): busbw/line 0.300, probe p99 49 us" in text
    assert ("vs the deployed settings busbw +1.0 % (95 % interval -1.0 % to +3.0 %, 4 "
            "paired") in text
    assert f"recovered by the re-tune (new winner vs old choice, same replicates): " \
           f"{log2_percent(0.4):+.1f} %" in text
    m = s.metrics()
    assert m["retune_recovered_percent"] == pytest.approx(log2_percent(0.4))
    assert (m["retune_old_winner_percent"], m["retune_old_is_baseline"]) == (1.0, 0.0)
    assert m["retune_old_busbw_norm"] == pytest.approx(0.3)
    assert m["retune_new_busbw_norm"] == pytest.approx(0.4)


def test_noise_shared_by_both_arms_cancels() -> None:
    """Replicate-to-replicate swings that hit both arms alike do not widen the interval."""
    swing = [0.3, -0.2, 0.5, -0.4]
    s = summarize(_study(f"warm:{OLD_WINNER}", [0.1 + w for w in swing],
                         [0.3 + w for w in swing]))
    lo, hi = s.recovered_ci or (0, 0)
    assert hi - lo == pytest.approx(0.0, abs=1e-9)


def test_old_choice_deployed_is_trial_zero() -> None:
    """The old choice is what runs now: recovered is the winner's own confirmed check."""
    s = summarize(_study(None, [0.1, 0.2], [0.5, 0.6, 0.4, 0.5]))
    assert s.old_trial is None and s.pairs == 4
    assert (s.recovered_percent, s.recovered_ci) == (41.0, (30.0, 52.0))
    lines = s.lines()
    assert lines[1] == "  old choice: its baseline: nothing beat it"
    assert "it is what runs now (trial 0, the baseline every paired number below is " \
           "relative to): busbw/line 0.200" in lines[2]
    assert lines[-1].endswith("+41.0 % (95 % interval +30.0 % to +52.0 %, 4 pairs)")
    m = s.metrics()
    assert m["retune_old_is_baseline"] == 1.0 and "retune_old_winner_percent" not in m
    block = json.loads(json.dumps(s.as_dict()))  # what summary.json holds
    assert block["old_on_new_mix"]["is_baseline"] and block["old_choice"] == "baseline"
    assert block["recovered"] == {"percent": 41.0, "ci95_low": 30.0, "ci95_high": 52.0,
                                  "pairs": 4}
    assert block["new_winner"]["paired"]["ci95_low"] == 30.0 and block["from_run"] == "abc"


def test_no_confirmed_winner_says_why() -> None:
    s = summarize(_study(None, [0.1, 0.2], [0.1, -0.1], winner=None))
    text = "\n".join(s.lines())
    assert "re-tune: no confirmed winner on the new mix" in text
    assert "best candidate, unconfirmed (trial 2): busbw +41.0 %" in text
    assert "recovered by the re-tune: not measured (no confirmed winner on the new mix)" in text
    assert "retune_recovered_percent" not in s.metrics()
    assert s.as_dict()["recovered"] is None and s.as_dict()["new_winner"] is None


def _old(confirmed: bool) -> optuna.Study:
    """An old study as the loop leaves it: confirmation, parent run, no recorded store."""
    st = _study(None, [0.1, 0.2], [0.5, 0.6], winner=2 if confirmed else None, name="nc-1")
    st.set_user_attr("mlflow_parent_run_id", "run-1")
    return st


def test_lineage_says_what_the_old_study_chose() -> None:
    won = lineage(_old(True), "sqlite:///results/nc/optuna.db")
    assert won["retuned_from_choice"] == "winner" and won["retuned_from_trial"] == "2"
    assert won["retuned_from_evidence"] == ("its confirmed winner, trial 2: busbw +41.0 % (95 % "
                                            "interval +30.0 % to +52.0 %, 2 paired repeats) "
                                            "on its own mix")
    assert won["retuned_from_run"] == "run-1"
    kept = lineage(_old(False), "sqlite:///results/nc/optuna.db")
    assert kept["retuned_from_choice"] == "baseline" and kept["retuned_from_trial"] == "0"
    assert kept["retuned_from_evidence"].startswith("its baseline: nothing beat it on its own "
                                                   "mix (best candidate, trial 2: busbw +41.0 %")


def test_old_tracking_store(tmp_path: Path) -> None:
    """Where the old study logged: recorded, else its experiment's, else the default next to
    its Optuna database (only if it exists); nothing when it did not log."""
    url = f"sqlite:///{tmp_path / 'optuna.db'}"
    old = _old(True)
    assert old_tracking_uri(old, url) == ""  # no mlflow.db next to it
    (tmp_path / "mlflow.db").touch()
    assert old_tracking_uri(old, url) == f"sqlite:///{tmp_path / 'mlflow.db'}"
    old.set_user_attr("experiment_yaml", "name: x\ntracking: {uri: 'http://mlflow:5000'}\n")
    assert old_tracking_uri(old, url) == "http://mlflow:5000"
    old.set_user_attr("mlflow_tracking_uri", "sqlite:////srv/mlflow.db")
    assert old_tracking_uri(old, url) == "sqlite:////srv/mlflow.db"
    old.set_user_attr("mlflow_parent_run_id", "")
    assert old_tracking_uri(old, url) == ""


def test_retune_logs_where_the_old_study_did() -> None:
    text = (ROOT / "experiments/moe-mix.yaml").read_text()
    exp = parse_experiment(text, "moe-mix.yaml")
    assert same_store(exp, "sqlite:////old/mlflow.db").tracking_uri == "sqlite:////old/mlflow.db"
    assert same_store(exp, "") is exp  # the old study did not log
    own = parse_experiment(text + "tracking: {uri: 'sqlite:////own.db'}\n", "moe-mix.yaml")
    assert same_store(own, "sqlite:////old/mlflow.db").tracking_uri == "sqlite:////own.db"


def test_resume_keeps_a_retune_one() -> None:
    """``ecntune resume`` of a re-tune: the old choice is still confirmed alongside (its label),
    the summary still logged; any other study resumes as before."""
    st = _study(f"warm:{OLD_WINNER}", [0.1], [0.5])
    opts = resumed(st)
    assert opts["warm"] == [(OLD_WINNER, {"kmin_bytes": 2000})]
    assert opts["lineage"]["retuned_from"] == "nc-1"
    assert opts["summarize"] is summary_for_tracking
    plain = optuna.create_study(direction="maximize")
    assert resumed(plain) == {}
